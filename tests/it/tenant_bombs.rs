//! No hosted script can stop `kite operator` or starve its neighbours: each bomb runs
//! as its own StarlarkController beside a healthy max-replicas one, and the operator
//! keeps its pid, the neighbour keeps correcting drift, and every bomb says what went
//! wrong and where, then goes away when deleted.

use std::time::{Duration, Instant};

use crate::support::operator::*;
use crate::support::*;
use serde_json::json;

/// Everything the bombs and the neighbour need.
const CEILING: &str = r#"[
  {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list", "watch", "patch"]},
  {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch", "create", "patch", "delete"]},
  {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "get", "patch"]}
]"#;

/// A handler on ConfigMaps that runs `body` (indented four spaces), then the control
/// call with `options`.
fn on_configmaps(body: &str, options: &str) -> String {
    format!(
        "def reconcile(cm):\n{body}\n\nk8s.control(\"configmaps\", reconcile = reconcile{options})\n"
    )
}

/// (name, script, what its status must say, besides its script line).
fn bombs() -> Vec<(&'static str, String, &'static str)> {
    vec![
        (
            "list-cycle",
            on_configmaps("    a = []\n    a.append(a)\n    return a", ""),
            "nested deeper",
        ),
        (
            "dict-cycle",
            on_configmaps("    d = {}\n    d[\"self\"] = d\n    return [d]", ""),
            "nested deeper",
        ),
        (
            "recursion",
            format!(
                "def down(n):\n    return down(n + 1)\n\n{}",
                on_configmaps("    down(0)", "")
            ),
            "stack",
        ),
        (
            "doubling",
            on_configmaps(
                "    s = \"x\"\n    for i in range(64):\n        s = s + s",
                "",
            ),
            "memory",
        ),
        (
            "huge-list",
            on_configmaps("    x = [i for i in range(1000000000)]", ""),
            "limit",
        ),
        (
            "dict-growth",
            on_configmaps(
                "    d = {}\n    for i in range(1000000000):\n        d[i] = i",
                "",
            ),
            "memory",
        ),
        (
            "loop-handler",
            on_configmaps(
                "    n = 0\n    for i in range(1000000000):\n        for j in range(1000000000):\n            n += 1",
                "",
            ),
            "time budget",
        ),
        (
            "loop-top",
            "n = 0\nfor i in range(1000000000):\n    for j in range(1000000000):\n        n += 1\n"
                .to_owned(),
            "cancelled",
        ),
        (
            "wait-forever",
            on_configmaps(
                "    k8s.wait_for(\"configmap\", \"never\", timeout = \"10000h\")",
                "",
            ),
            "time budget",
        ),
        (
            "watch-forever",
            format!(
                "def seen(event, obj):\n    return True\n\n{}",
                on_configmaps("    k8s.watch(\"configmaps\", handler = seen)", "")
            ),
            "time budget",
        ),
        (
            "poll-1ns",
            on_configmaps("    pass", ", poll = \"1ns\""),
            "poll",
        ),
        (
            "requeue-0s",
            on_configmaps("    return \"0s\"", ""),
            "floor",
        ),
        (
            "workers-1000",
            on_configmaps("    pass", ", workers = 1000"),
            "workers",
        ),
        (
            "children-5000",
            on_configmaps(
                "    return [k8s.obj.config_map(name = \"c%d\" % i, namespace = cm.metadata.namespace) for i in range(5000)]",
                "",
            ),
            "children",
        ),
        (
            "child-10mb",
            on_configmaps(
                "    return [k8s.obj.config_map(name = \"big\", namespace = cm.metadata.namespace, data = {\"x\": \"y\" * 10000000})]",
                "",
            ),
            "KiB",
        ),
    ]
}

