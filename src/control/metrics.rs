//! Per-controller reconcile metrics, encoded by `prometheus-client` in the Prometheus
//! text format (version 0.0.4).

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::{ConstCounter, Counter};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// The `Content-Type` of what [`Scrape::render`] returns; it lives with the server
/// that sends it, below this layer.
pub use crate::http::METRICS_CONTENT_TYPE as CONTENT_TYPE;

/// Upper bounds (seconds) of the reconcile duration histogram buckets.
const BUCKETS: [f64; 13] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// How one reconciliation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Done; nothing more to do until the object changes.
    Success,
    /// Done for now; the handler asked to run again later.
    Requeue,
    /// The handler failed.
    Error,
}

impl Outcome {
    const ALL: [Self; 3] = [Self::Success, Self::Requeue, Self::Error];

    /// Its name in metrics and status: success, requeue or error.
    #[must_use]
    pub fn label(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::Requeue => "requeue",
            Self::Error => "error",
        }
    }
}

/// One controller's metrics. Each controller owns one, so several controllers in one
/// process keep separate counts; a scrape labels each with its controller.
#[derive(Debug)]
pub struct Metrics {
    /// Indexed like [`Outcome::ALL`].
    outcomes: [Counter; 3],
    duration: Histogram,
    retries: Counter,
    watch_restarts: Counter,
    queue_depth: Gauge,
    /// The latest reconcile's end and the latest handler error, for the operator's status.
    latest: std::sync::Mutex<Latest>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self {
            outcomes: Default::default(),
            duration: Histogram::new(BUCKETS),
            retries: Counter::default(),
            watch_restarts: Counter::default(),
            queue_depth: Gauge::default(),
            latest: std::sync::Mutex::default(),
        }
    }
}

/// What the operator shows about a controller's most recent work.
#[derive(Debug, Default, Clone)]
pub struct Latest {
    pub reconcile: Option<std::time::SystemTime>,
    /// The first line of the error, with the script's file:line:col when it has one.
    pub error: Option<String>,
    /// The last few reconciles, oldest first ([`RECENT`] at most).
    pub recent: std::collections::VecDeque<Recent>,
}

/// Reconciles kept in [`Latest::recent`].
pub const RECENT: usize = 5;

/// One reconcile, as `kubectl describe` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Recent {
    pub at: std::time::SystemTime,
    /// `namespace/name` of the object.
    pub key: String,
    /// What started it: add, update, event, resync, related...
    pub trigger: String,
    pub duration: Duration,
    pub outcome: Outcome,
    /// The first line of its error.
    pub error: Option<String>,
}

impl Metrics {
    /// All counts zero.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Counts one reconciliation and observes how long it took.
    pub fn record_reconcile(&self, outcome: Outcome, duration: Duration) {
        self.outcomes[outcome as usize].inc();
        if let Ok(mut l) = self.latest.lock() {
            l.reconcile = Some(std::time::SystemTime::now());
        }
        self.duration.observe(duration.as_secs_f64());
    }

    /// Remembers one reconcile among the recent ones.
    pub fn record_recent(&self, recent: Recent) {
        if let Ok(mut l) = self.latest.lock() {
            if l.recent.len() >= RECENT {
                l.recent.pop_front();
            }
            l.recent.push_back(recent);
        }
    }

    /// Remembers the latest handler error.
    pub fn record_error(&self, message: String) {
        if let Ok(mut l) = self.latest.lock() {
            l.error = Some(message);
        }
    }

    /// The latest reconcile time and error.
    pub fn latest(&self) -> Latest {
        self.latest.lock().map(|l| l.clone()).unwrap_or_default()
    }

    /// Counts a key requeued after an error.
    pub fn record_retry(&self) {
        self.retries.inc();
    }

    /// Counts a watch restarted after an error or expiry.
    pub fn record_watch_restart(&self) {
        self.watch_restarts.inc();
    }

