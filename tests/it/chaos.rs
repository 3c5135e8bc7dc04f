//! Faults injected into the real local cluster: a TCP fault proxy between kite and the
//! API server, and SIGSTOP/SIGCONT of processes we started. Each test states the figure
//! it asserts and prints what it measured. The slow ones (minutes) are `#[ignore]`d and
//! run by `make chaos`; the rest also run in `make test`.

use std::time::{Duration, Instant};

use crate::support::operator::curl;
use crate::support::proxy::{Mode, Proxy};
use crate::support::{self, *};

const T: Duration = Duration::from_secs(30);

/// The drift controller every fault test runs: deployments labelled for the test are
/// capped at 2 replicas.
fn capper(ns: &str, kubeconfig: &std::path::Path, port: u16) -> Kite {
    let script = format!(
        "def reconcile(d):\n    if d.spec.replicas > 2:\n        k8s.patch(\"deployment\", d.metadata.name, {{\"spec\": {{\"replicas\": 2}}}}, namespace = d.metadata.namespace)\n\nk8s.control(\"deployments\", reconcile = reconcile, namespace = \"{ns}\", labels = \"chaos=cap\", health_port = {port})\n"
    );
    let path = std::env::temp_dir().join(format!("{}.star", unique_name("capper")));
    std::fs::write(&path, script).unwrap();
    let kc = kubeconfig.display().to_string();
    Kite::spawn(&[
        "run",
        &path.display().to_string(),
        "--allow-k8s",
        "--kubeconfig",
        &kc,
    ])
}

async fn deployment(ns: &str, name: &str, replicas: u32) {
    create_enforced_deployment(ns, name, replicas).await;
    kubectl_ok(&[
        "label",
        "deployment",
        name,
        "-n",
        ns,
        "chaos=cap",
        "--overwrite",
    ])
    .await;
}

async fn replicas(ns: &str, name: &str) -> String {
    jsonpath("deployment", name, ns, "{.spec.replicas}").await
}

#[tokio::test(flavor = "multi_thread")]
async fn health_under_idle_connections() {
    // 200 idle connections to the health port: at least 99 % of 1 s probes succeed.
    let ns = TestNamespace::new("chaos-idle").await;
    let port = free_port();
    let mut kite = capper(&ns.name, &kubeconfig(), port);
    let url = format!("http://127.0.0.1:{port}/healthz");
    wait_until("healthz", T, || async { curl(&url).await.is_some() }).await;
    let mut idle = Vec::new();
    for _ in 0..200 {
        idle.push(
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .unwrap(),
        );
    }
    let (mut ok, mut all) = (0, 0);
    for _ in 0..100 {
        all += 1;
        if curl(&url).await.is_some() {
            ok += 1;
        }
    }
    drop(idle);
    println!("health under 200 idle connections: {ok}/{all} probes succeeded");
    assert!(ok * 100 >= all * 99, "{ok}/{all}");
    assert!(kite.try_wait().is_none());
}

