//! One worker thread: takes a key from the queue, delivers its pending events in order,
//! runs the level-triggered reconcile, and requeues according to the outcome.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value as Json;

use super::controller::{EventItem, Pending, Shared};
use super::handlers::{self, Arg, Error, Outcome};
use super::informer::Key;
use super::metrics::Outcome as Recorded;

/// Runs until the queue shuts down. Blocking here is fine: this is a plain thread.
pub(super) fn run(shared: &Arc<Shared>, runtime: &tokio::runtime::Handle) {
    loop {
        if shared.leader_election {
            // A standby keeps its cache warm but does not reconcile.
            let mut leading = shared.leading.clone();
            let got = runtime.block_on(async {
                tokio::time::timeout(Duration::from_millis(500), leading.wait_for(|l| *l)).await
            });
            if !matches!(got, Ok(Ok(_))) {
                if shared.queue.is_shut_down() {
                    return;
                }
                continue;
            }
        }
        let Some(key) = shared.queue.get() else {
            return;
        };
        if !shared.leading_now() {
            // Leadership was lost while waiting: hand the key back for the next leader.
            shared.queue.done(&key);
            shared.queue.add(key);
            continue;
        }
        process(shared, runtime, &key);
        shared.queue.done(&key);
    }
}

fn process(shared: &Shared, runtime: &tokio::runtime::Handle, key: &Key) {
    let pending = {
        let mut map = shared.pending.lock().unwrap_or_else(|p| p.into_inner());
        // No entry means a delayed requeue or a retry came due.
        map.remove(key).unwrap_or(Pending {
            reconcile: Some("requeue"),
            ..Default::default()
        })
    };
    // Judge every update (each echo is consumed from the write log), then decide.
    let outside_updates = pending
        .updates
        .iter()
        .filter(|(old, new)| {
            let echo = shared.host.writes.is_echo(new);
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
        return;
    }
    let start = Instant::now();
    let trigger = level.unwrap_or("event");
    let mut result: Result<Option<Outcome>, Error> = Ok(None);
    for event in pending.events {
        if let Err(e) = deliver(shared, event) {
            result = Err(e);
            break;
        }
    }
    if result.is_ok()
        && level.is_some()
        && let Some(obj) = shared.store.get(key)
    {
        result = reconcile(shared, &obj, trigger).map(Some);
    }
    let elapsed = start.elapsed();
    match result {
        Ok(outcome) => {
            shared.queue.forget(key);
            let requeue = match outcome {
                Some(Outcome::RequeueAfter(d)) => {
                    shared.queue.add_after(key.clone(), d);
                    Some(d)
                }
                _ => None,
            };
            shared.metrics.record_reconcile(
                if requeue.is_some() {
                    Recorded::Requeue
                } else {
                    Recorded::Success
                },
                elapsed,
            );
            tracing::info!(
                controller = %shared.name, key = %key, trigger, duration_ms = elapsed.as_millis() as u64,
                outcome = if requeue.is_some() { "requeue" } else { "success" },
                requeue_after = requeue.map(crate::duration::format).unwrap_or_default(),
                "reconciled"
            );
        }
        Err(e) => failed(shared, runtime, key, trigger, elapsed, &e),
    }
}

fn failed(
    shared: &Shared,
    runtime: &tokio::runtime::Handle,
    key: &Key,
    trigger: &str,
    elapsed: Duration,
    e: &Error,
) {
    shared.metrics.record_reconcile(Recorded::Error, elapsed);
    let failures = shared.queue.failures(key) + 1;
    if failures > shared.spec.max_retries {
        shared.queue.forget(key);
        tracing::error!(
            controller = %shared.name, key = %key, trigger, duration_ms = elapsed.as_millis() as u64,
            outcome = "dropped", failures, error = %first_line(&e.to_string()),
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
        return;
    }
    let delay = shared.queue.add_rate_limited(key.clone());
    shared.metrics.record_retry();
    tracing::warn!(
        controller = %shared.name, key = %key, trigger, duration_ms = elapsed.as_millis() as u64,
        outcome = "error", retry_in = %crate::duration::format(delay), failures,
        error = %first_line(&e.to_string()), "reconciled"
    );
    traceback(shared, key, e);
}

/// The full error, traceback included, after the one-line reconcile record.
fn traceback(shared: &Shared, key: &Key, e: &Error) {
    tracing::warn!(controller = %shared.name, key = %key, "handler error for {key}:\n{e}");
}

fn first_line(s: &str) -> String {
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

/// Records a Warning event on `obj`; failures to record are only logged.
pub(super) fn warn_event(
    shared: &Shared,
    runtime: &tokio::runtime::Handle,
    obj: &Json,
    reason: &str,
    message: &str,
) {
    let spec = crate::k8s::event::EventSpec {
        reason,
        message,
        type_: "Warning",
        namespace: None,
    };
    let fut = crate::k8s::event::record(&shared.session, obj, &spec);
    match runtime.block_on(crate::k8s::ops::with_timeout(Duration::from_secs(10), fut)) {
        Ok(_) => {}
        Err(e) => {
            tracing::warn!(controller = %shared.name, reason, "could not record the event: {e}")
        }
    }
}

fn call(
    shared: &Shared,
    f: &starlark::values::OwnedFrozenValue,
    args: &[Arg],
) -> Result<Outcome, Error> {
    handlers::call(
        &shared.host,
        f,
        args,
        shared.budget,
        &shared.stop,
        handlers::decode_outcome,
    )
}

/// Delivers one watch event to the event-form handlers.
fn deliver(shared: &Shared, event: EventItem) -> Result<(), Error> {
    let h = &shared.handlers;
    let two_arg = if shared.spec.reconcile_arity == Some(2) {
        h.reconcile.as_ref()
    } else {
        None
    };
    let (name, obj, hook, hook_args): (&str, &Arc<Json>, _, Vec<&Arc<Json>>) = match &event {
        EventItem::Added(o) => ("ADDED", o, h.on_create.as_ref(), vec![o]),
        EventItem::Modified(old, new) => ("MODIFIED", new, h.on_update.as_ref(), vec![old, new]),
        EventItem::Deleted(o) => ("DELETED", o, h.on_delete.as_ref(), vec![o]),
    };
    if let Some(f) = two_arg {
        call(shared, f, &[Arg::Str(name), Arg::Obj(obj)])?;
    }
    if let Some(f) = hook {
        let args: Vec<Arg> = hook_args.into_iter().map(|o| Arg::Obj(o)).collect();
        call(shared, f, &args)?;
    }
    Ok(())
}

/// The level-triggered reconcile of an existing object.
fn reconcile(shared: &Shared, obj: &Arc<Json>, trigger: &str) -> Result<Outcome, Error> {
    let h = &shared.handlers;
    if let Some(p) = &h.predicate {
        let keep = handlers::call(
            &shared.host,
            p,
            &[Arg::Obj(obj)],
            shared.budget,
            &shared.stop,
            handlers::decode_bool,
        )?;
        if !keep {
            return Ok(Outcome::Done);
        }
    }
    let Some(f) = &h.reconcile else {
        return Ok(Outcome::Done);
    };
    let outcome = if shared.spec.reconcile_arity == Some(2) {
        // Poll, resync and requeue reach the two-argument form as MODIFIED, as client-go's resync does.
        let _ = trigger;
        call(shared, f, &[Arg::Str("MODIFIED"), Arg::Obj(obj)])?
    } else {
        call(shared, f, &[Arg::Obj(obj)])?
    };
    match outcome {
        Outcome::Children(_) => Err(Error::BadReturn(
            "returning child objects needs the operator-pattern support, which this build lacks"
                .into(),
        )),
        other => Ok(other),
    }
}
