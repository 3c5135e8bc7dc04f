//! Starting a controller resource's script as its identity, in place of what ran
//! before, and reporting how it went.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;

use super::assessment::Runnable;
use super::decision::{Decision, stop};
use super::hosted::{self, Plan};
use super::identity;
use super::inputs::Inputs;
use super::reconciler::{Context, Error, RETRY, Result, valid};

/// How soon a started controller's identity is looked at again when its objects
/// changed while it started.
const AGAIN: std::time::Duration = std::time::Duration::from_secs(1);

/// The longest wait before a failed start is tried again.
const MAX_RETRY: std::time::Duration = std::time::Duration::from_secs(160);

/// The wait before trying a start again after `failures` failures in a row: [`RETRY`],
/// doubling, at most [`MAX_RETRY`].
fn retry_after(failures: u32) -> std::time::Duration {
    RETRY
        .saturating_mul(1 << failures.saturating_sub(1).min(8))
        .min(MAX_RETRY)
}
use super::resource::Phase;
use super::status::Verdict;
use super::tenant::Tenant;
use super::turns::Turn;

/// Starts the script's controller as `sa` in place of what ran before, in the
/// namespace's top-level `turn`, and reports it.
pub(super) async fn start<K: Tenant>(
    cr: &K,
    ctx: &Context,
    inputs: &Inputs,
    (runnable, turn): (Runnable, Turn),
    sa: &str,
    d: Decision<'_>,
) -> Result<Action> {
    let Inputs { spec, home, .. } = inputs;
    let Runnable {
        script,
        file_name,
        inference,
        ..
    } = runnable;
    let mut rbac_message = format!("ServiceAccount {home}/{sa}");
    if !inference.warnings.is_empty() {
        rbac_message += &format!("; not inferred: {}", inference.warnings.join("; "));
    }
    let rbac = Verdict::yes("RBACReady", "Granted", rbac_message);

    let client = identity::impersonating(&ctx.tenants, home, sa).map_err(Error::Impersonate)?;
    let author = d
        .authority
        .as_ref()
        .map_or("", |a| a.author.username.as_str());
    let plan = Plan {
        name: cr.display(),
        file_name,
        script,
        vars: spec.vars.clone(),
        overrides: spec.control.clone(),
        namespace: home.clone(),
        handler_budget: ctx.handler_budget,
        limits: ctx.limits.clone(),
        confined: K::CONFINED,
        lease: ctx.lease.clone(),
        pool: ctx.pool.clone(),
        // A StarlarkController's informers count against its namespace's limit and
        // memory; a ClusterStarlarkController's belong to no tenant, and its author (a
        // cluster administrator) sizes the operator for them.
        informers: ctx.informers.access(
            Some(identity::service_account_user(home, sa)),
            K::CONFINED.then_some(home.as_str()),
        ),
        discovery: ctx.discovery.clone(),
        turn: Some(turn),
        modules: ctx.modules.clone(),
        quota: ctx.quota.clone(),
        reserve: ctx.registry.reserve(&d.key),
        journal: ctx
            .registry
            .journal(&d.key, &cr.uid().unwrap_or_default(), author),
        author: author.to_owned(),
    };
    // Never two writers: the old version stops before the new one's top level runs.
    if let Some(old) = ctx.registry.take_hosted(&d.key) {
        stop(old).await;
    }
    let started = hosted::start(plan, client).await;
    Ok(report(ctx, inputs.generation, rbac, started, d).await)
}

/// Records how starting went: Running, an error in the script, or a failure to retry.
async fn report(
    ctx: &Context,
    generation: i64,
    rbac: Verdict,
    started: hosted::Result<hosted::Hosted>,
    mut d: Decision<'_>,
) -> Action {
    match started {
        Ok(h) => {
            let mut message = format!("watching {}", h.watching);
            if !h.ignored.is_empty() {
                message += &format!("; ignored: {}", h.ignored.join(", "));
            }
            d.outcome.phase = Phase::Running;
            d.outcome.watching = Some(h.watching.clone());
            d.outcome.started_at = Some(Time(Timestamp::now()));
            d.outcome.logs = ctx.logs.then(|| match d.key.0.as_str() {
                "" => format!("kite logs cslc/{}", d.key.1),
                ns => format!("kite logs slc/{} -n {ns}", d.key.1),
            });
            d.outcome.conditions = vec![valid(), rbac, Verdict::yes("Ready", "Running", message)];
            let (reason, note) = if d.first {
                ("Started", "started")
            } else {
                ("Reloaded", "reloaded")
            };
            d.event(
                EventType::Normal,
                reason,
                &format!("controller {note} at generation {generation}"),
            );
            let (key, uid, applied) = (d.key.clone(), d.uid.clone(), d.applied);
            let granted = d.grants.is_some();
            d.finish(Some(h)).await;
            // Until the grants are registered, a watch event about its objects marks
            // nothing to restore. Look again in a moment when the watches saw a change
            // since the comparison, or when the apply wrote: an owner that had no objects
            // has no change number to compare (objects deleted and replaced by unlabelled
            // ones during the start would otherwise never be seen).
            if granted
                && (applied.wrote || ctx.seen.last_change(&uid) != applied.seen_at)
                && ctx.registry.mark_grants_changed(&key)
            {
                return Action::requeue(AGAIN);
            }
            Action::requeue(ctx.recheck)
        }
        Err(hosted::Error::Evaluate(rendered)) => {
            d.invalid("ScriptError", crate::script::run::summary(&rendered))
                .await;
            Action::await_change()
        }
        Err(e) => {
            let message = e.to_string();
            let reason = match e {
                hosted::Error::Quota(_) => "MemoryQuota",
                hosted::Error::Start(crate::control::controller::Error::Watch {
                    source: crate::control::informers::Error::Limit { .. },
                    ..
                }) => "WatchQuota",
                _ => "StartFailed",
            };
            d.outcome.conditions = vec![valid(), rbac, Verdict::no("Ready", reason, &message)];
            d.outcome.error = Some(message.clone());
            d.event(EventType::Warning, reason, &message);
            let key = d.key.clone();
            d.retry_later().finish(None).await;
            // Each retry runs the analysis, the reviews, the grants and the top level
            // again: one that keeps failing is tried less and less often, so that a
            // namespace of refused controllers costs the API server little.
            Action::requeue(retry_after(ctx.registry.failed_start(&key)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_start_that_keeps_failing_is_tried_less_and_less_often() {
        let secs = |n| retry_after(n).as_secs();
        assert_eq!(
            [
                secs(0),
                secs(1),
                secs(2),
                secs(3),
                secs(4),
                secs(5),
                secs(u32::MAX)
            ],
            [20, 20, 40, 80, 160, 160, 160]
        );
    }
}
