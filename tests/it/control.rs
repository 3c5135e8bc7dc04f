//! k8s.control() end to end against the local cluster: the seed's controllers, hooks,
//! failures and retries, runaway handlers, shutdown (leader election: `control_leader`).

use std::time::Duration;

use crate::support::*;

pub(crate) const T: Duration = Duration::from_secs(30);

pub(crate) async fn create_cm(ns: &str, name: &str, labels: &str, data: &str) {
    let manifest = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: {ns}, labels: {{{labels}}}}}\ndata: {{{data}}}\n"
    );
    let out = kubectl_stdin(&["apply", "-f", "-"], &manifest).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn pod_logger_prints_added_modified_and_deleted() {
    // The seed's example watches the default namespace; the pod name is unique.
    let mut kite = Kite::spawn(&["run", "examples/pod-logger-controller.star", "--allow-all"]);
    kite.wait_stdout("Starting pod logger controller...", T)
        .await;
    let name = unique_name("logger");
    let out = kubectl_stdin(
        &["apply", "-f", "-"],
        &format!("apiVersion: v1\nkind: Pod\nmetadata: {{name: {name}, namespace: default}}\nspec: {{containers: [{{name: c, image: nginx:alpine}}]}}\n"),
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    kite.wait_stdout(&format!("Event: ADDED | Pod Name: {name} | Status:"), T)
        .await;
    // kwok schedules and starts the pod: status changes arrive as MODIFIED.
    kite.wait_stdout(
        &format!("Event: MODIFIED | Pod Name: {name} | Status: Running"),
        T,
    )
    .await;
    kubectl_ok(&["delete", "pod", &name, "-n", "default", "--wait=false"]).await;
    kite.wait_stdout(&format!("Event: DELETED | Pod Name: {name}"), T)
        .await;
}

/// The seed's walkthrough, run in one test because the example binds port 8081.
#[tokio::test(flavor = "multi_thread")]
async fn max_replicas_walkthrough() {
    // The example binds port 8081 and watches labelled Deployments in every namespace.
    let _cluster = exclusive().await;
    let ns = TestNamespace::new("maxrep").await;
    let mut kite = Kite::spawn(&[
        "run",
        "examples/max-replicas-controller.star",
        "--allow-all",
    ]);
    kite.wait_stdout("Starting max-replicas controller. Max allowed: 3", T)
        .await;
    wait_until("the health server", T, || async {
        let out = tokio::process::Command::new("curl")
            .args([
                "-s",
                "-o",
                "/dev/null",
                "-w",
                "%{http_code}",
                "localhost:8081/readyz",
            ])
            .output()
            .await
            .unwrap();
        out.stdout == b"200"
    })
    .await;

    kubectl_ok(&[
        "create",
        "deployment",
        "alice-web",
        "--image=nginx:alpine",
        "--replicas=10",
        "-n",
        &ns.name,
    ])
    .await;
    kubectl_ok(&[
        "create",
        "deployment",
        "bob-web",
        "--image=nginx:alpine",
        "--replicas=2",
        "-n",
        &ns.name,
    ])
    .await;
    kubectl_ok(&[
        "label",
        "deployment",
        "bob-web",
        "enforce-max-replicas=true",
        "-n",
        &ns.name,
    ])
    .await;
    let labelled = std::time::Instant::now();
    kubectl_ok(&[
        "label",
        "deployment",
        "alice-web",
        "enforce-max-replicas=true",
        "-n",
        &ns.name,
    ])
    .await;
    wait_until(
        "alice-web to be scaled to 3",
        Duration::from_secs(2),
        || async {
            kubectl_ok(&[
                "get",
                "deployment",
                "alice-web",
                "-n",
                &ns.name,
                "-o",
                "jsonpath={.spec.replicas}",
            ])
            .await
                == "3"
        },
    )
    .await;
    println!("corrected {:?} after the label", labelled.elapsed());
    kite.wait_stdout(
        &format!(
            "[DRIFT DETECTED] {}/alice-web replicas=10 exceeds max=3",
            ns.name
        ),
        T,
    )
    .await;
    let events = kubectl_ok(&[
        "get",
        "events",
        "-n",
        &ns.name,
        "--field-selector",
        "involvedObject.name=alice-web",
    ])
    .await;
    assert!(
        events.contains("DriftCorrected") && events.contains("Scaled down replicas from 10 to 3"),
        "{events}"
    );

    let health = tokio::process::Command::new("curl")
        .args(["-i", "-s", "localhost:8081/healthz"])
        .output()
        .await
        .unwrap();
    assert!(
        String::from_utf8_lossy(&health.stdout).starts_with("HTTP/1.1 200"),
        "{health:?}"
    );
    let metrics = tokio::process::Command::new("curl")
        .args(["-s", "localhost:8081/metrics"])
        .output()
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&metrics.stdout).contains("kite_reconcile_total"));

    // bob-web is within policy: logged, never patched.
    kite.wait_stdout(
        &format!(
            "[IN POLICY] {}/bob-web replicas=2 within limit (<= 3)",
            ns.name
        ),
        T,
    )
    .await;
    let managers = kubectl_ok(&[
        "get",
        "deployment",
        "bob-web",
        "-n",
        &ns.name,
        "-o",
        "jsonpath={.metadata.managedFields[*].manager}",
    ])
    .await;
    assert!(
        !managers.contains("kite") && !managers.contains("starkite"),
        "bob-web was written: {managers}"
    );

    // No echo loop: after the correction, alice-web is not reconciled again by our own patch
    // or by the deployment controller's status updates. Wait until the rollout settles.
    kubectl_ok(&[
        "rollout",
        "status",
        "deployment/alice-web",
        "-n",
        &ns.name,
        "--timeout=60s",
    ])
    .await;
    let drift = format!("{}/alice-web", ns.name);
    let before = count(&kite.stdout(), &drift);
    // A metadata-only change (a label: no new generation) is not reconciled; a real
    // change by someone else is, exactly once. (Not an annotation: a Deployment's
    // generation counts annotation changes too.)
    kubectl_ok(&[
        "label",
        "deployment",
        "alice-web",
        "-n",
        &ns.name,
        "touched=1",
    ])
    .await;
    kubectl_ok(&[
        "scale",
        "deployment",
        "alice-web",
        "-n",
        &ns.name,
        "--replicas=2",
    ])
    .await;
    kite.wait_stdout(&format!("[IN POLICY] {drift} replicas=2"), T)
        .await;
    let after = count(&kite.stdout(), &drift);
    assert_eq!(
        after,
        before + 1,
        "exactly one reconcile for one outside change: {:?}",
        kite.stdout()
    );
    assert_eq!(
        count(&kite.stdout(), &format!("[DRIFT DETECTED] {drift}")),
        1,
        "corrected once"
    );
    sigterm(kite.pid());
    assert!(kite.wait(T).await.success());

    // With --var max_replicas=5 the cap becomes 5.
    let mut kite = Kite::spawn(&[
        "run",
        "examples/max-replicas-controller.star",
        "--allow-all",
        "--var",
        "max_replicas=5",
    ]);
    kite.wait_stdout("Max allowed: 5", T).await;
    kubectl_ok(&[
        "create",
        "deployment",
        "carol-web",
        "--image=nginx:alpine",
        "--replicas=9",
        "-n",
        &ns.name,
    ])
    .await;
    kubectl_ok(&[
        "label",
        "deployment",
        "carol-web",
        "enforce-max-replicas=true",
        "-n",
        &ns.name,
    ])
    .await;
    wait_until("carol-web to be scaled to 5", T, || async {
        kubectl_ok(&[
            "get",
            "deployment",
            "carol-web",
            "-n",
            &ns.name,
            "-o",
            "jsonpath={.spec.replicas}",
        ])
        .await
            == "5"
    })
    .await;
    sigterm(kite.pid());
    assert!(kite.wait(T).await.success());
}

