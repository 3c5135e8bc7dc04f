//! `make bench`: the API server's patch limit, a native kube-rs controller and kite, side by side.

#![allow(
    clippy::pedantic,
    reason = "a benchmark is a script of cluster calls and measurements; pedantic does not make it easier to read (docs/design/lints.md)"
)]

mod cluster;
mod native;
mod procstat;
mod workload;

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{ExitCode, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use kube::Client;

use cluster::Namespaces;
use procstat::Usage;
use workload::{Latencies, Tracker};

/// The controllers' label selector.
pub const LABEL: &str = "enforce-max-replicas=true";
pub const MAX_REPLICAS: i32 = 3;
/// The value drifted deployments get (the backlog's starting value too).
pub const DRIFT_REPLICAS: i32 = 10;
/// Workers of each controller, and requests in flight for the limit.
pub const WORKERS: usize = 2;

const BACKLOG: usize = 1000;
const STREAM_SET: usize = 100;
const STREAM_RATE: u32 = 10;
const STREAM_FOR: Duration = Duration::from_secs(20);
const LIMIT_FOR: Duration = Duration::from_secs(10);
const LIMIT_SET: usize = 100;
/// Kite must reach this multiple of the native backlog throughput (median of the
/// rounds' ratios) ...
const TARGET_THROUGHPUT: f64 = 1.5;
/// ... spend at most this multiple of native's CPU per correction ...
const TARGET_CPU: f64 = 1.0;
/// ... stay within this multiple of its stream p99 ...
const TARGET_P99: f64 = 1.0;
/// ... and within this many bytes of its peak RSS.
const TARGET_RSS_EXTRA: u64 = 15_000_000;
/// Rounds by default: two make one ABBA sequence (native, kite, kite, native).
const DEFAULT_ROUNDS: usize = 2;

fn main() -> ExitCode {
    // `cargo bench` passes --bench; positional arguments select the mode.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    // `controllers native-controller <ns>` is the native controller itself: both
    // controllers then run as child processes, measured the same way from /proc.
    let result = match args.as_slice() {
        [cmd, ns] if cmd == "native-controller" => runtime.block_on(native::run(ns)),
        _ => runtime.block_on(bench()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// Where controller logs and the report go.
fn out_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/bench")
}

async fn bench() -> anyhow::Result<()> {
    let client = cluster::client().await?;
    std::fs::create_dir_all(out_dir())?;
    let namespaces = Namespaces::new(client.clone());
    // Ctrl-C must still clean up: the run is raced against it, then namespaces go.
    let result = tokio::select! {
        r = run_all(&client, &namespaces) => r,
        _ = tokio::signal::ctrl_c() => Err(anyhow::anyhow!("interrupted")),
    };
    namespaces.delete_all().await;
    let report = result?;
    println!("{report}");
    std::fs::write(out_dir().join("report.md"), &report)?;
    eprintln!(
        "report written to {}",
        out_dir().join("report.md").display()
    );
    Ok(())
}

/// One controller's measurements.
struct Run {
    /// Objects/s in the backlog.
    throughput: f64,
    latency: Latencies,
    usage: Usage,
    backlog_cpu: Duration,
    /// CPU of the control-plane processes during the backlog.
    cluster_cpu: Duration,
    events: i64,
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Native,
    Kite,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::Native => "native",
            Kind::Kite => "kite",
        }
    }
}

/// The API server's limit, measured before and after the controller runs.
struct Limit {
    patches: f64,
    pairs: f64,
    /// The bench process's own CPU during the patch loop.
    client_cpu: Duration,
    cluster_cpu: Duration,
}

async fn run_all(client: &Client, namespaces: &Namespaces) -> anyhow::Result<String> {
    let rounds: usize = std::env::var("KITE_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(DEFAULT_ROUNDS)
        .clamp(1, 6);
    let cluster_pids = cluster_pids();
    let load_before = loadavg();
    let mut limits = vec![limit(client, namespaces, &cluster_pids, "limit-a").await?];
    let (mut natives, mut kites) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        // ABBA order: a load change on this shared machine that drifts linearly over the
        // run hits both controllers alike.
        let order = if round % 2 == 0 {
            [Kind::Native, Kind::Kite]
        } else {
            [Kind::Kite, Kind::Native]
        };
        for kind in order {
            let perf = kind == Kind::Kite && kites.is_empty();
            let run = run_controller(client, namespaces, kind, round, &cluster_pids, perf).await?;
            match kind {
                Kind::Native => natives.push(run),
                Kind::Kite => kites.push(run),
            }
        }
    }
    limits.push(limit(client, namespaces, &cluster_pids, "limit-b").await?);
    let load = (load_before, loadavg());
    Ok(report(&limits, &natives, &kites, load))
}

async fn limit(
    client: &Client,
    namespaces: &Namespaces,
    cluster_pids: &[u32],
    suffix: &str,
) -> anyhow::Result<Limit> {
    eprintln!("== {suffix}: merge patches with {WORKERS} in flight for {LIMIT_FOR:?}");
    let ns = namespaces.create(suffix).await?;
    cluster::create_deployments(client, &ns, LIMIT_SET, MAX_REPLICAS).await?;
    cluster::wait_settled(client, &ns, LIMIT_SET, Duration::from_secs(120)).await?;
    let own = [std::process::id()];
    let (cpu0, server0) = (procstat::cpu_of(&own), procstat::cpu_of(cluster_pids));
    let patches = workload::limit(client, &ns, LIMIT_SET, LIMIT_FOR, false).await?;
    let client_cpu = procstat::cpu_of(&own) - cpu0;
    let cluster_cpu = procstat::cpu_of(cluster_pids) - server0;
    // One correction is a patch and an event: the ceiling of corrections, for reference.
    let pairs = workload::limit(client, &ns, LIMIT_SET, LIMIT_FOR, true).await?;
    eprintln!("   {patches:.0} patches/s, {pairs:.0} patch+event pairs/s");
    namespaces.delete(&ns).await;
    Ok(Limit {
        patches,
        pairs,
        client_cpu,
        cluster_cpu,
    })
}

/// The 1-minute load average: the machine is shared, so the report says how busy it was.
fn loadavg() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}