/// What a bomb's status says went wrong, once it says it with the script's line.
fn complaint(s: &serde_json::Value, name: &str) -> Option<String> {
    let file = format!("{name}.star:");
    let ready = condition(s, "Ready");
    let texts = [
        s["lastError"].as_str().unwrap_or_default().to_owned(),
        if ready["status"] == "False" {
            ready["message"].as_str().unwrap_or_default().to_owned()
        } else {
            String::new()
        },
    ];
    texts.into_iter().find(|t| t.contains(&file))
}

#[tokio::test(flavor = "multi_thread")]
async fn no_script_stops_the_operator_or_its_neighbours() {
    // Its figures (the neighbour's latency, RSS) are taken with no other test running,
    // as when it had a binary of its own.
    let _cluster = exclusive().await;
    install_starlarkcontroller_crd().await;
    let ns = TestNamespace::new("slc-bombs").await;
    let ns = ns.name.as_str();
    let ceiling = Ceiling::new(CEILING).await;
    let op = Operator::start(ns, &ceiling).await;
    let pid = op.kite.pid();

    // The neighbour, ready and working before the bombs go off.
    apply_slc(ns, "neighbour", max_replicas_spec(ns, "3")).await;
    wait_condition(ns, "neighbour", "Ready", "True", Duration::from_secs(30)).await;
    create_enforced_deployment(ns, "web", 5).await;
    replicas_become(ns, "web", "3").await;
    let baseline = rss_kib(pid);

    let bombs = bombs();
    for (name, script, _) in &bombs {
        apply_slc(
            ns,
            name,
            json!({"script": script, "control": {"maxRetries": 1}}),
        )
        .await;
    }
    kubectl_ok(&["create", "configmap", "trigger", "-n", ns]).await;

    // The neighbour corrects ten drifts, each quickly, while the bombs go off.
    let mut took = Vec::new();
    for i in 0..10 {
        drifted(ns, "web", &(5 + i % 3).to_string()).await;
        let started = Instant::now();
        wait_until("the drift corrected", Duration::from_secs(20), || async {
            jsonpath("deployment", "web", ns, "{.spec.replicas}").await == "3"
        })
        .await;
        took.push(started.elapsed());
    }
    took.sort();
    let p99 = took[took.len() - 1];
    println!("neighbour drift corrections: {took:?}");
    assert!(p99 < Duration::from_secs(2), "p99 {p99:?}: {took:?}");

    // Every bomb says what went wrong, with its script's line.
    let started = Instant::now();
    for (name, _, says) in &bombs {
        let left = Duration::from_secs(70).saturating_sub(started.elapsed());
        let what = format!("{name}: an error with its script line");
        let text = wait_for(&what, left.max(Duration::from_secs(1)), || async {
            complaint(&status(ns, name).await, name)
        })
        .await;
        assert!(text.contains(says), "{name}: {text}");
        println!("{name}: {text}");
    }
    assert_eq!(op.kite.pid(), pid);
    assert!(
        std::fs::metadata(format!("/proc/{pid}")).is_ok(),
        "the operator is alive"
    );

    // Each goes within 30 s of being deleted: a handler that is still running gets
    // the stop grace (10 s) and is then cancelled; the others go at once, however long
    // the operator's watches have been quiet.
    for (name, _, _) in &bombs {
        let started = Instant::now();
        let running = ["loop-handler", "wait-forever", "watch-forever"].contains(name);
        let limit = Duration::from_secs(if running { 30 } else { 5 });
        kubectl_ok(&["delete", "slc", name, "-n", ns, "--wait=false"]).await;
        wait_until(&format!("{name} deleted"), limit, || async {
            !kubectl(&["get", "slc", name, "-n", ns])
                .await
                .status
                .success()
        })
        .await;
        println!("{name} deleted in {:?}", started.elapsed());
    }

    // Memory comes back once the bombs are gone.
    let back = wait_for(
        "RSS back near its baseline",
        Duration::from_secs(30),
        || async {
            let rss = rss_kib(pid);
            println!("RSS {rss} KiB (baseline {baseline} KiB)");
            (rss < baseline + 20 * 1024).then_some(rss)
        },
    )
    .await;
    println!("RSS back to {back} KiB");

    // And the neighbour still works.
    drifted(ns, "web", "6").await;
    replicas_become(ns, "web", "3").await;
    assert!(std::fs::metadata(format!("/proc/{pid}")).is_ok());
}

