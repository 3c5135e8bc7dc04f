//! Proves that the local control plane is a real cluster: Ready kwok nodes, Deployments
//! that roll out, garbage collection, RBAC, CRDs and the audit log.

use std::time::Duration;

use crate::support::*;
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

#[tokio::test(flavor = "multi_thread")]
async fn two_nodes_are_ready() {
    let out = kubectl_ok(&["get", "nodes", "--no-headers"]).await;
    let ready: Vec<&str> = out
        .lines()
        .filter(|l| l.split_whitespace().nth(1) == Some("Ready"))
        .collect();
    assert_eq!(ready.len(), 2, "kubectl get nodes:\n{out}");
}

/// The fake nodes heartbeat through leases; without them their status is refreshed only
/// every 10 minutes and the node lifecycle controller flaps them NotReady.
#[tokio::test(flavor = "multi_thread")]
async fn nodes_renew_their_leases() {
    let renew = || async {
        kubectl_ok(&[
            "get",
            "lease",
            "kwok-node-0",
            "-n",
            "kube-node-lease",
            "-o",
            "jsonpath={.spec.renewTime}",
        ])
        .await
    };
    let first = renew().await;
    assert!(!first.is_empty(), "kwok-node-0 has a lease");
    wait_until("the lease renewed", Duration::from_secs(40), || async {
        renew().await != first
    })
    .await;
}

/// The cluster is the release it was built as: the newest supported by default, or
/// `KUBE_VERSION` (`make test-compat`), and kite takes it as supported.
#[tokio::test(flavor = "multi_thread")]
async fn api_server_reports_the_release_it_was_built_as() {
    let version = client()
        .await
        .apiserver_version()
        .await
        .expect("server version");
    let wanted = std::env::var("KUBE_VERSION").unwrap_or_else(|_| "1.37.2".into());
    let git = &version.git_version;
    assert!(
        *git == format!("v{wanted}") || git.starts_with(&format!("v{wanted}.")),
        "{git} is not KUBE_VERSION {wanted}"
    );
    assert_eq!(kite::support::problem(&version), None, "{git}");
}

#[tokio::test(flavor = "multi_thread")]
async fn deployment_rolls_out_on_kwok_nodes() {
    let ns = TestNamespace::new("cluster-deploy").await;
    kubectl_ok(&[
        "create",
        "deployment",
        "web",
        "--image=nginx:alpine",
        "--replicas=3",
        "-n",
        &ns.name,
    ])
    .await;
    let out = kubectl(&[
        "rollout",
        "status",
        "deployment/web",
        "-n",
        &ns.name,
        "--timeout=60s",
    ])
    .await;
    assert!(
        out.status.success(),
        "rollout: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let available = kubectl_ok(&[
        "get",
        "deployment",
        "web",
        "-n",
        &ns.name,
        "-o",
        "jsonpath={.status.availableReplicas}",
    ])
    .await;
    assert_eq!(available, "3");
    let pods: Api<Pod> = Api::namespaced(client().await, &ns.name);
    for pod in pods.list(&ListParams::default()).await.unwrap() {
        let status = pod.status.unwrap_or_default();
        assert_eq!(status.phase.as_deref(), Some("Running"));
        assert!(
            pod.spec
                .unwrap()
                .node_name
                .unwrap()
                .starts_with("kwok-node-")
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn deleting_an_owner_collects_its_dependent() {
    let ns = TestNamespace::new("cluster-gc").await;
    let cms: Api<ConfigMap> = Api::namespaced(client().await, &ns.name);
    let owner: ConfigMap = serde_json::from_value(json!({"metadata": {"name": "owner"}})).unwrap();
    let owner = cms.create(&PostParams::default(), &owner).await.unwrap();
    let dependent: ConfigMap = serde_json::from_value(json!({"metadata": {
        "name": "dependent",
        "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
                             "uid": owner.metadata.uid.unwrap()}]
    }}))
    .unwrap();
    cms.create(&PostParams::default(), &dependent)
        .await
        .unwrap();
    cms.delete("owner", &DeleteParams::background())
        .await
        .unwrap();
    wait_until(
        "the garbage collector to delete the dependent",
        Duration::from_secs(30),
        || async { matches!(cms.get_opt("dependent").await, Ok(None)) },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn unprivileged_user_is_forbidden_and_audited() {
    let ns = TestNamespace::new("cluster-rbac").await;
    let client = client_from(&unprivileged_kubeconfig()).await;
    let pods: Api<Pod> = Api::namespaced(client, &ns.name);
    match pods.list(&ListParams::default()).await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 403, "{status:?}"),
        other => panic!("expected 403, got {other:?}"),
    }
    let out = kubectl_as(&unprivileged_kubeconfig(), &["get", "pods", "-n", &ns.name]).await;
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("Forbidden"));

    // The audit log records who asked, for what, where, and the answer.
    wait_until(
        "the audit log to record the 403",
        Duration::from_secs(10),
        || async {
            audit_events(&ns.name).iter().any(|e| {
                e["user"]["username"] == "kite-unprivileged"
                    && e["verb"] == "list"
                    && e["objectRef"]["resource"] == "pods"
                    && e["objectRef"]["namespace"] == ns.name.as_str()
                    && e["responseStatus"]["code"] == 403
            })
        },
    )
    .await;
    wait_until(
        "the audit log to record the admin's namespace creation",
        Duration::from_secs(10),
        || async {
            audit_events(&ns.name).iter().any(|e| {
                e["user"]["username"] == "kite-admin"
                    && e["verb"] == "create"
                    && e["objectRef"]["resource"] == "namespaces"
                    && e["responseStatus"]["code"] == 201
            })
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn custom_resources_are_served() {
    let ns = TestNamespace::new("cluster-crd").await;
    let group = format!("{}.kite.test", ns.name);
    let crd = format!(
        r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {{name: widgets.{group}}}
spec:
  group: {group}
  scope: Namespaced
  names: {{plural: widgets, singular: widget, kind: Widget}}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {{type: object, properties: {{size: {{type: integer}}}}}}
"#
    );
    let out = kubectl_stdin(&["apply", "-f", "-"], &crd).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let crd_name = format!("widgets.{group}");
    kubectl_ok(&[
        "wait",
        "--for=condition=Established",
        &format!("crd/{crd_name}"),
        "--timeout=30s",
    ])
    .await;

    let widget = format!(
        "apiVersion: {group}/v1\nkind: Widget\nmetadata: {{name: w1, namespace: {}}}\nspec: {{size: 3}}\n",
        ns.name
    );
    // Discovery of a new group can lag Established by a moment; retry until it is served.
    wait_until(
        "the Widget to be created",
        Duration::from_secs(30),
        || async {
            kubectl_stdin(&["apply", "-f", "-"], &widget)
                .await
                .status
                .success()
        },
    )
    .await;
    let size = kubectl_ok(&[
        "get",
        &format!("widgets.{group}"),
        "w1",
        "-n",
        &ns.name,
        "-o",
        "jsonpath={.spec.size}",
    ])
    .await;
    assert_eq!(size, "3");
    kubectl_ok(&["delete", "crd", &crd_name, "--wait=false"]).await;
}
