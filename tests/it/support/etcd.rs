//! The local cluster's etcd, reached through its JSON gateway: its current revision, and
//! compaction (which the API server would otherwise do only every 5 minutes).

use serde_json::{Value as Json, json};

use super::cluster_dir;

/// The etcd URL the API server uses, read from its command line (our recorded pid).
pub fn url() -> String {
    let pid = std::fs::read_to_string(cluster_dir().join("pids/kube-apiserver.pid"))
        .expect("the API server's pid file");
    let cmdline =
        std::fs::read(format!("/proc/{}/cmdline", pid.trim())).expect("the API server is running");
    String::from_utf8_lossy(&cmdline)
        .split('\0')
        .find_map(|arg| arg.strip_prefix("--etcd-servers="))
        .and_then(|servers| servers.split(',').next())
        .expect("--etcd-servers on the API server's command line")
        .to_owned()
}

async fn post(path: &str, body: &Json) -> Json {
    let out = tokio::process::Command::new("curl")
        .args(["-s", "-f", "-m", "30", "-X", "POST"])
        .arg(format!("{}{path}", url()))
        .args(["-d", &body.to_string()])
        .output()
        .await
        .expect("run curl");
    assert!(out.status.success(), "etcd {path}: {out:?}");
    serde_json::from_slice(&out.stdout).expect("etcd answers JSON")
}

/// etcd's current revision.
pub async fn revision() -> u64 {
    // Any key: the response header carries the store's revision.
    let r = post("/v3/kv/range", &json!({"key": "AA=="})).await;
    r["header"]["revision"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .expect("a revision in the response header")
}

/// Compacts away every revision before the current one (physically: it waits until
/// the old revisions are gone). Returns the revision compacted to.
pub async fn compact() -> u64 {
    let rev = revision().await;
    post(
        "/v3/kv/compaction",
        &json!({"revision": rev.to_string(), "physical": true}),
    )
    .await;
    rev
}