/// The backlog and then the stream, against one controller in a fresh namespace.
async fn run_controller(
    client: &Client,
    namespaces: &Namespaces,
    kind: Kind,
    round: usize,
    cluster_pids: &[u32],
    perf: bool,
) -> anyhow::Result<Run> {
    let name = kind.name();
    eprintln!("== {name} #{round}: backlog of {BACKLOG} deployments at {DRIFT_REPLICAS} replicas");
    let ns = namespaces.create(&format!("{name}{round}")).await?;
    let setup = Instant::now();
    cluster::create_deployments(client, &ns, BACKLOG, DRIFT_REPLICAS).await?;
    eprintln!("   created in {:.1?}", setup.elapsed());
    cluster::wait_settled(client, &ns, BACKLOG, Duration::from_secs(180)).await?;
    eprintln!("   settled after {:.1?}", setup.elapsed());
    let tracker = Tracker::start(client, &ns, BACKLOG, Duration::from_secs(60)).await?;

    let server0 = procstat::cpu_of(cluster_pids);
    let start = Instant::now();
    let mut child = spawn_controller(kind, &ns)?;
    let pid = child.id().context("the controller's pid")?;
    let perf = (perf && std::env::var_os("KITE_BENCH_PERF").is_some())
        .then(|| start_perf(pid))
        .transpose()?;
    let done = tokio::select! {
        r = tracker.wait_all_at_max(Duration::from_secs(300)) => r.with_context(|| {
            format!("{name}: {}/{BACKLOG} corrected", tracker.at_max())
        })?,
        status = child.wait() => bail!("{name} exited early ({status:?}); see {}", out_dir().display()),
    };
    let backlog = done - start;
    let backlog_cpu = procstat::usage(pid).map(|u| u.cpu).unwrap_or_default();
    let cluster_cpu = procstat::cpu_of(cluster_pids) - server0;
    if let Some(perf) = perf {
        stop_perf(perf).await;
    }
    eprintln!("   {BACKLOG} corrected in {backlog:.2?}");

    // The deployment controller writes the corrected deployments' status: let that pass.
    cluster::wait_settled(client, &ns, BACKLOG, Duration::from_secs(120)).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    eprintln!("== {name} #{round}: stream of {STREAM_RATE} drifts/s for {STREAM_FOR:?}");
    let latency = tokio::select! {
        r = workload::stream(client, &ns, &tracker, STREAM_SET, STREAM_RATE, STREAM_FOR) => r?,
        status = child.wait() => bail!("{name} exited early ({status:?}); see {}", out_dir().display()),
    };
    eprintln!(
        "   p50 {:.1?} p99 {:.1?} ({} samples, {} missed)",
        latency.percentile(0.5),
        latency.percentile(0.99),
        latency.samples.len(),
        latency.missed
    );
    let usage = procstat::usage(pid).context("the controller's /proc entry")?;
    let _ = child.start_kill();
    let _ = tokio::time::timeout(Duration::from_secs(10), child.wait()).await;

    let events = cluster::drift_events(client, &ns).await?;
    let (replicasets, pods) = cluster::replicasets_and_pods(client, &ns).await?;
    eprintln!("   {events} DriftCorrected events; {replicasets} ReplicaSets and {pods} pods");
    if replicasets + pods > 0 {
        eprintln!("warning: the namespace was meant to stay free of ReplicaSets and pods");
    }
    namespaces.delete(&ns).await;
    Ok(Run {
        throughput: BACKLOG as f64 / backlog.as_secs_f64(),
        latency,
        usage,
        backlog_cpu,
        cluster_cpu,
        events,
    })
}

