//! `load()`: the library's modules (`k8s`), `.star` files and module directories, as
//! upstream Starkite finds them.
//!
//! A path (`"./lib/util.star"`, `"lib/mod"`) is found next to the loading file, else in
//! the working directory or the script's own directory. A bare name (`"mymodule"`) is
//! searched as `<name>.star` or a directory `<name>/` (with `main.star` or
//! `<name>.star`) in `modules/` and the directory itself of: the loading file, the
//! script, the working directory; then in `$STARKITE_MODULE_PATH` (`:`-separated) and
//! `~/.starkite/modules`. Every other `.star` file of a module directory adds its
//! public names to the module.
//!
//! Besides its own names, a loaded module offers one named after it (the file's stem or
//! the directory's name): a module value of its public names, so that
//! `load("./greeter.star", "greeter")` gives `greeter.greet(...)`. Loaded files see
//! `_config`, an empty dict (upstream passes module configuration there). Each file is
//! evaluated once per run; a file that loads itself, directly or not, is an error.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use starlark::environment::{FrozenModule, Module};
use starlark::eval::{Evaluator, FileLoader};
use starlark::syntax::{AstModule, Dialect};
use starlark::values::ValueLike;
use starlark::values::dict::AllocDict;

use super::host::Host;
use super::library::ModuleFn;
use super::loaded::{FrozenLoadedModule, LoadedModule};

/// The modules loaded so far in one run, shared by every file's loader.
#[derive(Default)]
pub struct LoadCache {
    done: RefCell<HashMap<PathBuf, FrozenModule>>,
    /// Files being loaded right now, to report cycles instead of recursing forever.
    in_progress: RefCell<Vec<PathBuf>>,
    /// The library's modules, built once per run.
    builtin: RefCell<HashMap<&'static str, FrozenModule>>,
    /// The names each file loaded (which its module value leaves out).
    imported: RefCell<HashMap<PathBuf, Vec<String>>>,
    /// The directory of the script the run started from (the first to load anything),
    /// which bare module names are also searched from.
    root: RefCell<Option<PathBuf>>,
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

/// What a `load()` names on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Target {
    File(PathBuf),
    /// A module directory and its entry file (`main.star` or `<dir name>.star`).
    Dir {
        dir: PathBuf,
        entry: PathBuf,
    },
}