#[tokio::test(flavor = "multi_thread")]
async fn hooks_see_old_and_new_values() {
    let ns = TestNamespace::new("hooks").await;
    let var = format!("namespace={}", ns.name);
    let mut kite = Kite::spawn(&[
        "run",
        "tests/scripts/control/hooks.star",
        "--allow-k8s",
        "--var",
        &var,
    ]);
    create_cm(&ns.name, "h", "test: hooks", "v: one").await;
    kite.wait_stdout("CREATE h one", T).await;
    kubectl_ok(&[
        "patch",
        "configmap",
        "h",
        "-n",
        &ns.name,
        "-p",
        r#"{"data":{"v":"two"}}"#,
    ])
    .await;
    kite.wait_stdout("UPDATE h one -> two", T).await;
    kubectl_ok(&["delete", "configmap", "h", "-n", &ns.name]).await;
    kite.wait_stdout("DELETE h two", T).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_failed_on_delete_is_delivered_again_until_it_succeeds() {
    let ns = TestNamespace::new("flaky").await;
    let var = format!("namespace={}", ns.name);
    let mut kite = Kite::spawn(&[
        "run",
        "tests/scripts/control/flaky_delete.star",
        "--allow-k8s",
        "--var",
        &var,
    ]);
    create_cm(&ns.name, "gate", "gate: closed", "a: b").await;
    let names: Vec<String> = (0..100).map(|i| format!("cm-{i:03}")).collect();
    let list = names
        .iter()
        .map(|name| {
            format!(
                "- {{apiVersion: v1, kind: ConfigMap, metadata: {{name: {name}, labels: {{test: flaky}}}}, data: {{a: b}}}}"
            )
        })
        .collect::<Vec<_>>()
        .join("\n");
    let manifest = format!("apiVersion: v1\nkind: List\nitems:\n{list}\n");
    let out = kubectl_stdin(&["apply", "-n", &ns.name, "-f", "-"], &manifest).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for name in &names {
        kite.wait_stdout(&format!("ADDED {name}"), T).await;
    }
    kubectl_ok(&["delete", "configmaps", "-n", &ns.name, "-l", "test=flaky"]).await;
    // Two failed deliveries per deletion on average before the gate opens.
    let failed = |kite: &Kite| {
        let lines = kite.stderr();
        let failed = lines
            .iter()
            .filter(|l| l.contains("outcome=\"error\"") && l.contains("gate is closed"));
        failed.count()
    };
    wait_until("200 failed deliveries", Duration::from_secs(60), || async {
        failed(&kite) >= 200
    })
    .await;
    kubectl_ok(&["delete", "configmap", "gate", "-n", &ns.name]).await;
    for name in &names {
        kite.wait_stdout(&format!("DELETED {name}"), Duration::from_secs(60))
            .await;
    }
    // Each exactly once, and nothing else.
    let out = kite.stdout();
    for name in &names {
        let line = format!("DELETED {name}");
        assert_eq!(count(&out, &line), 1, "{out:?}");
    }
    let deliveries = out.iter().filter(|l| l.starts_with("DELETED ")).count();
    println!(
        "{} failed deliveries, then {deliveries} successful",
        failed(&kite)
    );
    assert_eq!(deliveries, 100, "{out:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn failures_retry_with_growing_delays_then_warn_and_spare_the_others() {
    let ns = TestNamespace::new("failing").await;
    let var = format!("namespace={}", ns.name);
    let mut kite = Kite::spawn(&[
        "run",
        "tests/scripts/control/failing.star",
        "--allow-k8s",
        "--var",
        &var,
    ]);
    create_cm(&ns.name, "bad", "test: failing, fail: 'true'", "a: b").await;
    create_cm(&ns.name, "good", "test: failing", "a: b").await;
    kite.wait_stdout("OK good", T).await;
    // 1 try + 3 retries, then a Warning event and no more tries.
    wait_until("the ReconcileFailed warning", T, || async {
        kubectl_ok(&[
            "get",
            "events",
            "-n",
            &ns.name,
            "--field-selector",
            "involvedObject.name=bad,type=Warning",
            "-o",
            "jsonpath={.items[*].reason}",
        ])
        .await
        .contains("ReconcileFailed")
    })
    .await;
    assert_eq!(count(&kite.stdout(), "FAIL bad"), 4, "{:?}", kite.stdout());
    let retries: Vec<u64> = kite
        .stderr()
        .iter()
        .filter(|l| l.contains("bad") && l.contains("retry_in="))
        .filter_map(|l| {
            l.split("retry_in=")
                .nth(1)?
                .split_whitespace()
                .next()?
                .trim_end_matches("ms")
                .parse()
                .ok()
        })
        .collect();
    assert_eq!(retries.len(), 3, "{:?}", kite.stderr());
    assert!(
        retries.windows(2).all(|w| w[1] > w[0]),
        "retry delays grow: {retries:?}"
    );
    // The good object keeps working while the bad one fails.
    kubectl_ok(&[
        "patch",
        "configmap",
        "good",
        "-n",
        &ns.name,
        "-p",
        r#"{"data":{"a":"c"}}"#,
    ])
    .await;
    wait_until("good to be reconciled again", T, || async {
        count(&kite.stdout(), "OK good") >= 2
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_runaway_handler_is_cancelled_and_the_worker_survives() {
    let ns = TestNamespace::new("spin").await;
    let var = format!("namespace={}", ns.name);
    let mut kite = Kite::spawn(&[
        "run",
        "tests/scripts/control/spin.star",
        "--allow-k8s",
        "--var",
        &var,
        "--handler-timeout",
        "1s",
    ]);
    create_cm(&ns.name, "spin", "test: spin", "a: b").await;
    kite.wait_stdout("SPINNING", T).await;
    wait_until("the cancellation to be logged", T, || {
        let err = kite.stderr();
        async move {
            err.iter()
                .any(|l| l.contains("handler cancelled after exceeding its time budget of 1s"))
        }
    })
    .await;
    // The single worker is free again.
    create_cm(&ns.name, "after", "test: spin", "a: b").await;
    kite.wait_stdout("DONE after", T).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn sigterm_lets_the_handler_finish_and_exits_zero() {
    let ns = TestNamespace::new("shutdown").await;
    let var = format!("namespace={}", ns.name);
    let mut kite = Kite::spawn(&[
        "run",
        "tests/scripts/control/slow.star",
        "--allow-k8s",
        "--var",
        &var,
        "--grace-period",
        "20s",
    ]);
    create_cm(&ns.name, "s", "test: slow", "a: b").await;
    kite.wait_stdout("START s", T).await;
    sigterm(kite.pid());
    let status = kite.wait(Duration::from_secs(25)).await;
    assert!(status.success(), "exit status {status:?}");
    assert_eq!(
        count(&kite.stdout(), "FINISH s"),
        1,
        "the in-flight handler finished: {:?}",
        kite.stdout()
    );
}