#[tokio::test(flavor = "multi_thread")]
async fn half_open_watch() {
    // The proxy holds every byte of the established connections without closing them:
    // drift made meanwhile is corrected within 30 s of the path healing, and /healthz
    // stays 200 throughout.
    let ns = TestNamespace::new("chaos-half").await;
    let proxy = Proxy::start().await;
    let port = free_port();
    let _kite = capper(&ns.name, &proxy.kubeconfig, port);
    let ready = format!("http://127.0.0.1:{port}/readyz");
    wait_until("ready", T, || async { curl(&ready).await.is_some() }).await;
    deployment(&ns.name, "web", 5).await;
    wait_until("capped", T, || async {
        replicas(&ns.name, "web").await == "2"
    })
    .await;

    // Every connection kite has goes silent, for good.
    proxy.set(Mode::Blackhole(Instant::now()));
    let drifted = Instant::now();
    kubectl_ok(&["scale", "deployment", "web", "-n", &ns.name, "--replicas=6"]).await;
    let health = format!("http://127.0.0.1:{port}/healthz");
    let (mut ok, mut all) = (0, 0);
    let corrected = loop {
        all += 1;
        if curl(&health).await.is_some() {
            ok += 1;
        }
        if replicas(&ns.name, "web").await == "2" {
            break drifted.elapsed();
        }
        assert!(
            drifted.elapsed() < Duration::from_secs(120),
            "never corrected"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    };
    println!(
        "half-open watch: drift corrected {corrected:?} after it was made; healthz {ok}/{all}"
    );
    assert_eq!(ok, all, "/healthz failed while the connections were dead");
    assert!(corrected <= Duration::from_secs(30), "took {corrected:?}");
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "12 minutes: make chaos"]
async fn quiet_kind_no_relist() {
    // 12 minutes with no change: one LIST of the kind in the audit log (the start), and
    // no watch restart; the watches are resumed from their resourceVersion instead.
    let ns = TestNamespace::new("chaos-quiet").await;
    let port = free_port();
    let _kite = capper(&ns.name, &kubeconfig(), port);
    let ready = format!("http://127.0.0.1:{port}/readyz");
    wait_until("ready", T, || async { curl(&ready).await.is_some() }).await;
    tokio::time::sleep(Duration::from_secs(12 * 60)).await;
    let lists = audit_events(&format!("\"namespace\":\"{}\"", ns.name))
        .into_iter()
        .filter(|e| {
            e["verb"] == "list"
                && e["objectRef"]["resource"] == "deployments"
                && e["stage"] == "ResponseComplete"
        })
        .count();
    let metrics = curl(&format!("http://127.0.0.1:{port}/metrics"))
        .await
        .unwrap_or_default();
    let restarts: u64 = metrics
        .lines()
        .find(|l| l.starts_with("kite_watch_restarts_total{"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(u64::MAX);
    println!("quiet kind over 12 min: {lists} LIST, {restarts} watch restarts");
    assert_eq!(lists, 1);
    assert_eq!(restarts, 0);
}

/// The hosted stamper: its top level learns which operator runs it from the operator's
/// lease, and its handler keeps writing that identity into the ConfigMap "x".
const STAMPER: &str = r#"me = k8s.get("lease", "kite-operator").spec.holderIdentity

def reconcile(cm):
    if cm.metadata.name != "x":
        return
    n = 0
    for i in range(1000000000):
        if i % 100000 == 0:
            n += 1
            k8s.patch("configmap", "x", {"data": {"by": me, "n": str(n)}})

k8s.control("configmaps", reconcile = reconcile, labels = "t=stamp")
"#;

#[tokio::test(flavor = "multi_thread")]
async fn operator_lease_loss_stops_hosted() {
    // Two operators; the leader is frozen mid-handler for 25 s: after the standby takes
    // over, no hosted write of the old one lands.
    use support::operator::{Ceiling, WebhookConfiguration, apply_slc};
    install_starlarkcontroller_crd().await;
    let ns = TestNamespace::new("chaos-oplease").await;
    let ns = ns.name.as_str();
    let ceiling = Ceiling::new(
        r#"[{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list", "watch", "patch"]},
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get"]},
            {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "get", "patch"]}]"#,
    )
    .await;
    let webhook = WebhookConfiguration::new(ns);
    let start = |port: u16| {
        Kite::spawn(&[
            "operator",
            "--namespace",
            ns,
            "--ceiling",
            &ceiling.0,
            "--health-port",
            &port.to_string(),
            "--leader-election",
            "--leader-election-namespace",
            ns,
            "--webhook-port",
            "0",
            "--webhook-configuration",
            &webhook.0,
        ])
    };
    let (pa, pb) = (free_port(), free_port());
    let mut a = start(pa);
    let ready = |port: u16| async move {
        curl(&format!("http://127.0.0.1:{port}/readyz"))
            .await
            .is_some()
    };
    wait_until("the first operator leads", T, || ready(pa)).await;
    let mut b = start(pb);
    let holder =
        || async { jsonpath("lease", "kite-operator", ns, "{.spec.holderIdentity}").await };
    let first = holder().await;
    apply_slc(ns, "stamper", serde_json::json!({"script": STAMPER})).await;
    kubectl_ok(&["create", "configmap", "x", "-n", ns]).await;
    kubectl_ok(&["label", "configmap", "x", "-n", ns, "t=stamp"]).await;
    wait_until("the leader's stamps", T, || async {
        jsonpath("configmap", "x", ns, "{.data.by}").await == first
    })
    .await;
    let versions = Versions::record("configmap", "x", ns, "{.data.by}");
    signal(a.pid(), "-STOP");
    let paused = Instant::now();
    let second = wait_for(
        "the standby takes the lease",
        Duration::from_secs(40),
        || async {
            let h = holder().await;
            (!h.is_empty() && h != first).then_some(h)
        },
    )
    .await;
    wait_until("the new leader's stamps", T, || async {
        jsonpath("configmap", "x", ns, "{.data.by}").await == second
    })
    .await;
    let took_over = paused.elapsed();
    if took_over < Duration::from_secs(25) {
        tokio::time::sleep(Duration::from_secs(25) - took_over).await; // the fault's length
    }
    signal(a.pid(), "-CONT");
    tokio::time::sleep(Duration::from_secs(5)).await; // an observation window
    let seen = versions.stop();
    let from = seen
        .iter()
        .position(|v| *v == second)
        .expect("the new leader stamped");
    let late = seen[from..].iter().filter(|v| **v == first).count();
    println!(
        "operator lease loss: takeover {took_over:?} after the pause; {} versions, {late} by the old operator after the takeover",
        seen.len()
    );
    assert_eq!(late, 0, "{seen:?}");
    // The old operator exits, so that it starts afresh as a standby.
    let status = a.wait(T).await;
    assert!(
        !status.success(),
        "it exits with an error: it lost its lease"
    );
    assert!(b.try_wait().is_none(), "the new leader runs on");
}

/// A tracing line's or a MicroTime's RFC 3339 timestamp.
fn at(text: &str) -> k8s_openapi::jiff::Timestamp {
    let stamp = text.split_whitespace().next().unwrap_or_default();
    stamp
        .parse()
        .unwrap_or_else(|e| panic!("no timestamp in {text:?}: {e}"))
}

#[tokio::test(flavor = "multi_thread")]
async fn leader_partition() {
    // The leader cut off from the API server for 20 s (every byte lost, both ways): it
    // stops acting within 11 s of its last renewal, the lease changes hands exactly once,
    // and no write of the old leader lands after the new leader's first.
    let ns = TestNamespace::new("chaos-part").await;
    let ns = ns.name.as_str();
    let proxy = Proxy::start().await;
    let var = format!("namespace={ns}");
    let start = |me: &str, port: u16, kc: &std::path::Path| {
        Kite::spawn(&[
            "run",
            "tests/scripts/control/stamper.star",
            "--allow-k8s",
            "--kubeconfig",
            &kc.display().to_string(),
            "--var",
            &var,
            "--var",
            &format!("me={me}"),
            "--var",
            &format!("port={port}"),
        ])
    };
    let (pa, pb) = (free_port(), free_port());
    let mut a = start("a", pa, &proxy.kubeconfig);
    let ready = |port: u16| async move {
        curl(&format!("http://127.0.0.1:{port}/readyz"))
            .await
            .is_some()
    };
    wait_until("a leads", T, || ready(pa)).await;
    let mut b = start("b", pb, &kubeconfig());
    let cm = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: x, namespace: {ns}, labels: {{t: stamp}}}}\ndata: {{by: nobody}}\n"
    );
    assert!(
        kubectl_stdin(&["apply", "-f", "-"], &cm)
            .await
            .status
            .success()
    );
    a.wait_stdout("STAMPING a", T).await;
    let lease = format!("kite-stamp-{ns}");
    let transitions = || async {
        let n = jsonpath("lease", &lease, ns, "{.spec.leaseTransitions}").await;
        n.parse::<u32>().unwrap_or(0)
    };
    let before = transitions().await;
    let stamps = Versions::record("configmap", "x", ns, "{.data.by}");
    let holders = Versions::record(
        "lease",
        &lease,
        ns,
        "{.spec.renewTime} {.spec.holderIdentity}",
    );

    proxy.set(Mode::Partition);
    let cut = Instant::now();
    b.wait_stdout("STAMPING b", Duration::from_secs(40)).await;
    let took_over = cut.elapsed();
    // The fault's length.
    tokio::time::sleep(Duration::from_secs(20).saturating_sub(cut.elapsed())).await;
    proxy.set(Mode::Pass);
    // An observation window (not a wait for a condition): the old leader gets every
    // chance to write, and to take the lease back.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let stamps = stamps.stop();
    let holders = holders.stop();

    let first_b = stamps.iter().position(|v| v == "b").expect("b stamped");
    let late = stamps[first_b..].iter().filter(|v| *v == "a").count();
    let mut sequence: Vec<&str> = holders
        .iter()
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect();
    sequence.dedup();
    let last_renewal = holders
        .iter()
        .rfind(|l| l.ends_with(" a"))
        .map(|l| at(l))
        .expect("a renewed while watched");
    let stopped = a
        .stderr()
        .iter()
        .find(|l| l.contains("stopped leading"))
        .map(|l| at(l))
        .expect("a says it stopped leading");
    let acted_for = stopped.duration_since(last_renewal);
    let after = transitions().await;
    println!(
        "partitioned leader: stopped {acted_for:#} after its last renewal; takeover {took_over:?} \
         after the cut; holders {sequence:?}; {} versions, {late} by the old leader after the takeover",
        stamps.len()
    );
    assert_eq!(late, 0, "{stamps:?}");
    assert_eq!(sequence, ["a", "b"], "{holders:?}");
    assert_eq!(after, before + 1, "lease transitions");
    assert!(
        acted_for.as_secs_f64() <= 11.0,
        "acted {acted_for:#} after its last renewal"
    );
    assert!(b.try_wait().is_none(), "the new leader runs on");
}
