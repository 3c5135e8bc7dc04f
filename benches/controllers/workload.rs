//! The workloads: the API server's patch limit, the correction tracker, the drift stream.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::bail;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::cluster::deployment_name;
use crate::{DRIFT_REPLICAS, LABEL, MAX_REPLICAS, WORKERS};

/// A small xorshift generator: the benchmark needs spread, not quality, and no new
/// dependency.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed | 1)
    }

    pub fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// Patches/s (or patch+event pairs/s) the API server sustains with `WORKERS` requests
/// in flight, on `count` existing deployments.
pub async fn limit(
    client: &Client,
    ns: &str,
    count: usize,
    duration: Duration,
    with_event: bool,
) -> anyhow::Result<f64> {
    let done = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let end = start + duration;
    let workers = (0..WORKERS).map(|w| {
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), ns);
        let events: Api<Event> = Api::namespaced(client.clone(), ns);
        let done = done.clone();
        async move {
            // Each worker owns every WORKERS-th deployment and walks them round-robin,
            // alternating the value per round, so every patch really changes the object
            // (an unchanged patch is a no-op the API server does not write to etcd).
            let mine: Vec<String> = (w..count).step_by(WORKERS).map(deployment_name).collect();
            let mut i = 0usize;
            while Instant::now() < end {
                let name = &mine[i % mine.len()];
                let replicas = 4 + (i / mine.len()) % 2;
                let patch = json!({"spec": {"replicas": replicas}});
                deployments
                    .patch(name, &PatchParams::default(), &Patch::Merge(patch))
                    .await?;
                if with_event {
                    let event: Event = serde_json::from_value(json!({
                        "metadata": {"name": format!("{name}.{w}-{i}")},
                        "involvedObject": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name, "namespace": ns},
                        "reason": "LimitProbe", "message": "limit", "type": "Normal", "count": 1,
                    }))?;
                    events.create(&PostParams::default(), &event).await?;
                }
                done.fetch_add(1, Ordering::Relaxed);
                i += 1;
            }
            anyhow::Ok(())
        }
    });
    futures::future::try_join_all(workers).await?;
    Ok(done.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64())
}

/// One injected drift and what became of it.
#[derive(Debug, Clone)]
struct Probe {
    name: String,
    /// Wall-clock time of the drift, to find it in the controllers' logs.
    sent_at: std::time::SystemTime,
    /// When the drift patch's response arrived.
    answered: Option<Instant>,
    /// The watch showed the drifted value: only a later MAX_REPLICAS is a correction.
    drift_seen: bool,
    corrected: Option<Instant>,
}

#[derive(Default)]
struct State {
    replicas: HashMap<String, i32>,
    synced: bool,
    /// When every deployment first had spec.replicas == MAX_REPLICAS.
    all_at_max: Option<Instant>,
    /// Deployment name → index into `probes` of its uncorrected drift.
    open: HashMap<String, usize>,
    probes: Vec<Probe>,
}

