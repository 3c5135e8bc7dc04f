//! `kite operator` with many StarlarkControllers: 50 become Ready and each corrects drift
//! on its own deployment; the operator's memory is reported as they come and go; after a
//! restart every controller resumes. A binary of its own, so nothing else runs meanwhile.

use std::time::Duration;

use crate::support::operator::{WebhookConfiguration, curl};
use crate::support::*;
use serde_json::{Value as Json, json};

const MAX_REPLICAS: &str = include_str!("../../examples/max-replicas-controller.star");
const COUNT: usize = 50;

fn rss_mb(pid: u32) -> f64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kb: f64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0);
    kb / 1024.0
}

/// The process's thread count.
fn threads(pid: u32) -> usize {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Threads:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(usize::MAX)
}

async fn ready_count(ns: &str) -> usize {
    let out = kubectl(&["get", "slc", "-n", ns, "-o", "json"]).await;
    let list: Json = serde_json::from_slice(&out.stdout).unwrap_or(Json::Null);
    list["items"]
        .as_array()
        .map(|items| {
            items
                .iter()
                .filter(|i| {
                    i["status"]["conditions"].as_array().is_some_and(|c| {
                        c.iter()
                            .any(|c| c["type"] == "Ready" && c["status"] == "True")
                    })
                })
                .count()
        })
        .unwrap_or(0)
}

