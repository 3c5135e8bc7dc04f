//! The layers point one way: a test that reads the sources and fails on an import that
//! points up (`docs/design/architecture.md` draws the layers).

/// Each layer and the modules above it that it must never name.
const RULES: &[(&str, &[&str])] = &[
    (
        "script",
        &[
            "k8s",
            "control",
            "library",
            "operator",
            "rbac",
            "artifacts",
            "http",
            "cli",
            "tester",
        ],
    ),
    (
        "k8s",
        &[
            "control",
            "library",
            "operator",
            "rbac",
            "artifacts",
            "cli",
            "fake",
            "testing",
        ],
    ),
    (
        "control",
        &[
            "library",
            "operator",
            "rbac",
            "artifacts",
            "cli",
            "fake",
            "testing",
        ],
    ),
    (
        "testing",
        &[
            "operator",
            "rbac",
            "artifacts",
            "http",
            "cli",
            "tester",
            "dev",
            "lsp",
        ],
    ),
    (
        "fake",
        &[
            "control",
            "library",
            "operator",
            "artifacts",
            "cli",
            "tester",
            "testing",
        ],
    ),
    ("rbac", &["library", "operator", "artifacts", "cli"]),
    ("lsp", &["operator", "rbac", "artifacts", "http", "cli"]),
    ("dev", &["operator", "rbac", "artifacts", "cli", "tester"]),
    (
        "tester",
        &["control", "operator", "rbac", "artifacts", "http", "cli"],
    ),
];

/// The modules of the crate root that `text` names: `crate::x`, and `crate::{x, y}`.
fn named_modules(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    for (at, _) in text.match_indices("crate::") {
        let rest = &text[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let inner = group.split('}').next().unwrap_or_default();
            for part in inner.split(',') {
                let name = part.trim().split("::").next().unwrap_or_default();
                names.push(name.trim().to_owned());
            }
        } else {
            let name: String = rest
                .chars()
                .take_while(|c| c.is_alphanumeric() || *c == '_')
                .collect();
            names.push(name);
        }
    }
    names
}

fn sources(dir: &std::path::Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn no_layer_names_a_layer_above_it() {
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut found = Vec::new();
    for (layer, above) in RULES {
        let mut files = Vec::new();
        sources(&src.join(layer), &mut files);
        assert!(!files.is_empty(), "no sources under src/{layer}");
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap();
            // Only code counts: a doc comment may point the reader upwards.
            let code: String = text
                .lines()
                .filter(|l| !l.trim_start().starts_with("//"))
                .collect::<Vec<_>>()
                .join("\n");
            for name in named_modules(&code) {
                if above.contains(&name.as_str()) {
                    found.push(format!("{}: crate::{name}", file.display()));
                }
            }
            if code.contains("super::super::super") {
                found.push(format!("{}: super::super::super", file.display()));
            }
        }
    }
    assert!(
        found.is_empty(),
        "imports that point up:\n{}",
        found.join("\n")
    );
}

#[test]
fn both_import_forms_are_seen() {
    assert_eq!(
        named_modules("use crate::{control, k8s::ops};\nlet x = crate::script::host::Host;"),
        ["control", "k8s", "script"]
    );
}
