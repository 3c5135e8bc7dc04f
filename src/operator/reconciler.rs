//! Reconciles one StarlarkController: validate its script, generate its identity within
//! the ceiling, start or reload its controller, or stop it.

use std::ops::ControlFlow;
use std::sync::Arc;
use std::time::Duration;

use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::finalizer::{self, finalizer};

use super::approval::{self, Author};
use super::assessment::{self, Assessment, Runnable, assessment};
use super::authority::{self, first_denied};
use super::ceiling::{self, Ceiling};
use super::decision::{Decision, publish, stop};
use super::grants::{self, Grant};
use super::inputs::Inputs;
use super::registry::{Authority, Registry};
use super::resource::Phase;
use super::shard::Claim;
use super::startup::start;
use super::status::Verdict;
use super::tenant::Tenant;
use super::turns::busy_again;
use crate::k8s::discovery::Discovery;

/// Keeps a StarlarkController until its controller is stopped and its cluster-wide
/// RBAC is removed (the garbage collector cannot remove cluster-scoped objects owned by
/// a namespaced one).
pub const FINALIZER: &str = "starkite.io/operator";
/// How soon a controller that could not start (an unknown kind, the ceiling) is retried.
pub(super) const RETRY: Duration = Duration::from_secs(20);

/// What every reconcile shares.
pub struct Context {
    /// The operator's own client.
    pub client: kube::Client,
    /// The client hosted scripts impersonate their ServiceAccounts through: the same
    /// identity and settings as `client`, on connections of its own
    /// (`docs/design/transport.md`).
    pub tenants: kube::Client,
    /// Whether the operator serves the logs API (`kite logs`).
    pub logs: bool,
    pub registry: Arc<Registry>,
    /// The operator's Events, written in the background.
    pub events: super::events::Events,
    pub discovery: Discovery,
    /// The name of the ceiling ClusterRole.
    pub ceiling: String,
    /// The generated objects as the operator's watches of them last saw them.
    pub seen: Arc<super::seen::Seen>,
    /// The ceiling as last read, until its watch reports a change.
    pub ceilings: Arc<ceiling::Cache>,
    /// Authors' permissions allowed a moment ago, for starts (never for re-checks).
    pub reviews: Arc<super::reviews::Reviews>,
    pub handler_budget: Duration,
    pub limits: crate::script::host::Limits,
    /// Where ClusterStarlarkControllers' ServiceAccounts and scripts live.
    pub operator_namespace: String,
    /// Signs and checks the approvals the admission webhook stamps.
    pub approval: approval::Key,
    /// A few top-level runs at a time per namespace (one slow top level does not hold
    /// up the namespace's other controllers; many cannot take every core).
    pub turns: Arc<super::turns::Turns>,
    /// One analysis (lint and inference) at a time per namespace for reconciles: apart
    /// from the top levels, so that a slow top level never holds up an analysis.
    pub analyses: super::turns::Turns,
    /// One analysis at a time per namespace for the admission webhook, apart from the
    /// reconciles': a reconcile only takes a free turn, never waits, and reviews
    /// waiting in line would otherwise always be served first.
    pub admission_analyses: super::turns::Turns,
    /// The reconciles of one namespace's resources under way at once
    /// ([`share`]): slow steps (a stop's grace, a start waiting on
    /// the API server) of one tenant's resources hold a few of the operator's
    /// reconcile slots, never all of them.
    pub shares: super::turns::Turns,
    /// The hosted scripts' evaluated top levels, shared between equal ones.
    pub modules: Arc<super::modules::Modules>,
    /// The operator's lease, when it elects a leader.
    pub lease: Option<Arc<crate::control::leader::Validity>>,
    /// The worker threads every hosted controller shares.
    pub pool: crate::control::pool::Pool,
    /// The informers hosted controllers share, gated by their own read access.
    pub informers: Arc<crate::control::informers::Informers>,
    /// This replica's share of the controllers, with `--shards auto`.
    pub shards: Option<Arc<super::shard::Shards>>,
    /// How often a running controller's resource is looked at again without a change:
    /// its author, approval and read access are checked again (`--recheck-period`).
    pub recheck: Duration,
    /// What each namespace's running controllers keep in memory.
    pub quota: Arc<super::quota::Quota>,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading the script's ConfigMap: {0}")]
    ReadScript(#[source] kube::Error),
    #[error(transparent)]
    Grant(#[from] grants::Error),
    #[error(transparent)]
    ReadCeiling(ceiling::Error),
    #[error("building the impersonating client: {0}")]
    Impersonate(#[source] hyper::header::InvalidHeaderValue),
    #[error("checking the author's permissions: {0}")]
    CheckAuthor(#[source] authority::Error),
    #[error(transparent)]
    Shard(#[from] super::shard::Error),
    #[error("the finalizer: {0}")]
    Finalize(#[source] Box<finalizer::Error<Error>>),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A namespace's share of the reconciles under way at once: an eighth of
/// `concurrent` (`--concurrent-reconciles`, per kind), at most
/// [`RECONCILES_PER_NAMESPACE`], at least one. ClusterStarlarkControllers share one.
pub fn share(concurrent: u16) -> usize {
    (usize::from(concurrent) / 8).clamp(1, RECONCILES_PER_NAMESPACE)
}

/// The most reconciles of one namespace's resources under way at once.
pub const RECONCILES_PER_NAMESPACE: usize = 16;

/// The reconcile function the operator's controllers run, for both kinds, in a share
/// of its namespace's: without a free one it is looked at again when one is given back.
///
/// # Errors
/// API errors; the controller retries them with backoff.
pub async fn reconcile<K: Tenant>(cr: Arc<K>, ctx: Arc<Context>) -> Result<Action> {
    let key = cr.key();
    let Some(_share) = ctx.shares.take_or_queue(&key.0, &key) else {
        return Ok(Action::requeue(busy_again()));
    };
    let api = cr.api_of(&ctx.client);
    finalizer(&api, FINALIZER, cr, |event| async {
        match event {
            finalizer::Event::Apply(cr) => Box::pin(apply(&*cr, &ctx)).await,
            finalizer::Event::Cleanup(cr) => cleanup(&*cr, &ctx).await,
        }
    })
    .await
    .map_err(|e| Error::Finalize(Box::new(e)))
}

/// Retries a failed reconcile after a while.
pub fn error_policy<K: Tenant>(cr: Arc<K>, e: &Error, _ctx: Arc<Context>) -> Action {
    tracing::warn!(kind = K::KIND, controller = %cr.display(), error = %e, "reconcile failed");
    Action::requeue(Duration::from_secs(5))
}

/// The ServiceAccount generated for a controller resource (its roles and bindings share
/// the name): `starkite-<name>-<uid>` for a StarlarkController, with `cluster-` before
/// the name for a ClusterStarlarkController, where `<uid>` is the first 8 hex digits of
/// the resource's uid and the name is shortened to keep the whole within 63 characters.
///
/// The uid makes the name the resource's own: no name, however chosen, of another
/// resource (another StarlarkController, or a ClusterStarlarkController beside one in
/// the operator's namespace) gives the same name, short of a 1 in 2^32 coincidence of
/// the uids' random bits, which [`grants::apply`] refuses anyway (it never writes over
/// an object another resource owns).
pub fn service_account_name(name: &str, uid: &str, cluster: bool) -> String {
    let tag: String = uid
        .chars()
        .filter(char::is_ascii_hexdigit)
        .take(8)
        .collect::<String>()
        .to_ascii_lowercase();
    let prefix = if cluster {
        "starkite-cluster-"
    } else {
        "starkite-"
    };
    let room = 63 - prefix.len() - 1 - tag.len();
    let short: String = name.chars().take(room).collect();
    format!("{prefix}{}-{tag}", short.trim_end_matches(['-', '.']))
}

/// Ends [`apply`] with a step's action when the step breaks; otherwise gives what the
/// step continues with. Errors end it too, as with `?`.
macro_rules! step {
    ($step:expr) => {
        match $step? {
            ControlFlow::Continue(next) => next,
            ControlFlow::Break(action) => return Ok(action),
        }
    };
}

/// What a step of [`apply`] gives: the action that ends the reconcile (`Break`), or
/// what the next step goes on with (`Continue`).
type Step<T = ()> = Result<ControlFlow<Action, T>>;

/// Ends the reconcile with `action`.
fn done<T>(action: Action) -> Step<T> {
    Ok(ControlFlow::Break(action))
}

/// Goes on to the next step with `next`.
fn proceed<T>(next: T) -> Step<T> {
    Ok(ControlFlow::Continue(next))
}

/// The operator's decision about a controller resource that is not being deleted, in
/// steps: claim its shard; restore its generated RBAC and, when nothing changed,
/// recheck what it runs on; then decide anew: approve, assess, bound by the ceiling,
/// authorize, grant its identity, start its controller and report.
async fn apply<K: Tenant>(cr: &K, ctx: &Context) -> Result<Action> {
    step!(claim(cr, ctx).await);
    let (inputs, script) = Inputs::read(cr, ctx).await?;
    // An object of the identity's name that now belongs to another resource: decide
    // again, which reports the conflict and stops the controller.
    let restored = restore(cr, ctx, &inputs).await;
    let subject = inputs.subject(&script);
    // Whatever changed, whatever the restore found: a running version whose new
    // decision does not come (a busy namespace, a conflict, an error) is still checked
    // once per period. Only an unchanged resource whose grants stand may end there.
    let settled = inputs.unchanged() && matches!(restored, Ok(false));
    step!(recheck(cr, ctx, &inputs, subject, settled).await);
    restored?;
    let d = inputs.decision(cr, ctx);
    let d = step!(within_ceiling(ctx, &inputs.ceiling, d).await);
    // Only what the operator's webhook approved runs, and only as far as its author
    // could go themselves. Checked before the script is looked at, so that nothing of
    // an unapproved script (a ConfigMap its author may not read) reaches the status.
    let (d, author) = step!(approve(cr, ctx, &inputs, subject, d).await);
    // A start needs a top-level turn (taken below): while none is free, not even the
    // analysis is done again. What must stop has stopped above; a suspension needs none.
    if !inputs.spec.suspend && ctx.turns.queue_if_busy(&inputs.home, &d.key) {
        return Ok(Action::requeue(busy_again()));
    }
    let (d, runnable) = step!(assess(cr, ctx, script, d).await);
    let d = step!(bound(ctx, &inputs.ceiling, &runnable.resolved, d).await);
    let d = step!(authorize(cr, ctx, author, &runnable, d).await);
    // The namespace's turn to run the top level, before anything is granted: turned
    // away, nothing was written and nothing changes (what runs goes on running), and
    // the resource is looked at again when a turn is given back. Never waited for: a
    // tenant whose top levels never end holds its turns for good, and a reconcile
    // waiting on them would hold one of the operator's reconcile slots.
    let Some(turn) = ctx.turns.take_or_queue(&inputs.home, &d.key) else {
        return Ok(Action::requeue(busy_again()));
    };
    let (d, sa) = step!(grant(cr, ctx, &inputs, &runnable, d).await);
    start(cr, ctx, &inputs, (*runnable, turn), &sa, d).await
}

/// With `--shards auto`: goes on only with a resource that is this replica's.
async fn claim<K: Tenant>(cr: &K, ctx: &Context) -> Step {
    if let Some(shards) = &ctx.shards {
        match shards.claim(cr).await? {
            Claim::Mine => {}
            Claim::Elsewhere(after) => {
                // Another replica's now: stop ours before letting go of the claim, so
                // the new owner never runs beside it.
                if let Some(h) = ctx.registry.remove(&cr.key()) {
                    stop(h).await;
                    tracing::info!(kind = K::KIND, controller = %cr.display(), "handed over to another replica");
                }
                shards.release(cr).await?;
                return done(Action::requeue(after));
            }
        }
    }
    proceed(())
}

/// When nothing changed but someone deleted or edited what was granted, grants it
/// again; true if an object of the identity's name now belongs to another resource.
async fn restore<K: Tenant>(cr: &K, ctx: &Context, inputs: &Inputs) -> Result<bool> {
    if inputs.unchanged()
        && let Some(grant) = ctx.registry.take_changed_grants(&inputs.key)
    {
        // Nothing new to decide; but someone may have deleted or edited what was
        // granted.
        match grant.restore(&ctx.client, &ctx.seen).await {
            Ok(applied) => {
                if applied.wrote {
                    tracing::info!(kind = K::KIND, controller = %cr.display(), "restored the generated RBAC");
                }
            }
            Err(grants::Error::Conflict { .. }) => return Ok(true),
            Err(e) => {
                ctx.registry.grants_changed(&grant.uid);
                return Err(e.into());
            }
        }
    }
    Ok(false)
}

/// What a running controller runs on is checked again once per `ctx.recheck`; for a
/// `settled` resource (unchanged, its grants standing), the reconcile ends here unless
/// something no longer holds, which stops it ([`stop_now`]). Any other goes on to its
/// new decision.
async fn recheck<K: Tenant>(
    cr: &K,
    ctx: &Context,
    inputs: &Inputs,
    subject: approval::Subject<'_>,
    settled: bool,
) -> Step {
    let key = &inputs.key;
    let holds = |after: Duration| {
        if settled {
            done(Action::requeue(after))
        } else {
            proceed(())
        }
    };
    // The author may have lost a permission, or been deleted; the approval may have
    // grown too old. Any of these: decide again, which reports it.
    let Some(authority) = ctx.registry.authority_due(key, ctx.recheck) else {
        return holds(ctx.registry.until_due(key, ctx.recheck));
    };
    let gone = match authority::author_gone(&ctx.client, &authority.author).await {
        Ok(gone) => gone.is_some(),
        Err(e) => {
            ctx.registry.author_unchecked(key);
            return Err(Error::CheckAuthor(e));
        }
    };
    let expired = ctx
        .approval
        .verify(subject, inputs.approval.as_deref())
        .is_err();
    let denied = if gone || expired {
        Ok(Some(String::new()))
    } else {
        first_denied(&ctx.client, &authority.author, &authority.permissions).await
    };
    match denied {
        Ok(None) => {
            // The controller's own account must still be allowed to read what it
            // watches through the operator's shared informers.
            let Some(access) = ctx.registry.access(key) else {
                return holds(ctx.recheck);
            };
            match access.reauthorize().await {
                Ok(()) => return holds(ctx.recheck),
                Err(e @ crate::control::informers::Error::Review(_)) => {
                    tracing::warn!(kind = K::KIND, controller = %cr.display(), error = %e, "asking again whether it may read what it watches");
                    ctx.registry.author_unchecked(key);
                    return done(Action::requeue(RETRY));
                }
                // Decide again: starting it is refused, and says why.
                Err(e) => {
                    tracing::warn!(kind = K::KIND, controller = %cr.display(), error = %e, "no longer allowed to read what it watches");
                }
            }
        }
        // Decide again: the author check below now refuses it. It must ask the API
        // server, not take an answer a start was given a moment ago.
        Ok(Some(_)) => ctx.reviews.forget(&authority.author),
        Err(e) => {
            ctx.registry.author_unchecked(key);
            return Err(Error::CheckAuthor(e));
        }
    }
    stop_now(cr, ctx, inputs).await
}

/// Something a running controller relied on no longer holds: it stops now, before the
/// new decision, which a busy namespace may turn away for a while (its turns held) and
/// which must not leave it running meanwhile. That decision comes at once and says
/// precisely why it cannot run, or starts it again.
async fn stop_now<K: Tenant>(cr: &K, ctx: &Context, inputs: &Inputs) -> Step {
    let message = "what it was started on no longer holds (its author, approval or read access); deciding again".to_owned();
    inputs
        .decision(cr, ctx)
        .retry_later()
        .denied(valid(), "Rechecking", message)
        .await;
    done(Action::requeue(Duration::from_secs(1)))
}

/// What runs must stay within the ceiling as it is now, whether or not the decision
/// after gets its namespace's turns: [`bound`] with the rules it was started with,
/// without analysing the script again.
async fn within_ceiling<'a>(
    ctx: &Context,
    ceiling: &Result<Ceiling, String>,
    d: Decision<'a>,
) -> Step<Decision<'a>> {
    match ctx.registry.running_authority(&d.key) {
        Some(running) => bound(ctx, ceiling, &running.resolved, d).await,
        None => proceed(d),
    }
}

/// The author the operator's webhook approved the resource for, if the approval holds
/// and the author is still there.
async fn approve<'a, K: Tenant>(
    cr: &K,
    ctx: &Context,
    inputs: &Inputs,
    subject: approval::Subject<'_>,
    d: Decision<'a>,
) -> Step<(Decision<'a>, Author)> {
    let Inputs {
        name, home, spec, ..
    } = inputs;
    let author = match ctx.approval.verify(subject, inputs.approval.as_deref()) {
        Ok(author) => author,
        Err(e) => {
            let resource = match cr.namespace() {
                Some(ns) => format!("{} {name} -n {ns}", K::KIND.to_lowercase()),
                None => format!("{} {name}", K::KIND.to_lowercase()),
            };
            let pinned = match &spec.script_from {
                Some(from) => format!(
                    " (or ConfigMap {home}/{} changed since it was approved: its content is pinned)",
                    from.config_map_key_ref.name
                ),
                None => String::new(),
            };
            let message = format!(
                "{e}{pinned}; to have it reviewed, change it through the API server with the webhook in place, \
                 e.g. kubectl annotate {resource} {}=review --overwrite",
                approval::ANNOTATION
            );
            d.denied(valid(), "NotApproved", message).await;
            // An expired approval is looked at again only when someone reviews it.
            return done(Action::await_change());
        }
    };
    match authority::author_gone(&ctx.client, &author).await {
        Ok(None) => {}
        Ok(Some(message)) => {
            let message = format!(
                "{message}; have someone whose rights cover this controller review it: kubectl annotate {} {name}{} {}=review --overwrite",
                K::KIND.to_lowercase(),
                cr.namespace()
                    .map(|ns| format!(" -n {ns}"))
                    .unwrap_or_default(),
                approval::ANNOTATION
            );
            d.denied(valid(), "AuthorGone", message).await;
            return done(Action::await_change());
        }
        Err(e) => return Err(Error::CheckAuthor(e)),
    }
    proceed((d, author))
}

/// The script, if it can run: linted, its RBAC inferred, within its namespace.
async fn assess<'a, K: Tenant>(
    cr: &K,
    ctx: &Context,
    script: Result<String, String>,
    mut d: Decision<'a>,
) -> Step<(Decision<'a>, Box<Runnable>)> {
    match assessment(ctx, cr, script, assessment::Turn::Take(&d.key)).await {
        // Looked at again when a turn is given back, or after a while: nothing was
        // decided, nothing recorded, no failure counted.
        Assessment::Busy => done(Action::requeue(busy_again())),
        Assessment::Suspended => {
            d.outcome.phase = Phase::Suspended;
            d.outcome.conditions = vec![Verdict::no("Ready", "Suspended", "spec.suspend is true")];
            d.finish(None).await;
            done(Action::await_change())
        }
        Assessment::Invalid { reason, message } => {
            d.invalid(reason, message).await;
            done(Action::await_change())
        }
        Assessment::Outside(message) => {
            d.denied(valid(), "OutsideNamespace", message).await;
            done(Action::await_change())
        }
        Assessment::Runnable(r) => proceed((d, r)),
    }
}

/// Goes on only if the ceiling ClusterRole allows `rules`, what the script needs.
async fn bound<'a>(
    ctx: &Context,
    ceiling: &Result<Ceiling, String>,
    rules: &crate::rbac::Rules,
    d: Decision<'a>,
) -> Step<Decision<'a>> {
    // The ceiling bounds what the script needs even when it runs as an existing
    // ServiceAccount (whose own permissions the administrator then answers for).
    let denied = match ceiling {
        Ok(c) => c.first_outside(rules).map(|rule| {
            format!(
                "the ceiling ClusterRole {:?} does not allow {rule}",
                ctx.ceiling
            )
        }),
        Err(missing) => Some(missing.clone()),
    };
    if let Some(message) = denied {
        d.retry_later()
            .denied(valid(), "BeyondCeiling", message)
            .await;
        return done(Action::requeue(RETRY));
    }
    proceed(d)
}

/// Goes on only if the author may do themselves what the script needs; records them as
/// the controller's authority.
async fn authorize<'a, K: Tenant>(
    cr: &K,
    ctx: &Context,
    author: Author,
    runnable: &Runnable,
    mut d: Decision<'a>,
) -> Step<Decision<'a>> {
    let permissions = assessment::permissions(cr, runnable, &ctx.operator_namespace);
    let denied = ctx
        .reviews
        .first_denied(&ctx.client, &author, &permissions)
        .await;
    match denied {
        Ok(None) => {}
        Ok(Some(message)) => {
            // Looked at again later: the author may be given the permission.
            d.retry_later()
                .denied(valid(), "AuthorForbidden", message)
                .await;
            return done(Action::requeue(ctx.recheck));
        }
        Err(e) => return Err(Error::CheckAuthor(e)),
    }
    d.authority = Some(Arc::new(Authority {
        author,
        permissions,
        resolved: runnable.resolved.clone(),
    }));
    proceed(d)
}