async fn apply_all(ns: &str, objects: Vec<Json>) {
    let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
    let out = kubectl_stdin(&["apply", "-n", ns, "-f", "-"], &list.to_string()).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn controllers(ns: &str) -> Vec<Json> {
    (0..COUNT)
        .map(|i| {
            json!({
                "apiVersion": "starkite.io/v1alpha1",
                "kind": "StarlarkController",
                "metadata": {"name": format!("limit-{i}")},
                "spec": {
                    "script": MAX_REPLICAS,
                    "vars": {"max_replicas": "3"},
                    "control": {"namespace": ns, "labels": format!("enforce-max-replicas=true,slc={i}")},
                },
            })
        })
        .collect()
}

/// Paused deployments: the controllers only read and patch spec.replicas, so no pods are
/// needed, and 50 of them stay cheap on a small machine.
fn deployments(replicas: u32) -> Vec<Json> {
    (0..COUNT)
        .map(|i| {
            json!({
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": format!("web-{i}"), "labels": {"enforce-max-replicas": "true", "slc": i.to_string()}},
                "spec": {
                    "replicas": replicas,
                    "paused": true,
                    "selector": {"matchLabels": {"app": format!("web-{i}")}},
                    "template": {"metadata": {"labels": {"app": format!("web-{i}")}},
                                 "spec": {"containers": [{"name": "c", "image": "nginx"}]}},
                },
            })
        })
        .collect()
}

async fn all_corrected(ns: &str, want: &str) -> bool {
    let out = kubectl(&[
        "get",
        "deployments",
        "-n",
        ns,
        "-l",
        "enforce-max-replicas=true",
        "-o",
        "jsonpath={.items[*].spec.replicas}",
    ])
    .await;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let values: Vec<&str> = text.split_whitespace().collect();
    values.len() == COUNT && values.iter().all(|v| *v == want)
}

fn start_operator(ns: &str, ceiling: &str, port: u16) -> Kite {
    Kite::spawn(&[
        "operator",
        "--namespace",
        ns,
        "--ceiling",
        ceiling,
        "--health-port",
        &port.to_string(),
        "--status-period",
        "2s",
        "--webhook-port",
        "0",
        "--webhook-configuration",
        &format!("kite-test-{ns}"),
    ])
}

/// The requests since `since` that read, wrote or listed a generated ServiceAccount,
/// Role or RoleBinding of the StarlarkControllers in `ns` (not the watches: they are
/// the operator's view of them), as `verb uri`.
async fn identity_requests_since(ns: &str, since: k8s_openapi::jiff::Timestamp) -> Vec<String> {
    let uids = kubectl(&[
        "get",
        "slc",
        "-n",
        ns,
        "-o",
        "jsonpath={.items[*].metadata.uid}",
    ])
    .await;
    let uids = String::from_utf8_lossy(&uids.stdout).into_owned();
    let prunes = uids
        .split_whitespace()
        .flat_map(|uid| audit_events(&format!("owner-uid%3D{uid}")));
    let named = ["serviceaccounts", "roles", "rolebindings"]
        .into_iter()
        .flat_map(|r| audit_events(&format!("/namespaces/{ns}/{r}/starkite-")));
    prunes
        .chain(named)
        .filter(|e| e["stage"] == "ResponseComplete" && e["verb"] != "watch")
        .filter(|e| {
            e["requestReceivedTimestamp"]
                .as_str()
                .and_then(|t| t.parse::<k8s_openapi::jiff::Timestamp>().ok())
                .is_some_and(|t| t > since)
        })
        .map(|e| format!("{} {}", e["verb"], e["requestURI"]))
        .collect()
}

#[tokio::test]
async fn fifty_controllers_in_one_operator_and_a_restart() {
    // Its timings are taken with no other test running, as when it had a binary of
    // its own.
    let _cluster = exclusive().await;
    install_starlarkcontroller_crd().await;
    let ns = TestNamespace::new("slc-scale").await;
    let ns = ns.name.as_str();
    let ceiling = unique_name("slc-scale-ceiling");
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": ceiling},
        "rules": [{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list", "watch", "patch"]},
                  {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "get", "patch"]}]});
    let out = kubectl_stdin(&["apply", "-f", "-"], &role.to_string()).await;
    assert!(out.status.success());
    let _webhook = WebhookConfiguration::new(ns);
    let port = free_port();
    let mut op = start_operator(ns, &ceiling, port);
    let ready = format!("http://127.0.0.1:{port}/readyz");
    wait_until("the operator ready", Duration::from_secs(30), || async {
        curl(&ready).await.is_some_and(|b| b.trim() == "ok")
    })
    .await;
    let idle = rss_mb(op.pid());

    apply_all(ns, deployments(5)).await;
    apply_all(ns, controllers(ns)).await;
    wait_until(
        "50 StarlarkControllers Ready",
        Duration::from_secs(120),
        || async { ready_count(ns).await == COUNT },
    )
    .await;
    wait_until(
        "every deployment corrected to 3",
        Duration::from_secs(60),
        || all_corrected(ns, "3"),
    )
    .await;
    let with_50 = rss_mb(op.pid());
    // The hosted controllers share one pool of worker threads: the count follows the
    // cores, not the 50 controllers (2 workers each). Threads that evaluated the
    // scripts' top levels idle out of tokio's blocking pool within seconds.
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let limit = 4 * cores + 16;
    wait_until(
        &format!("the operator at most {limit} threads"),
        Duration::from_secs(60),
        || async { threads(op.pid()) <= limit },
    )
    .await;
    eprintln!(
        "kite operator threads with {COUNT} controllers: {}",
        threads(op.pid())
    );

    // They come and go: delete all, create all again.
    kubectl_ok(&["delete", "slc", "--all", "-n", ns, "--timeout=120s"]).await;
    let after_delete = rss_mb(op.pid());
    apply_all(ns, controllers(ns)).await;
    wait_until("50 Ready again", Duration::from_secs(120), || async {
        ready_count(ns).await == COUNT
    })
    .await;
    let again = rss_mb(op.pid());
    eprintln!(
        "kite operator RSS: {idle:.1} MB idle, {with_50:.1} MB with {COUNT} controllers, {after_delete:.1} MB after deleting them, {again:.1} MB with {COUNT} again"
    );

    // Restart: every controller resumes and corrects drift again.
    sigterm(op.pid());
    assert!(
        op.wait(Duration::from_secs(60)).await.success(),
        "a clean shutdown"
    );
    apply_all(ns, deployments(6)).await;
    let restarted = k8s_openapi::jiff::Timestamp::now();
    let mut op = start_operator(ns, &ceiling, port);
    wait_until(
        "every deployment corrected after the restart",
        Duration::from_secs(120),
        || all_corrected(ns, "3"),
    )
    .await;
    wait_until(
        "50 Ready after the restart",
        Duration::from_secs(60),
        || async { ready_count(ns).await == COUNT },
    )
    .await;
    // Every call multiplexed on HTTP/2 (k8s::transport): the restart's burst of starts
    // leaves one connection to the API server, not one per request that was in flight
    // (on HTTP/1.1 the pool kept dozens). Allow one more for a connection being replaced.
    let connections = apiserver_connections(op.pid());
    eprintln!(
        "kite operator connections to the API server with {COUNT} controllers: {connections}"
    );
    assert!(
        (1..=2).contains(&connections),
        "the operator holds {connections} connections to the API server"
    );
    let asked = identity_requests_since(ns, restarted).await;
    assert!(
        asked.is_empty(),
        "the restarted operator found every generated identity as wanted in its watches, yet asked the API server about {} of them: {:?}",
        asked.len(),
        asked.iter().take(5).collect::<Vec<_>>()
    );
    kubectl_ok(&["delete", "slc", "--all", "-n", ns, "--timeout=120s"]).await;
    sigterm(op.pid());
    op.wait(Duration::from_secs(60)).await;
    let _ = kubectl(&["delete", "clusterrole", &ceiling]).await;
}
