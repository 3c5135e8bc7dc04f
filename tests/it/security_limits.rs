//! The adversarial suite of issue 26, continued: what a tenant's running controllers
//! may keep (memory between reconciles) and how soon a revoked author's controller
//! stops, without an operator restart.

use std::time::Duration;

use crate::security::{CEILING, reason_becomes, slc, tenant};
use crate::support::operator::*;
use crate::support::*;
use serde_json::json;

const T: Duration = Duration::from_secs(30);

/// A controller that reads the Deployments it watches: what a tenant who may read
/// Deployments may author.
const READER: &str = "def reconcile(d):\n    k8s.get(\"deployment\", d.metadata.name, namespace = d.metadata.namespace)\n\nk8s.control(\"deployments\", reconcile = reconcile)\n";

/// The status reason of `name`'s Ready condition ("" while it has none).
async fn ready_reason(ns: &str, name: &str) -> String {
    let s = status(ns, name).await;
    condition(&s, "Ready")["reason"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// Class 3 (memory): what one namespace's controllers keep between reconciles (the
/// values their top levels left) is bounded by `--namespace-memory`. The controller
/// over it is refused with the figures, keeps nothing, and runs once another goes.
#[tokio::test]
async fn a_namespace_keeps_no_more_memory_than_its_limit() {
    install_starlarkcontroller_crd().await;
    let ns = TestNamespace::new("sec-quota").await;
    let ns = ns.name.as_str();
    let user = tenant(ns).await;
    let ceiling = Ceiling::new(CEILING).await;
    let _op = Operator::start_with(
        ns,
        &ceiling,
        &["--namespace", ns, "--namespace-memory", "24"],
    )
    .await;
    // A 10 MB string each, kept for as long as the controller runs (in a heap chunk of
    // 16 MiB): one fits, two do not.
    let hoard = format!("BIG = \"x\" * 10000000\n\n{READER}");
    for name in ["first", "second"] {
        let out = apply_as(&user, &slc(ns, name, json!({"script": hoard}))).await;
        assert!(
            out.status.success(),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let (running, refused) = wait_for("one running, one over the limit", T, || async {
        let (a, b) = (
            ready_reason(ns, "first").await,
            ready_reason(ns, "second").await,
        );
        match (a.as_str(), b.as_str()) {
            ("Running", "MemoryQuota") => Some(("first", "second")),
            ("MemoryQuota", "Running") => Some(("second", "first")),
            _ => None,
        }
    })
    .await;
    let s = status(ns, refused).await;
    let m = condition(&s, "Ready")["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        m.contains("over the operator's limit of 24.0 MiB per namespace (--namespace-memory)"),
        "{m}"
    );
    // What the other keeps: its string's heap chunk and little else.
    let kept: f64 = m
        .split(&format!("namespace {ns}'s other controllers keep "))
        .nth(1)
        .and_then(|rest| rest.split(" MiB").next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no figure in {m}"));
    assert!((10.0..20.0).contains(&kept), "{m}");
    // Room again once the other goes.
    kubectl_ok(&["delete", "slc", running, "-n", ns]).await;
    wait_condition(ns, refused, "Ready", "True", Duration::from_secs(60)).await;
}

/// Class 9: the re-check sees revocation while the controller runs, with no restart:
/// a user whom a SubjectAccessReview now refuses, and a ServiceAccount author deleted,
/// each stop their controller within the re-check period.
#[tokio::test]
async fn revoked_authors_controllers_stop_within_the_recheck_period() {
    install_starlarkcontroller_crd().await;
    let ns = TestNamespace::new("sec-recheck").await;
    let ns = ns.name.as_str();
    let user = tenant(ns).await;
    kubectl_ok(&["create", "serviceaccount", "deployer", "-n", ns]).await;
    let robot = format!("system:serviceaccount:{ns}:deployer");
    grant(
        ns,
        &robot,
        "deployer",
        json!([
            {"apiGroups": ["starkite.io"], "resources": ["starlarkcontrollers"], "verbs": ["*"]},
            {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "get", "patch"]},
        ]),
    )
    .await;
    let ceiling = Ceiling::new(CEILING).await;
    let op =
        Operator::start_with(ns, &ceiling, &["--namespace", ns, "--recheck-period", "3s"]).await;
    let by_user = apply_as(&user, &slc(ns, "by-user", json!({"script": READER}))).await;
    assert!(by_user.status.success());
    let by_robot = kubectl_stdin(
        &["apply", "--as", &robot, "-f", "-"],
        &slc(ns, "by-robot", json!({"script": READER})).to_string(),
    )
    .await;
    assert!(
        by_robot.status.success(),
        "{}",
        String::from_utf8_lossy(&by_robot.stderr)
    );
    for name in ["by-user", "by-robot"] {
        wait_condition(ns, name, "Ready", "True", T).await;
    }
    wait_until("two controllers running", T, || async {
        op.metrics().await.contains("kite_operator_controllers 2")
    })
    .await;

    // The user loses the right to read Deployments; the robot is deleted.
    kubectl_ok(&["delete", "rolebinding", "tenant", "-n", ns]).await;
    kubectl_ok(&["delete", "serviceaccount", "deployer", "-n", ns]).await;
    let (_, m) = reason_becomes(ns, "by-user", "RBACReady", "AuthorForbidden").await;
    assert!(
        m.contains(&format!("tenant-{ns}")) && m.contains("deployments"),
        "{m}"
    );
    let (_, m) = reason_becomes(ns, "by-robot", "RBACReady", "AuthorGone").await;
    assert!(
        m.contains(&format!(
            "the author, ServiceAccount {ns}/deployer, no longer exists"
        )),
        "{m}"
    );
    for name in ["by-user", "by-robot"] {
        assert_ne!(ready_reason(ns, name).await, "Running", "{name}");
    }
    wait_until("both controllers stopped", T, || async {
        op.metrics().await.contains("kite_operator_controllers 0")
    })
    .await;
}
