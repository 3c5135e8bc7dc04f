//! `kite operator --shards auto`: replicas share the StarlarkControllers, each runs on
//! exactly one live replica, and a dead replica's share is taken over.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::operator::*;
use crate::support::*;

const T: Duration = Duration::from_secs(90);
const CONTROLLERS: usize = 24;

/// Which controllers each replica (by port) reports running in its /metrics.
async fn running_on(port: u16) -> BTreeSet<String> {
    curl(&format!("http://127.0.0.1:{port}/metrics"))
        .await
        .unwrap_or_default()
        .lines()
        .filter(|l| l.starts_with("kite_workqueue_depth{"))
        .filter_map(|l| l.split("starlarkcontroller=\"").nth(1))
        .filter_map(|rest| rest.split('"').next())
        .map(str::to_owned)
        .collect()
}

/// status.replica of every StarlarkController in `ns`.
async fn replicas(ns: &str) -> BTreeMap<String, String> {
    let out = kubectl_ok(&[
        "get",
        "slc",
        "-n",
        ns,
        "-o",
        "jsonpath={range .items[*]}{.metadata.name}={.status.replica}{\"\\n\"}{end}",
    ])
    .await;
    out.lines()
        .filter_map(|l| l.split_once('='))
        .map(|(n, r)| (n.to_owned(), r.to_owned()))
        .collect()
}

#[tokio::test]
async fn replicas_share_the_controllers_never_run_one_twice_and_take_over_a_dead_ones() {
    install_starlarkcontroller_crd().await;
    let ns = TestNamespace::new("shards").await;
    let ns = ns.name.as_str();
    let ceiling = Ceiling::new(MAX_REPLICAS_CEILING).await;
    let args = [
        "--namespace",
        ns,
        "--shards",
        "auto",
        "--operator-namespace",
        ns,
    ];
    let mut ops = Vec::new();
    for _ in 0..3 {
        ops.push(Operator::start_with(ns, &ceiling, &args).await);
    }
    let identity = |op: &Operator| format!("_{}", op.kite.pid());
    create_enforced_deployment(ns, "web", 5).await;

    // Sample every replica's running controllers until the end: no controller may
    // ever show on two at once.
    let ports: Vec<u16> = ops.iter().map(|o| o.port).collect();
    let doubles = Arc::new(Mutex::new(Vec::<String>::new()));
    let sampling = {
        let doubles = doubles.clone();
        tokio::spawn(async move {
            loop {
                let mut seen = BTreeMap::<String, usize>::new();
                for port in &ports {
                    for c in running_on(*port).await {
                        *seen.entry(c).or_default() += 1;
                    }
                }
                doubles
                    .lock()
                    .unwrap()
                    .extend(seen.into_iter().filter(|(_, n)| *n > 1).map(|(c, _)| c));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };

    for i in 0..CONTROLLERS {
        apply_slc(ns, &format!("cap-{i}"), max_replicas_spec(ns, "3")).await;
    }
    let placed = wait_for("every controller claimed and ready", T, || async {
        let placed = replicas(ns).await;
        if placed.len() != CONTROLLERS || placed.values().any(String::is_empty) {
            return None;
        }
        for name in placed.keys() {
            if condition(&status(ns, name).await, "Ready")["status"] != "True" {
                return None;
            }
        }
        Some(placed)
    })
    .await;
    // Spread over all three, each named by its replica's identity.
    let mut share = BTreeMap::<String, usize>::new();
    for r in placed.values() {
        *share.entry(r.clone()).or_default() += 1;
    }
    println!("share of {CONTROLLERS} over 3 replicas: {share:?}");
    assert_eq!(share.len(), 3, "{share:?}");
    for op in &ops {
        assert!(
            share.keys().any(|r| r.ends_with(&identity(op))),
            "{share:?}"
        );
    }
    let wide = kubectl_ok(&["get", "slc", "-n", ns, "-o", "wide"]).await;
    assert!(
        wide.lines().next().unwrap_or_default().contains("REPLICA"),
        "{wide}"
    );
    assert!(share.keys().all(|r| wide.contains(r.as_str())), "{wide}");
    replicas_become(ns, "web", "3").await;

    // Kill one outright: its share moves to the others within a lease (10 s) and a
    // look (2 s), plus the new claims.
    let victim = ops.remove(1);
    let dead = identity(&victim);
    let orphans: Vec<String> = placed
        .iter()
        .filter(|(_, r)| r.ends_with(&dead))
        .map(|(n, _)| n.clone())
        .collect();
    assert!(!orphans.is_empty());
    let mut victim = victim;
    victim.kite.kill();
    let killed = Instant::now();
    let live: Vec<String> = ops.iter().map(identity).collect();
    wait_until("the dead replica's share taken over", T, || async {
        let now = replicas(ns).await;
        orphans.iter().all(|n| {
            now.get(n)
                .is_some_and(|r| live.iter().any(|l| r.ends_with(l.as_str())))
        })
    })
    .await;
    let failover = killed.elapsed();
    println!(
        "failover of {} controllers: {:.1}s",
        orphans.len(),
        failover.as_secs_f64()
    );
    // And they run there: a drift is corrected.
    drifted(ns, "web", "6").await;
    replicas_become(ns, "web", "3").await;
    sampling.abort();
    let doubles = doubles.lock().unwrap().clone();
    assert!(
        doubles.is_empty(),
        "ran on two replicas at once: {doubles:?}"
    );
    // The webhook configuration may name the killed replica: the others put theirs back.
    drop(victim);
}