/// The ServiceAccount the controller runs as: the spec's, or one generated with the
/// inferred RBAC (granted now).
async fn grant<'a, K: Tenant>(
    cr: &K,
    ctx: &Context,
    inputs: &Inputs,
    runnable: &Runnable,
    mut d: Decision<'a>,
) -> Step<(Decision<'a>, String)> {
    let sa = if let Some(existing) = &inputs.spec.service_account_name {
        // Generated grants of an earlier version go: nothing uses them now, and nothing
        // would check them again.
        if d.first || ctx.registry.may_hold_grants(&d.key) {
            let within = cr.namespace().unwrap_or_default();
            grants::remove_seen(&ctx.client, &ctx.seen, &d.uid, &within).await?;
            ctx.registry.set_grants_remain(&d.key, false);
        }
        existing.clone()
    } else {
        let name = &inputs.name;
        let grant = Grant {
            kind: K::KIND,
            name: name.clone(),
            namespace: cr.namespace(),
            uid: d.uid.clone(),
            service_account: service_account_name(name, &d.uid, !K::CONFINED),
            home: inputs.home.clone(),
            rules: runnable.inference.rules.clone(),
        };
        // Until a decision records these grants, a later one that runs nothing must
        // still remove them (the apply or the start may fail or be cut short).
        ctx.registry.set_grants_remain(&d.key, true);
        match grant.restore(&ctx.client, &ctx.seen).await {
            Ok(applied) => d.applied = applied,
            Err(e @ grants::Error::Conflict { .. }) => {
                d.retry_later()
                    .denied(valid(), "IdentityConflict", e.to_string())
                    .await;
                return done(Action::requeue(ctx.recheck));
            }
            Err(e) => return Err(e.into()),
        }
        let sa = grant.service_account.clone();
        d.grants = Some(Arc::new(grant));
        sa
    };
    d.outcome.service_account = Some(sa.clone());
    proceed((d, sa))
}