fn spawn_controller(kind: Kind, ns: &str) -> anyhow::Result<tokio::process::Child> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut cmd = match kind {
        Kind::Native => {
            let mut c = tokio::process::Command::new(std::env::current_exe()?);
            c.args(["native-controller", ns]);
            c
        }
        Kind::Kite => {
            // The bench profile is release: this is target/release/kite.
            let mut c = tokio::process::Command::new(env!("CARGO_BIN_EXE_kite"));
            c.args([
                "run",
                "benches/max-replicas-bench.star",
                "--allow-all",
                "--var",
            ])
            .arg(format!("namespace={ns}"));
            c
        }
    };
    let log = |ext: &str| std::fs::File::create(out_dir().join(format!("{ns}.{ext}")));
    cmd.current_dir(root)
        .env("KUBECONFIG", cluster::kubeconfig())
        .stdin(Stdio::null())
        .stdout(log("stdout")?)
        .stderr(log("stderr")?)
        .kill_on_drop(true);
    Ok(cmd.spawn()?)
}

/// The control plane's processes, from the pid files `make cluster-up` writes.
fn cluster_pids() -> Vec<u32> {
    let dir = cluster::kubeconfig().with_file_name("pids");
    std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| {
            std::fs::read_to_string(e.ok()?.path())
                .ok()?
                .trim()
                .parse()
                .ok()
        })
        .collect()
}

/// `perf record` of kite during the backlog (KITE_BENCH_PERF=1); not used for the
/// reported numbers, since sampling slows the process.
fn start_perf(pid: u32) -> anyhow::Result<tokio::process::Child> {
    let out = out_dir().join("kite.perf.data");
    eprintln!("   perf record of kite into {}", out.display());
    Ok(tokio::process::Command::new("perf")
        .args(["record", "-F", "499", "-g", "-p", &pid.to_string(), "-o"])
        .arg(out)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()?)
}

async fn stop_perf(mut perf: tokio::process::Child) {
    // SIGINT makes perf write its data file; it is our own child, ended by its pid.
    if let Some(pid) = perf.id() {
        let _ = std::process::Command::new("kill")
            .args(["-INT", &pid.to_string()])
            .status();
    }
    let _ = tokio::time::timeout(Duration::from_secs(30), perf.wait()).await;
}

fn mb(bytes: u64) -> String {
    format!("{:.1} MB", bytes as f64 / 1e6)
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1e3)
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "MISSED" }
}

fn mean(values: impl IntoIterator<Item = f64>) -> f64 {
    let v: Vec<f64> = values.into_iter().collect();
    v.iter().sum::<f64>() / v.len().max(1) as f64
}

/// kite/native ratios of one measure, one per round: their median and their range.
struct Paired {
    rounds: usize,
    median: f64,
    low: f64,
    high: f64,
}

impl Paired {
    fn of(natives: &[Run], kites: &[Run], measure: impl Fn(&Run) -> f64) -> Self {
        let mut ratios: Vec<f64> = natives
            .iter()
            .zip(kites)
            .map(|(n, k)| measure(k) / measure(n))
            .filter(|r| r.is_finite())
            .collect();
        ratios.sort_by(f64::total_cmp);
        let median = match ratios.len() {
            0 => f64::NAN,
            n if n % 2 == 1 => ratios[n / 2],
            n => (ratios[n / 2 - 1] + ratios[n / 2]) / 2.0,
        };
        Self {
            rounds: ratios.len(),
            median,
            low: ratios.first().copied().unwrap_or(f64::NAN),
            high: ratios.last().copied().unwrap_or(f64::NAN),
        }
    }
}

impl std::fmt::Display for Paired {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{:.2} ({:.2}..{:.2})", self.median, self.low, self.high)
    }
}

/// Throughput, latency, memory and CPU of one controller over its runs.
struct Summary {
    throughput: f64,
    latency: Latencies,
    peak_rss: u64,
    backlog_cpu: f64,
    total_cpu: f64,
    cluster_cpu: f64,
}

impl Summary {
    fn of(runs: &[Run]) -> Self {
        Self {
            throughput: mean(runs.iter().map(|r| r.throughput)),
            latency: Latencies::pooled(runs.iter().map(|r| &r.latency)),
            peak_rss: runs.iter().map(|r| r.usage.peak_rss).max().unwrap_or(0),
            backlog_cpu: mean(runs.iter().map(|r| r.backlog_cpu.as_secs_f64())),
            total_cpu: mean(runs.iter().map(|r| r.usage.cpu.as_secs_f64())),
            cluster_cpu: mean(runs.iter().map(|r| r.cluster_cpu.as_secs_f64())),
        }
    }

