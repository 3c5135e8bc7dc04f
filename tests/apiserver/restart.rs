//! A controller survives an API server restart: its watch recovers and new drift is
//! still corrected. This is its own test binary, so no other test runs while the API
//! server is down (cargo runs test binaries one at a time).

use std::time::Duration;

use crate::support::*;

#[tokio::test(flavor = "multi_thread")]
async fn drift_is_corrected_after_an_api_server_restart() {
    let ns = TestNamespace::new("restart").await;
    let (mut kite, port) = cap_controller(&ns.name).await;
    let replicas = |name: &'static str| {
        let ns = ns.name.clone();
        async move {
            kubectl_ok(&[
                "get",
                "deployment",
                name,
                "-n",
                &ns,
                "-o",
                "jsonpath={.spec.replicas}",
            ])
            .await
        }
    };
    kubectl_ok(&[
        "create",
        "deployment",
        "before",
        "--image=nginx:alpine",
        "--replicas=9",
        "-n",
        &ns.name,
    ])
    .await;
    wait_until(
        "the first drift to be corrected",
        Duration::from_secs(20),
        || async { replicas("before").await == "2" },
    )
    .await;

    restart_apiserver().await;

    wait_until(
        "the API server to accept writes again",
        Duration::from_secs(60),
        || async {
            kubectl(&[
                "create",
                "deployment",
                "after",
                "--image=nginx:alpine",
                "--replicas=9",
                "-n",
                &ns.name,
            ])
            .await
            .status
            .success()
        },
    )
    .await;
    wait_until(
        "drift after the restart to be corrected",
        Duration::from_secs(60),
        || async { replicas("after").await == "2" },
    )
    .await;
    // The script prints after its patch lands: the line may follow the replicas.
    kite.wait_stdout("capped after", Duration::from_secs(10))
        .await;
    // Nothing crashed: the process is alive and healthy.
    let health = tokio::process::Command::new("curl")
        .args(["-s", &format!("localhost:{port}/healthz")])
        .output()
        .await
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&health.stdout), "ok");
}
