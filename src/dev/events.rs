//! `kite dev`'s logging: the workers' "reconciled" events become reconcile lines on
//! stdout; every other log line goes to stderr as under `kite run`.

use std::fmt;
use std::sync::Arc;

use tracing::field::{Field, Visit};
use tracing::{Event, Metadata, Subscriber};
use tracing_subscriber::filter::{EnvFilter, FilterExt, filter_fn};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::util::SubscriberInitExt;

use super::printer::{Printer, Reconcile};

/// A worker's record of one finished reconcile: logged from `control::worker` with an
/// `outcome` field.
pub fn is_reconcile(meta: &Metadata<'_>) -> bool {
    meta.is_event()
        && meta.target().ends_with("control::worker")
        && meta.fields().field("outcome").is_some()
        && meta.fields().field("key").is_some()
}

/// Installs the process's log subscriber: stderr for log lines (`KITE_LOG`, or the
/// level from `-v`), the printer for reconcile records.
///
/// # Errors
/// A subscriber was installed already.
pub fn install(
    printer: Arc<Printer>,
    json: bool,
    verbose: u8,
) -> Result<(), tracing_subscriber::util::TryInitError> {
    use std::io::IsTerminal;
    let level = match verbose {
        0 => "info",
        1 => "debug",
        _ => "trace",
    };
    let env = EnvFilter::try_from_env("KITE_LOG").unwrap_or_else(|_| EnvFilter::new(level));
    let stderr = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    let stderr = if json {
        stderr.json().boxed()
    } else {
        stderr.boxed()
    };
    let not_reconcile = filter_fn(|meta| !is_reconcile(meta));
    tracing_subscriber::registry()
        .with(stderr.with_filter(env.and(not_reconcile)))
        .with(Reconciles(printer).with_filter(filter_fn(is_reconcile)))
        .try_init()
}

/// The layer that prints reconcile records.
struct Reconciles(Arc<Printer>);

impl<S: Subscriber> Layer<S> for Reconciles {
    fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        self.0.reconciled(&fields.into_reconcile());
    }
}

/// The fields of a reconcile record, as text.
#[derive(Default)]
struct Fields {
    reconcile: Reconcile,
    error: String,
    retry_in: String,
    requeue_after: String,
    failures: String,
}

impl Fields {
    fn into_reconcile(self) -> Reconcile {
        let mut r = self.reconcile;
        let mut detail = Vec::new();
        if !self.requeue_after.is_empty() {
            detail.push(format!("after {}", self.requeue_after));
        }
        if !self.failures.is_empty() && r.outcome == "dropped" {
            detail.push(format!("gave up after {} failures", self.failures));
        }
        if !self.retry_in.is_empty() {
            detail.push(format!("retry in {}", self.retry_in));
        }
        if !self.error.is_empty() {
            detail.push(self.error);
        }
        r.detail = detail.join(": ");
        r
    }

    fn set(&mut self, field: &Field, value: String) {
        match field.name() {
            "key" => self.reconcile.key = value,
            "trigger" => self.reconcile.trigger = value,
            "outcome" => self.reconcile.outcome = value,
            "duration_ms" => self.reconcile.duration_ms = value.parse().unwrap_or_default(),
            "error" => self.error = value,
            "retry_in" => self.retry_in = value,
            "requeue_after" => self.requeue_after = value,
            "failures" => self.failures = value,
            _ => {}
        }
    }
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.set(field, value.to_owned());
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.set(field, value.to_string());
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.set(field, value.to_string());
    }

    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        // `%value` fields arrive here and print as Display.
        self.set(field, format!("{value:?}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Collects what the reconcile layer would print.
    struct Collect(Arc<Mutex<Vec<Reconcile>>>);

    impl<S: Subscriber> Layer<S> for Collect {
        fn on_event(&self, event: &Event<'_>, _ctx: Context<'_, S>) {
            let mut fields = Fields::default();
            event.record(&mut fields);
            self.0.lock().unwrap().push(fields.into_reconcile());
        }
    }

    #[test]
    fn reconcile_records_are_read_from_their_fields() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let subscriber = tracing_subscriber::registry().with(
            Collect(seen.clone()).with_filter(filter_fn(|m| m.fields().field("outcome").is_some())),
        );
        tracing::subscriber::with_default(subscriber, || {
            let key = "ns/a".to_owned();
            tracing::info!(controller = "c", key = %key, trigger = "create", duration_ms = 7_u64, outcome = "success", requeue_after = "", "reconciled");
            tracing::warn!(key = %key, trigger = "update", duration_ms = 3_u64, outcome = "error", retry_in = %"5s", failures = 2_u32, error = %"boom", "reconciled");
            tracing::info!("something else");
        });
        let seen = seen.lock().unwrap();
        assert_eq!(
            seen[0],
            Reconcile {
                key: "ns/a".into(),
                trigger: "create".into(),
                duration_ms: 7,
                outcome: "success".into(),
                detail: String::new(),
            }
        );
        assert_eq!(seen[1].detail, "retry in 5s: boom");
        assert_eq!(seen.len(), 2);
    }
}