    /// Sets the number of keys waiting in the work queue.
    pub fn set_queue_depth(&self, depth: usize) {
        self.queue_depth
            .set(i64::try_from(depth).unwrap_or(i64::MAX));
    }

    /// Reconciliations so far, whatever their outcome.
    #[must_use]
    pub fn reconciles(&self) -> u64 {
        self.outcomes.iter().map(Counter::get).sum()
    }

    /// Reconciliations that ended in [`Outcome::Error`].
    #[must_use]
    pub fn errors(&self) -> u64 {
        self.outcomes[Outcome::Error as usize].get()
    }
}

/// The labels of one series of a labelled family, as (name, value) pairs.
pub type Labels = Vec<(String, String)>;

/// One controller in a scrape: `controller="<name>"` plus `extra` labels (e.g. the
/// operator's `starlarkcontroller`), and its metrics.
#[derive(Debug, Clone)]
pub struct Series {
    pub controller: String,
    pub extra: Vec<(&'static str, String)>,
    pub metrics: Arc<Metrics>,
}

/// One `/metrics` response: process-level gauges and any number of controllers.
#[derive(Debug, Default)]
pub struct Scrape {
    registry: Registry,
}

impl Scrape {
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an unlabelled gauge (e.g. `kite_operator_leader`).
    pub fn gauge(&mut self, name: &str, help: &str, value: i64) {
        let g: Gauge = Gauge::default();
        g.set(value);
        self.registry.register(name, help, g);
    }

    /// Adds an unlabelled counter (e.g. `kite_operator_events_dropped`).
    pub fn counter(&mut self, name: &str, help: &str, value: u64) {
        self.registry.register(name, help, ConstCounter::new(value));
    }

    /// Adds a gauge with one series per label set (e.g. `kite_operator_ready`).
    pub fn labelled_gauge(&mut self, name: &str, help: &str, series: Vec<(Labels, i64)>) {
        let family: Family<Labels, Gauge> = Family::default();
        for (labels, value) in series {
            family.get_or_create(&labels).set(value);
        }
        self.registry.register(name, help, family);
    }

    /// Adds the process's background Event writes that did not happen
    /// (`crate::k8s::recorder`): dropped for a full queue, and failed.
    pub fn events(&mut self) {
        let dropped = ConstCounter::new(crate::k8s::recorder::dropped());
        self.registry.register(
            "kite_events_dropped",
            "Events dropped because their identity's event queue was full",
            dropped,
        );
        let failed = ConstCounter::new(crate::k8s::recorder::failed());
        self.registry.register(
            "kite_events_failed",
            "Events whose background write failed (each is logged)",
            failed,
        );
    }

    /// Adds a counter with one series per label set.
    pub fn labelled_counter(&mut self, name: &str, help: &str, series: Vec<(Labels, u64)>) {
        let family: Family<Labels, Counter> = Family::default();
        for (labels, value) in series {
            family.get_or_create(&labels).inc_by(value);
        }
        self.registry.register(name, help, family);
    }

    /// Adds the controllers' series, each metric's samples together under its one
    /// HELP/TYPE header.
    pub fn controllers(&mut self, series: Vec<Series>) {
        self.registry
            .register_collector(Box::new(Controllers(series)));
    }

    /// The exposition, in the Prometheus text format ([`CONTENT_TYPE`]).
    #[must_use]
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Encoding into a String only fails if a collector fails; ours do not.
        if let Err(e) =
            prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry)
        {
            tracing::warn!(error = %e, "encoding metrics");
        }
        out
    }
}

#[derive(Debug)]
struct Controllers(Vec<Series>);