/// Watches the namespace's deployments and timestamps corrections as they arrive.
pub struct Tracker {
    state: Arc<Mutex<State>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Tracker {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Tracker {
    /// Starts watching; returns once the initial list is in.
    pub async fn start(
        client: &Client,
        ns: &str,
        expected: usize,
        timeout: Duration,
    ) -> anyhow::Result<Self> {
        let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
        let state = Arc::new(Mutex::new(State::default()));
        let s = state.clone();
        let task = tokio::spawn(async move {
            let mut events = std::pin::pin!(
                watcher(api, watcher::Config::default().labels(LABEL)).default_backoff()
            );
            while let Some(event) = events.next().await {
                let now = Instant::now();
                let mut st = s.lock().unwrap();
                match event {
                    Ok(watcher::Event::Apply(d) | watcher::Event::InitApply(d)) => {
                        st.observe(&d, now, expected)
                    }
                    Ok(watcher::Event::InitDone) => st.synced = true,
                    Ok(_) => {}
                    Err(e) => eprintln!("tracker watch: {e}"),
                }
            }
        });
        let tracker = Self { state, task };
        tracker
            .wait("the tracker's initial list", timeout, |s| s.synced)
            .await?;
        Ok(tracker)
    }

    async fn wait(
        &self,
        what: &str,
        timeout: Duration,
        done: impl Fn(&State) -> bool,
    ) -> anyhow::Result<()> {
        let deadline = Instant::now() + timeout;
        while !done(&self.state.lock().unwrap()) {
            if Instant::now() >= deadline {
                bail!("timed out after {timeout:?} waiting for {what}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// Waits until every deployment is at MAX_REPLICAS; returns when that was first seen.
    pub async fn wait_all_at_max(&self, timeout: Duration) -> anyhow::Result<Instant> {
        self.wait("every deployment to be corrected", timeout, |s| {
            s.all_at_max.is_some()
        })
        .await?;
        Ok(self.state.lock().unwrap().all_at_max.expect("checked"))
    }

    /// How many deployments are at MAX_REPLICAS now (for error messages).
    pub fn at_max(&self) -> usize {
        let st = self.state.lock().unwrap();
        st.replicas.values().filter(|&&r| r == MAX_REPLICAS).count()
    }
}

impl State {
    fn observe(&mut self, d: &Deployment, now: Instant, expected: usize) {
        let name = d.name_any();
        let replicas = d.spec.replicas.unwrap_or(1);
        self.replicas.insert(name.clone(), replicas);
        if let Some(&i) = self.open.get(&name) {
            let probe = &mut self.probes[i];
            if replicas == DRIFT_REPLICAS {
                probe.drift_seen = true;
            } else if replicas == MAX_REPLICAS && probe.drift_seen {
                probe.corrected = Some(now);
                self.open.remove(&name);
            }
        }
        if self.all_at_max.is_none()
            && self.replicas.len() == expected
            && self.replicas.values().all(|&r| r == MAX_REPLICAS)
        {
            self.all_at_max = Some(now);
        }
    }
}

/// What the drift stream measured.
#[derive(Debug, Clone, Default)]
pub struct Latencies {
    /// Sorted.
    pub samples: Vec<Duration>,
    /// Drifts not corrected within the grace period after the stream.
    pub missed: usize,
}

impl Latencies {
    /// Several runs' samples together.
    pub fn pooled<'a>(runs: impl IntoIterator<Item = &'a Latencies>) -> Self {
        let mut all = Self::default();
        for r in runs {
            all.samples.extend(&r.samples);
            all.missed += r.missed;
        }
        all.samples.sort();
        all
    }

    /// The nearest-rank percentile.
    pub fn percentile(&self, q: f64) -> Duration {
        if self.samples.is_empty() {
            return Duration::ZERO;
        }
        let n = self.samples.len();
        let rank = ((q * n as f64).ceil() as usize).clamp(1, n);
        self.samples[rank - 1]
    }
}

/// Sets `DRIFT_REPLICAS` on random deployments among the first `set` at `rate` per
/// second for `duration`, and measures drift-response → correction-seen latency.
pub async fn stream(
    client: &Client,
    ns: &str,
    tracker: &Tracker,
    set: usize,
    rate: u32,
    duration: Duration,
) -> anyhow::Result<Latencies> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), ns);
    let mut rng = Rng::new(0x5eed_0000 + u64::from(std::process::id()));
    let mut tick = tokio::time::interval(Duration::from_secs(1) / rate);
    // A late tick must not be followed by a burst: the rate is the point.
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut inflight = tokio::task::JoinSet::new();
    let end = Instant::now() + duration;
    while Instant::now() < end {
        tick.tick().await;
        // A deployment still waiting for its correction is not drifted again.
        let picked = {
            let mut st = tracker.state.lock().unwrap();
            let name = (0..20)
                .map(|_| deployment_name(rng.below(set)))
                .find(|n| !st.open.contains_key(n));
            name.map(|name| {
                st.probes.push(Probe {
                    name: name.clone(),
                    sent_at: std::time::SystemTime::now(),
                    answered: None,
                    drift_seen: false,
                    corrected: None,
                });
                let i = st.probes.len() - 1;
                st.open.insert(name.clone(), i);
                (name, i)
            })
        };
        let Some((name, i)) = picked else { continue };
        let api = api.clone();
        let state = tracker.state.clone();
        inflight.spawn(async move {
            let patch = json!({"spec": {"replicas": DRIFT_REPLICAS}});
            let result = api
                .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                .await;
            let mut st = state.lock().unwrap();
            match result {
                Ok(_) => st.probes[i].answered = Some(Instant::now()),
                Err(e) => {
                    eprintln!("drift patch of {name}: {e}");
                    st.open.remove(&name);
                }
            }
        });
    }
    let _ = tokio::time::timeout(Duration::from_secs(30), async {
        while inflight.join_next().await.is_some() {}
    })
    .await;
    // Corrections still on their way get a bounded grace period.
    let _ = tracker
        .wait("the last corrections", Duration::from_secs(30), |s| {
            s.open.is_empty()
        })
        .await;
    let st = tracker.state.lock().unwrap();
    let mut samples: Vec<Duration> = st
        .probes
        .iter()
        .filter_map(|p| Some(p.corrected?.saturating_duration_since(p.answered?)))
        .collect();
    samples.sort();
    // The slowest corrections, with their names and times, for reading the logs.
    let mut slow: Vec<&Probe> = st.probes.iter().filter(|p| p.answered.is_some()).collect();
    slow.sort_by_key(|p| {
        std::cmp::Reverse(
            p.corrected
                .map(|c| c.saturating_duration_since(p.answered.unwrap())),
        )
    });
    for p in slow.iter().take(3) {
        let at = p
            .sent_at
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        let took = p
            .corrected
            .map(|c| c.saturating_duration_since(p.answered.unwrap()));
        eprintln!(
            "   slow: {} drifted at unix {:.3}, corrected after {took:.1?}",
            p.name,
            at.as_secs_f64()
        );
    }
    let missed = st
        .probes
        .iter()
        .filter(|p| p.answered.is_some() && p.corrected.is_none())
        .count();
    Ok(Latencies { samples, missed })
}
