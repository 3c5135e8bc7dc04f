//! The API server itself frozen (SIGSTOP of our own recorded pid, then SIGCONT), or
//! crash-looping (killed and started again). Their own test binary, since nothing else
//! can run meanwhile; `#[ignore]`d, run one at a time by `make chaos`.

use std::time::{Duration, Instant};

use crate::support::operator::curl;
use crate::support::*;

#[tokio::test(flavor = "multi_thread")]
#[ignore = "freezes the API server: make chaos"]
async fn apiserver_stall() {
    // The API server stopped for 30 s: kite stays alive without a panic, and drift made
    // during the stall (a request that lands when it resumes) is corrected within 20 s
    // of SIGCONT.
    let ns = TestNamespace::new("chaos-stall").await;
    let (mut kite, port) = cap_controller(&ns.name).await;
    kubectl_ok(&[
        "create",
        "deployment",
        "web",
        "--image=nginx:alpine",
        "--replicas=5",
        "-n",
        &ns.name,
    ])
    .await;
    let replicas = || async { jsonpath("deployment", "web", &ns.name, "{.spec.replicas}").await };
    wait_until("capped", Duration::from_secs(20), || async {
        replicas().await == "2"
    })
    .await;

    let pid = std::fs::read_to_string(cluster_dir().join("pids/kube-apiserver.pid"))
        .unwrap()
        .trim()
        .parse::<u32>()
        .unwrap();
    // A drift sent during the stall, on a connection opened before it (a new one could
    // not even finish its TLS handshake): it lands when the API server resumes.
    let deployments: kube::Api<k8s_openapi::api::apps::v1::Deployment> =
        kube::Api::namespaced(client().await, &ns.name);
    deployments
        .get("web")
        .await
        .expect("the connection is open");
    signal(pid, "-STOP");
    let drift = tokio::spawn(async move {
        let patch = serde_json::json!({"spec": {"replicas": 7}});
        let params = kube::api::PatchParams::default();
        deployments
            .patch("web", &params, &kube::api::Patch::Merge(&patch))
            .await
            .map(|_| ())
    });
    tokio::time::sleep(Duration::from_secs(30)).await; // the fault's length
    signal(pid, "-CONT");
    let resumed = Instant::now();
    let landed = drift.await.expect("the drift task");
    assert!(
        landed.is_ok(),
        "the drift landed after the stall: {landed:?}"
    );
    wait_until("the drift corrected", Duration::from_secs(60), || async {
        replicas().await == "2"
    })
    .await;
    let took = resumed.elapsed();
    let corrections = count(&kite.stdout(), "capped web");
    println!(
        "API server stalled 30 s: drift corrected {took:?} after SIGCONT ({corrections} corrections)"
    );
    assert_eq!(
        corrections,
        2,
        "the first cap and the drift's: {:?}",
        kite.stdout()
    );
    assert!(kite.try_wait().is_none(), "kite exited");
    let log = [kite.stdout(), kite.stderr()].concat().join("\n");
    assert!(!log.contains("panicked"), "{log}");
    assert!(
        curl(&format!("http://127.0.0.1:{port}/healthz"))
            .await
            .is_some(),
        "kite is healthy again"
    );
    assert!(took <= Duration::from_secs(20), "took {took:?}");
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "restarts the API server: make chaos"]
async fn apiserver_crashloop() {
    // The API server killed and started again 5 times, 5 s apart, while 10 drifts a
    // second are attempted: every drift is corrected within 30 s of the last restart,
    // and kite's RSS grows by less than 20 MB.
    let ns = TestNamespace::new("chaos-crash").await;
    let ns = ns.name.clone();
    let (mut kite, _) = cap_controller(&ns).await;
    let names: Vec<String> = (0..10).map(|i| format!("d{i}")).collect();
    for name in &names {
        create_enforced_deployment(&ns, name, 2).await;
    }
    let capped = || async {
        let out = kubectl(&[
            "get",
            "deployments",
            "-n",
            &ns,
            "-o",
            "jsonpath={.items[*].spec.replicas}",
        ])
        .await;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        out.status.success() && text.split_whitespace().filter(|r| *r == "2").count() == 10
    };
    wait_until("all capped", Duration::from_secs(30), capped).await;
    let before = rss_kib(kite.pid());

    // 10 drifts a second, attempted whether or not the API server is up.
    let drifting = {
        let (ns, names) = (ns.clone(), names.clone());
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(100));
            for i in 0.. {
                tick.tick().await;
                let (ns, name) = (ns.clone(), names[i % names.len()].clone());
                tokio::spawn(async move {
                    let _ = kubectl(&[
                        "scale",
                        "deployment",
                        &name,
                        "-n",
                        &ns,
                        "--replicas=5",
                        "--request-timeout=5s",
                    ])
                    .await;
                });
            }
        })
    };
    for i in 0..5 {
        if i > 0 {
            // Up for 5 s between crashes.
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
        restart_apiserver().await;
    }
    drifting.abort();
    let last = Instant::now();
    wait_until("every drift corrected", Duration::from_secs(60), capped).await;
    let took = last.elapsed();
    let after = rss_kib(kite.pid());
    let corrections = count(&kite.stdout(), "capped d");
    println!(
        "API server restarted 5 times: {corrections} drifts corrected, the last {took:?} after the last restart; RSS {before} -> {after} KiB"
    );
    assert!(corrections >= 10, "the drifts landed: {corrections}");
    assert!(kite.try_wait().is_none(), "kite exited");
    assert!(took <= Duration::from_secs(30), "took {took:?}");
    assert!(
        after < before + 20 * 1024,
        "RSS grew from {before} to {after} KiB"
    );
}