async fn cleanup<K: Tenant>(cr: &K, ctx: &Context) -> Result<Action> {
    if let Some(h) = ctx.registry.remove(&cr.key()) {
        stop(h).await;
        let note = format!("controller stopped: the {} is being deleted", K::KIND);
        publish(
            ctx,
            &cr.object_ref(&()),
            EventType::Normal,
            "Stopped",
            &note,
        );
    }
    let within = cr.namespace().unwrap_or_default();
    grants::remove(&ctx.client, &cr.uid().unwrap_or_default(), &within).await?;
    Ok(Action::await_change())
}

/// A resource that left the operator's watch without a last reconcile (deleted with
/// its finalizer taken off by hand, or relabelled out of `--selector`): what it ran
/// stops, and its grants go, as for a deletion. The controller learns of it when the
/// resource's next requeue (at most `--recheck-period` away) finds it gone.
///
/// `uid`, when the requeue knew it, is the object that went: an entry that belongs to
/// a new object of the same name (created in between) is left alone.
pub fn forget(ctx: &Arc<Context>, key: &super::registry::Key, uid: Option<&str>) {
    let Some((uid, hosted)) = ctx.registry.forget(key, uid) else {
        return;
    };
    tracing::info!(controller = %format!("{}/{}", key.0, key.1), "the resource is gone from the operator's watch; stopping its controller");
    // In the background: the stop takes up to its grace, and the removal lists. Awaited
    // here, they would hold up the whole controller's stream (every namespace's
    // reconciles), and a tenant deleting its resources could do that at will. A new
    // resource of the same name is already a stranger to the registry; the old one's
    // in-flight handlers may still end beside its start, as an old pod beside a new one.
    let (ctx, key) = (ctx.clone(), key.clone());
    tokio::spawn(async move {
        if let Some(h) = hosted {
            let _stopping = STOPPING.acquire().await;
            stop(h).await;
        }
        // A few at a time: a mass deletion must not become a burst of lists.
        let _turn = FORGETTING.acquire().await;
        // Back in the watch meanwhile (relabelled into the selector again): what it was
        // granted is its new decision's.
        if ctx.registry.knows_uid(&uid) {
            return;
        }
        if let Err(e) = grants::remove(&ctx.client, &uid, &key.0).await {
            tracing::warn!(controller = %format!("{}/{}", key.0, key.1), error = %e, "removing the grants of a resource that is gone");
        }
    });
}

