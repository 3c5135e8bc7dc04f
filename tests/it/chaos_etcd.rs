//! Gaps in kite's view of the cluster, with etcd compacted meanwhile: kite frozen while
//! many objects change, and a compaction in the middle of a paginated list. Both take a
//! minute or more with hundreds of objects: `#[ignore]`d, run by `make chaos`.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::support::{self, *};

/// `count` Deployments `<prefix>-NNN` (numbered from `from`) labelled `chaos=gap`, in
/// one request.
async fn deployments(ns: &str, from: usize, count: usize, replicas: u32) {
    let items: Vec<String> = (from..from + count)
        .map(|i| {
            format!(
                "- {{apiVersion: apps/v1, kind: Deployment, metadata: {{name: d-{i:03}, labels: {{chaos: gap}}}}, \
                 spec: {{replicas: {replicas}, selector: {{matchLabels: {{app: d-{i:03}}}}}, \
                 template: {{metadata: {{labels: {{app: d-{i:03}}}}}, spec: {{containers: [{{name: c, image: nginx:alpine}}]}}}}}}}}"
            )
        })
        .collect();
    let manifest = format!("apiVersion: v1\nkind: List\nitems:\n{}\n", items.join("\n"));
    let out = kubectl_stdin(&["apply", "-n", ns, "-f", "-"], &manifest).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every labelled Deployment's replicas, by name.
async fn replicas(ns: &str) -> BTreeMap<String, String> {
    let out = kubectl_ok(&[
        "get",
        "deployments",
        "-n",
        ns,
        "-l",
        "chaos=gap",
        "-o",
        "jsonpath={range .items[*]}{.metadata.name}={.spec.replicas}{\"\\n\"}{end}",
    ])
    .await;
    out.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(n, r)| (n.to_owned(), r.to_owned()))
        .collect()
}

fn script(name: &str, body: &str) -> String {
    let path = std::env::temp_dir().join(format!("{}.star", unique_name(name)));
    std::fs::write(&path, body).unwrap();
    path.display().to_string()
}

/// Lines of `kite`'s stdout equal to `prefix` + a name, by name.
fn seen(kite: &Kite, prefix: &str) -> BTreeMap<String, usize> {
    let mut by_name = BTreeMap::new();
    for line in kite.stdout() {
        if let Some(name) = line.strip_prefix(prefix) {
            *by_name.entry(name.to_owned()).or_insert(0) += 1;
        }
    }
    by_name
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "200 Deployments and a 20 s freeze: make chaos"]
async fn watch_gap_compaction() {
    // 200 Deployments (0 replicas, drifted to 3: few pods for 2 cores). Both controllers
    // are frozen (SIGSTOP) for 20 s while 100 are drifted, 50 deleted and 50 created,
    // and etcd is compacted. After SIGCONT all drift
    // is corrected within 30 s, and the event-form controller sees exactly the 50
    // deletions and the 50 creations, each once, and no other ADDED.
    let ns = TestNamespace::new("chaos-gap").await;
    let ns = ns.name.as_str();
    let capper = script(
        "gap-cap",
        &format!(
            "def reconcile(d):\n    if d.spec.replicas > 2:\n        k8s.patch(\"deployment\", d.metadata.name, {{\"spec\": {{\"replicas\": 2}}}}, namespace = d.metadata.namespace)\n\n\
             k8s.control(\"deployments\", reconcile = reconcile, namespace = \"{ns}\", labels = \"chaos=gap\", workers = 4)\n"
        ),
    );
    let events = script(
        "gap-events",
        &format!(
            "def added(d):\n    print(\"ADDED \" + d.metadata.name)\n\n\
             def deleted(d):\n    print(\"DELETED \" + d.metadata.name)\n\n\
             k8s.control(\"deployments\", on_create = added, on_delete = deleted, namespace = \"{ns}\", labels = \"chaos=gap\")\n"
        ),
    );
    deployments(ns, 0, 200, 0).await;
    let mut cap = Kite::spawn(&["run", &capper, "--allow-k8s"]);
    let mut ev = Kite::spawn(&["run", &events, "--allow-k8s"]);
    wait_until("200 ADDED", Duration::from_secs(60), || async {
        seen(&ev, "ADDED ").len() == 200
    })
    .await;
    cap.wait_stderr_line("controller started", Duration::from_secs(30))
        .await;

    let frozen = Instant::now();
    signal(cap.pid(), "-STOP");
    signal(ev.pid(), "-STOP");
    // The changes, made concurrently so that they fit in the freeze.
    let drifted: Vec<String> = (0..100).map(|i| format!("d-{i:03}")).collect();
    let gone: Vec<String> = (100..150).map(|i| format!("d-{i:03}")).collect();
    let scales = drifted.chunks(10).map(|chunk| async move {
        let mut scale = vec!["scale", "deployment", "-n", ns, "--replicas=3"];
        scale.extend(chunk.iter().map(String::as_str));
        kubectl_ok(&scale).await;
    });
    let deletes = gone.chunks(10).map(|chunk| async move {
        let mut delete = vec!["delete", "deployment", "-n", ns, "--wait=false"];
        delete.extend(chunk.iter().map(String::as_str));
        kubectl_ok(&delete).await;
    });
    let creates = (0..5).map(|b| deployments(ns, 200 + b * 10, 10, 0));
    futures::join!(
        futures::future::join_all(scales),
        futures::future::join_all(deletes),
        futures::future::join_all(creates)
    );
    let compacted = support::etcd::compact().await;
    println!(
        "changes made and etcd compacted to revision {compacted} in {:?}",
        frozen.elapsed()
    );
    // The fault's length.
    tokio::time::sleep(Duration::from_secs(20).saturating_sub(frozen.elapsed())).await;
    signal(cap.pid(), "-CONT");
    signal(ev.pid(), "-CONT");
    let resumed = Instant::now();

    wait_until("every drift corrected", Duration::from_secs(60), || async {
        let now = replicas(ns).await;
        drifted.iter().all(|d| now.get(d).is_some_and(|r| r == "2"))
    })
    .await;
    let corrected = resumed.elapsed();
    wait_until(
        "50 DELETED and 250 ADDED",
        Duration::from_secs(60),
        || async { seen(&ev, "DELETED ").len() == 50 && seen(&ev, "ADDED ").len() == 250 },
    )
    .await;
    let delivered = resumed.elapsed();
    println!("after SIGCONT: drift corrected in {corrected:?}, events delivered in {delivered:?}");

    let deleted = seen(&ev, "DELETED ");
    let added = seen(&ev, "ADDED ");
    let want_deleted: Vec<&String> = gone.iter().collect();
    assert_eq!(deleted.keys().collect::<Vec<_>>(), want_deleted);
    assert!(deleted.values().all(|n| *n == 1), "{deleted:?}");
    let twice: Vec<_> = added.iter().filter(|(_, n)| **n > 1).collect();
    assert!(twice.is_empty(), "spurious ADDED: {twice:?}");
    let new = (200..250).all(|i| added.contains_key(&format!("d-{i:03}")));
    assert!(new, "{added:?}");
    assert!(corrected <= Duration::from_secs(30), "{corrected:?}");
    assert!(cap.try_wait().is_none() && ev.try_wait().is_none());
}