    fn p(&self, q: f64) -> f64 {
        self.latency.percentile(q).as_secs_f64()
    }
}

fn report(limits: &[Limit], natives: &[Run], kites: &[Run], load: (f64, f64)) -> String {
    let mut out = String::new();
    let patches = mean(limits.iter().map(|l| l.patches));
    let pairs = mean(limits.iter().map(|l| l.pairs));
    let (native, kite) = (Summary::of(natives), Summary::of(kites));
    let _ = writeln!(
        out,
        "| | throughput | stream p50 | stream p99 | peak RSS | CPU s (backlog / whole run) | control plane CPU s (backlog) |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|");
    let _ = writeln!(
        out,
        "| limit | {patches:.0} patches/s ({pairs:.0} patch+event/s) | | | | {:.1} (client, 10 s) | {:.1} (10 s) |",
        mean(limits.iter().map(|l| l.client_cpu.as_secs_f64())),
        mean(limits.iter().map(|l| l.cluster_cpu.as_secs_f64())),
    );
    for (name, s) in [("native", &native), ("kite", &kite)] {
        let _ = writeln!(
            out,
            "| {name} | {:.0} objects/s | {} | {} | {} | {:.2} / {:.2} | {:.1} |",
            s.throughput,
            ms(s.latency.percentile(0.5)),
            ms(s.latency.percentile(0.99)),
            mb(s.peak_rss),
            s.backlog_cpu,
            s.total_cpu,
            s.cluster_cpu,
        );
    }
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
    let _ = writeln!(
        out,
        "| kite/native | {:.2} | {:.2} | {:.2} | {:+.1} MB | {:.2} / {:.2} | {:.2} |",
        ratio(kite.throughput, native.throughput),
        ratio(kite.p(0.5), native.p(0.5)),
        ratio(kite.p(0.99), native.p(0.99)),
        (kite.peak_rss as f64 - native.peak_rss as f64) / 1e6,
        ratio(kite.backlog_cpu, native.backlog_cpu),
        ratio(kite.total_cpu, native.total_cpu),
        ratio(kite.cluster_cpu, native.cluster_cpu),
    );
    let _ = writeln!(
        out,
        "| kite/limit | {:.2} (native/limit {:.2}) | | | | | |",
        ratio(kite.throughput, patches),
        ratio(native.throughput, patches),
    );
    // A round's ratio compares two runs made back to back, under the same load; the
    // median of the rounds' ratios is what the targets are checked against, so that
    // one noisy round cannot decide them.
    let throughput = Paired::of(natives, kites, |r| r.throughput);
    let cpu = Paired::of(natives, kites, |r| r.backlog_cpu.as_secs_f64());
    let p99 = Paired::of(natives, kites, |r| r.latency.percentile(0.99).as_secs_f64());
    let _ = writeln!(
        out,
        "| kite/native, median of {} rounds (spread) | {} | | {} | | {} (CPU per correction) | |",
        throughput.rounds, throughput, p99, cpu,
    );
    let _ = writeln!(out);
    let throughput_ok = throughput.median >= TARGET_THROUGHPUT;
    let cpu_ok = cpu.median <= TARGET_CPU;
    let p99_ok = p99.median <= TARGET_P99;
    let rss_ok = kite.peak_rss <= native.peak_rss + TARGET_RSS_EXTRA;
    let _ = writeln!(
        out,
        "Targets (medians of the rounds' ratios): kite throughput >= {TARGET_THROUGHPUT} x native: {}; kite CPU per correction <= {TARGET_CPU} x native: {}; kite p99 <= {TARGET_P99} x native: {}; kite peak RSS <= native + {}: {}.",
        verdict(throughput_ok),
        verdict(cpu_ok),
        verdict(p99_ok),
        mb(TARGET_RSS_EXTRA),
        verdict(rss_ok),
    );
    let runs = |rs: &[Run]| {
        rs.iter()
            .map(|r| {
                format!(
                    "{:.0}/s, p99 {}, {} events",
                    r.throughput,
                    ms(r.latency.percentile(0.99)),
                    r.events
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    };
    let _ = writeln!(
        out,
        "Runs (ABBA order): native [{}]; kite [{}]. Limit before/after: {}. Stream samples: native {} ({} missed), kite {} ({} missed). Load average before/after: {:.1}/{:.1}.",
        runs(natives),
        runs(kites),
        limits
            .iter()
            .map(|l| format!("{:.0}", l.patches))
            .collect::<Vec<_>>()
            .join("/"),
        native.latency.samples.len(),
        native.latency.missed,
        kite.latency.samples.len(),
        kite.latency.missed,
        load.0,
        load.1,
    );
    out
}
