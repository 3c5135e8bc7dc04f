//! The operator's hosted controllers, one entry per StarlarkController.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::grants::Grant;
use super::hosted::Hosted;
use super::resource::StarlarkControllerStatus;
use super::status::{self, Live, Outcome};

/// `(namespace, name)` of a StarlarkController.
pub type Key = (String, String);

/// What the operator holds for one StarlarkController.
#[derive(Default)]
pub struct Entry {
    pub uid: String,
    /// What was started (generation and script); equal means nothing to do.
    pub fingerprint: u64,
    pub hosted: Option<Hosted>,
    pub outcome: Outcome,
    /// The ConfigMap the script comes from, whose changes reload the controller.
    pub script_ref: Option<(String, String)>,
    /// The status last written, to skip writes that change nothing.
    pub written: Option<StarlarkControllerStatus>,
    /// The identity generated for the running controller, re-applied when someone
    /// deletes or edits part of it.
    pub grants: Option<Arc<Grant>>,
    /// Set when a generated object changed; the next reconcile re-applies the grants.
    pub grants_changed: bool,
}

/// The entries, behind a lock that is never held across an await.
#[derive(Default)]
pub struct Registry {
    entries: Mutex<HashMap<Key, Entry>>,
}

impl Registry {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Entry>> {
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The fingerprint of what runs for `key`, if anything was decided for it.
    pub fn fingerprint(&self, key: &Key) -> Option<u64> {
        self.lock().get(key).map(|e| e.fingerprint)
    }

    /// Records a decision (and the controller now running, if any); returns the
    /// controller it replaces, which the caller stops.
    pub fn decide(
        &self,
        key: Key,
        uid: &str,
        fingerprint: u64,
        outcome: Outcome,
        hosted: Option<Hosted>,
        script_ref: Option<(String, String)>,
    ) -> Option<Hosted> {
        let mut entries = self.lock();
        let entry = entries.entry(key).or_default();
        if entry.uid != uid {
            // A new object with the same name: its status starts afresh.
            entry.written = None;
        }
        entry.uid = uid.to_owned();
        entry.fingerprint = fingerprint;
        entry.outcome = outcome;
        entry.script_ref = script_ref;
        std::mem::replace(&mut entry.hosted, hosted)
    }

    /// Remembers the identity generated for `key` (None: nothing generated).
    pub fn set_grants(&self, key: &Key, grants: Option<Arc<Grant>>) {
        if let Some(e) = self.lock().get_mut(key) {
            e.grants = grants;
            e.grants_changed = false;
        }
    }

    /// The key whose generated objects carry the owner label `uid`; marks its grants
    /// for re-applying.
    pub fn grants_changed(&self, uid: &str) -> Option<Key> {
        let mut entries = self.lock();
        let (key, entry) = entries
            .iter_mut()
            .find(|(_, e)| e.uid == uid && e.grants.is_some())?;
        entry.grants_changed = true;
        Some(key.clone())
    }

    /// The grants of `key` to re-apply, if one of its generated objects changed.
    pub fn take_changed_grants(&self, key: &Key) -> Option<Arc<Grant>> {
        let mut entries = self.lock();
        let e = entries.get_mut(key)?;
        if !std::mem::take(&mut e.grants_changed) {
            return None;
        }
        e.grants.clone()
    }

    /// Takes the controller running for `key` out, for the caller to stop; the rest of
    /// the entry stays.
    pub fn take_hosted(&self, key: &Key) -> Option<Hosted> {
        self.lock().get_mut(key).and_then(|e| e.hosted.take())
    }

    /// Forgets `key`; returns its controller, which the caller stops.
    pub fn remove(&self, key: &Key) -> Option<Hosted> {
        self.lock().remove(key).and_then(|e| e.hosted)
    }

    /// Every controller, for shutdown.
    pub fn drain(&self) -> Vec<Hosted> {
        self.lock().drain().filter_map(|(_, e)| e.hosted).collect()
    }

    /// Every StarlarkController decided so far (all of them depend on the ceiling).
    pub fn keys(&self) -> Vec<Key> {
        self.lock().keys().cloned().collect()
    }

    /// StarlarkControllers whose script comes from the ConfigMap `namespace/name`.
    pub fn referencing(&self, namespace: &str, name: &str) -> Vec<Key> {
        self.lock()
            .iter()
            .filter(|(_, e)| {
                e.script_ref
                    .as_ref()
                    .is_some_and(|(n, m)| n == namespace && m == name)
            })
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Statuses that differ from what was last written.
    pub fn pending_statuses(&self) -> Vec<(Key, StarlarkControllerStatus)> {
        self.lock()
            .iter()
            .filter_map(|(k, e)| {
                let live = e.hosted.as_ref().map(live).unwrap_or_default();
                let next = status::render(&e.outcome, &live, e.written.as_ref());
                (e.written.as_ref() != Some(&next)).then(|| (k.clone(), next))
            })
            .collect()
    }

    /// Remembers a status as written.
    pub fn written(&self, key: &Key, status: StarlarkControllerStatus) {
        if let Some(e) = self.lock().get_mut(key) {
            e.written = Some(status);
        }
    }

    /// Every hosted controller's metric series, labelled by StarlarkController.
    pub fn render_metrics(&self, out: &mut String) {
        for ((ns, name), e) in self.lock().iter() {
            if let Some(h) = &e.hosted {
                let cr = format!("{ns}/{name}");
                h.controller
                    .render_metrics(&[("starlarkcontroller", &cr)], out);
            }
        }
    }

    /// How many StarlarkControllers are running.
    pub fn running(&self) -> usize {
        self.lock().values().filter(|e| e.hosted.is_some()).count()
    }
}

fn live(h: &Hosted) -> Live {
    let (reconciles, errors) = h.controller.counts();
    let latest = h.controller.latest();
    Live {
        reconciles,
        errors,
        last_error: latest.error,
        last_reconcile: latest.reconcile,
    }
}
