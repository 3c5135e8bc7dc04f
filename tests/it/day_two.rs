//! Day two (issue 29): what a platform team meets around an install of kite, such as
//! a local run of the operator beside the in-cluster one.

use std::time::Duration;

use crate::support::operator::*;
use crate::support::*;
use serde_json::{Value as Json, json};

const T: Duration = Duration::from_secs(60);

/// The names of the operator's webhook configurations that review `ns`.
async fn configurations_for(ns: &str) -> Vec<String> {
    let out = kubectl_ok(&[
        "get",
        "mutatingwebhookconfigurations",
        "-l",
        "app.kubernetes.io/managed-by=kite-operator",
        "-o",
        "json",
    ])
    .await;
    let list: Json = serde_json::from_str(&out).unwrap();
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| {
            c["webhooks"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
                == ns
        })
        .map(|c| {
            c["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

/// A locally run operator registers a configuration named apart from the in-cluster
/// install's, and takes it with it when it exits cleanly: nothing is left that would
/// refuse creates with no webhook behind it.
#[tokio::test(flavor = "multi_thread")]
async fn a_local_run_leaves_no_webhook_configuration_behind() {
    install_starlarkcontroller_crd().await;
    let ns = TestNamespace::new("local-run").await;
    let ns = ns.name.as_str();
    let ceiling = Ceiling::new(MAX_REPLICAS_CEILING).await;
    let port = free_port().to_string();
    let mut kite = Kite::spawn(&[
        "operator",
        "--namespace",
        ns,
        "--ceiling",
        &ceiling.0,
        "--health-port",
        &port,
        "--webhook-port",
        "0",
    ]);
    let ready = format!("http://127.0.0.1:{port}/readyz");
    wait_until("the operator ready", T, || async {
        curl(&ready).await.is_some_and(|b| b.trim() == "ok")
    })
    .await;
    let names = configurations_for(ns).await;
    assert_eq!(names.len(), 1, "{names:?}");
    assert!(names[0].starts_with("kite-operator-local-"), "{names:?}");

    sigterm(kite.pid());
    assert!(kite.wait(T).await.success());
    assert_eq!(configurations_for(ns).await, Vec::<String>::new());
    let stderr = kite.stderr().join("\n");
    assert!(
        stderr.contains("removed this run's admission webhook configuration"),
        "{stderr}"
    );
    // A create is not refused by a webhook that nobody serves.
    let slc = json!({
        "apiVersion": "starkite.io/v1alpha1",
        "kind": "StarlarkController",
        "metadata": {"name": "after", "namespace": ns},
        "spec": {"script": "k8s.control(\"deployments\", reconcile = lambda d: None)\n"},
    });
    let out = kubectl_stdin(&["create", "-f", "-"], &slc.to_string()).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
