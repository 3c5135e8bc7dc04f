//! Which files `kite test` runs: `*_test.star` under each directory given (searched
//! recursively, in name order), and each file given by name.

use std::path::{Path, PathBuf};

use super::{Error, Result};

/// The suffix that marks a test file in a directory.
pub const SUFFIX: &str = "_test.star";

/// Directories never searched: tool state, not scripts.
const SKIPPED_DIRS: &[&str] = &[".git", "target", "node_modules"];

/// The test files of `paths`, each once, in the order given (a directory's files sorted
/// by path).
///
/// # Errors
/// [`Error::Discover`] for a path that does not exist or a directory that cannot be read.
pub fn discover(paths: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out: Vec<PathBuf> = Vec::new();
    for path in paths {
        let meta = std::fs::metadata(path).map_err(|source| Error::Discover {
            path: path.display().to_string(),
            source,
        })?;
        let mut found = Vec::new();
        if meta.is_dir() {
            walk(path, &mut found)?;
            found.sort();
        } else {
            found.push(path.clone());
        }
        for file in found {
            if !out.contains(&file) {
                out.push(file);
            }
        }
    }
    Ok(out)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let entries = std::fs::read_dir(dir).map_err(|source| Error::Discover {
        path: dir.display().to_string(),
        source,
    })?;
    for entry in entries {
        let entry = entry.map_err(|source| Error::Discover {
            path: dir.display().to_string(),
            source,
        })?;
        let path = entry.path();
        let name = entry.file_name();
        let name = name.to_string_lossy();
        // file_type does not follow symlinks, so a link cycle cannot recurse forever.
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            if !SKIPPED_DIRS.contains(&name.as_ref()) {
                walk(&path, out)?;
            }
        } else if name.ends_with(SUFFIX) && (kind.is_file() || path.is_file()) {
            out.push(path);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn directories_are_searched_recursively_and_files_taken_as_given() {
        let dir = std::env::temp_dir().join(format!("kite-discover-{}", std::process::id()));
        let root = dir.as_path();
        let _ = std::fs::remove_dir_all(root);
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::create_dir_all(root.join(".git")).unwrap();
        for f in [
            "z_test.star",
            "a/b/deep_test.star",
            "a/helper.star",
            "a/not_test.py",
            ".git/x_test.star",
        ] {
            std::fs::write(root.join(f), "").unwrap();
        }
        let found = discover(&[root.to_path_buf()]).unwrap();
        assert_eq!(
            found,
            [root.join("a/b/deep_test.star"), root.join("z_test.star")]
        );
        // A file named directly runs whatever its name, and only once.
        let found = discover(&[
            root.join("a/helper.star"),
            root.join("z_test.star"),
            root.to_path_buf(),
        ])
        .unwrap();
        assert_eq!(
            found,
            [
                root.join("a/helper.star"),
                root.join("z_test.star"),
                root.join("a/b/deep_test.star")
            ]
        );
        let _ = std::fs::remove_dir_all(root);
    }

    #[test]
    fn a_missing_path_is_named() {
        let err = discover(&[PathBuf::from("/no/such/dir")]).unwrap_err();
        assert!(err.to_string().contains("/no/such/dir"), "{err}");
    }
}
