//! `load()`: the built-in `k8s` module and `.star` files relative to the loading file.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use starlark::environment::{FrozenModule, Module};
use starlark::eval::{Evaluator, FileLoader};
use starlark::syntax::{AstModule, Dialect};

use super::builtins::globals;
use super::host::Host;

/// The modules loaded so far in one run, shared by every file's loader.
#[derive(Default)]
pub struct LoadCache {
    done: RefCell<HashMap<PathBuf, FrozenModule>>,
    /// Files being loaded right now, to report cycles instead of recursing forever.
    in_progress: RefCell<Vec<PathBuf>>,
    builtin_k8s: RefCell<Option<FrozenModule>>,
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
        if path == "k8s" || path == "@kite//k8s" {
            return self.builtin_k8s().map_err(starlark::Error::new_other);
        }
        let Some(dir) = &self.dir else {
            return Err(starlark::Error::new_other(anyhow::anyhow!(
                "load({path:?}): this script has no directory to load files from; only load(\"k8s\", \"k8s\") is available"
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
                eval.eval_module(ast, globals())?;
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
    fn builtin_k8s(&self) -> anyhow::Result<FrozenModule> {
        if let Some(m) = self.cache.builtin_k8s.borrow().as_ref() {
            return Ok(m.clone());
        }
        let frozen = Module::with_temp_heap(|module| {
            module.set(
                "k8s",
                module.heap().alloc(crate::k8s::module::module_value()),
            );
            module.freeze()
        })
        .map_err(|e| anyhow::anyhow!("{e:?}"))?;
        *self.cache.builtin_k8s.borrow_mut() = Some(frozen.clone());
        Ok(frozen)
    }
}

fn resolve(dir: &Path, path: &str) -> PathBuf {
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
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
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
