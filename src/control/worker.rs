//! One worker thread: takes a key from the queue, delivers its pending events in order,
//! runs the level-triggered reconcile (with finalizers and children), and requeues
//! according to the outcome.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value as Json;

use super::controller::{EventItem, Pending, Shared, WorkKey};
use super::finalizer;
use super::handlers::{self, Arg, Error, Outcome};
use super::informer::Key;
use super::metrics::Outcome as Recorded;
use crate::children::{self, condition::Ready};

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
        let Some(item) = shared.queue.get() else {
            return;
        };
        if !shared.is_leading() {
            // Leadership was lost while waiting: hand the key back for the next leader.
            shared.queue.done(&item);
            shared.queue.add(item);
            continue;
        }
        // A panic (a bug in kite, never a script error) must not take the worker and
        // its key with it: it is logged and counted, and the key retried with backoff.
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match &item {
            WorkKey::Primary(key) => process(shared, runtime, &item, key),
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
            continue;
        }
        shared.queue.done(&item);
    }
}

/// Runs a `watch_related` map function and requeues the primaries it names. Its errors
/// are logged and stop nothing.
fn map_related(shared: &Shared, index: usize, key: &Key) {
    let obj = shared
        .related
        .lock()
        .unwrap_or_else(|p| p.into_inner())
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
        &shared.stop,
        handlers::decode_refs,
    ) {
        Ok(refs) => {
            for (ns, name) in refs {
                let namespace = if shared.target.resource.namespaced {
                    ns.unwrap_or_else(|| key.namespace.clone())
                } else {
                    String::new()
                };
                let primary = Key { namespace, name };
                tracing::debug!(controller = %shared.name, related = %key, primary = %primary, "related change");
                shared
                    .pending
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .entry(primary.clone())
                    .or_default()
                    .reconcile
                    .get_or_insert("related");
                shared.queue.add(WorkKey::Primary(primary));
            }
        }
        Err(e) => {
            tracing::warn!(controller = %shared.name, kind, key = %key, "watch_related map_func failed:\n{e}")
        }
    }
}

