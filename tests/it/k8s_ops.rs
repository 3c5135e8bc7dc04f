//! The k8s module's workload and node operations against the local cluster: deploy,
//! scale, expose, autoscale, set_*, rollout (incl. history and undo), run, describe,
//! cordon/taint/drain on a node of the test's own, and top without metrics-server.

use std::process::{Output, Stdio};
use std::time::Duration;

use crate::support::*;

const T: Duration = Duration::from_secs(90);

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

async fn kite_script(script: &str, vars: &[String]) -> Output {
    let path = format!("tests/scripts/k8s_ops/{script}");
    let mut args = vec!["run", path.as_str(), "--allow-k8s"];
    for v in vars {
        args.extend(["--var", v.as_str()]);
    }
    kite_output(&args, T).await
}

fn assert_ok(out: &Output) -> String {
    let stdout = text(&out.stdout);
    assert!(
        out.status.success(),
        "stdout:\n{stdout}\nstderr:\n{}",
        text(&out.stderr)
    );
    stdout
}

#[tokio::test(flavor = "multi_thread")]
async fn workload_functions_change_the_cluster_as_kubectl_would() {
    let ns = TestNamespace::new("k8sops").await;
    let var = format!("namespace={}", ns.name);
    let out = kite_script("workloads.star", std::slice::from_ref(&var)).await;
    let stdout = assert_ok(&out);
    assert!(
        stdout.contains("all workload functions checked"),
        "{stdout}"
    );

    let n = &ns.name;
    assert_eq!(
        jsonpath("deployment", "web", n, "{.spec.replicas}").await,
        "3"
    );
    assert_eq!(
        jsonpath("service", "web", n, "{.spec.ports[0].port}").await,
        "80"
    );
    assert_eq!(
        jsonpath("service", "api", n, "{.spec.ports[0].targetPort}").await,
        "9090"
    );
    assert_eq!(
        jsonpath("hpa", "web-hpa", n, "{.spec.maxReplicas}").await,
        "5"
    );
    let c = "{.spec.template.spec.containers[0]";
    assert_eq!(
        jsonpath("deployment", "web", n, &format!("{c}.image}}")).await,
        "nginx:2.0"
    );
    assert_eq!(
        jsonpath(
            "deployment",
            "web",
            n,
            &format!("{c}.resources.limits.memory}}")
        )
        .await,
        "64Mi"
    );
    assert_eq!(jsonpath("deployment", "web", n, "{.spec.paused}").await, "");
    // run(rm=True) deleted its pod.
    wait_until("the run pod is deleted", T, || async {
        !kubectl(&["get", "pod", "once", "-n", n])
            .await
            .status
            .success()
    })
    .await;

    // Undo needs the Deployment controller's ReplicaSets, one per template.
    wait_until("the revisions exist", T, || async {
        let names = kubectl_ok(&["get", "rs", "-n", n, "-l", "app=web", "-o", "name"]).await;
        names.lines().count() >= 3
    })
    .await;
    let out = kite_script("history.star", &[var]).await;
    let stdout = assert_ok(&out);
    assert!(stdout.contains("revisions: [1, 2, 3"), "{stdout}");
    assert!(stdout.contains("first image: nginx:1.0"), "{stdout}");
    assert!(stdout.contains("undone to: nginx:1.0"), "{stdout}");
    assert!(
        stdout.contains("missing revision: k8s.rollout: revision 99 not found"),
        "{stdout}"
    );
    assert_eq!(
        jsonpath("deployment", "web", n, &format!("{c}.image}}")).await,
        "nginx:1.0"
    );
}

/// A fake node of the test's own (kwok runs it), deleted at the end. Its taint keeps
/// the scheduler from placing other tests' pods there (the drain would evict them);
/// the tests' own pods name the node directly.
struct TestNode(String);