/// A tenant whose top levels never end (each asks for more memory than its limit at
/// once, and its thread is parked for good) holds every top-level turn of its
/// namespace. Its further controllers, turned away, must not hold the operator's
/// reconcile slots while they wait for a turn: with two slots and three of them
/// waiting, a controller in another namespace still starts.
#[tokio::test]
async fn a_namespace_whose_turns_are_held_for_good_holds_no_reconcile_slot() {
    use crate::security::{CEILING, reason_becomes, slc, tenant};
    const READER: &str = "def reconcile(d):\n    k8s.get(\"deployment\", d.metadata.name, namespace = d.metadata.namespace)\n\nk8s.control(\"deployments\", reconcile = reconcile)\n";
    install_starlarkcontroller_crd().await;
    let held = TestNamespace::new("slc-held").await;
    let beside = TestNamespace::new("slc-beside").await;
    let (held, beside) = (held.name.as_str(), beside.name.as_str());
    let (attacker, neighbour) = (tenant(held).await, tenant(beside).await);
    let ceiling = Ceiling::new(CEILING).await;
    let label = format!("kite-test={held}");
    let mut op = Operator::start_with(
        held,
        &ceiling,
        &[
            "--selector",
            &label,
            "--concurrent-reconciles",
            "2",
            "--script-memory",
            "16",
        ],
    )
    .await;
    op.also.push(beside.to_owned());
    let labelled = |ns: &str, name: &str, script: &str| {
        let mut o = slc(ns, name, json!({"script": script}));
        o["metadata"]["labels"] = json!({"kite-test": held});
        o
    };
    // Four top levels parked for good: the namespace's four top-level turns.
    let park = format!("S = \"x\" * 100000000\n\n{READER}");
    for i in 0..4 {
        let name = format!("park-{i}");
        let out = apply_as(&attacker, &labelled(held, &name, &park)).await;
        assert!(out.status.success(), "{name}");
        let (_, m) = reason_becomes(held, &name, "Ready", "ScriptError").await;
        assert!(m.contains("asked for more memory than its limit"), "{m}");
    }
    // Three more, each waiting for a turn that never comes: more than the slots.
    for i in 0..3 {
        let name = format!("queued-{i}");
        let out = apply_as(&attacker, &labelled(held, &name, READER)).await;
        assert!(out.status.success(), "{name}");
    }
    // Another tenant's controller starts, in its own namespace's turn.
    let out = apply_as(&neighbour, &labelled(beside, "neighbour", READER)).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_condition(
        beside,
        "neighbour",
        "Ready",
        "True",
        Duration::from_secs(30),
    )
    .await;
    // The waiting ones were turned away, not started and not failed: nothing decided.
    for i in 0..3 {
        let name = format!("queued-{i}");
        let s = status(held, &name).await;
        assert!(condition(&s, "Ready").is_null(), "{name}: {s}");
    }
    assert!(
        op.metrics().await.contains("kite_script_threads_parked 4"),
        "{}",
        op.metrics().await
    );
    // Deleting them works as ever (the finalizer is the operator's to remove).
    kubectl_ok(&["delete", "slc", "neighbour", "-n", beside, "--timeout=30s"]).await;
}

