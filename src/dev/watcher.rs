//! Change detection for `kite dev`: the script, the files it loads and the var files,
//! polled by modification time, size and inode, with a quiet period so an editor's save
//! (write, then rename over the original) reloads once.

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use starlark::syntax::AstModule;

use crate::script::library::Library;
use crate::script::loader::dialect;

/// What a file looked like at the last poll; None while it does not exist.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Stamp {
    modified: Option<SystemTime>,
    len: u64,
    inode: u64,
}

fn stamp(path: &Path) -> Option<Stamp> {
    let meta = std::fs::metadata(path).ok()?;
    Some(Stamp {
        modified: meta.modified().ok(),
        len: meta.len(),
        inode: meta.ino(),
    })
}

/// Polled file stamps; a change is reported once the files have stayed unchanged for
/// the quiet period.
pub struct Watcher {
    files: Vec<(PathBuf, Option<Stamp>)>,
    /// Files changed since the last report.
    changed: Vec<PathBuf>,
    /// When a file last changed, while a report is pending.
    settling_since: Option<Instant>,
    quiet: Duration,
}

impl Watcher {
    /// A watcher of nothing yet; see [`Watcher::watch`].
    pub fn new(quiet: Duration) -> Self {
        Self {
            files: Vec::new(),
            changed: Vec::new(),
            settling_since: None,
            quiet,
        }
    }

    /// Watches `files` from now on. Files watched already keep their last stamp, so a
    /// change made while a reload was running is still seen.
    pub fn watch(&mut self, files: Vec<PathBuf>) {
        let old = std::mem::take(&mut self.files);
        self.files = files
            .into_iter()
            .map(|path| {
                let known = old.iter().find(|(p, _)| *p == path).map(|(_, s)| *s);
                let s = known.unwrap_or_else(|| stamp(&path));
                (path, s)
            })
            .collect();
    }

    /// How many files are watched.
    pub fn len(&self) -> usize {
        self.files.len()
    }

    /// The files that changed, once they have been quiet for the quiet period; None
    /// when nothing changed or a change is still settling.
    pub fn poll(&mut self) -> Option<Vec<PathBuf>> {
        let now = Instant::now();
        let mut moved = false;
        for (path, last) in &mut self.files {
            let current = stamp(path);
            if current != *last {
                *last = current;
                moved = true;
                if !self.changed.contains(path) {
                    self.changed.push(path.clone());
                }
            }
        }
        if moved {
            self.settling_since = Some(now);
            return None;
        }
        match self.settling_since {
            Some(since) if now.duration_since(since) >= self.quiet => {
                self.settling_since = None;
                Some(std::mem::take(&mut self.changed))
            }
            _ => None,
        }
    }
}

/// The script and every `.star` file it loads, directly or through other files (found
/// from their `load()` statements, without running anything), then `extra`. A file that
/// cannot be read or parsed is still listed, so fixing it is seen.
pub fn sources(script: &Path, library: &Library, extra: &[PathBuf]) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = Vec::new();
    let mut todo = vec![canonical(script)];
    while let Some(path) = todo.pop() {
        if found.contains(&path) {
            continue;
        }
        found.push(path.clone());
        let Ok(text) = std::fs::read_to_string(&path) else {
            continue;
        };
        let Ok(ast) = AstModule::parse(&path.display().to_string(), text, &dialect()) else {
            continue;
        };
        let dir = path
            .parent()
            .map_or_else(|| PathBuf::from("."), Path::to_path_buf);
        for load in ast.loads() {
            let id = load.module_id;
            if library
                .module(id.strip_prefix("@kite//").unwrap_or(id))
                .is_some()
            {
                continue;
            }
            let files = crate::script::loader::files_of(&dir, id);
            if files.is_empty() {
                // Not there yet: watched, so that creating it reloads.
                let relative = Path::new(id.strip_prefix("./").unwrap_or(id));
                todo.push(canonical(&dir.join(relative)));
            }
            todo.extend(files);
        }
    }
    found.extend(extra.iter().map(|p| canonical(p)));
    found
}

fn canonical(path: &Path) -> PathBuf {
    path.canonicalize().unwrap_or_else(|_| path.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("kite-dev-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn a_write_is_reported_once_after_it_settles() {
        let dir = temp_dir("write");
        let file = dir.join("a.star");
        std::fs::write(&file, "x = 1\n").unwrap();
        let mut w = Watcher::new(Duration::ZERO);
        w.watch(vec![file.clone()]);
        assert_eq!(w.poll(), None, "nothing changed");
        std::fs::write(&file, "x = 22\n").unwrap();
        assert_eq!(w.poll(), None, "still settling");
        assert_eq!(w.poll(), Some(vec![file.clone()]));
        assert_eq!(w.poll(), None, "reported once");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn a_save_by_rename_and_a_burst_of_writes_reload_once() {
        let dir = temp_dir("rename");
        let file = dir.join("a.star");
        std::fs::write(&file, "x = 1\n").unwrap();
        let mut w = Watcher::new(Duration::from_hours(1));
        w.watch(vec![file.clone()]);
        std::fs::write(dir.join("a.star.tmp"), "x = 2\n").unwrap();
        std::fs::rename(dir.join("a.star.tmp"), &file).unwrap();
        assert_eq!(w.poll(), None);
        std::fs::write(&file, "x = 333\n").unwrap();
        assert_eq!(w.poll(), None);
        assert_eq!(w.poll(), None, "not quiet long enough yet");
        w.quiet = Duration::ZERO;
        assert_eq!(w.poll(), Some(vec![file.clone()]), "one report");
        assert_eq!(w.poll(), None);
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn files_watched_already_keep_their_stamp() {
        let dir = temp_dir("keep");
        let file = dir.join("a.star");
        std::fs::write(&file, "x = 1\n").unwrap();
        let mut w = Watcher::new(Duration::ZERO);
        w.watch(vec![file.clone()]);
        std::fs::write(&file, "x = 22\n").unwrap();
        w.watch(vec![file.clone(), dir.join("new.star")]);
        assert_eq!(w.len(), 2);
        assert_eq!(w.poll(), None);
        assert_eq!(w.poll(), Some(vec![file.clone()]), "the change is not lost");
        let _ = std::fs::remove_dir_all(dir);
    }

    #[test]
    fn sources_follow_loads_but_not_library_modules() {
        let dir = temp_dir("sources");
        std::fs::create_dir_all(dir.join("lib")).unwrap();
        std::fs::write(
            dir.join("main.star"),
            "load(\"k8s\", \"k8s\")\nload(\"./lib/a.star\", \"a\")\n",
        )
        .unwrap();
        std::fs::write(dir.join("lib/a.star"), "load(\"b.star\", \"b\")\na = 1\n").unwrap();
        std::fs::write(dir.join("lib/b.star"), "b = (\n").unwrap();
        let vars = dir.join("vars.yaml");
        let found = sources(
            &dir.join("main.star"),
            crate::library::library(),
            std::slice::from_ref(&vars),
        );
        let dir = dir.canonicalize().unwrap();
        assert_eq!(
            found,
            [
                dir.join("main.star"),
                dir.join("lib/a.star"),
                dir.join("lib/b.star"),
                vars
            ]
        );
        let _ = std::fs::remove_dir_all(dir);
    }
}