/// Stops of resources gone from the watch under way at once, at most (each waits out
/// its handlers' grace, then gives freed memory back).
static STOPPING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(64);

/// Grant removals of resources gone from the watch under way at once, at most.
static FORGETTING: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(8);

pub(super) fn valid() -> Verdict {
    Verdict::yes("ScriptValid", "Valid", "parsed and linted")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_gets_an_eighth_of_the_reconciles_within_bounds() {
        assert_eq!(share(128), 16);
        assert_eq!(share(1024), RECONCILES_PER_NAMESPACE);
        assert_eq!(share(32), 4);
        assert_eq!(share(2), 1, "never none");
    }

    #[test]
    fn service_account_names_fit_a_label() {
        let uid = "0A1b2c3d-aaaa-bbbb-cccc-dddddddddddd";
        assert_eq!(
            service_account_name("max-replicas", uid, false),
            "starkite-max-replicas-0a1b2c3d"
        );
        assert_eq!(
            service_account_name("policy", uid, true),
            "starkite-cluster-policy-0a1b2c3d"
        );
        let long = service_account_name(&"x".repeat(253), uid, false);
        assert!(long.len() <= 63, "{long}");
        assert!(long.ends_with("-0a1b2c3d"), "{long}");
        assert_eq!(
            long,
            service_account_name(&"x".repeat(253), uid, false),
            "stable across runs and processes"
        );
    }

    /// The collisions of issue 26: a StarlarkController named like another's shortened
    /// name, and one named `cluster-X` beside ClusterStarlarkController `X`.
    #[test]
    fn names_of_two_resources_never_coincide() {
        let (a, b) = (
            "11111111-0000-4000-8000-000000000000",
            "22222222-0000-4000-8000-000000000000",
        );
        let long = "y".repeat(80);
        let victim = service_account_name(&long, a, false);
        let shortened = victim.trim_start_matches("starkite-");
        assert_ne!(victim, service_account_name(shortened, b, false));
        assert_ne!(
            service_account_name("x", a, true),
            service_account_name("cluster-x", b, false)
        );
        assert_ne!(
            service_account_name("x", a, false),
            service_account_name("x", b, false)
        );
    }
}
