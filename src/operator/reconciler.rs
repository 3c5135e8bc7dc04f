//! Reconciles one StarlarkController: validate its script, generate its identity within
//! the ceiling, start or reload its controller, or stop it.

use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::runtime::events::{Event, EventType, Recorder};
use kube::runtime::finalizer::{self, finalizer};
use kube::{Api, Resource, ResourceExt};

use super::ceiling::{self, Ceiling};
use super::grants::{self, Owner};
use super::hosted::{self, Hosted, Plan};
use super::identity;
use super::registry::{Key, Registry};
use super::resource::{Phase, StarlarkController};
use super::status::{Outcome, Verdict};
use crate::k8s::discovery::Discovery;
use crate::rbac::{Catalog, Inference};
use crate::script::vars::Vars;

/// Keeps a StarlarkController until its controller is stopped and its cluster-wide
/// RBAC is removed (the garbage collector cannot remove cluster-scoped objects owned by
/// a namespaced one).
pub const FINALIZER: &str = "starkite.io/operator";
/// How often a running controller's resource is looked at again without a change.
const RECHECK: Duration = Duration::from_secs(300);
/// How soon a controller that could not start (an unknown kind, the ceiling) is retried.
const RETRY: Duration = Duration::from_secs(20);

/// What every reconcile shares.
pub struct Context {
    /// The operator's own client.
    pub client: kube::Client,
    /// The operator's connection settings, from which impersonating clients are made.
    pub config: kube::Config,
    pub registry: Arc<Registry>,
    pub recorder: Recorder,
    pub discovery: Discovery,
    /// The name of the ceiling ClusterRole.
    pub ceiling: String,
    pub handler_budget: Duration,
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
    Impersonate(#[source] kube::Error),
    #[error("the finalizer: {0}")]
    Finalize(#[source] Box<finalizer::Error<Error>>),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The reconcile function the operator's controller runs.
///
/// # Errors
/// API errors; the controller retries them with backoff.
pub async fn reconcile(cr: Arc<StarlarkController>, ctx: Arc<Context>) -> Result<Action> {
    let ns = cr.namespace().unwrap_or_default();
    let api: Api<StarlarkController> = Api::namespaced(ctx.client.clone(), &ns);
    finalizer(&api, FINALIZER, cr, |event| async {
        match event {
            finalizer::Event::Apply(cr) => apply(&cr, &ctx).await,
            finalizer::Event::Cleanup(cr) => cleanup(&cr, &ctx).await,
        }
    })
    .await
    .map_err(|e| Error::Finalize(Box::new(e)))
}

/// Retries a failed reconcile after a while.
pub fn error_policy(cr: Arc<StarlarkController>, e: &Error, _ctx: Arc<Context>) -> Action {
    tracing::warn!(starlarkcontroller = %format!("{}/{}", cr.namespace().unwrap_or_default(), cr.name_any()), error = %e, "reconcile failed");
    Action::requeue(Duration::from_secs(5))
}

/// The ServiceAccount generated for a StarlarkController: `starkite-<name>`, shortened
/// with a hash when that is longer than a label (roles and bindings share the name).
pub fn service_account_name(name: &str) -> String {
    let full = format!("starkite-{name}");
    if full.len() <= 63 {
        return full;
    }
    let mut h = std::collections::hash_map::DefaultHasher::new();
    name.hash(&mut h);
    let mut short: String = full.chars().take(54).collect();
    short = short.trim_end_matches('-').to_owned();
    format!("{short}-{:08x}", h.finish() as u32)
}

async fn read_script(
    ctx: &Context,
    cr: &StarlarkController,
    ns: &str,
) -> Result<Result<String, String>> {
    if let Some(s) = &cr.spec.script {
        return Ok(Ok(s.clone()));
    }
    let Some(from) = &cr.spec.script_from else {
        return Ok(Err("spec.script or spec.scriptFrom is required".into()));
    };
    let r = &from.config_map_key_ref;
    let api: Api<ConfigMap> = Api::namespaced(ctx.client.clone(), ns);
    match api.get_opt(&r.name).await.map_err(Error::ReadScript)? {
        None => Ok(Err(format!("ConfigMap {ns}/{} does not exist", r.name))),
        Some(cm) => match cm.data.as_ref().and_then(|d| d.get(&r.key)) {
            Some(text) => Ok(Ok(text.clone())),
            None => Ok(Err(format!(
                "ConfigMap {ns}/{} has no key {:?}",
                r.name, r.key
            ))),
        },
    }
}

async fn apply(cr: &StarlarkController, ctx: &Context) -> Result<Action> {
    let ns = cr.namespace().unwrap_or_default();
    let name = cr.name_any();
    let key: Key = (ns.clone(), name.clone());
    let uid = cr.uid().unwrap_or_default();
    let generation = cr.metadata.generation.unwrap_or(0);
    let script = read_script(ctx, cr, &ns).await?;
    let script_ref = cr
        .spec
        .script_from
        .as_ref()
        .map(|f| (ns.clone(), f.config_map_key_ref.name.clone()));
    // The ceiling is part of what was decided: when the administrator changes it, every
    // controller is checked against it again (at the latest on the next RECHECK).
    let ceiling = match Ceiling::fetch(&ctx.client, &ctx.ceiling).await {
        Ok(c) => Ok(c),
        Err(e @ ceiling::Error::FindCeiling(_)) => Err(e.to_string()),
        Err(e) => return Err(Error::ReadCeiling(e)),
    };
    let fingerprint = {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        let bound = ceiling.as_ref().map(Ceiling::fingerprint);
        (generation, &uid, &script, bound).hash(&mut h);
        h.finish()
    };
    let previous = ctx.registry.fingerprint(&key);
    if previous == Some(fingerprint) {
        return Ok(Action::requeue(RECHECK));
    }
    let mut d = Decision::new(
        ctx,
        cr,
        key,
        uid,
        fingerprint,
        generation,
        script_ref,
        previous.is_none(),
    );

    if cr.spec.suspend {
        d.outcome.phase = Phase::Suspended;
        d.outcome.conditions = vec![Verdict::no("Ready", "Suspended", "spec.suspend is true")];
        d.finish(None).await;
        return Ok(Action::await_change());
    }
    let script = match script {
        Ok(s) => s,
        Err(message) => {
            d.invalid("ScriptNotFound", message).await;
            return Ok(Action::await_change());
        }
    };
    let file_name = format!("{name}.star");
    if let Err(e) = crate::script::check::check_text(&file_name, &script) {
        d.invalid("ScriptInvalid", e.to_string().trim_end().to_owned())
            .await;
        return Ok(Action::await_change());
    }
    let inference = match infer(ctx, cr, &file_name, &script).await {
        Ok(i) => i,
        Err(e) => {
            d.invalid("ScriptInvalid", e.to_string()).await;
            return Ok(Action::await_change());
        }
    };
    let valid = Verdict::yes("ScriptValid", "Valid", "parsed and linted");

    // The ceiling bounds what the script needs even when it runs as an existing
    // ServiceAccount (whose own permissions the administrator then answers for).
    let resolved = inference.rules.resolved(&ns);
    let denied = match &ceiling {
        Ok(c) => c.first_outside(&resolved).map(|rule| {
            format!(
                "the ceiling ClusterRole {:?} does not allow {rule}",
                ctx.ceiling
            )
        }),
        Err(missing) => Some(missing.clone()),
    };
    if let Some(message) = denied {
        d.outcome.conditions = vec![
            valid,
            Verdict::no("RBACReady", "BeyondCeiling", &message),
            Verdict::no("Ready", "RBACDenied", &message),
        ];
        d.outcome.error = Some(message.clone());
        d.event(EventType::Warning, "RBACDenied", &message).await;
        d.retry_later().finish(None).await;
        return Ok(Action::requeue(RETRY));
    }
    let sa = match &cr.spec.service_account_name {
        Some(existing) => existing.clone(),
        None => {
            let sa = service_account_name(&name);
            let owner = Owner {
                name: &name,
                namespace: &ns,
                uid: &d.uid,
            };
            grants::apply(&ctx.client, &owner, &sa, &inference.rules).await?;
            sa
        }
    };
    let mut rbac_message = format!("ServiceAccount {sa}");
    if !inference.warnings.is_empty() {
        rbac_message += &format!("; not inferred: {}", inference.warnings.join("; "));
    }
    let rbac = Verdict::yes("RBACReady", "Granted", rbac_message);
    d.outcome.service_account = Some(sa.clone());

    let client = identity::impersonating(&ctx.config, &ns, &sa).map_err(Error::Impersonate)?;
    let plan = Plan {
        name: format!("{ns}/{name}"),
        file_name,
        script,
        vars: cr.spec.vars.clone(),
        overrides: cr.spec.control.clone(),
        namespace: ns.clone(),
        handler_budget: ctx.handler_budget,
    };
    match hosted::start(plan, client).await {
        Ok(h) => {
            let mut message = format!("watching {}", h.watching);
            if !h.ignored.is_empty() {
                message += &format!("; ignored: {}", h.ignored.join(", "));
            }
            d.outcome.phase = Phase::Running;
            d.outcome.watching = Some(h.watching.clone());
            d.outcome.started_at = Some(Time(Timestamp::now()));
            d.outcome.conditions = vec![valid, rbac, Verdict::yes("Ready", "Running", message)];
            let (reason, note) = if d.first {
                ("Started", "started")
            } else {
                ("Reloaded", "reloaded")
            };
            d.event(
                EventType::Normal,
                reason,
                &format!("controller {note} at generation {generation}"),
            )
            .await;
            d.finish(Some(h)).await;
            Ok(Action::requeue(RECHECK))
        }
        Err(hosted::Error::Evaluate(rendered)) => {
            d.invalid("ScriptError", crate::script::run::summary(&rendered))
                .await;
            Ok(Action::await_change())
        }
        Err(e) => {
            let message = e.to_string();
            d.outcome.conditions = vec![valid, rbac, Verdict::no("Ready", "StartFailed", &message)];
            d.outcome.error = Some(message.clone());
            d.event(EventType::Warning, "StartFailed", &message).await;
            d.retry_later().finish(None).await;
            Ok(Action::requeue(RETRY))
        }
    }
}

/// The kinds the script may name: built in, and whatever the cluster serves.
async fn infer(
    ctx: &Context,
    cr: &StarlarkController,
    file_name: &str,
    script: &str,
) -> crate::rbac::Result<Inference> {
    let vars = Vars::from_map(cr.spec.vars.clone());
    let namespace = cr
        .spec
        .control
        .as_ref()
        .and_then(|c| c.namespace.as_deref());
    let run = |resources| {
        let mut catalog = Catalog::builtin();
        catalog.add_discovered(resources);
        crate::rbac::infer_text(file_name, script, catalog, &vars, namespace)
    };
    let first = run(ctx.discovery.all().await.unwrap_or_default())?;
    if first.warnings.iter().any(|w| w.contains("--crd")) {
        // A CRD created since discovery was cached: look again once.
        ctx.discovery.invalidate();
        return run(ctx.discovery.all().await.unwrap_or_default());
    }
    Ok(first)
}

async fn cleanup(cr: &StarlarkController, ctx: &Context) -> Result<Action> {
    let key: Key = (cr.namespace().unwrap_or_default(), cr.name_any());
    if let Some(h) = ctx.registry.remove(&key) {
        stop(h).await;
        publish(
            ctx,
            cr,
            EventType::Normal,
            "Stopped",
            "controller stopped: the StarlarkController is being deleted",
        )
        .await;
    }
    grants::remove(&ctx.client, &cr.uid().unwrap_or_default()).await?;
    Ok(Action::await_change())
}

async fn stop(h: Hosted) {
    h.controller.shutdown(Duration::from_secs(10)).await;
}

async fn publish(
    ctx: &Context,
    cr: &StarlarkController,
    type_: EventType,
    reason: &str,
    note: &str,
) {
    let event = Event {
        type_,
        reason: reason.into(),
        note: Some(note.chars().take(1000).collect()),
        action: "Reconcile".into(),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&event, &cr.object_ref(&())).await {
        tracing::warn!(reason, error = %e, "recording an event");
    }
}

/// A reconcile's decision about one StarlarkController, recorded once at the end.
struct Decision<'a> {
    ctx: &'a Context,
    cr: &'a StarlarkController,
    key: Key,
    uid: String,
    fingerprint: u64,
    script_ref: Option<(String, String)>,
    /// No decision was recorded for this resource before.
    first: bool,
    outcome: Outcome,
}

impl<'a> Decision<'a> {
    #[allow(clippy::too_many_arguments)]
    fn new(
        ctx: &'a Context,
        cr: &'a StarlarkController,
        key: Key,
        uid: String,
        fingerprint: u64,
        generation: i64,
        script_ref: Option<(String, String)>,
        first: bool,
    ) -> Self {
        let outcome = Outcome {
            generation,
            phase: Phase::Failed,
            ..Default::default()
        };
        Decision {
            ctx,
            cr,
            key,
            uid,
            fingerprint,
            script_ref,
            first,
            outcome,
        }
    }

    /// Forgets the fingerprint, so the next reconcile tries again.
    fn retry_later(mut self) -> Self {
        self.fingerprint = 0;
        self
    }

    async fn event(&self, type_: EventType, reason: &str, note: &str) {
        publish(self.ctx, self.cr, type_, reason, note).await;
    }

    async fn invalid(mut self, reason: &str, message: String) {
        self.outcome.conditions = vec![
            Verdict::no("ScriptValid", reason, &message),
            Verdict::no("Ready", reason, &message),
        ];
        self.outcome.error = Some(message.clone());
        self.event(EventType::Warning, "ScriptInvalid", &message)
            .await;
        self.finish(None).await;
    }

    /// Records the outcome and what now runs; stops what ran before.
    async fn finish(self, hosted: Option<Hosted>) {
        let stopping = hosted.is_none();
        let old = self.ctx.registry.decide(
            self.key,
            &self.uid,
            self.fingerprint,
            self.outcome,
            hosted,
            self.script_ref,
        );
        if let Some(old) = old {
            stop(old).await;
            if stopping {
                publish(
                    self.ctx,
                    self.cr,
                    EventType::Normal,
                    "Stopped",
                    "controller stopped",
                )
                .await;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_account_names_fit_a_label() {
        assert_eq!(
            service_account_name("max-replicas"),
            "starkite-max-replicas"
        );
        let long = service_account_name(&"x".repeat(63));
        assert!(long.len() <= 63, "{long}");
        assert_ne!(long, service_account_name(&"x".repeat(62)));
    }
}
