//! A controller in upstream Starkite's style (the two-argument reconcile, `printf`,
//! `strings`, `health_port = 0`) runs unchanged against the local cluster.

use std::time::Duration;

use crate::support::*;

const T: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread")]
async fn printf_scaler_caps_and_reports() {
    let ns = TestNamespace::new("printf").await;
    let var = format!("namespace={}", ns.name);
    let mut kite = Kite::spawn(&[
        "run",
        "tests/scripts/standard/printf_scaler.star",
        "--allow-k8s",
        "--var",
        &var,
    ]);
    kite.wait_stdout(&format!("Capping \"{}\" at 2 replicas", ns.name), T)
        .await;
    create_enforced_deployment(&ns.name, "big", 5).await;
    create_enforced_deployment(&ns.name, "ok", 1).await;
    kite.wait_stdout("[SCALE DOWN] big from 5 to 2", T).await;
    kite.wait_stdout("[OK] ok     has 1 (max 2)", T).await;
    wait_until("big capped at 2", T, || async {
        jsonpath("deployment", "big", &ns.name, "{.spec.replicas}").await == "2"
    })
    .await;
    kubectl_ok(&["delete", "deployment", "ok", "-n", &ns.name]).await;
    kite.wait_stdout("[DELETED] ok", T).await;
    // health_port = 0: no health server, and nothing said about one.
    assert!(
        !kite.stderr().iter().any(|l| l.contains("serving /healthz")),
        "{:?}",
        kite.stderr()
    );
}
