//! What a worker does with one key: deliver its events to the event-form handlers,
//! run the level-triggered reconcile (children, Ready) or the finalizer, and report
//! the outcome to the thread loop in `worker`.

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value as Json;

use super::finalizer;
use super::handlers::{self, Arg, Error, Outcome, WriteError};
use super::informer::Key;
use super::shared::{EventItem, Shared};
use super::worker::{first_line, guarded, record_event, warn_event};
use crate::control::children::{self, condition::Ready};

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
        &shared.cancel(),
        handlers::decode_outcome,
    )
    .map_err(|e| shared.handlers.locate(f, e))
}

/// Delivers one watch event to the event-form handlers.
pub(super) fn deliver(shared: &Shared, event: EventItem) -> Result<(), Error> {
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

pub(super) fn api_error(what: &'static str, source: WriteError) -> Error {
    Error::Write {
        what,
        source: Box::new(source),
    }
}

/// The level-triggered reconcile of an existing object: finalizer first, then the
/// handler, then its children.
pub(super) fn reconcile(
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
            let added = guarded(
                shared,
                runtime,
                finalizer::patch(&shared.session, &shared.target, &obj, patch),
            )
            .map_err(|e| api_error("adding the finalizer", e))?;
            shared.writes.record(&added);
            obj = Arc::new(added);
        }
    }
    if let Some(p) = &h.predicate {
        let keep = handlers::call(
            &shared.host,
            p,
            &[Arg::Obj(&obj)],
            shared.budget,
            &shared.cancel(),
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
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .insert(key.clone());
    let ctx = children_context(shared);
    let report = guarded(shared, runtime, async {
        let limit = Duration::from_mins(2);
        match tokio::time::timeout(limit, children::reconcile(&ctx, &obj, desired)).await {
            Ok(report) => report.map_err(WriteError::from),
            Err(_) => Err(crate::k8s::ops::Error::Timeout(limit).into()),
        }
    })
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
pub(super) fn finalize(
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
        let removed = guarded(
            shared,
            runtime,
            finalizer::patch(&shared.session, &shared.target, obj, patch),
        )
        .map_err(|e| api_error("removing the finalizer", e))?;
        shared.writes.record(&removed);
    }
    Ok(Outcome::Done)
}

/// Whether kite manages this parent's Ready condition: it returned children in this
/// run, or an earlier run left a Ready condition with one of kite's reasons.
pub(super) fn owns_ready(shared: &Shared, key: &Key, obj: &Json) -> bool {
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
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .contains(key)
        || obj["status"]["conditions"]
            .as_array()
            .is_some_and(|cs| cs.iter().any(ours))
}

pub(super) fn set_ready(
    shared: &Shared,
    runtime: &tokio::runtime::Handle,
    parent: &Json,
    ready: &Ready,
) {
    let ctx = children_context(shared);
    let fut = crate::k8s::ops::with_timeout(
        Duration::from_secs(30),
        children::set_ready(&ctx, parent, ready),
    );
    if let Err(e) = guarded(shared, runtime, fut) {
        tracing::warn!(controller = %shared.name, "could not update the Ready condition: {e}");
    }
}

fn children_context(shared: &Shared) -> children::Context<'_> {
    children::Context {
        session: &shared.session,
        writes: &shared.writes,
        watches: &shared.watches,
        primary: &shared.target.resource,
        namespace: shared.spec.namespace.as_deref(),
    }
}
