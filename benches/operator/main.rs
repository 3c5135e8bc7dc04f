//! `make bench-operator`: one `kite operator` hosting 100, 500 and 1000
//! StarlarkControllers across 50 namespaces plus 20 ClusterStarlarkControllers on Pods,
//! then three sharded replicas: time to Ready, memory, threads, watches, drift, spread
//! and failover.

#![allow(
    clippy::pedantic,
    reason = "a benchmark is a script of cluster calls and measurements; pedantic does not make it easier to read (docs/design/lints.md)"
)]

#[allow(
    dead_code,
    reason = "shared with the `controllers` bench, which uses all of it"
)]
#[path = "../controllers/cluster.rs"]
mod cluster;
mod fleet;
mod operator;
#[allow(
    dead_code,
    reason = "shared with the `controllers` bench, which uses all of it"
)]
#[path = "../controllers/procstat.rs"]
mod procstat;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use cluster::Namespaces;
use fleet::Fleet;
use operator::Operator;

/// The label the deployments carry (the max-replicas example selects it).
pub const LABEL: &str = "enforce-max-replicas=true";
const NAMESPACES: usize = 50;
/// Deployments per namespace, for the drift stream.
const DEPLOYMENTS: usize = 2;
const CLUSTER_CONTROLLERS: usize = 20;
const DRIFT_RATE: u32 = 5;
const DRIFT_FOR: Duration = Duration::from_secs(20);

/// Issue 28's targets: (controllers, all Ready after a restart within, RSS within).
const TARGETS: &[(usize, Duration, u64)] = &[
    (1000, Duration::from_secs(8), 120_000_000),
    (5000, Duration::from_secs(40), 500_000_000),
];
const TARGET_DRIFT_P99: Duration = Duration::from_millis(100);
const TARGET_SPREAD: f64 = 0.10;
const TARGET_FAILOVER: Duration = Duration::from_secs(20);

fn main() -> ExitCode {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    match runtime.block_on(bench()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn out_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench")
}

/// The sizes to run: `KITE_BENCH_SIZES=100,500` for a shorter run.
fn sizes() -> Vec<usize> {
    std::env::var("KITE_BENCH_SIZES")
        .ok()
        .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
        .filter(|v: &Vec<usize>| !v.is_empty())
        .unwrap_or_else(|| vec![100, 500, 1000])
}

/// One size's figures.
struct Row {
    size: usize,
    ready: Duration,
    rss: u64,
    threads: u64,
    watches: i64,
    triples: usize,
    drift: fleet::Drift,
}

struct Sharded {
    size: usize,
    ready: Duration,
    share: Vec<usize>,
    rss: Vec<u64>,
    failover: Option<Duration>,
    moved: usize,
}

async fn bench() -> anyhow::Result<()> {
    let client = cluster::client().await?;
    std::fs::create_dir_all(out_dir())?;
    let namespaces = Namespaces::new(client.clone());
    let mut fleet = Fleet::new(client.clone());
    let result = tokio::select! {
        r = run(&mut fleet, &namespaces) => r,
        _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
    };
    fleet.clean_up().await;
    namespaces.delete_all().await;
    let report = result?;
    println!("{report}");
    std::fs::write(out_dir().join("operator.md"), &report)?;
    eprintln!(
        "report written to {}",
        out_dir().join("operator.md").display()
    );
    Ok(())
}

async fn run(fleet: &mut Fleet, namespaces: &Namespaces) -> anyhow::Result<String> {
    fleet.prepare(namespaces, NAMESPACES, DEPLOYMENTS).await?;
    fleet
        .watched(
            &["starlarkcontrollers", "clusterstarlarkcontrollers"],
            Duration::from_secs(60),
        )
        .await?;
    let baseline = fleet.watches().await?;
    let mut rows = Vec::new();
    let mut op = Operator::start(fleet, "single", &[]).await?;
    fleet
        .create_cluster_controllers(CLUSTER_CONTROLLERS)
        .await?;
    for size in sizes() {
        eprintln!(
            "== {size} StarlarkControllers + {CLUSTER_CONTROLLERS} ClusterStarlarkControllers"
        );
        fleet.create_controllers(size).await?;
        fleet.wait_ready(None, Duration::from_secs(600)).await?;
        // Time to Ready from a cold start: every controller started by the new process.
        op.stop().await;
        let started = Instant::now();
        let since = jiff_now();
        op = Operator::start(fleet, &format!("single-{size}"), &[]).await?;
        let ready = fleet
            .wait_ready(Some(since), Duration::from_secs(600))
            .await?;
        let ready = ready.min(started.elapsed());
        eprintln!("   all Ready {:.1}s after start", ready.as_secs_f64());
        // Let the start-up burst settle before reading memory and watches.
        tokio::time::sleep(Duration::from_secs(5)).await;
        let (rss, threads) = op.rss_and_threads();
        let watches = fleet.watches().await? - baseline;
        let drift = fleet.drift(DRIFT_RATE, DRIFT_FOR).await?;
        eprintln!(
            "   RSS {} MB, {threads} threads, {watches} watches, drift p50 {:?} p99 {:?}",
            rss / 1_000_000,
            drift.p50,
            drift.p99
        );
        rows.push(Row {
            size,
            ready,
            rss,
            threads,
            watches,
            triples: fleet.triples(),
            drift,
        });
    }
    op.stop().await;
    let sharded = shards(fleet).await?;
    Ok(report(&rows, &sharded))
}

/// Three replicas with `--shards auto`: how evenly they share, and how fast the others
/// take over when one is killed.
async fn shards(fleet: &mut Fleet) -> anyhow::Result<Sharded> {
    let size = fleet.size();
    eprintln!("== 3 replicas, --shards auto, {size} StarlarkControllers");
    let since = jiff_now();
    let started = Instant::now();
    let mut ops = Vec::new();
    for i in 0..3 {
        ops.push(Operator::start(fleet, &format!("shard-{i}"), &["--shards", "auto"]).await?);
    }
    let identities: Vec<String> = ops.iter().map(Operator::identity).collect();
    fleet
        .wait_claimed(&identities, Some(since), Duration::from_secs(600))
        .await?;
    let ready = started.elapsed();
    let placed = fleet.replicas().await?;
    let share: Vec<usize> = identities
        .iter()
        .map(|id| placed.values().filter(|r| *r == id).count())
        .collect();
    let rss: Vec<u64> = ops.iter().map(|o| o.rss_and_threads().0).collect();
    eprintln!("   share {share:?} after {:.1}s", ready.as_secs_f64());
    // Kill the second outright.
    let victim = ops.remove(1);
    let dead = victim.identity();
    let moved = placed.values().filter(|r| **r == dead).count();
    let since = jiff_now();
    let killed = Instant::now();
    victim.kill();
    let live: Vec<String> = ops.iter().map(Operator::identity).collect();
    let failover = fleet
        .wait_moved(&dead, &live, since, Duration::from_secs(180))
        .await
        .ok()
        .map(|()| killed.elapsed());
    eprintln!("   failover of {moved}: {failover:?}");
    for op in ops {
        op.stop().await;
    }
    Ok(Sharded {
        size,
        ready,
        share,
        rss,
        failover,
        moved,
    })
}

fn jiff_now() -> k8s_openapi::jiff::Timestamp {
    k8s_openapi::jiff::Timestamp::now()
}

fn mark(ok: bool) -> &'static str {
    if ok { "met" } else { "MISSED" }
}