fn process(shared: &Shared, runtime: &tokio::runtime::Handle, item: &WorkKey, key: &Key) {
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
        result = reconcile(shared, runtime, key, &obj).map(Some);
    }
    let elapsed = start.elapsed();
    match result {
        Ok(outcome) => {
            shared.queue.forget(item);
            let requeue = match outcome {
                Some(Outcome::RequeueAfter(d)) => {
                    let d = at_least_floor(shared, key, d);
                    shared.queue.add_after(item.clone(), d);
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
            failed(shared, runtime, item, key, trigger, elapsed, &e)
        }
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

#[allow(clippy::too_many_arguments)]
fn failed(
    shared: &Shared,
    runtime: &tokio::runtime::Handle,
    item: &WorkKey,
    key: &Key,
    trigger: &str,
    elapsed: Duration,
    e: &Error,
) {
    shared.metrics.record_reconcile(Recorded::Error, elapsed);
    shared
        .metrics
        .record_error(crate::script::run::summary(&e.to_string()));
    let failures = shared.queue.failures(item) + 1;
    if failures > shared.spec.max_retries {
        shared.queue.forget(item);
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
    let delay = shared.queue.add_rate_limited(item.clone());
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
    if let Err(e) = runtime.block_on(crate::k8s::ops::with_timeout(Duration::from_secs(10), fut)) {
        tracing::warn!(controller = %shared.name, reason, "could not record the event: {e}");
    }
}

fn warn_event(
    shared: &Shared,
    runtime: &tokio::runtime::Handle,
    obj: &Json,
    reason: &str,
    message: &str,
) {
    record_event(shared, runtime, obj, "Warning", reason, message);
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
    .map_err(|e| shared.handlers.locate(f, e))
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

fn api_error(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Raised(format!("error: {what}: {e}"))
}

/// The level-triggered reconcile of an existing object: finalizer first, then the
/// handler, then its children.
fn reconcile(
    shared: &Shared,
    runtime: &tokio::runtime::Handle,
    key: &Key,
    obj: &Arc<Json>,
) -> Result<Outcome, Error> {
    let h = &shared.handlers;
    let mut obj = obj.clone();
    if let Some(name) = &shared.spec.finalizer {
        if finalizer::deleting(&obj) {
            return finalize(shared, runtime, &obj, name);
        }
        if !finalizer::has(&obj, name) {
            let patch = finalizer::add_patch(&obj, name);
            let added = runtime
                .block_on(finalizer::patch(
                    &shared.session,
                    &shared.target,
                    &obj,
                    patch,
                ))
                .map_err(|e| api_error("adding the finalizer", e))?;
            shared.host.writes.record(&added);
            obj = Arc::new(added);
        }
    }
    if let Some(p) = &h.predicate {
        let keep = handlers::call(
            &shared.host,
            p,
            &[Arg::Obj(&obj)],
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
        call(shared, f, &[Arg::Str("MODIFIED"), Arg::Obj(&obj)])?
    } else {
        call(shared, f, &[Arg::Obj(&obj)])?
    };
    let Outcome::Children(desired) = outcome else {
        return Ok(outcome);
    };
    if let Err(message) = shared.host.limits.check_children(&desired) {
        return Err(shared.handlers.locate(f, Error::BadReturn(message)));
    }
    shared
        .with_children
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(key.clone());
    let ctx = children_context(shared);
    let report = runtime
        .block_on(crate::k8s::ops::with_timeout(
            Duration::from_secs(120),
            async {
                children::reconcile(&ctx, &obj, desired)
                    .await
                    .map_err(|e| crate::k8s::ops::Error::Invalid(e.to_string()))
            },
        ))
        .map_err(|e| api_error("applying children", e))?;
    if !report.changed.is_empty() || !report.pruned.is_empty() {
        let mut parts = Vec::new();
        if !report.changed.is_empty() {
            parts.push(format!("applied {}", report.changed.join(", ")));
        }
        if !report.pruned.is_empty() {
            parts.push(format!("pruned {}", report.pruned.join(", ")));
        }
        record_event(
            shared,
            runtime,
            &obj,
            "Normal",
            "Reconciled",
            &parts.join("; "),
        );
    }
    let ready = if report.waiting.is_empty() {
        Ready::reconciled()
    } else {
        Ready::progressing(&report.waiting)
    };
    // The freshest parent: the applyset labels may have just been written.
    let current = shared.store.get(key).unwrap_or(obj);
    set_ready(shared, runtime, &current, &ready);
    Ok(Outcome::Done)
}

/// The object is deleting: run finalize, then remove our finalizer.
fn finalize(
    shared: &Shared,
    runtime: &tokio::runtime::Handle,
    obj: &Json,
    name: &str,
) -> Result<Outcome, Error> {
    if !finalizer::has(obj, name) {
        // Already finalized, or never ours: nothing to do, and reconcile is not called.
        return Ok(Outcome::Done);
    }
    let outcome = match &shared.handlers.finalize {
        Some(f) => match call(shared, f, &[Arg::Obj(obj)]) {
            Ok(o) => o,
            Err(e) => {
                warn_event(
                    shared,
                    runtime,
                    obj,
                    "FinalizeFailed",
                    &first_line(&e.to_string()),
                );
                return Err(e);
            }
        },
        None => Outcome::Done,
    };
    if let Outcome::RequeueAfter(d) = outcome {
        return Ok(Outcome::RequeueAfter(d));
    }
    if let Some(patch) = finalizer::remove_patch(obj, name) {
        let removed = runtime
            .block_on(finalizer::patch(
                &shared.session,
                &shared.target,
                obj,
                patch,
            ))
            .map_err(|e| api_error("removing the finalizer", e))?;
        shared.host.writes.record(&removed);
    }
    Ok(Outcome::Done)
}

/// Whether kite manages this parent's Ready condition: it returned children in this
/// run, or an earlier run left a Ready condition with one of kite's reasons.
fn owns_ready(shared: &Shared, key: &Key, obj: &Json) -> bool {
    let ours = |c: &Json| {
        c["type"] == "Ready"
            && matches!(
                c["reason"].as_str(),
                Some("Reconciled" | "Progressing" | "ReconcileError")
            )
    };
    shared
        .with_children
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .contains(key)
        || obj["status"]["conditions"]
            .as_array()
            .is_some_and(|cs| cs.iter().any(ours))
}

fn set_ready(shared: &Shared, runtime: &tokio::runtime::Handle, parent: &Json, ready: &Ready) {
    let ctx = children_context(shared);
    let fut = crate::k8s::ops::with_timeout(
        Duration::from_secs(30),
        children::set_ready(&ctx, parent, ready),
    );
    if let Err(e) = runtime.block_on(fut) {
        tracing::warn!(controller = %shared.name, "could not update the Ready condition: {e}");
    }
}

fn children_context(shared: &Shared) -> children::Context<'_> {
    children::Context {
        session: &shared.session,
        writes: &shared.host.writes,
        watches: &shared.watches,
        primary: &shared.target.resource,
        namespace: shared.spec.namespace.as_deref(),
    }
}
