//! `load()`: the library's modules (`k8s`) and `.star` files relative to the loading file.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use starlark::environment::{FrozenModule, Module};
use starlark::eval::{Evaluator, FileLoader};
use starlark::syntax::{AstModule, Dialect};

use super::host::Host;
use super::library::ModuleFn;

/// The modules loaded so far in one run, shared by every file's loader.
#[derive(Default)]
pub struct LoadCache {
    done: RefCell<HashMap<PathBuf, FrozenModule>>,
    /// Files being loaded right now, to report cycles instead of recursing forever.
    in_progress: RefCell<Vec<PathBuf>>,
    /// The library's modules, built once per run.
    builtin: RefCell<HashMap<&'static str, FrozenModule>>,
}

/// The loader of one file: resolves relative paths against that file's directory.
pub struct Loader<'a> {
    /// None for a script without a file, which can load only the built-in modules.
    pub dir: Option<PathBuf>,
    pub cache: &'a LoadCache,
    pub host: &'a Host,
}

/// The dialect kite scripts are parsed with.
pub fn dialect() -> Dialect {
    Dialect {
        enable_f_strings: true,
        ..Dialect::Extended
    }
}

impl FileLoader for Loader<'_> {
    fn load(&self, path: &str) -> starlark::Result<FrozenModule> {
        let name = path.strip_prefix("@kite//").unwrap_or(path);
        if let Some(module) = self.host.library.module(name) {
            return self.builtin(module).map_err(starlark::Error::new_other);
        }
        let Some(dir) = &self.dir else {
            let names: Vec<String> = (self.host.library.module_names().iter())
                .map(|n| format!("load({n:?}, {n:?})"))
                .collect();
            return Err(starlark::Error::new_other(anyhow::anyhow!(
                "load({path:?}): this script has no directory to load files from; only {} is available",
                names.join(" or ")
            )));
        };
        let full = resolve(dir, path);
        if let Some(m) = self.cache.done.borrow().get(&full) {
            return Ok(m.clone());
        }
        if self.cache.in_progress.borrow().contains(&full) {
            return Err(starlark::Error::new_other(anyhow::anyhow!(
                "load cycle: {} loads itself through {}",
                full.display(),
                self.cache
                    .in_progress
                    .borrow()
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(" -> ")
            )));
        }
        let text = std::fs::read_to_string(&full).map_err(|e| {
            starlark::Error::new_other(anyhow::anyhow!(
                "cannot load {path:?} ({}): {e}",
                full.display()
            ))
        })?;
        let ast = AstModule::parse(&display_name(&full), text, &dialect())?;
        self.cache.in_progress.borrow_mut().push(full.clone());
        let loader = Loader {
            dir: Some(parent(&full)),
            cache: self.cache,
            host: self.host,
        };
        let result = Module::with_temp_heap(|module| -> starlark::Result<FrozenModule> {
            {
                let mut eval = Evaluator::new(&module);
                eval.extra = Some(self.host);
                eval.set_loader(&loader);
                eval.set_print_handler(&self.host.printer);
                eval.eval_module(ast, self.host.library.globals())?;
            }
            module
                .freeze()
                .map_err(|e| starlark::Error::new_other(anyhow::anyhow!("{e:?}")))
        });
        self.cache.in_progress.borrow_mut().pop();
        let frozen = result?;
        self.cache.done.borrow_mut().insert(full, frozen.clone());
        Ok(frozen)
    }
}

impl Loader<'_> {
    fn builtin(&self, (name, add): (&'static str, ModuleFn)) -> anyhow::Result<FrozenModule> {
        if let Some(m) = self.cache.builtin.borrow().get(name) {
            return Ok(m.clone());
        }
        let frozen = Module::with_temp_heap(|module| {
            add(&module);
            module.freeze()
        })
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        self.cache.builtin.borrow_mut().insert(name, frozen.clone());
        Ok(frozen)
    }
}

/// The file `load(path)` names from a file in `dir` (also what `kite lsp` jumps to).
pub fn resolve(dir: &Path, path: &str) -> PathBuf {
    let p = Path::new(path.strip_prefix("./").unwrap_or(path));
    let joined = if p.is_absolute() {
        p.to_path_buf()
    } else {
        dir.join(p)
    };
    joined.canonicalize().unwrap_or(joined)
}

fn parent(path: &Path) -> PathBuf {
    path.parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

/// The name a file is shown under in messages: relative to the working directory when
/// possible, as the user typed it.
pub fn display_name(path: &Path) -> String {
    let cwd = std::env::current_dir()
        .ok()
        .and_then(|d| d.canonicalize().ok());
    match cwd.and_then(|cwd| path.strip_prefix(&cwd).ok().map(Path::to_path_buf)) {
        Some(rel) => rel.display().to_string(),
        None => path.display().to_string(),
    }
}