impl Target {
    fn key(&self) -> &Path {
        match self {
            Target::File(p) | Target::Dir { dir: p, .. } => p,
        }
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
        self.cache
            .root
            .borrow_mut()
            .get_or_insert_with(|| dir.clone());
        let root = self.cache.root.borrow().clone();
        let target = find(dir, root.as_deref(), path).map_err(|e| {
            let builtin: Vec<&str> = self.host.library.module_names();
            starlark::Error::new_other(anyhow::anyhow!(
                "cannot load {path:?}: {e}{}",
                if builtin.is_empty() || path.contains('/') {
                    String::new()
                } else {
                    format!(" (library modules: {})", builtin.join(", "))
                }
            ))
        })?;
        let export = module_name(path, &target);
        self.cached(target.key(), |this| match &target {
            Target::File(file) => this.evaluate(file, &export),
            Target::Dir { dir, entry } => this.merge(dir, entry, &export),
        })
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

    /// The module at `key` from the cache, else made by `make` (once: a file that loads
    /// itself while being made is a cycle).
    fn cached(
        &self,
        key: &Path,
        make: impl FnOnce(&Self) -> starlark::Result<FrozenModule>,
    ) -> starlark::Result<FrozenModule> {
        if let Some(m) = self.cache.done.borrow().get(key) {
            return Ok(m.clone());
        }
        if self.cache.in_progress.borrow().iter().any(|p| p == key) {
            return Err(starlark::Error::new_other(anyhow::anyhow!(
                "load cycle: {} loads itself through {}",
                key.display(),
                self.cache
                    .in_progress
                    .borrow()
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(" -> ")
            )));
        }
        self.cache.in_progress.borrow_mut().push(key.to_path_buf());
        let result = make(self);
        self.cache.in_progress.borrow_mut().pop();
        let frozen = result?;
        self.cache
            .done
            .borrow_mut()
            .insert(key.to_path_buf(), frozen.clone());
        Ok(frozen)
    }

    /// Evaluates one file, binding its module value as `export`.
    fn evaluate(&self, full: &Path, export: &str) -> starlark::Result<FrozenModule> {
        let text = std::fs::read_to_string(full).map_err(|e| {
            starlark::Error::new_other(anyhow::anyhow!("cannot load {}: {e}", full.display()))
        })?;
        let ast = AstModule::parse(&display_name(full), text, &dialect())?;
        // What the file loads is its own business, not part of its module value.
        let loaded: Vec<String> = (ast.loads().iter())
            .flat_map(|l| l.symbols.keys().map(|k| (*k).to_owned()))
            .collect();
        self.cache
            .imported
            .borrow_mut()
            .insert(full.to_path_buf(), loaded.clone());
        let loader = Loader {
            dir: Some(parent(full)),
            cache: self.cache,
            host: self.host,
        };
        Module::with_temp_heap(|module| -> starlark::Result<FrozenModule> {
            let heap = module.heap();
            module.set("_config", heap.alloc(AllocDict::EMPTY));
            {
                let mut eval = Evaluator::new(&module);
                eval.extra = Some(self.host);
                eval.set_loader(&loader);
                eval.set_print_handler(&self.host.printer);
                eval.eval_module(ast, self.host.library.globals())?;
            }
            LoadedModule::bind(&module, heap, export, &loaded);
            module
                .freeze()
                .map_err(|e| starlark::Error::new_other(anyhow::anyhow!("{e:?}")))
        })
    }

    /// A module directory: its entry file's public names, then those of every other
    /// `.star` file in it (in name order, a later one winning), bound as `export`.
    fn merge(&self, dir: &Path, entry: &Path, export: &str) -> starlark::Result<FrozenModule> {
        let mut parts = vec![entry.to_path_buf()];
        parts.extend(star_files(dir).into_iter().filter(|p| p != entry));
        let mut loaded = Vec::new();
        for file in &parts {
            let stem = file.file_stem().map(|s| s.to_string_lossy().into_owned());
            let frozen = self.cached(file, |this| {
                this.evaluate(file, stem.as_deref().unwrap_or_default())
            })?;
            let imported = (self.cache.imported.borrow().get(file).cloned()).unwrap_or_default();
            loaded.push((stem, frozen, imported));
        }
        Module::with_temp_heap(|module| {
            for (stem, frozen, imported) in &loaded {
                for name in frozen.names() {
                    let name = name.as_str();
                    let Ok(Some(v)) = frozen.get_option(name) else {
                        continue;
                    };
                    // A part's own module value is not a name of the whole module.
                    let own = Some(name) == stem.as_deref()
                        && v.value().downcast_ref::<FrozenLoadedModule>().is_some();
                    if !name.starts_with('_') && !own && !imported.iter().any(|i| i == name) {
                        module.set(name, module.heap().access_owned_frozen_value(&v));
                    }
                }
            }
            LoadedModule::bind(&module, module.heap(), export, &[]);
            module
                .freeze()
                .map_err(|e| starlark::Error::new_other(anyhow::anyhow!("{e:?}")))
        })
    }
}

/// The `.star` files directly in `dir`, sorted.
fn star_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|e| e == "star") && p.is_file())
        .map(|p| canonical(&p))
        .collect();
    files.sort();
    files
}

/// A directory that is a module: it has `main.star` or `<its name>.star`.
fn module_dir(dir: &Path) -> Option<Target> {
    if !dir.is_dir() {
        return None;
    }
    let own = dir.file_name()?.to_string_lossy().into_owned() + ".star";
    ["main.star", own.as_str()]
        .iter()
        .map(|f| dir.join(f))
        .find(|p| p.is_file())
        .map(|entry| Target::Dir {
            dir: canonical(dir),
            entry: canonical(&entry),
        })
}

