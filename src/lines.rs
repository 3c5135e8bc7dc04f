//! The size of a file, checked: no source file over [`LIMIT`] lines
//! (`docs/design/lints.md`).

use std::path::Path;

/// The most lines a file under `src/` may have; split a file by role before it gets here.
const LIMIT: usize = 800;

#[test]
fn no_source_file_is_over_the_limit() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    crate::layers::sources(&root.join("src"), &mut files);
    assert!(files.len() > 100, "the sources were not found");
    let mut over: Vec<String> = files
        .iter()
        .filter_map(|file| {
            let lines = std::fs::read_to_string(file).unwrap().lines().count();
            (lines > LIMIT).then(|| format!("{}: {lines} lines", file.display()))
        })
        .collect();
    over.sort();
    assert!(
        over.is_empty(),
        "over {LIMIT} lines (split them by role):\n{}",
        over.join("\n")
    );
}

#[test]
fn the_limit_is_the_one_the_guide_states() {
    let guide =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/design/lints.md"))
            .unwrap();
    assert!(
        guide.contains(&format!("no file over {LIMIT} lines")),
        "docs/design/lints.md does not state the limit of {LIMIT} lines"
    );
}
