//! The layers point one way: a test that reads the sources and fails on an import that
//! points up, and one that keeps `docs/design/architecture.md`'s drawing and table of
//! the layers in step with [`RULES`].

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Each module of the crate root and the modules it must never name (space-separated):
/// every module drawn at its own height or above it in `docs/design/architecture.md`,
/// and a few below it that it has no business with (`script` and `http`, `test_runner` and
/// `control`). A module that is not in a row's list it may name.
const RULES: &[(&str, &str)] = &[
    // The leaves name no other module.
    (
        "duration",
        "signal tls version http script k8s control rbac fake_cluster harness library test_runner artifacts dev lsp operator cli",
    ),
    (
        "signal",
        "duration tls version http script k8s control rbac fake_cluster harness library test_runner artifacts dev lsp operator cli",
    ),
    (
        "tls",
        "duration signal version http script k8s control rbac fake_cluster harness library test_runner artifacts dev lsp operator cli",
    ),
    (
        "version",
        "duration signal tls http script k8s control rbac fake_cluster harness library test_runner artifacts dev lsp operator cli",
    ),
    (
        "http",
        "duration signal tls version script k8s control rbac fake_cluster harness library test_runner artifacts dev lsp operator cli",
    ),
    (
        "script",
        "http k8s control rbac fake_cluster harness library test_runner artifacts dev lsp operator cli",
    ),
    (
        "k8s",
        "control rbac fake_cluster harness library test_runner artifacts dev lsp operator cli",
    ),
    (
        "control",
        "rbac fake_cluster harness library test_runner artifacts dev lsp operator cli",
    ),
    (
        "rbac",
        "fake_cluster harness library test_runner artifacts dev lsp operator cli",
    ),
    (
        "fake_cluster",
        "control harness library test_runner artifacts dev lsp operator cli",
    ),
    (
        "harness",
        "http rbac library test_runner artifacts dev lsp operator cli",
    ),
    ("library", "test_runner artifacts dev lsp operator cli"),
    (
        "test_runner",
        "http control rbac artifacts dev lsp operator cli",
    ),
    ("artifacts", "test_runner dev lsp operator cli"),
    ("dev", "rbac test_runner artifacts lsp operator cli"),
    ("lsp", "http rbac artifacts dev operator cli"),
    ("operator", "dev lsp cli"),
    ("cli", ""),
];

/// The modules `module` must never name.
fn never(module: &str) -> BTreeSet<&'static str> {
    RULES
        .iter()
        .find(|(name, _)| *name == module)
        .map(|(_, above)| above.split_whitespace().collect())
        .unwrap_or_default()
}

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

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// Every `.rs` file under `dir`.
pub(crate) fn sources(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The files of a module of the crate root: `src/x.rs` and everything under `src/x/`.
fn module_sources(module: &str) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let file = src().join(format!("{module}.rs"));
    if file.is_file() {
        files.push(file);
    }
    sources(&src().join(module), &mut files);
    files
}

/// The modules `src/lib.rs` declares, but for the test-only ones (this one, `lines`).
fn declared_modules() -> BTreeSet<String> {
    let text = std::fs::read_to_string(src().join("lib.rs")).unwrap();
    let mut modules = BTreeSet::new();
    let mut test_only = false;
    for line in text.lines().map(str::trim) {
        let declared = line
            .strip_prefix("pub mod ")
            .or_else(|| line.strip_prefix("mod "))
            .and_then(|rest| rest.strip_suffix(';'));
        if let Some(name) = declared
            && !test_only
        {
            modules.insert(name.to_owned());
        }
        test_only = line == "#[cfg(test)]";
    }
    modules
}

