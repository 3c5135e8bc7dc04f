//! The work of one key on a pool thread: `reconcile` delivers its pending events and
//! runs the level-triggered reconcile or the finalizer, then the key is requeued
//! according to the outcome, with backoff on failure.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value as Json;

use super::handlers::{self, Arg, Error, Outcome, WriteError};
use super::informer::Key;
use super::metrics::Outcome as Recorded;
use super::reconcile::{deliver, owns_ready, reconcile, set_ready};
use super::shared::{EventItem, Pending, Shared, WorkKey};
use crate::control::children::condition::Ready;

/// A controller's queue as work for a [`Pool`](super::pool::Pool): a job per ready key,
/// none while this replica does not lead (a standby keeps its cache warm only).
pub(super) struct QueueSource {
    pub shared: Arc<Shared>,
    pub runtime: tokio::runtime::Handle,
}

impl super::pool::Source for QueueSource {
    fn take(&self) -> Option<Box<dyn FnOnce() + Send>> {
        if !self.shared.is_leading() {
            return None;
        }
        let item = self.shared.queue.try_get()?;
        let (shared, runtime) = (self.shared.clone(), self.runtime.clone());
        Some(Box::new(move || work(&shared, &runtime, item)))
    }

    fn next_due_in(&self) -> Option<Duration> {
        // A standby takes nothing, so its due keys must not keep the pool awake.
        if !self.shared.is_leading() {
            return None;
        }
        self.shared.queue.next_work_in()
    }

    fn held(&self, why: super::pool::Held) {
        tracing::error!(controller = %self.shared.name, "{why}");
        self.shared.metrics.record_error(why.to_string());
        // It runs nothing more: what it would run is not kept either.
        self.shared.queue.shut_down();
        self.shared
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clear();
        self.shared
            .held
            .store(0, std::sync::atomic::Ordering::Relaxed);
    }
}

/// Processes one key on a pool thread. Blocking here is fine: it is a plain thread.
fn work(shared: &Arc<Shared>, runtime: &tokio::runtime::Handle, item: WorkKey) {
    // A panic (a bug in kite, never a script error) must not take the thread and the
    // key with it: it is logged and counted, and the key retried with backoff.
    let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match &item {
        WorkKey::Primary(key) => {
            process(shared, runtime, &item, key);
        }
        WorkKey::Related(i, key) => map_related(shared, *i, key),
    }));
    if let Err(panic) = outcome {
        let what = panic
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic".to_owned());
        tracing::error!(controller = %shared.name, item = ?item, "worker panicked: {what}");
        shared
            .metrics
            .record_error(format!("internal error (panic): {what}"));
        shared.queue.done(&item);
        shared.queue.add_rate_limited(item);
        return;
    }
    shared.queue.done(&item);
}

/// Runs a `watch_related` map function and requeues the primaries it names. Its errors
/// are logged and stop nothing.
pub(super) fn map_related(shared: &Shared, index: usize, key: &Key) {
    let obj = shared
        .related
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .remove(&(index, key.clone()));
    let (Some(obj), Some(f)) = (obj, shared.handlers.related.get(index)) else {
        return;
    };
    let kind = shared
        .spec
        .watch_related
        .get(index)
        .cloned()
        .unwrap_or_default();
    match handlers::call(
        &shared.host,
        f,
        &[Arg::Obj(&obj)],
        shared.budget,
        &shared.cancel(),
        handlers::decode_refs,
    ) {
        Ok(refs) => {
            let mut outside = (0, None);
            let (mut invalid, beyond) = (0, refs.len().saturating_sub(MAX_RELATED));
            for (ns, name) in refs.into_iter().take(MAX_RELATED) {
                let namespace = if shared.target.resource.namespaced {
                    ns.unwrap_or_else(|| key.namespace.clone())
                } else {
                    String::new()
                };
                if !object_name(&name) || !(namespace.is_empty() || object_name(&namespace)) {
                    invalid += 1;
                    continue;
                }
                // A controller confined to a namespace reconciles nothing outside it.
                if let Some(own) = shared.spec.namespace.as_deref()
                    && own != "*"
                    && shared.target.resource.namespaced
                    && namespace != own
                {
                    outside.0 += 1;
                    outside.1.get_or_insert(format!("{namespace}/{name}"));
                    continue;
                }
                let primary = Key { namespace, name };
                tracing::debug!(controller = %shared.name, related = %key, primary = %primary, "related change");
                shared
                    .pending
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .entry(primary.clone())
                    .or_default()
                    .reconcile
                    .get_or_insert("related");
                shared.queue.add(WorkKey::Primary(primary));
            }
            if invalid + beyond > 0 {
                tracing::warn!(controller = %shared.name, kind, related = %key, invalid, beyond, "watch_related map_func returned names that are not object names, or more than {MAX_RELATED}; ignored");
            }
            if let (n, Some(first)) = outside {
                // One line per call, and the names are the script's: escaped and cut
                // like its prints.
                let first = shared.host.printer.contain(&first);
                let own = shared.spec.namespace.as_deref().unwrap_or_default();
                tracing::warn!(controller = %shared.name, kind, related = %key, "watch_related map_func named {n} objects outside the controller's namespace {own} (first {first}); ignored");
            }
        }
        Err(e) => {
            let e = shared.host.printer.contain(&e.to_string());
            tracing::warn!(controller = %shared.name, kind, key = %key, "watch_related map_func failed:\n{e}");
        }
    }
}