impl TestNode {
    async fn new(ns: &str) -> Self {
        let name = format!("kite-test-{ns}");
        let manifest = format!(
            r#"{{"apiVersion": "v1", "kind": "Node",
  "metadata": {{"name": "{name}", "annotations": {{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"}},
               "labels": {{"type": "kwok", "kubernetes.io/hostname": "{name}"}}}},
  "spec": {{"taints": [{{"key": "kite-test.io/private", "effect": "NoSchedule"}}]}},
  "status": {{"allocatable": {{"cpu": "4", "memory": "8Gi", "pods": "100"}},
             "capacity": {{"cpu": "4", "memory": "8Gi", "pods": "100"}}}}}}"#
        );
        let out = kubectl_stdin(&["apply", "-f", "-"], &manifest).await;
        assert!(out.status.success(), "{}", text(&out.stderr));
        Self(name)
    }
}

impl Drop for TestNode {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kubectl")
            .args([
                "delete",
                "node",
                &self.0,
                "--wait=false",
                "--ignore-not-found",
            ])
            .env("KUBECONFIG", kubeconfig())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// The taints kite set (the node lifecycle controller may add its own).
async fn kite_taints(node: &str) -> Vec<String> {
    let out = kubectl_ok(&[
        "get",
        "node",
        node,
        "-o",
        "jsonpath={range .spec.taints[*]}{.key}={.value}:{.effect}{\"\\n\"}{end}",
    ])
    .await;
    out.lines()
        .filter(|l| l.starts_with("kite.test/"))
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn node_scheduling_controls_and_top_without_metrics_server() {
    let ns = TestNamespace::new("k8snode").await;
    let node = TestNode::new(&ns.name).await;
    let out = kite_script("nodes.star", &[format!("node={}", node.0)]).await;
    let stdout = assert_ok(&out);
    for line in [
        "cordoned: True",
        "tainted: [\"kite.test/a=3:NoSchedule\", \"kite.test/b=2:NoExecute\"]",
        "untainted: [\"kite.test/a=3:NoSchedule\"]",
        "has no taint with key \"kite.test/zzz\"",
        "not \"Sometimes\"",
        "describe has taints: True",
        "uncordoned: False",
        "-nope\" not found (404)",
        // Without metrics-server the rows carry upstream's capacity and requests only.
        "top_nodes: 1 True False",
        "top_pods: list",
        "sort_by must be \"cpu\" or \"memory\", not \"disk\"",
    ] {
        assert!(stdout.contains(line), "{line:?} missing from:\n{stdout}");
    }
    assert_eq!(kite_taints(&node.0).await, ["kite.test/a=3:NoSchedule"]);
    assert_eq!(
        jsonpath("node", &node.0, "", "{.spec.unschedulable}").await,
        ""
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn drain_respects_budgets_and_unmanaged_pods() {
    let ns = TestNamespace::new("k8sdrain").await;
    let node = TestNode::new(&ns.name).await;
    let manifests = format!(
        r#"{{"apiVersion": "v1", "kind": "List", "items": [
  {{"apiVersion": "v1", "kind": "Pod", "metadata": {{"name": "lonely"}},
    "spec": {{"nodeName": "{n}", "containers": [{{"name": "c", "image": "busybox"}}]}}}},
  {{"apiVersion": "apps/v1", "kind": "ReplicaSet", "metadata": {{"name": "keeper"}},
    "spec": {{"replicas": 1, "selector": {{"matchLabels": {{"app": "keeper"}}}},
      "template": {{"metadata": {{"labels": {{"app": "keeper"}}}},
        "spec": {{"nodeName": "{n}", "containers": [{{"name": "c", "image": "busybox"}}]}}}}}}}},
  {{"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {{"name": "keeper"}},
    "spec": {{"minAvailable": 1, "selector": {{"matchLabels": {{"app": "keeper"}}}}}}}}]}}"#,
        n = node.0
    );
    let out = kubectl_stdin(&["apply", "-n", &ns.name, "-f", "-"], &manifests).await;
    assert!(out.status.success(), "{}", text(&out.stderr));
    let keeper_pod = wait_for("the keeper pod runs", T, || async {
        let out = kubectl(&[
            "get",
            "pods",
            "-n",
            &ns.name,
            "-l",
            "app=keeper",
            "--field-selector",
            "status.phase=Running",
            "-o",
            "jsonpath={.items[*].metadata.name}",
        ])
        .await;
        let name = text(&out.stdout).trim().to_owned();
        (out.status.success() && !name.is_empty() && !name.contains(' ')).then_some(name)
    })
    .await;
    wait_until("the budget counts the pod", T, || async {
        jsonpath("pdb", "keeper", &ns.name, "{.status.currentHealthy}").await == "1"
    })
    .await;
    let vars = |force: &str, timeout: &str| {
        vec![
            format!("node={}", node.0),
            format!("force={force}"),
            format!("timeout={timeout}"),
        ]
    };

    // Without force the unmanaged pod is refused; the budget blocks the other one until
    // the timeout. Nothing is evicted, and the node is cordoned.
    let stdout = assert_ok(&kite_script("drain.star", &vars("no", "4s")).await);
    assert!(stdout.contains("evicted: []"), "{stdout}");
    assert!(
        stdout.contains("/lonely: not managed by a controller"),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("{keeper_pod}: still refused")),
        "{stdout}"
    );
    assert_eq!(
        jsonpath("node", &node.0, "", "{.spec.unschedulable}").await,
        "true"
    );
    assert!(
        kubectl(&["get", "pod", "lonely", "-n", &ns.name])
            .await
            .status
            .success()
    );