/// The code of a file: a comment may point the reader upwards, only code counts.
fn code_of(text: &str) -> String {
    text.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn no_layer_names_a_layer_above_it() {
    let mut found = Vec::new();
    for (layer, _) in RULES {
        let above = never(layer);
        let files = module_sources(layer);
        assert!(!files.is_empty(), "no sources for the module {layer}");
        for file in files {
            let code = code_of(&std::fs::read_to_string(&file).unwrap());
            for name in named_modules(&code) {
                if above.contains(name.as_str()) {
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
fn every_module_has_a_row_and_every_row_a_module() {
    let declared = declared_modules();
    assert!(declared.contains("script") && declared.contains("cli"));
    let rows: BTreeSet<String> = RULES.iter().map(|(m, _)| (*m).to_owned()).collect();
    assert_eq!(rows.len(), RULES.len(), "a module with two rows");
    assert_eq!(
        rows, declared,
        "the rows of RULES against src/lib.rs's modules"
    );
    for (module, _) in RULES {
        let never = never(module);
        assert!(!never.contains(module), "{module} forbids itself");
        let unknown: Vec<_> = never.iter().filter(|m| !rows.contains(**m)).collect();
        assert!(
            unknown.is_empty(),
            "{module} forbids unknown modules {unknown:?}"
        );
    }
}

/// The drawing of `docs/design/architecture.md`: the first code block under `## Layers`.
fn drawing(doc: &str) -> &str {
    let section = doc
        .split("\n## Layers\n")
        .nth(1)
        .expect("a ## Layers section");
    let block = section.split("```").nth(1).expect("a drawing in ## Layers");
    block.trim_start_matches(|c: char| c != '\n')
}

/// The modules a drawing shows, each with the line it is drawn on (0 at the top).
fn drawn_modules(drawing: &str, known: &BTreeSet<String>) -> Vec<(String, usize)> {
    let mut drawn = Vec::new();
    for (line, text) in drawing.lines().enumerate() {
        for word in text.split(|c: char| !(c.is_alphanumeric() || c == '_' || c == '.')) {
            if known.contains(word) {
                drawn.push((word.to_owned(), line));
            }
        }
    }
    drawn
}

/// The table of the rules as the architecture note shows it, between its markers: what
/// each module may name, which is every module its row does not forbid.
fn rules_table() -> String {
    let mut out = String::from("| Module | May name (and no other module) |\n|---|---|\n");
    for (module, _) in RULES {
        let never = never(module);
        let may: Vec<String> = RULES
            .iter()
            .map(|(m, _)| *m)
            .filter(|m| m != module && !never.contains(m))
            .map(|m| format!("`{m}`"))
            .collect();
        let may = if may.is_empty() {
            "(none)".to_owned()
        } else {
            may.join(", ")
        };
        out.push_str(&format!("| `{module}` | {may} |\n"));
    }
    out
}

const TABLE_START: &str =
    "<!-- rules: generated from src/layers.rs; `cargo test --lib layers` checks it -->\n";
const TABLE_END: &str = "<!-- /rules -->";

#[test]
fn the_drawing_and_the_table_agree_with_the_rules() {
    let doc = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/design/architecture.md"),
    )
    .unwrap();
    let known: BTreeSet<String> = RULES.iter().map(|(m, _)| (*m).to_owned()).collect();
    let drawn = drawn_modules(drawing(&doc), &known);
    let names: Vec<&str> = drawn.iter().map(|(m, _)| m.as_str()).collect();
    let shown: BTreeSet<String> = names.iter().map(|m| (*m).to_owned()).collect();
    assert_eq!(shown, known, "the modules drawn against the rows of RULES");
    assert_eq!(names.len(), shown.len(), "a module drawn twice: {names:?}");
    // Drawn above or beside a module, a module may not be named by it.
    let line = |m: &str| drawn.iter().find(|(n, _)| n == m).map(|(_, l)| *l).unwrap();
    let mut wrong = Vec::new();
    for (module, _) in RULES {
        let never = never(module);
        for (other, other_line) in &drawn {
            if other != module && *other_line <= line(module) && !never.contains(other.as_str()) {
                wrong.push(format!(
                    "{module} may name {other}, drawn at its height or above"
                ));
            }
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
    let table = doc
        .split(TABLE_START)
        .nth(1)
        .and_then(|rest| rest.split(TABLE_END).next())
        .expect("the table of the rules between its markers");
    assert_eq!(
        table,
        rules_table(),
        "docs/design/architecture.md's table of the rules is stale; it should read:\n{}",
        rules_table()
    );
}

#[test]
fn both_import_forms_are_seen() {
    assert_eq!(
        named_modules("use crate::{control, k8s::ops};\nlet x = crate::script::host::Host;"),
        ["control", "k8s", "script"]
    );
}

#[test]
fn a_drawing_is_read_line_by_line() {
    let known = ["k8s", "script"].map(str::to_owned).into();
    let drawn = drawn_modules("  k8s (main.rs)\n   |\n  script\n", &known);
    assert_eq!(drawn, [("k8s".to_owned(), 0), ("script".to_owned(), 2)]);
}
