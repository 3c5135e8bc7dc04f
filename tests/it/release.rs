//! The release (issue 29): the workflow passes actionlint, and the version it
//! publishes (Cargo.toml's) is the one config/manager and the README name.

use crate::support::{repo_root, tool};

fn read(path: &str) -> String {
    std::fs::read_to_string(repo_root().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Cargo.toml's package version.
fn version() -> String {
    read("Cargo.toml")
        .lines()
        .find_map(|l| l.strip_prefix("version = \""))
        .and_then(|v| v.strip_suffix('"'))
        .expect("a version in Cargo.toml")
        .to_owned()
}

#[test]
fn the_release_workflow_passes_actionlint() {
    let out = std::process::Command::new(tool("actionlint"))
        .arg(".github/workflows/release.yml")
        .current_dir(repo_root())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "actionlint: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn every_image_reference_names_cargo_tomls_version() {
    let image = format!("ghcr.io/kite-dev/kite:{}", version());
    let manager = read("config/manager/manager.yaml");
    assert!(
        manager.contains(&format!("image: {image}")),
        "config/manager/manager.yaml"
    );
    for path in ["config/manager/manager.yaml", "README.md", "Dockerfile"] {
        let text = read(path);
        for (at, _) in text.match_indices("ghcr.io/kite-dev/kite:") {
            let tag: String = text[at..]
                .chars()
                .take_while(|c| !c.is_whitespace() && !"`\",)".contains(*c))
                .collect();
            // A placeholder (VERSION, X.Y.Z) stands for any; a version must be this one.
            let named = tag.rsplit(':').next().unwrap_or_default();
            assert!(
                tag == image || !named.starts_with(|c: char| c.is_ascii_digit()),
                "{path} names {tag}, not {image}"
            );
        }
    }
    // The workflow publishes that version, and only when the tag names it.
    let workflow = read(".github/workflows/release.yml");
    assert!(
        workflow.contains("IMAGE: ghcr.io/kite-dev/kite\n"),
        "{workflow}"
    );
    assert!(workflow.contains("sed -n 's/^version = \"\\(.*\\)\"/\\1/p' Cargo.toml"));
    assert!(workflow.contains("\"v${version}\" != \"${GITHUB_REF_NAME}\""));
}
