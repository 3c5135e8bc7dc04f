//! Golden tests of what users see when things go wrong: each `tests/golden/NAME.star`
//! runs as its `# args:` line says (default `run`), and its stderr must equal
//! `NAME.stderr` and its exit code the `# exit:` line. `UPDATE_GOLDEN=1` rewrites them.

use std::path::Path;
use std::process::Command;

fn header<'a>(source: &'a str, key: &str) -> Option<&'a str> {
    source
        .lines()
        .take_while(|l| l.starts_with('#'))
        .find_map(|l| l.strip_prefix(&format!("# {key}:")).map(str::trim))
}

#[test]
fn error_rendering_matches_golden_files() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut cases: Vec<_> = std::fs::read_dir(root.join("tests/golden"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "star"))
        .collect();
    cases.sort();
    assert!(cases.len() >= 5, "golden cases are missing");
    let update = std::env::var_os("UPDATE_GOLDEN").is_some();
    let mut failures = Vec::new();
    for case in cases {
        let source = std::fs::read_to_string(&case).unwrap();
        let rel = case
            .strip_prefix(root)
            .unwrap()
            .to_str()
            .unwrap()
            .to_owned();
        let args: Vec<&str> = header(&source, "args")
            .unwrap_or("run")
            .split_whitespace()
            .collect();
        let want_code: i32 = header(&source, "exit").unwrap_or("0").parse().unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_kite"))
            .arg(args[0])
            .arg(&rel)
            .args(&args[1..])
            .current_dir(root)
            // No cluster is needed, and none may be reached by accident.
            .env("KUBECONFIG", "/nonexistent")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        let golden = case.with_extension("stderr");
        if update {
            std::fs::write(&golden, &stderr).unwrap();
        }
        let want = std::fs::read_to_string(&golden).unwrap_or_default();
        if stderr != want || out.status.code() != Some(want_code) {
            failures.push(format!(
                "{rel}: exit {:?} (want {want_code})\n--- got ---\n{stderr}--- want ---\n{want}",
                out.status.code()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