fn report(rows: &[Row], sharded: &Sharded) -> String {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let mut out = String::new();
    let _ = writeln!(
        out,
        "### kite operator at scale ({}; {cores} cores; {NAMESPACES} namespaces, {CLUSTER_CONTROLLERS} ClusterStarlarkControllers on Pods)\n",
        jiff_now().strftime("%Y-%m-%d")
    );
    let _ = writeln!(
        out,
        "| StarlarkControllers | all Ready after start | RSS | threads | watches opened | distinct triples | drift p50 | drift p99 |"
    );
    let _ = writeln!(out, "|---:|---:|---:|---:|---:|---:|---:|---:|");
    for r in rows {
        let _ = writeln!(
            out,
            "| {} | {:.1} s | {} MB | {} | {} | {} | {} ms | {} ms |",
            r.size,
            r.ready.as_secs_f64(),
            r.rss / 1_000_000,
            r.threads,
            r.watches,
            r.triples,
            r.drift.p50.as_millis(),
            r.drift.p99.as_millis(),
        );
    }
    let _ = writeln!(
        out,
        "\nWatches opened: the API server's open WATCH requests (`apiserver_longrunning_requests`) \
         minus those open before the operator started. Distinct triples: the hosted controllers' \
         (resource, namespace, selector) triples plus the operator's own watches."
    );
    let total: usize = sharded.share.iter().sum();
    let even = total as f64 / sharded.share.len().max(1) as f64;
    let spread = sharded
        .share
        .iter()
        .map(|s| (*s as f64 - even).abs() / even)
        .fold(0.0, f64::max);
    let _ = writeln!(
        out,
        "\n3 replicas, `--shards auto`, {} StarlarkControllers: all claimed and Ready {:.1} s after start; \
         share {:?} (largest deviation {:.1} %); RSS {:?} MB; killing one moved its {} in {}.",
        sharded.size,
        sharded.ready.as_secs_f64(),
        sharded.share,
        spread * 100.0,
        sharded
            .rss
            .iter()
            .map(|r| r / 1_000_000)
            .collect::<Vec<_>>(),
        sharded.moved,
        sharded.failover.map_or_else(
            || "more than 180 s".to_owned(),
            |d| format!("{:.1} s", d.as_secs_f64())
        ),
    );
    let thread_cap = 4 * cores as u64 + 16;
    let _ = writeln!(out, "\nTargets:");
    for r in rows {
        if let Some((_, ready, rss)) = TARGETS.iter().find(|(n, _, _)| *n == r.size) {
            let _ = writeln!(
                out,
                "- {} Ready within {} s after a restart: {:.1} s, {}",
                r.size,
                ready.as_secs(),
                r.ready.as_secs_f64(),
                mark(r.ready <= *ready)
            );
            let _ = writeln!(
                out,
                "- {} within {} MB: {} MB, {}",
                r.size,
                rss / 1_000_000,
                r.rss / 1_000_000,
                mark(r.rss <= *rss)
            );
        }
        let _ = writeln!(
            out,
            "- {}: threads <= {thread_cap}: {}, {}; watches <= distinct triples: {} <= {}, {}; drift p99 < {} ms: {} ms, {}",
            r.size,
            r.threads,
            mark(r.threads <= thread_cap),
            r.watches,
            r.triples,
            mark(r.watches <= r.triples as i64),
            TARGET_DRIFT_P99.as_millis(),
            r.drift.p99.as_millis(),
            mark(r.drift.p99 < TARGET_DRIFT_P99)
        );
    }
    let _ = writeln!(
        out,
        "- spread within ±10 %: {:.1} %, {}",
        spread * 100.0,
        mark(spread <= TARGET_SPREAD)
    );
    let _ = writeln!(
        out,
        "- failover < 20 s: {}",
        mark(sharded.failover.is_some_and(|f| f < TARGET_FAILOVER))
    );
    out
}
