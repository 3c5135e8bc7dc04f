//! Per-controller reconcile metrics, rendered in the Prometheus text exposition format.

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// Upper bounds (seconds) of the reconcile duration histogram buckets.
const BUCKETS: [f64; 13] = [
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
];

/// Name, type and help of each metric, in rendering order ([`Metrics::render_family`]
/// matches on the index).
#[rustfmt::skip]
const FAMILIES: [(&str, &str, &str); 6] = [
    ("kite_reconcile_total", "counter", "Reconciliations, by outcome."),
    ("kite_reconcile_errors_total", "counter", "Reconciliations that failed."),
    ("kite_reconcile_duration_seconds", "histogram", "Time spent in reconcile handlers."),
    ("kite_workqueue_depth", "gauge", "Keys waiting in the work queue."),
    ("kite_workqueue_retries_total", "counter", "Keys requeued after an error, with backoff."),
    ("kite_watch_restarts_total", "counter", "Watches restarted after an error or expiry."),
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

    fn label(self) -> &'static str {
        match self {
            Self::Success => "success",
            Self::Requeue => "requeue",
            Self::Error => "error",
        }
    }
}

/// One controller's metrics. Each controller owns one, so several controllers in one
/// process keep separate counts; updates are lock-free.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Indexed like [`Outcome::ALL`].
    outcomes: [AtomicU64; 3],
    /// Non-cumulative counts per bucket; the extra last slot is +Inf. Keeping `_count` as
    /// the sum of the slots (rather than a separate counter) keeps a concurrent render
    /// consistent: the +Inf bucket always equals `_count`.
    buckets: [AtomicU64; BUCKETS.len() + 1],
    duration_sum_nanos: AtomicU64,
    retries: AtomicU64,
    watch_restarts: AtomicU64,
    queue_depth: AtomicU64,
    /// The latest reconcile's end and the latest handler error, for the operator's status.
    latest: std::sync::Mutex<Latest>,
}

/// What the operator shows about a controller's most recent work.
#[derive(Debug, Default, Clone)]
pub struct Latest {
    pub reconcile: Option<std::time::SystemTime>,
    /// The first line of the error, with the script's file:line:col when it has one.
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
        self.outcomes[outcome as usize].fetch_add(1, Relaxed);
        if let Ok(mut l) = self.latest.lock() {
            l.reconcile = Some(std::time::SystemTime::now());
        }
        let secs = duration.as_secs_f64();
        let slot = BUCKETS
            .iter()
            .position(|&le| secs <= le)
            .unwrap_or(BUCKETS.len());
        self.buckets[slot].fetch_add(1, Relaxed);
        let nanos = u64::try_from(duration.as_nanos()).unwrap_or(u64::MAX);
        // Saturating: wrapping would make the sum go backwards (u64 nanos last 584 years).
        let _ = self
            .duration_sum_nanos
            .fetch_update(Relaxed, Relaxed, |sum| Some(sum.saturating_add(nanos)));
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
        self.retries.fetch_add(1, Relaxed);
    }

    /// Counts a watch restarted after an error or expiry.
    pub fn record_watch_restart(&self) {
        self.watch_restarts.fetch_add(1, Relaxed);
    }

    /// Sets the number of keys waiting in the work queue.
    pub fn set_queue_depth(&self, depth: usize) {
        self.queue_depth
            .store(u64::try_from(depth).unwrap_or(u64::MAX), Relaxed);
    }

    /// Reconciliations so far, whatever their outcome.
    #[must_use]
    pub fn reconciles(&self) -> u64 {
        self.outcomes.iter().map(|n| n.load(Relaxed)).sum()
    }

    /// Reconciliations that ended in [`Outcome::Error`].
    #[must_use]
    pub fn errors(&self) -> u64 {
        self.outcomes[Outcome::Error as usize].load(Relaxed)
    }

    /// Appends Prometheus text for this controller with the label `controller="<name>"`
    /// plus `extra_labels` (label values escaped; names must be valid label names and
    /// not `controller`, `outcome` or `le`). No HELP/TYPE lines: see
    /// [`Metrics::render_headers`], or [`Metrics::render_all`] which also keeps each
    /// metric's lines together as the exposition format asks.
    pub fn render(&self, controller: &str, extra_labels: &[(&str, &str)], out: &mut String) {
        let labels = labels(controller, extra_labels);
        for family in 0..FAMILIES.len() {
            self.render_family(family, &labels, out);
        }
    }

    /// HELP/TYPE header lines for every metric: write them once per scrape, before the
    /// [`Metrics::render`] output of each controller.
    pub fn render_headers(out: &mut String) {
        for family in 0..FAMILIES.len() {
            header(family, out);
        }
    }

    /// Renders several controllers as one exposition: each metric's HELP/TYPE lines
    /// once, followed by that metric's samples for every controller.
    pub fn render_all(
        controllers: &[(&str, &Self)],
        extra_labels: &[(&str, &str)],
        out: &mut String,
    ) {
        let labels: Vec<String> = controllers
            .iter()
            .map(|(name, _)| labels(name, extra_labels))
            .collect();
        for family in 0..FAMILIES.len() {
            header(family, out);
            for ((_, metrics), labels) in controllers.iter().zip(&labels) {
                metrics.render_family(family, labels, out);
            }
        }
    }

    /// Writes the samples of `FAMILIES[family]`; `labels` is the escaped label list.
    fn render_family(&self, family: usize, labels: &str, out: &mut String) {
        let name = FAMILIES[family].0;
        // Writing to a String cannot fail: the fmt::Results are ignored.
        let value = match family {
            0 => {
                for outcome in Outcome::ALL {
                    let n = self.outcomes[outcome as usize].load(Relaxed);
                    let label = outcome.label();
                    let _ = writeln!(out, "{name}{{{labels},outcome=\"{label}\"}} {n}");
                }
                return;
            }
            2 => return self.render_histogram(name, labels, out),
            1 => self.errors(),
            3 => self.queue_depth.load(Relaxed),
            4 => self.retries.load(Relaxed),
            _ => self.watch_restarts.load(Relaxed),
        };
        let _ = writeln!(out, "{name}{{{labels}}} {value}");
    }

    fn render_histogram(&self, name: &str, labels: &str, out: &mut String) {
        let mut cumulative = 0;
        for (slot, count) in self.buckets.iter().enumerate() {
            cumulative += count.load(Relaxed);
            let le = BUCKETS
                .get(slot)
                .map_or_else(|| "+Inf".to_owned(), f64::to_string);
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{le}\"}} {cumulative}");
        }
        // u64 nanoseconds to f64 seconds: exact below 2^53 ns (104 days), close beyond.
        #[allow(clippy::cast_precision_loss)]
        let sum = self.duration_sum_nanos.load(Relaxed) as f64 / 1e9;
        let _ = writeln!(out, "{name}_sum{{{labels}}} {sum}");
        let _ = writeln!(out, "{name}_count{{{labels}}} {cumulative}");
    }
}

