//! Shared informers in `kite operator`: controllers watching the same resource, scope
//! and selectors share one watch run as the operator, and only a controller whose own
//! ServiceAccount may list and watch it is let in.

use std::time::Duration;

use crate::support::operator::*;
use crate::support::*;
use serde_json::json;

const T: Duration = Duration::from_secs(60);

/// The operator's `kite_operator_informers` gauge.
async fn informers(op: &Operator) -> Option<u64> {
    op.metrics()
        .await
        .lines()
        .find_map(|l| l.strip_prefix("kite_operator_informers "))
        .and_then(|v| v.trim().parse().ok())
}

#[tokio::test]
async fn controllers_watching_the_same_kind_share_one_watch_until_the_last_goes() {
    install_starlarkcontroller_crd().await;
    let ns = TestNamespace::new("share").await;
    let ns = ns.name.as_str();
    let ceiling = Ceiling::new(MAX_REPLICAS_CEILING).await;
    let op = Operator::start(ns, &ceiling).await;
    create_enforced_deployment(ns, "web", 5).await;
    apply_slc(ns, "one", max_replicas_spec(ns, "3")).await;
    apply_slc(ns, "two", max_replicas_spec(ns, "2")).await;
    wait_condition(ns, "one", "Ready", "True", T).await;
    wait_condition(ns, "two", "Ready", "True", T).await;
    // Both act on what the one watch delivers: the lower cap wins in the end.
    replicas_become(ns, "web", "2").await;
    assert_eq!(informers(&op).await, Some(1), "{}", op.metrics().await);

    // The watch is the operator's: neither ServiceAccount lists or watches Deployments.
    let watched_as = |who: &str| {
        audit_events(&format!("\"namespace\":\"{ns}\""))
            .into_iter()
            .filter(|e| {
                matches!(e["verb"].as_str(), Some("list" | "watch"))
                    && e["objectRef"]["resource"] == "deployments"
                    && e["impersonatedUser"]["username"]
                        .as_str()
                        .or(e["user"]["username"].as_str())
                        == Some(who)
            })
            .count()
    };
    assert!(
        watched_as("kite-admin") >= 2,
        "the operator listed and watched"
    );
    for sa in [
        generated_name(ns, "one").await,
        generated_name(ns, "two").await,
    ] {
        assert_eq!(
            watched_as(&format!("system:serviceaccount:{ns}:{sa}")),
            0,
            "{sa} did not watch under its own name"
        );
    }

    // One goes: the other keeps the watch and still corrects drift.
    kubectl_ok(&["delete", "slc", "one", "-n", ns, "--timeout=30s"]).await;
    drifted(ns, "web", "4").await;
    replicas_become(ns, "web", "2").await;
    assert_eq!(informers(&op).await, Some(1));
    // The last goes: so does the watch.
    kubectl_ok(&["delete", "slc", "two", "-n", ns, "--timeout=30s"]).await;
    wait_until("the shared watch closed", T, || async {
        informers(&op).await == Some(0)
    })
    .await;
}