    // Without the budget and with force, both go.
    kubectl_ok(&["delete", "pdb", "keeper", "-n", &ns.name]).await;
    let stdout = assert_ok(&kite_script("drain.star", &vars("yes", "60s")).await);
    assert!(stdout.contains("errors: 0"), "{stdout}");
    assert!(
        stdout.contains(&format!("\"{}/{keeper_pod}\"", ns.name))
            && stdout.contains(&format!("\"{}/lonely\"", ns.name)),
        "{stdout}"
    );
    assert!(
        !kubectl(&["get", "pod", "lonely", "-n", &ns.name])
            .await
            .status
            .success()
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn drain_of_a_missing_node_fails_naming_it() {
    let out = kite_script(
        "drain.star",
        &[
            "node=kite-test-no-such-node".into(),
            "force=no".into(),
            "timeout=5s".into(),
        ],
    )
    .await;
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("k8s.drain: nodes \"kite-test-no-such-node\" not found (404)"),
        "{err}"
    );
}

/// `k8s.watch` reads its list a page at a time on the script's own thread: more
/// objects than a page all arrive as ADDED, and a change made meanwhile follows.
#[tokio::test(flavor = "multi_thread")]
async fn watch_lists_every_page_then_follows_changes() {
    let ns = TestNamespace::new("k8swatch").await;
    let var = format!("namespace={}", ns.name);
    let out = kite_script("watch.star", std::slice::from_ref(&var)).await;
    let stdout = assert_ok(&out);
    assert!(stdout.contains("listed 150"), "{stdout}");
    assert!(stdout.contains("late arrived as ADDED"), "{stdout}");
}

/// Issue 28: `k8s.event` writes in the background, and nothing is lost when the run
/// ends: every repeat is counted, whether it was merged while waiting or bumped after.
#[tokio::test(flavor = "multi_thread")]
async fn background_events_are_all_written_before_the_run_exits() {
    let ns = TestNamespace::new("k8sevents").await;
    let var = format!("namespace={}", ns.name);
    let out = kite_script("events.star", std::slice::from_ref(&var)).await;
    let stdout = assert_ok(&out);
    assert!(stdout.contains("recorded 300 events"), "{stdout}");
    let events = kubectl_ok(&["get", "events", "-n", &ns.name, "-o", "json"]).await;
    let events: serde_json::Value = serde_json::from_str(&events).unwrap();
    let mut counts = std::collections::BTreeMap::new();
    for e in events["items"].as_array().unwrap() {
        if e["reason"] == "Noted" {
            let message = e["message"].as_str().unwrap().to_owned();
            *counts.entry(message).or_insert(0) += e["count"].as_i64().unwrap();
        }
    }
    assert_eq!(counts.len(), 100, "{counts:?}");
    assert!(counts.values().all(|c| *c == 3), "{counts:?}");
}