fn header(family: usize, out: &mut String) {
    let (name, kind, help) = FAMILIES[family];
    let _ = write!(out, "# HELP {name} {help}\n# TYPE {name} {kind}\n");
}

/// `controller="<name>",k="v",...` with values escaped.
fn labels(controller: &str, extra: &[(&str, &str)]) -> String {
    let mut out = String::from("controller=\"");
    escape_into(controller, &mut out);
    out.push('"');
    for (name, value) in extra {
        out.push(',');
        out.push_str(name);
        out.push_str("=\"");
        escape_into(value, &mut out);
        out.push('"');
    }
    out
}

/// Label-value escaping per the text exposition format: `\`, `"` and newline.
fn escape_into(value: &str, out: &mut String) {
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
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

    #[test]
    fn counts_and_cumulative_buckets() {
        let m = Metrics::new();
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

        let mut out = String::new();
        m.render("web", &[], &mut out);
        let c = "{controller=\"web\"";
        let get = |metric: &str| sample(&out, &format!("{metric}{c}")).to_owned();
        assert_eq!(
            get("kite_reconcile_total").as_str(),
            ",outcome=\"success\"} 2"
        );
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
        assert!(!out.contains('#'), "render writes no headers:\n{out}");
    }

    #[test]
    fn label_values_are_escaped() {
        let mut out = String::new();
        let m = Metrics::new();
        m.render(
            "a\"b\\c\nd",
            &[("namespace", "x\"y"), ("pod", "p")],
            &mut out,
        );
        let want = r#"kite_workqueue_depth{controller="a\"b\\c\nd",namespace="x\"y",pod="p"} 0"#;
        assert!(out.lines().any(|l| l == want), "{out}");
        assert_eq!(out.lines().count(), 3 + 1 + 16 + 3);
        assert!(out.lines().all(|l| l.ends_with(char::is_numeric)), "{out}");
    }

    #[test]
    fn headers_once_for_several_controllers() {
        let (a, b) = (Metrics::new(), Metrics::new());
        a.record_reconcile(Outcome::Success, ms(1));
        let mut separate = String::new();
        Metrics::render_headers(&mut separate);
        a.render("a", &[], &mut separate);
        b.render("b", &[], &mut separate);
        let mut grouped = String::new();
        Metrics::render_all(&[("a", &a), ("b", &b)], &[], &mut grouped);

        for out in [&separate, &grouped] {
            for (name, kind, _) in FAMILIES {
                let count = |line: String| out.lines().filter(|l| *l == line).count();
                assert_eq!(count(format!("# TYPE {name} {kind}")), 1, "{out}");
                assert_eq!(out.matches(&format!("# HELP {name} ")).count(), 1, "{out}");
            }
            let a_success = "kite_reconcile_total{controller=\"a\",outcome=\"success\"} 1";
            let b_success = "kite_reconcile_total{controller=\"b\",outcome=\"success\"} 0";
            assert!(out.lines().any(|l| l == a_success), "{out}");
            assert!(out.lines().any(|l| l == b_success), "{out}");
        }
        // render_all keeps each metric's samples right after its header.
        let families: Vec<&str> = grouped
            .lines()
            .filter(|l| !l.starts_with('#'))
            .map(|l| l.split(['{', ' ']).next().unwrap_or(l))
            .map(|n| n.trim_end_matches("_bucket").trim_end_matches("_sum"))
            .map(|n| n.trim_end_matches("_count"))
            .collect();
        let mut deduped = families.clone();
        deduped.dedup();
        assert_eq!(deduped.len(), FAMILIES.len(), "{grouped}");
        assert_eq!(separate.len(), grouped.len());
    }
}