/// The audit log's lines written since `from` (a byte offset), and the new offset.
fn audit_since(from: u64) -> (String, u64) {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(cluster_dir().join("audit.log")).expect("the audit log");
    let end = f.seek(SeekFrom::End(0)).unwrap();
    f.seek(SeekFrom::Start(from.min(end))).unwrap();
    let mut text = String::new();
    let _ = f.read_to_string(&mut text);
    (text, end)
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "5000 ConfigMaps: make chaos"]
async fn compaction_during_paginated_list() {
    // 5000 ConfigMaps, listed 500 a page through a slow link; etcd is compacted once the
    // second page has been asked for. The controller syncs within 60 s and its cache
    // holds exactly the 5000.
    let ns = TestNamespace::new("chaos-pages").await;
    let ns = ns.name.as_str();
    let batches = (0..10).map(|b| async move {
        let items: Vec<String> = (b * 500..(b + 1) * 500)
            .map(|i| {
                format!(
                    "- {{apiVersion: v1, kind: ConfigMap, metadata: {{name: cm-{i:04}, labels: {{chaos: page}}}}, data: {{n: \"{i}\"}}}}"
                )
            })
            .collect();
        let manifest = format!("apiVersion: v1\nkind: List\nitems:\n{}\n", items.join("\n"));
        let out = kubectl_stdin(&["create", "-n", ns, "-f", "-"], &manifest).await;
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    });
    futures::future::join_all(batches).await;

    let proxy = support::proxy::Proxy::start().await;
    proxy.set(support::proxy::Mode::Delay(Duration::from_millis(150)));
    let port = free_port();
    let path = script(
        "pages",
        &format!(
            "def reconcile(cm):\n    print(\"SEEN \" + cm.metadata.name)\n\n\
             k8s.control(\"configmaps\", reconcile = reconcile, namespace = \"{ns}\", labels = \"chaos=page\", health_port = {port})\n"
        ),
    );
    let (_, mut offset) = audit_since(u64::MAX);
    let started = Instant::now();
    let kc = proxy.kubeconfig.display().to_string();
    let mut kite = Kite::spawn(&["run", &path, "--allow-k8s", "--kubeconfig", &kc]);
    let second_page = format!("/api/v1/namespaces/{ns}/configmaps?");
    wait_until("the second page asked for", Duration::from_secs(60), || {
        let (text, end) = audit_since(offset);
        offset = end;
        let asked = text
            .lines()
            .any(|l| l.contains(&second_page) && l.contains("continue="));
        async move { asked }
    })
    .await;
    let compacted = support::etcd::compact().await;
    proxy.set(support::proxy::Mode::Pass);
    println!(
        "compacted to revision {compacted} {:?} after start, between pages",
        started.elapsed()
    );

    let ready = format!("http://127.0.0.1:{port}/readyz");
    wait_until("synced", Duration::from_secs(90), || async {
        support::operator::curl(&ready).await.is_some()
    })
    .await;
    let synced = started.elapsed();
    wait_until("5000 reconciled", Duration::from_secs(120), || async {
        seen(&kite, "SEEN ").len() >= 5000
    })
    .await;
    let names = seen(&kite, "SEEN ");
    let relists = count(&kite.stderr(), "list failed");
    println!(
        "synced in {synced:?} ({relists} list restarts); {} objects reconciled",
        names.len()
    );
    assert_eq!(names.len(), 5000);
    assert!((0..5000).all(|i| names.contains_key(&format!("cm-{i:04}"))));
    assert!(synced <= Duration::from_secs(60), "synced in {synced:?}");
    assert!(kite.try_wait().is_none());
}