/// What `path` at `candidate` is: a file or a module directory.
fn at(candidate: &Path) -> Option<Target> {
    if candidate.is_file() {
        return Some(Target::File(canonical(candidate)));
    }
    module_dir(candidate)
}

/// Where `load(name)` from a file in `dir` finds its module (see the module docs).
fn find(dir: &Path, root: Option<&Path>, name: &str) -> Result<Target, String> {
    let cwd = std::env::current_dir().ok();
    if is_path(name) {
        let p = Path::new(name.strip_prefix("./").unwrap_or(name));
        if p.is_absolute() {
            return at(p).ok_or_else(|| format!("no such file or module directory {name}"));
        }
        let bases = [Some(dir), cwd.as_deref(), root].into_iter().flatten();
        for base in bases {
            if let Some(t) = at(&base.join(p)) {
                return Ok(t);
            }
        }
        return Err(format!(
            "no such file or module directory {}",
            dir.join(p).display()
        ));
    }
    let searched = search_path(dir, root, cwd.as_deref());
    for base in &searched {
        let file = base.join(format!("{name}.star"));
        if file.is_file() {
            return Ok(Target::File(canonical(&file)));
        }
        if let Some(t) = module_dir(&base.join(name)) {
            return Ok(t);
        }
    }
    let shown: Vec<String> = searched.iter().map(|p| p.display().to_string()).collect();
    Err(format!(
        "no module {name:?} ({name}.star or {name}/) in {}",
        shown.join(", ")
    ))
}

/// Whether `load(name)` names a path (`lib/x.star`, `./mod`) rather than a module to
/// search for; upstream's test is exactly a slash or a `.star` ending.
#[expect(
    clippy::case_sensitive_file_extension_comparisons,
    reason = "upstream's exact test"
)]
fn is_path(name: &str) -> bool {
    name.contains('/') || name.ends_with(".star")
}

/// The directories a bare module name is searched in, in order, without repeats.
fn search_path(dir: &Path, root: Option<&Path>, cwd: Option<&Path>) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for base in [Some(dir), root, cwd].into_iter().flatten() {
        out.push(base.join("modules"));
        out.push(base.to_path_buf());
    }
    if let Some(paths) = std::env::var_os("STARKITE_MODULE_PATH") {
        out.extend(std::env::split_paths(&paths).filter(|p| !p.as_os_str().is_empty()));
    }
    if let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        out.push(PathBuf::from(home).join(".starkite").join("modules"));
    }
    let mut seen = Vec::new();
    out.retain(|p| {
        let c = canonical(p);
        let new = !seen.contains(&c);
        seen.push(c);
        new
    });
    out
}

/// The name a module value is bound under: a bare name itself, else the file's stem or
/// the directory's name.
fn module_name(path: &str, target: &Target) -> String {
    if !is_path(path) {
        return path.to_owned();
    }
    let named = match target {
        Target::File(f) => f.file_stem(),
        Target::Dir { dir, .. } => dir.file_name(),
    };
    named
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The files `load(path)` from a file in `dir` reads (a module directory's every
/// `.star` file), for `kite dev` to watch and `kite lsp` to jump to; empty when it
/// names nothing on disk.
pub fn files_of(dir: &Path, path: &str) -> Vec<PathBuf> {
    match find(dir, None, path) {
        Ok(Target::File(f)) => vec![f],
        Ok(Target::Dir { dir, entry }) => {
            let mut files = vec![entry.clone()];
            files.extend(star_files(&dir).into_iter().filter(|p| *p != entry));
            files
        }
        Err(_) => Vec::new(),
    }
}

/// The file `load(path)` names from a file in `dir` (also what `kite lsp` jumps to): a
/// module directory's entry file, or where the file would be.
pub fn resolve(dir: &Path, path: &str) -> PathBuf {
    match files_of(dir, path).into_iter().next() {
        Some(file) => file,
        None => canonical(&dir.join(path.strip_prefix("./").unwrap_or(path))),
    }
}

fn canonical(path: &Path) -> PathBuf {
    path.canonicalize().unwrap_or_else(|_| path.to_path_buf())
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

#[cfg(test)]
#[path = "loader_tests.rs"]
mod tests;