#[tokio::test]
async fn a_controller_whose_account_may_not_watch_is_refused_until_it_may() {
    install_starlarkcontroller_crd().await;
    let ns = TestNamespace::new("share-deny").await;
    let ns = ns.name.as_str();
    let ceiling = Ceiling::new(MAX_REPLICAS_CEILING).await;
    let op = Operator::start(ns, &ceiling).await;
    create_enforced_deployment(ns, "web", 5).await;
    // A controller that may watch Deployments here already holds the shared watch (its
    // cap is above the Deployment's replicas, so it changes nothing).
    apply_slc(ns, "allowed", max_replicas_spec(ns, "10")).await;
    wait_condition(ns, "allowed", "Ready", "True", T).await;
    assert_eq!(informers(&op).await, Some(1));
    // An account that may list and patch Deployments, but not watch them.
    kubectl_ok(&["create", "serviceaccount", "lister", "-n", ns]).await;
    kubectl_ok(&[
        "create",
        "role",
        "lister",
        "-n",
        ns,
        "--verb=list,patch",
        "--resource=deployments.apps",
    ])
    .await;
    kubectl_ok(&[
        "create",
        "rolebinding",
        "lister",
        "-n",
        ns,
        "--role=lister",
        &format!("--serviceaccount={ns}:lister"),
    ])
    .await;
    let mut spec = max_replicas_spec(ns, "3");
    spec["serviceAccountName"] = json!("lister");
    apply_slc(ns, "borrowed", spec).await;
    let s = wait_condition(ns, "borrowed", "Ready", "False", T).await;
    let message = condition(&s, "Ready")["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.contains(&format!(
            "system:serviceaccount:{ns}:lister may not watch deployments (apps) in namespace {ns}"
        )),
        "{s}"
    );
    assert_eq!(condition(&s, "Ready")["reason"], "StartFailed", "{s}");
    // Nothing was let through, though the watch it asked for was open: the Deployment is
    // left alone, and no other watch opened.
    assert_eq!(
        jsonpath("deployment", "web", ns, "{.spec.replicas}").await,
        "5"
    );
    assert_eq!(informers(&op).await, Some(1));

    // Granted, it runs (the operator tries again by itself).
    kubectl_ok(&[
        "create",
        "role",
        "watcher",
        "-n",
        ns,
        "--verb=watch",
        "--resource=deployments.apps",
    ])
    .await;
    kubectl_ok(&[
        "create",
        "rolebinding",
        "watcher",
        "-n",
        ns,
        "--role=watcher",
        &format!("--serviceaccount={ns}:lister"),
    ])
    .await;
    wait_condition(ns, "borrowed", "Ready", "True", T).await;
    replicas_become(ns, "web", "3").await;
}

/// The operator's `kite_operator_modules` gauge.
async fn modules(op: &Operator) -> Option<u64> {
    op.metrics()
        .await
        .lines()
        .find_map(|l| l.strip_prefix("kite_operator_modules "))
        .and_then(|v| v.trim().parse().ok())
}

/// Issue 28: controllers of one namespace running the same script with the same vars
/// share one evaluated top level (and what it printed is printed for each); other vars
/// make another; a top level that reached the cluster is each controller's own.
#[tokio::test]
async fn controllers_of_the_same_script_and_vars_share_one_top_level() {
    install_starlarkcontroller_crd().await;
    let ns = TestNamespace::new("share-mod").await;
    let ns = ns.name.as_str();
    let ceiling = Ceiling::new(MAX_REPLICAS_CEILING).await;
    let op = Operator::start(ns, &ceiling).await;
    for (name, max) in [("a", "3"), ("b", "3"), ("c", "2")] {
        apply_slc(ns, name, max_replicas_spec(ns, max)).await;
    }
    for name in ["a", "b", "c"] {
        wait_condition(ns, name, "Ready", "True", T).await;
    }
    assert_eq!(modules(&op).await, Some(2), "{}", op.metrics().await);
    let out = op.kite.stdout();
    for name in ["a", "b"] {
        let line = format!("[{ns}/{name}] Starting max-replicas controller. Max allowed: 3");
        assert_eq!(count(&out, &line), 1, "{line} in {out:?}");
    }

    // Reading the cluster at the top level: each evaluates its own.
    let reads =
        format!("seen = len(k8s.list(\"deployments\", namespace = \"{ns}\"))\n{MAX_REPLICAS}");
    for name in ["d", "e"] {
        apply_slc(
            ns,
            name,
            json!({"script": reads, "vars": {"max_replicas": "3"}, "control": {"namespace": ns}}),
        )
        .await;
    }
    for name in ["d", "e"] {
        wait_condition(ns, name, "Ready", "True", T).await;
    }
    assert_eq!(modules(&op).await, Some(2), "{}", op.metrics().await);

    // The last holders go: so does the shared top level.
    for name in ["a", "b"] {
        kubectl_ok(&["delete", "slc", name, "-n", ns, "--timeout=30s"]).await;
    }
    wait_until("the shared top level dropped", T, || async {
        modules(&op).await == Some(1)
    })
    .await;
}
