//! A reconcile's decision about one controller resource, recorded once at the end:
//! its status, its events, what runs, and the grants that go when nothing runs.

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, EventType};

use super::grants::{self, Grant};
use super::hosted::Hosted;
use super::reconciler::Context;
use super::registry::{Authority, Key};
use super::resource::Phase;
use super::status::{Outcome, Verdict};

/// How long a hosted controller's in-flight handlers may finish when it stops.
const STOP_GRACE: Duration = Duration::from_secs(10);

/// The decision, built up during one reconcile.
pub struct Decision<'a> {
    pub ctx: &'a Context,
    /// The resource, for events.
    pub object: ObjectReference,
    pub key: Key,
    pub uid: String,
    pub fingerprint: u64,
    pub script_ref: Option<(String, String)>,
    /// No decision was recorded for this resource before.
    pub first: bool,
    pub outcome: Outcome,
    /// The identity generated for what now runs.
    pub grants: Option<Arc<Grant>>,
    /// What applying that identity did ([`grants::Applied`]).
    pub applied: grants::Applied,
    /// Who approved what now runs.
    pub authority: Option<Arc<Authority>>,
}

impl<'a> Decision<'a> {
    pub fn new(ctx: &'a Context, object: ObjectReference, key: Key, uid: String) -> Self {
        Decision {
            ctx,
            object,
            key,
            uid,
            fingerprint: 0,
            script_ref: None,
            first: true,
            outcome: Outcome {
                phase: Phase::Failed,
                ..Default::default()
            },
            grants: None,
            applied: grants::Applied::default(),
            authority: None,
        }
    }

    /// Forgets the fingerprint, so the next reconcile tries again.
    pub fn retry_later(mut self) -> Self {
        self.fingerprint = 0;
        self
    }

    pub fn event(&self, type_: EventType, reason: &str, note: &str) {
        publish(self.ctx, &self.object, type_, reason, note);
    }

    /// The script cannot run: ScriptValid and Ready are False for `reason`.
    pub async fn invalid(mut self, reason: &str, message: String) {
        self.outcome.conditions = vec![
            Verdict::no("ScriptValid", reason, &message),
            Verdict::no("Ready", reason, &message),
        ];
        self.outcome.error = Some(message.clone());
        self.event(EventType::Warning, "ScriptInvalid", &message);
        self.finish(None).await;
    }

    /// The script may not have the permissions it needs: RBACReady and Ready are
    /// False for `reason`.
    pub async fn denied(mut self, valid: Verdict, reason: &str, message: String) {
        self.outcome.conditions = vec![
            valid,
            Verdict::no("RBACReady", reason, &message),
            Verdict::no("Ready", "RBACDenied", &message),
        ];
        self.outcome.error = Some(message.clone());
        self.event(EventType::Warning, "RBACDenied", &message);
        self.finish(None).await;
    }

    /// Records the outcome and what now runs; stops what ran before. When nothing
    /// runs, the generated grants go too: what does not run holds no permissions.
    ///
    /// The removal lists every kind it generates cluster-wide, so it is made only when
    /// something may be there to remove: on the first decision after the operator's
    /// start (a previous run may have left some), when this reconcile or the last
    /// run granted, or when a removal failed. Otherwise a controller refused again and
    /// again (every retry, every change of its ConfigMap) would cost five cluster-wide
    /// lists each time, paid by everyone else.
    pub async fn finish(mut self, hosted: Option<Hosted>) {
        let stopping = hosted.is_none();
        let grants_may_remain =
            self.first || self.grants.is_some() || self.ctx.registry.may_hold_grants(&self.key);
        let old = if stopping {
            self.ctx.registry.take_hosted(&self.key)
        } else {
            None
        };
        if let Some(old) = old {
            stop(old).await;
            self.event(EventType::Normal, "Stopped", "controller stopped");
        }
        let mut removal_owed = false;
        if stopping
            && grants_may_remain
            && let Err(e) = grants::remove(&self.ctx.client, &self.uid, &self.key.0).await
        {
            tracing::warn!(controller = %format!("{}/{}", self.key.0, self.key.1), error = %e, "removing the grants; retrying");
            self.fingerprint = 0;
            removal_owed = true;
        }
        let grants = if stopping { None } else { self.grants };
        let authority = if stopping { None } else { self.authority };
        let key = self.key.clone();
        let old = self.ctx.registry.decide(
            self.key,
            &self.uid,
            self.fingerprint,
            self.outcome,
            hosted,
            self.script_ref,
        );
        self.ctx.registry.set_grants(&key, grants);
        self.ctx.registry.set_grants_remain(&key, removal_owed);
        self.ctx.registry.set_authority(&key, authority);
        // The caller stopped the old version before starting this one; anything still
        // here raced in and goes the same way.
        if let Some(old) = old {
            stop(old).await;
        }
    }
}

/// Stops a hosted controller: no new work, in-flight handlers get a moment, then are
/// cancelled.
pub async fn stop(h: Hosted) {
    h.controller.shutdown(STOP_GRACE).await;
    let _ = tokio::task::spawn_blocking(crate::script::memory::release).await;
}

/// Records an event on the resource, in the background ([`super::events`]).
pub fn publish(
    ctx: &Context,
    object: &ObjectReference,
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
    ctx.events.publish(event, object.clone());
}