/// The most primaries one `watch_related` call may name.
const MAX_RELATED: usize = 1000;

/// Whether `name` can name an object: not empty, at most 253 characters, with no `/`,
/// `%`, whitespace or control character (what any resource's names allow at most).
fn object_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && !name
            .chars()
            .any(|c| c == '/' || c == '%' || c.is_whitespace() || c.is_control())
}

/// What processing one key did, for whoever drives the queue by hand (`k8s.testing`).
#[derive(Debug, Clone)]
pub(super) struct Processed {
    pub trigger: &'static str,
    pub requeue_after: Option<Duration>,
    /// The handler's or a write's error, and when the key is retried (`None`: given up).
    pub error: Option<(String, Option<Duration>)>,
    pub elapsed: Duration,
}

/// Delivers the key's pending events and runs its reconcile; `None` when there was
/// nothing to do (only our own echoes).
pub(super) fn process(
    shared: &Shared,
    runtime: &tokio::runtime::Handle,
    item: &WorkKey,
    key: &Key,
) -> Option<Processed> {
    let pending = {
        let mut map = shared
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // No entry means a delayed requeue or a retry came due.
        map.remove(key).map_or(
            Pending {
                reconcile: Some("requeue"),
                ..Default::default()
            },
            |p| shared.release(p),
        )
    };
    // Judge every update (each echo is consumed from the write log), then decide.
    let outside_updates = pending
        .updates
        .iter()
        .filter(|(old, new)| {
            let echo = shared.writes.is_echo(new);
            // Says why a reconcile ran (or did not), for chasing hot loops with -v.
            let meta = |o: &Json, f: &str| o["metadata"][f].to_string();
            tracing::debug!(key = %key, echo, from_rv = meta(old, "resourceVersion"), to_rv = meta(new, "resourceVersion"),
                from_generation = meta(old, "generation"), to_generation = meta(new, "generation"), "update seen");
            !echo
        })
        .count();
    let level = pending
        .reconcile
        .or((outside_updates > 0).then_some("update"));
    if pending.events.is_empty() && level.is_none() {
        return None;
    }
    let start = Instant::now();
    // Only a controller with a journal names its writes (nothing is noted otherwise).
    if shared.host.printer.journal().is_some() {
        crate::k8s::write_log::noting();
    }
    let trigger = level.unwrap_or("event");
    let mut result: Result<Option<Outcome>, Error> = Ok(None);
    let mut events = pending.events;
    while let Some(event) = events.pop_front() {
        if let Err(e) = deliver(shared, event.clone()) {
            // The failed event and those after it go back to the front of the key's
            // list, before anything that arrived meanwhile, and the retry delivers them
            // (and runs the reconcile that was due) in order.
            events.push_front(event);
            redeliver(shared, key, events, level);
            result = Err(e);
            break;
        }
    }
    if result.is_ok()
        && level.is_some()
        && let Some(obj) = shared.store.get(key)
    {
        result = reconcile(shared, runtime, key, &obj).map(Some);
    }
    let elapsed = start.elapsed();
    let wrote = wrote(crate::k8s::write_log::noted());
    match result {
        Ok(outcome) => Some(succeeded(
            shared,
            item,
            key,
            outcome,
            (trigger, &wrote),
            elapsed,
        )),
        Err(e) => {
            if let Some(obj) = shared.store.get(key)
                && owns_ready(shared, key, &obj)
            {
                set_ready(
                    shared,
                    runtime,
                    &obj,
                    &Ready::error(first_line(&e.to_string())),
                );
            }
            let retry = failed(shared, runtime, item, key, (trigger, &wrote), elapsed, &e);
            Some(Processed {
                trigger,
                requeue_after: None,
                error: Some((e.to_string(), retry)),
                elapsed,
            })
        }
    }
}