/// A hosted watch whose handler never lets its body be read fills its own HTTP/2
/// stream's window and stops there: another tenant's calls on the same connection
/// (the operator's tenants' lanes, `k8s::transport`) still go through.
#[tokio::test(flavor = "multi_thread")]
async fn a_watch_nobody_reads_holds_back_no_other_tenant() {
    use crate::security::{CEILING, slc, tenant};
    install_starlarkcontroller_crd().await;
    let stalled = TestNamespace::new("slc-unread").await;
    let beside = TestNamespace::new("slc-reader").await;
    let (stalled, beside) = (stalled.name.as_str(), beside.name.as_str());
    let (attacker, neighbour) = (tenant(stalled).await, tenant(beside).await);
    grant(
        stalled,
        &attacker,
        "tenant-configmaps",
        json!([{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}]),
    )
    .await;
    create_enforced_deployment(stalled, "trigger", 1).await;
    let ceiling = Ceiling::new(CEILING).await;
    let label = format!("kite-test={stalled}");
    let mut op = Operator::start_with(stalled, &ceiling, &["--selector", &label]).await;
    op.also.push(beside.to_owned());
    let labelled = |ns: &str, name: &str, script: &str| {
        let mut o = slc(ns, name, json!({"script": script}));
        o["metadata"]["labels"] = json!({"kite-test": stalled});
        o
    };
    // The watch lists only the namespace's root CA; the first big ConfigMap's handler
    // then sleeps for the rest
    // of the handler's budget, so the body of the watch is not read while the others
    // arrive.
    const UNREAD: &str = "def slow(event, obj):\n    if not obj.metadata.name.startswith(\"big-\"):\n        return True\n    time.sleep(\"50s\")\n    return False\n\ndef reconcile(d):\n    k8s.watch(\"configmaps\", namespace = d.metadata.namespace, handler = slow, timeout = \"55s\")\n\nk8s.control(\"deployments\", reconcile = reconcile)\n";
    let out = apply_as(&attacker, &labelled(stalled, "unread", UNREAD)).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_condition(stalled, "unread", "Ready", "True", Duration::from_secs(60)).await;
    let watcher = format!("system:serviceaccount:{stalled}:");
    wait_until("the unread watch open", Duration::from_secs(30), || async {
        audit_events(&format!("/api/v1/namespaces/{stalled}/configmaps?"))
            .iter()
            .any(|e| {
                e["verb"] == "watch"
                    && e["stage"] == "ResponseStarted"
                    && e["impersonatedUser"]["username"]
                        .as_str()
                        .is_some_and(|u| u.starts_with(&watcher))
            })
    })
    .await;
    // 21 MB of ConfigMaps on that watch: far more than one stream's window (1 MiB),
    // and more than hyper's adaptive window grows to (16 MiB).
    let stall_began = std::time::Instant::now();
    let filler = "x".repeat(900 * 1024);
    for i in 0..24 {
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("big-{i}"), "namespace": stalled},
            "data": {"filler": filler}});
        let out = kubectl_stdin(&["create", "-f", "-"], &cm.to_string()).await;
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    // The neighbour starts and records an Event for each deployment it sees, through
    // its own impersonating client: the same lanes as the stalled watch.
    const SEER: &str = "def reconcile(d):\n    k8s.event(d, reason = \"Seen\", message = \"seen by the neighbour\")\n\nk8s.control(\"deployments\", reconcile = reconcile)\n";
    create_enforced_deployment(beside, "watched", 1).await;
    let out = apply_as(&neighbour, &labelled(beside, "seer", SEER)).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_until(
        "the neighbour's Event while the other tenant's watch is unread",
        Duration::from_secs(30),
        || async {
            let events = kubectl_ok(&[
                "get",
                "events",
                "-n",
                beside,
                "--field-selector",
                "reason=Seen,involvedObject.name=watched",
                "-o",
                "name",
            ])
            .await;
            !events.trim().is_empty()
        },
    )
    .await;
    // Still within the stalled handler's sleep: the stall was in place all along.
    assert!(
        stall_began.elapsed() < Duration::from_secs(45),
        "the check ran after the stalled handler's sleep"
    );
    kubectl_ok(&["delete", "slc", "unread", "-n", stalled, "--timeout=90s"]).await;
    kubectl_ok(&["delete", "slc", "seer", "-n", beside, "--timeout=30s"]).await;
}
