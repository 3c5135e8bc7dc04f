//! Go-to-definition: a name's top-level binding in its file, followed through `load()`
//! into the loaded file (paths resolved as kite's loader resolves them).

use std::path::{Path, PathBuf};

use super::outline::{BindingKind, outline};
use super::text::dotted_at;

/// Where a definition is: the file, its text and the byte offset of the name.
#[derive(Debug)]
pub struct Target {
    pub path: PathBuf,
    pub text: String,
    pub offset: usize,
}

/// Re-exports chained through more files than this are not followed.
const MAX_HOPS: usize = 16;

/// The definition of what is at byte `offset` of `text` (the file at `path`). `read`
/// gives a file's text: the editor's copy when it has one open, else the disk's.
pub fn definition(
    path: &Path,
    text: &str,
    offset: usize,
    read: &dyn Fn(&Path) -> Option<String>,
) -> Option<Target> {
    let own = outline(text);
    // On a load's module string: the loaded file itself.
    if let Some(load) = own
        .loads
        .iter()
        .find(|l| (l.begin..l.end).contains(&offset))
    {
        let file = loaded_file(path, &load.module)?;
        let text = read(&file)?;
        return Some(Target {
            path: file,
            text,
            offset: 0,
        });
    }
    let (name, ..) = dotted_at(text, offset)?;
    if name.contains('.') {
        return None;
    }
    follow(path.to_path_buf(), text.to_owned(), &name, read, 0)
}

fn follow(
    path: PathBuf,
    text: String,
    name: &str,
    read: &dyn Fn(&Path) -> Option<String>,
    hops: usize,
) -> Option<Target> {
    let binding = outline(&text).find(name)?.clone();
    if let BindingKind::Load { module, their } = &binding.kind
        && hops < MAX_HOPS
        && let Some(file) = loaded_file(&path, module)
        && let Some(loaded) = read(&file)
        && let Some(found) = follow(file, loaded, their, read, hops + 1)
    {
        return Some(found);
    }
    Some(Target {
        path,
        text,
        offset: binding.offset,
    })
}

/// The file `load(module)` in `from` reads; None for the library's own modules.
pub fn loaded_file(from: &Path, module: &str) -> Option<PathBuf> {
    let name = module.strip_prefix("@kite//").unwrap_or(module);
    if crate::library::library().module(name).is_some() {
        return None;
    }
    let dir = from.parent()?;
    Some(crate::script::loader::resolve(dir, module))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn follows_loads_to_the_def_and_stays_in_file_otherwise() {
        let dir = std::env::temp_dir().join(format!("kite-lsp-def-{}", std::process::id()));
        std::fs::create_dir_all(dir.join("lib")).unwrap();
        let helpers = "X = 1\n\ndef f(a):\n    return a\n";
        std::fs::write(dir.join("lib/helpers.star"), helpers).unwrap();
        let main = dir.join("main.star");
        let text = "load(\"lib/helpers.star\", \"f\", g = \"f\")\nload(\"k8s\", \"k8s\")\n\ndef local():\n    return f(1) + g(2)\n\nlocal()\n";
        let read = |p: &Path| std::fs::read_to_string(p).ok();

        let at = text.find("f(1)").unwrap();
        let t = definition(&main, text, at, &read).expect("f");
        assert!(t.path.ends_with("lib/helpers.star"), "{}", t.path.display());
        assert_eq!(t.offset, helpers.find("f(a)").unwrap());

        let at = text.find("g(2)").unwrap();
        let t = definition(&main, text, at, &read).expect("g");
        assert_eq!(t.offset, helpers.find("f(a)").unwrap());

        let at = text.rfind("local()").unwrap();
        let t = definition(&main, text, at, &read).expect("local");
        assert_eq!(
            (t.path.as_path(), t.offset),
            (main.as_path(), text.find("local").unwrap())
        );

        let at = text.find("lib/").unwrap();
        let t = definition(&main, text, at, &read).expect("the file");
        assert_eq!(t.offset, 0);
        assert!(t.path.ends_with("lib/helpers.star"));

        // The library's own module has no file.
        let at = text.find("\"k8s\"").unwrap() + 1;
        assert!(definition(&main, text, at, &read).is_none());
        std::fs::remove_dir_all(&dir).ok();
    }
}