/// Runs one of the reconcile's own writes (finalizer, children, Ready) unless this
/// leadership term has ended or a lease has run out, and cuts it short if that
/// happens meanwhile: after losing the lease, nothing more is sent.
pub(super) fn guarded<T, E: Into<WriteError>>(
    shared: &Shared,
    runtime: &tokio::runtime::Handle,
    fut: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, WriteError> {
    let budget = crate::script::budget::Budget {
        // The write's own timeout bounds it; this budget only carries the cancel.
        deadline: std::time::Instant::now() + Duration::from_hours(1),
        stop: Some(shared.cancel()),
    };
    match crate::script::budget::scope(budget, || crate::script::budget::block_on(runtime, fut)) {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(e.into()),
        Err(stopped) => Err(stopped.into()),
    }
}

/// Puts undelivered `events` (and the reconcile `level`, if one was due) back at the
/// front of `key`'s pending work, ahead of what arrived since.
pub(super) fn redeliver(
    shared: &Shared,
    key: &Key,
    mut events: std::collections::VecDeque<EventItem>,
    level: Option<&'static str>,
) {
    let mut map = shared
        .pending
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let entry = map.entry(key.clone()).or_default();
    let bytes: usize = events.iter().map(EventItem::size).sum();
    entry.bytes += bytes;
    shared
        .held
        .fetch_add(bytes, std::sync::atomic::Ordering::Relaxed);
    events.append(&mut entry.events);
    entry.events = events;
    if entry.reconcile.is_none() {
        entry.reconcile = level;
    }
}

/// A requeue no sooner than the host's floor; a shorter one is raised to it and said in
/// the controller's last error, where `kubectl get` shows it.
fn at_least_floor(shared: &Shared, key: &Key, asked: Duration) -> Duration {
    let limits = &shared.host.limits;
    if asked >= limits.min_period {
        return asked;
    }
    let at = shared
        .handlers
        .reconcile_position()
        .map(|p| format!("{p}: "))
        .unwrap_or_default();
    let message = format!(
        "{at}reconcile of {key} asked to requeue after {}, below {} floor; requeued after {}",
        crate::duration::format(asked),
        limits.source,
        crate::duration::format(limits.min_period)
    );
    tracing::warn!(controller = %shared.name, "{message}");
    shared.metrics.record_error(message);
    limits.min_period
}

/// Records a reconcile that succeeded, and requeues its key when it asked to be.
fn succeeded(
    shared: &Shared,
    item: &WorkKey,
    key: &Key,
    outcome: Option<Outcome>,
    (trigger, wrote): (&'static str, &str),
    elapsed: Duration,
) -> Processed {
    shared.queue.forget(item);
    let requeue = match outcome {
        Some(Outcome::RequeueAfter(d)) => {
            let d = at_least_floor(shared, key, d);
            shared.queue.add_after(item.clone(), d);
            Some(d)
        }
        _ => None,
    };
    let recorded = if requeue.is_some() {
        Recorded::Requeue
    } else {
        Recorded::Success
    };
    shared.metrics.record_recent(super::metrics::Recent {
        at: std::time::SystemTime::now(),
        key: key.to_string(),
        trigger: trigger.to_owned(),
        duration: elapsed,
        outcome: recorded,
        error: None,
    });
    shared.metrics.record_reconcile(recorded, elapsed);
    journal(shared, || {
        let then = requeue.map_or_else(String::new, |d| {
            format!(", again in {}", crate::duration::format(d))
        });
        format!(
            "reconciled {key} ({trigger}) in {}ms{wrote}{then}",
            crate::duration::millis(elapsed)
        )
    });
    tracing::info!(
        controller = %shared.name, key = %key, trigger, duration_ms = crate::duration::millis(elapsed),
        outcome = if requeue.is_some() { "requeue" } else { "success" },
        requeue_after = requeue.map(crate::duration::format).unwrap_or_default(),
        "reconciled"
    );
    Processed {
        trigger,
        requeue_after: requeue,
        error: None,
        elapsed,
    }
}

/// ", wrote Kind ns/name, ..." for a journal line (empty when nothing was written).
fn wrote((names, count): (Vec<String>, usize)) -> String {
    if count == 0 {
        return String::new();
    }
    let more = count - names.len();
    let more = if more > 0 {
        format!(" and {more} more")
    } else {
        String::new()
    };
    format!(", wrote {}{more}", names.join(", "))
}

/// Adds `text` to the controller's journal, if it keeps one (hosted controllers).
fn journal(shared: &Shared, text: impl FnOnce() -> String) {
    if let Some(journal) = shared.host.printer.journal() {
        journal.push(text().trim_end());
    }
}

fn failed(
    shared: &Shared,
    runtime: &tokio::runtime::Handle,
    item: &WorkKey,
    key: &Key,
    (trigger, wrote): (&str, &str),
    elapsed: Duration,
    e: &Error,
) -> Option<Duration> {
    shared.metrics.record_reconcile(Recorded::Error, elapsed);
    let summary = crate::script::run::summary(&e.to_string());
    shared.metrics.record_recent(super::metrics::Recent {
        at: std::time::SystemTime::now(),
        key: key.to_string(),
        trigger: trigger.to_owned(),
        duration: elapsed,
        outcome: Recorded::Error,
        error: Some(summary.clone()),
    });
    shared.metrics.record_error(summary);
    journal(shared, || {
        format!(
            "reconcile of {key} ({trigger}) failed after {}ms{wrote}: {e}",
            crate::duration::millis(elapsed)
        )
    });
    let failures = shared.queue.failures(item) + 1;
    if failures > shared.spec.max_retries {
        shared.queue.forget(item);
        let undelivered = shared
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(key)
            .map_or(0, |p| shared.release(p).events.len());
        if undelivered > 0 {
            tracing::error!(controller = %shared.name, key = %key, undelivered, "giving up on {undelivered} undelivered events");
        }
        tracing::error!(
            controller = %shared.name, key = %key, trigger, duration_ms = crate::duration::millis(elapsed),
            outcome = "dropped", failures, error = %shared.host.printer.contain(&first_line(&e.to_string())),
            "reconciled; failed {failures} times, giving up until the object changes"
        );
        traceback(shared, key, e);
        if let Some(obj) = shared.store.get(key) {
            let message = format!(
                "reconcile failed {failures} times; last error: {}",
                first_line(&e.to_string())
            );
            warn_event(shared, runtime, &obj, "ReconcileFailed", &message);
        }
        return None;
    }
    let delay = shared.queue.add_rate_limited(item.clone());
    shared.metrics.record_retry();
    tracing::warn!(
        controller = %shared.name, key = %key, trigger, duration_ms = crate::duration::millis(elapsed),
        outcome = "error", retry_in = %crate::duration::format(delay), failures,
        error = %shared.host.printer.contain(&first_line(&e.to_string())), "reconciled"
    );
    traceback(shared, key, e);
    Some(delay)
}

/// The full error, traceback included, after the one-line reconcile record.
fn traceback(shared: &Shared, key: &Key, e: &Error) {
    // A hosted script's error text is its own: one line, escaped and cut (see
    // `Printer::contain`), so that it cannot forge or flood the operator's log.
    let e = shared.host.printer.contain(&e.to_string());
    tracing::warn!(controller = %shared.name, key = %key, "handler error for {key}:\n{e}");
}

pub(super) fn first_line(s: &str) -> String {
    // The rendered error starts with a traceback; the "error:" line says what went wrong.
    s.lines()
        .find(|l| l.starts_with("error:"))
        .or_else(|| s.lines().next())
        .unwrap_or_default()
        .trim_start_matches("error: ")
        .chars()
        .take(900)
        .collect()
}

/// Records an event on `obj`; failures to record are only logged.
pub(super) fn record_event(
    shared: &Shared,
    runtime: &tokio::runtime::Handle,
    obj: &Json,
    type_: &str,
    reason: &str,
    message: &str,
) {
    let spec = crate::k8s::event::EventSpec {
        reason,
        message,
        type_,
        namespace: None,
    };
    let fut = crate::k8s::event::record(&shared.session, obj, &spec);
    if let Err(e) = guarded(
        shared,
        runtime,
        crate::k8s::ops::with_timeout(Duration::from_secs(10), fut),
    ) {
        tracing::warn!(controller = %shared.name, reason, "could not record the event: {e}");
    }
}

pub(super) fn warn_event(
    shared: &Shared,
    runtime: &tokio::runtime::Handle,
    obj: &Json,
    reason: &str,
    message: &str,
) {
    record_event(shared, runtime, obj, "Warning", reason, message);
}

#[cfg(test)]
mod tests {
    /// Issue 26: names a `watch_related` function returns are object names, or
    /// ignored: nothing that could forge a log line or carry megabytes.
    #[test]
    fn only_object_names_are_queued() {
        for ok in [
            "web",
            "web-1.example",
            "a",
            &"x".repeat(253),
            "system:node:x",
        ] {
            assert!(super::object_name(ok), "{ok}");
        }
        for bad in [
            "",
            "a/b",
            "a%2f",
            "x\n2026 INFO forged",
            "a b",
            &"x".repeat(254),
        ] {
            assert!(!super::object_name(bad), "{bad:?}");
        }
    }
}
