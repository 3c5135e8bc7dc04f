//! What the operator's decision about a controller resource is made on, read once per
//! reconcile: its spec, script, approval and the ceiling, and their fingerprint.

use std::hash::{Hash, Hasher};

use kube::ResourceExt;

use super::approval;
use super::assessment::read_script;
use super::ceiling::Ceiling;
use super::decision::Decision;
use super::reconciler::{Context, Error, Result};
use super::registry::Key;
use super::resource::StarlarkControllerSpec;
use super::tenant::Tenant;

/// What a decision is made on, but the script.
pub(super) struct Inputs {
    pub(super) kind: &'static str,
    pub(super) spec: StarlarkControllerSpec,
    pub(super) spec_json: serde_json::Value,
    pub(super) home: String,
    pub(super) name: String,
    /// Empty for the cluster-scoped kind.
    pub(super) namespace: String,
    pub(super) key: Key,
    pub(super) uid: String,
    pub(super) generation: i64,
    pub(super) ceiling: Result<Ceiling, String>,
    pub(super) approval: Option<String>,
    pub(super) fingerprint: u64,
    /// The fingerprint of the last decision, if any.
    pub(super) previous: Option<u64>,
}

impl Inputs {
    /// Reads them for `cr`, with its script (kept apart: the assessment takes it).
    pub(super) async fn read<K: Tenant>(
        cr: &K,
        ctx: &Context,
    ) -> Result<(Self, Result<String, String>)> {
        let spec = cr.common_spec();
        let home = cr.home(&ctx.operator_namespace);
        let key = cr.key();
        let uid = cr.uid().unwrap_or_default();
        let generation = cr.meta().generation.unwrap_or(0);
        let script = read_script(&ctx.client, &spec, &home)
            .await
            .map_err(Error::ReadScript)?;
        // The ceiling is part of what was decided: when the administrator changes it, every
        // controller is checked against it again (at the latest on the next ctx.recheck).
        let ceiling = Ceiling::read(&ctx.ceilings, &ctx.client, &ctx.ceiling)
            .await
            .map_err(Error::ReadCeiling)?;
        let approval = cr.annotations().get(approval::ANNOTATION).cloned();
        let fingerprint = {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            let bound = ceiling.as_ref().map(Ceiling::fingerprint);
            (generation, &uid, &script, bound, &approval).hash(&mut h);
            h.finish()
        };
        let previous = ctx.registry.fingerprint(&key);
        let inputs = Inputs {
            kind: K::KIND,
            spec_json: serde_json::to_value(&spec).unwrap_or_default(),
            spec,
            home,
            name: cr.name_any(),
            namespace: cr.namespace().unwrap_or_default(),
            key,
            uid,
            generation,
            ceiling,
            approval,
            fingerprint,
            previous,
        };
        Ok((inputs, script))
    }

    /// Nothing changed since the last decision.
    pub(super) fn unchanged(&self) -> bool {
        self.previous == Some(self.fingerprint)
    }

    /// What the approval was given for.
    pub(super) fn subject<'a>(
        &'a self,
        script: &'a Result<String, String>,
    ) -> approval::Subject<'a> {
        approval::Subject {
            kind: self.kind,
            namespace: &self.namespace,
            name: &self.name,
            spec: &self.spec_json,
            script_from: self
                .spec
                .script_from
                .as_ref()
                .and_then(|_| script.as_ref().ok())
                .map(String::as_str),
        }
    }

    /// A new decision about `cr`, on these inputs.
    pub(super) fn decision<'a, K: Tenant>(&self, cr: &K, ctx: &'a Context) -> Decision<'a> {
        let mut d = Decision::new(ctx, cr.object_ref(&()), self.key.clone(), self.uid.clone());
        d.fingerprint = self.fingerprint;
        d.first = self.previous.is_none();
        d.outcome.generation = self.generation;
        d.script_ref = self
            .spec
            .script_from
            .as_ref()
            .map(|f| (self.home.clone(), f.config_map_key_ref.name.clone()));
        d
    }
}