impl Controllers {
    /// Writes one family: its header, then `sample` for every controller with its labels.
    fn family(
        &self,
        encoder: &mut DescriptorEncoder,
        (name, help, kind): (&str, &str, MetricType),
        sample: impl Fn(
            &Metrics,
            &[(&str, &str)],
            &mut prometheus_client::encoding::MetricEncoder,
        ) -> std::fmt::Result,
    ) -> std::fmt::Result {
        let mut family = encoder.encode_descriptor(name, help, None, kind)?;
        for s in &self.0 {
            let mut labels = vec![("controller", s.controller.as_str())];
            labels.extend(s.extra.iter().map(|(k, v)| (*k, v.as_str())));
            sample(&s.metrics, &labels, &mut family)?;
        }
        Ok(())
    }
}

impl Collector for Controllers {
    fn encode(&self, mut encoder: DescriptorEncoder) -> std::fmt::Result {
        use MetricType::{Counter as C, Gauge as G, Histogram as H};
        let reconciles = ("kite_reconcile", "Reconciliations, by outcome", C);
        self.family(&mut encoder, reconciles, |m, labels, family| {
            for outcome in Outcome::ALL {
                let set = (labels, [("outcome", outcome.label())]);
                m.outcomes[outcome as usize].encode(family.encode_family(&set)?)?;
            }
            Ok(())
        })?;
        let errors = ("kite_reconcile_errors", "Reconciliations that failed", C);
        self.family(&mut encoder, errors, |m, labels, family| {
            ConstCounter::new(m.errors()).encode(family.encode_family(&labels)?)
        })?;
        let duration = (
            "kite_reconcile_duration_seconds",
            "Time spent in reconcile handlers",
            H,
        );
        self.family(&mut encoder, duration, |m, labels, family| {
            m.duration.encode(family.encode_family(&labels)?)
        })?;
        let depth = ("kite_workqueue_depth", "Keys waiting in the work queue", G);
        self.family(&mut encoder, depth, |m, labels, family| {
            m.queue_depth.encode(family.encode_family(&labels)?)
        })?;
        let retries = (
            "kite_workqueue_retries",
            "Keys requeued after an error, with backoff",
            C,
        );
        self.family(&mut encoder, retries, |m, labels, family| {
            m.retries.encode(family.encode_family(&labels)?)
        })?;
        let restarts = (
            "kite_watch_restarts",
            "Watches restarted after an error or expiry",
            C,
        );
        self.family(&mut encoder, restarts, |m, labels, family| {
            m.watch_restarts.encode(family.encode_family(&labels)?)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn sample<'a>(text: &'a str, prefix: &str) -> &'a str {
        let line = text.lines().find(|l| l.starts_with(prefix));
        line.unwrap_or_else(|| panic!("no {prefix} in\n{text}"))[prefix.len()..].trim()
    }

    fn one(name: &str, extra: Vec<(&'static str, String)>, m: &Arc<Metrics>) -> Series {
        Series {
            controller: name.to_owned(),
            extra,
            metrics: m.clone(),
        }
    }

    fn render(series: Vec<Series>) -> String {
        let mut scrape = Scrape::new();
        scrape.controllers(series);
        scrape.render()
    }

    #[test]
    fn counts_and_cumulative_buckets() {
        let m = Arc::new(Metrics::new());
        m.record_reconcile(Outcome::Success, ms(3)); // 0.005
        m.record_reconcile(Outcome::Success, ms(5)); // 0.005: bounds are inclusive
        m.record_reconcile(Outcome::Requeue, ms(70)); // 0.1
        m.record_reconcile(Outcome::Error, ms(2_000)); // 2.5
        m.record_reconcile(Outcome::Error, Duration::from_secs(90)); // +Inf only
        m.record_retry();
        m.record_retry();
        m.record_watch_restart();
        m.set_queue_depth(7);
        assert_eq!((m.reconciles(), m.errors()), (5, 2));

        let out = render(vec![one("web", Vec::new(), &m)]);
        let c = "{controller=\"web\"";
        let get = |metric: &str| sample(&out, &format!("{metric}{c}")).to_owned();
        let success = sample(
            &out,
            "kite_reconcile_total{controller=\"web\",outcome=\"success\"}",
        );
        assert_eq!(success, "2");
        assert_eq!(get("kite_reconcile_errors_total"), "} 2");
        let bucket = |le: &str| {
            let prefix = format!("kite_reconcile_duration_seconds_bucket{c},le=\"{le}\"}}");
            sample(&out, &prefix).parse::<u64>().unwrap()
        };
        let expected = [
            ("0.005", 2),
            ("0.01", 2),
            ("0.05", 2),
            ("0.1", 3),
            ("1", 3),
            ("2.5", 4),
            ("60", 4),
            ("+Inf", 5),
        ];
        for (le, n) in expected {
            assert_eq!(bucket(le), n, "le={le}\n{out}");
        }
        let buckets = out.lines().filter(|l| l.contains("_bucket{")).count();
        assert_eq!(buckets, BUCKETS.len() + 1);
        assert_eq!(get("kite_reconcile_duration_seconds_count"), "} 5");
        assert_eq!(get("kite_reconcile_duration_seconds_sum"), "} 92.078");
        assert_eq!(get("kite_workqueue_depth"), "} 7");
        assert_eq!(get("kite_workqueue_retries_total"), "} 2");
        assert_eq!(get("kite_watch_restarts_total"), "} 1");
    }

    #[test]
    fn label_values_are_escaped() {
        let m = Arc::new(Metrics::new());
        let extra = vec![("namespace", "x\"y".to_owned()), ("pod", "p".to_owned())];
        let out = render(vec![one("a\"b\\c\nd", extra, &m)]);
        let want = r#"kite_workqueue_depth{controller="a\"b\\c\nd",namespace="x\"y",pod="p"} 0"#;
        assert!(out.lines().any(|l| l == want), "{out}");
        let samples = out.lines().filter(|l| !l.starts_with('#')).count();
        assert_eq!(samples, 3 + 1 + 16 + 3, "{out}");
    }

    #[test]
    fn each_metric_once_with_every_controller_under_it() {
        let (a, b) = (Arc::new(Metrics::new()), Arc::new(Metrics::new()));
        a.record_reconcile(Outcome::Success, ms(1));
        let mut scrape = Scrape::new();
        scrape.gauge(
            "kite_operator_leader",
            "Whether this operator holds the lease",
            1,
        );
        scrape.controllers(vec![one("a", Vec::new(), &a), one("b", Vec::new(), &b)]);
        let out = scrape.render();

        let families = [
            ("kite_operator_leader", "gauge"),
            ("kite_reconcile_total", "counter"),
            ("kite_reconcile_errors_total", "counter"),
            ("kite_reconcile_duration_seconds", "histogram"),
            ("kite_workqueue_depth", "gauge"),
            ("kite_workqueue_retries_total", "counter"),
            ("kite_watch_restarts_total", "counter"),
        ];
        for (name, kind) in families {
            let count = |line: String| out.lines().filter(|l| *l == line).count();
            assert_eq!(count(format!("# TYPE {name} {kind}")), 1, "{out}");
            assert_eq!(out.matches(&format!("# HELP {name} ")).count(), 1, "{out}");
        }
        assert!(out.contains("kite_operator_leader 1\n"), "{out}");
        let a_success = "kite_reconcile_total{controller=\"a\",outcome=\"success\"} 1";
        let b_success = "kite_reconcile_total{controller=\"b\",outcome=\"success\"} 0";
        assert!(out.lines().any(|l| l == a_success), "{out}");
        assert!(out.lines().any(|l| l == b_success), "{out}");
        // Each metric's samples follow its header, never interleaved with another's.
        let names: Vec<&str> = out
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.split(['{', ' ']).next().unwrap_or(l))
            .map(|n| n.trim_end_matches("_bucket").trim_end_matches("_sum"))
            .map(|n| n.trim_end_matches("_count"))
            .collect();
        let mut runs = names.clone();
        runs.dedup();
        assert_eq!(runs.len(), families.len(), "{out}");
    }
}
