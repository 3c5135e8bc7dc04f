//! The inferred role of a controller that uses the workload and pod I/O calls (`scale`,
//! `rollout`, `set_*`, `expose`, `autoscale`, `deploy`, `describe`, `logs`, `exec`,
//! `port_forward`): run under it, nothing is refused and every granted verb is used.

use std::time::Duration;

use super::deployed::Deployed;
use crate::support::*;

const SCRIPT: &str = "tests/scripts/artifacts/workload-ops.star";

/// The Deployment `web` (container `app`) and the running pod `one` the script works on.
async fn targets(ns: &str) {
    let manifest = format!(
        r"
apiVersion: apps/v1
kind: Deployment
metadata: {{name: web, namespace: {ns}}}
spec:
  replicas: 1
  selector: {{matchLabels: {{app: web}}}}
  template:
    metadata: {{labels: {{app: web}}}}
    spec:
      containers: [{{name: app, image: nginx}}]
---
apiVersion: v1
kind: Pod
metadata: {{name: one, namespace: {ns}}}
spec:
  containers: [{{name: one, image: busybox}}]
"
    );
    let out = kubectl_stdin(&["apply", "-f", "-"], &manifest).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_until("pod one running", Duration::from_secs(60), || async {
        jsonpath("pod", "one", ns, "{.status.phase}").await == "Running"
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn workload_and_pod_io_calls_run_under_their_inferred_role() {
    let d = Deployed::new("art-ops", SCRIPT, &[], Some("ns")).await;
    assert_eq!(
        d.kinds(),
        [
            "Namespace",
            "ServiceAccount",
            "Role",
            "RoleBinding",
            "Deployment"
        ]
    );
    let ns = d.ns.name.clone();
    targets(&ns).await;
    let var = format!("ns={ns}");
    // port_forward opens a listener on this machine: it needs --allow-net (issue 26).
    let mut kite = d.run(SCRIPT, &["--var", &var, "--allow-net"]);
    kubectl_ok(&["create", "configmap", "go", "-n", &ns]).await;
    kubectl_ok(&["label", "configmap", "go", "-n", &ns, "kite.test/ops=true"]).await;
    kite.wait_stdout("done with go", Duration::from_secs(90))
        .await;
    let out = kite.stdout().join("\n");
    for line in [
        "scaled web",
        "exposed web",
        "autoscaled web-hpa",
        "deployed made made",
    ] {
        assert!(out.contains(line), "no {line:?} in:\n{out}");
    }
    // The pod calls ran (against kwok's fake pod the API server finds no kubelet, or
    // another test's stand-in one); the audit check below shows they were authorized.
    for call in ["logs", "exec", "port_forward"] {
        let prefix = format!("{call}: ");
        assert!(
            out.lines().any(|l| l.starts_with(&prefix)),
            "no {prefix:?} in:\n{out}"
        );
    }
    let why = "the runtime's events: this handler does not fail and returns no children";
    // A websocket upgrade is audited as its `get` alone; the API server's second check,
    // for `create`, refuses with a 403 that `used()` does not count as `get`. So the
    // `get`s being used (checked) shows the `create`s were granted and needed: a role
    // without them makes exec and port-forward fail with a 403.
    let upgrade = "websocket upgrade: the API server's extra create check is not audited";
    d.assert_minimal_and_sufficient(
        &kite,
        &[
            ("create", "", "events", why),
            ("get", "", "events", why),
            ("patch", "", "events", why),
            ("create", "", "pods/exec", upgrade),
            ("create", "", "pods/portforward", upgrade),
        ],
        &[],
    )
    .await;
    d.assert_refused(&["delete", "deployment", "web", "-n", &ns])
        .await;
    d.assert_refused(&["get", "secrets", "-n", &ns]).await;
}

/// A kwok node of this test's own, deleted at the end: created unschedulable and
/// tainted, so nothing but the pod bound to it by name lands there, and never counted
/// among the cluster's Ready nodes.
struct OwnNode(String);

impl OwnNode {
    async fn new() -> Self {
        let name = unique_name("kite-audit-node");
        let manifest = format!(
            r#"
apiVersion: v1
kind: Node
metadata:
  name: {name}
  annotations: {{node.alpha.kubernetes.io/ttl: "0", kwok.x-k8s.io/node: fake}}
  labels: {{type: kwok, kubernetes.io/hostname: {name}}}
spec:
  unschedulable: true
  taints: [{{key: kite.test/private, value: "true", effect: NoSchedule}}]
status:
  allocatable: {{cpu: "4", memory: 8Gi, pods: "10"}}
  capacity: {{cpu: "4", memory: 8Gi, pods: "10"}}
"#
        );
        let out = kubectl_stdin(&["apply", "-f", "-"], &manifest).await;
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        OwnNode(name)
    }
}

impl Drop for OwnNode {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kubectl")
            .args([
                "delete",
                "node",
                &self.0,
                "--ignore-not-found",
                "--wait=false",
            ])
            .env("KUBECONFIG", kubeconfig())
            .stdout(std::process::Stdio::null())
            .status();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn node_calls_run_under_a_cluster_role_for_the_node() {
    let script = "tests/scripts/artifacts/node-ops.star";
    let node = OwnNode::new().await;
    let node_var = format!("node={}", node.0);
    let d = Deployed::new("art-node", script, &["--var", &node_var], Some("ns")).await;
    // Nodes and the pods on them are cluster-wide; the watched ConfigMaps are not.
    assert_eq!(
        d.kinds(),
        [
            "Namespace",
            "ServiceAccount",
            "ClusterRole",
            "Role",
            "ClusterRoleBinding",
            "RoleBinding",
            "Deployment"
        ]
    );
    let ns = d.ns.name.clone();
    // An unmanaged pod bound to the node by name: drain evicts it (force=True).
    let pod = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: victim, namespace: {ns}}}\n\
         spec:\n  nodeName: {}\n  containers: [{{name: app, image: busybox}}]\n",
        node.0
    );
    let out = kubectl_stdin(&["apply", "-f", "-"], &pod).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_until("the victim running", Duration::from_secs(60), || async {
        jsonpath("pod", "victim", &ns, "{.status.phase}").await == "Running"
    })
    .await;
    let var = format!("ns={ns}");
    let mut kite = d.run(script, &["--var", &var, "--var", &node_var]);
    kubectl_ok(&["create", "configmap", "go", "-n", &ns]).await;
    kubectl_ok(&["label", "configmap", "go", "-n", &ns, "kite.test/node=true"]).await;
    kite.wait_stdout("done with go", Duration::from_secs(90))
        .await;
    let out = kite.stdout().join("\n");
    let drained = format!("drained {} evicted 1 errors 0", node.0);
    assert!(out.contains(&drained), "no {drained:?} in:\n{out}");
    let why = "the runtime's events: this handler does not fail and returns no children";
    d.assert_minimal_and_sufficient(
        &kite,
        &[
            ("create", "", "events", why),
            ("get", "", "events", why),
            ("patch", "", "events", why),
        ],
        &[],
    )
    .await;
    d.assert_refused(&["delete", "node", &node.0]).await;
    d.assert_refused(&["get", "secrets", "-n", &ns]).await;
}
