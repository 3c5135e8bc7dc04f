//! Event routing: which informer changes become work, for the primary kind, its
//! children and its related kinds, and the timers' requeues.

use serde_json::Value as Json;

use std::sync::atomic::Ordering;

use super::informer::{Change, Key, size_of};
use super::shared::{EventItem, MAX_PENDING_BYTES, MAX_PENDING_EVENTS, Shared, WorkKey};
use super::watches::Role;

impl Shared {
    /// An informer change of the primary kind.
    pub(super) fn on_change(&self, change: Change) {
        // A queue that takes no more work (a stopping or held controller) needs no
        // backlog of events.
        if self.queue.is_shut_down() {
            return;
        }
        let Some(key) = Key::of(change.object()) else {
            return;
        };
        let wants_events = self.wants_events();
        let wants_level = self.wants_level();
        let level = match &change {
            Change::Added(_) if wants_level => Some("add"),
            _ => None,
        };
        let update = match &change {
            Change::Modified { old, new } if wants_level && !self.ignorable(old, new) => {
                Some((old.clone(), new.clone()))
            }
            _ => None,
        };
        if !wants_events && level.is_none() && update.is_none() {
            return;
        }
        // The versions this change keeps alive until a worker takes them: the new one
        // also sits in the cache, but is replaced there at the next change.
        let cost = if wants_events || update.is_some() {
            match &change {
                Change::Added(o) | Change::Deleted(o) => size_of(o),
                Change::Modified { old, new } => size_of(old) + size_of(new),
            }
        } else {
            0
        };
        {
            let mut pending = self
                .pending
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let p = pending.entry(key.clone()).or_default();
            if wants_events {
                if p.events.len() >= MAX_PENDING_EVENTS {
                    p.events.pop_front();
                    tracing::warn!(controller = %self.name, key = %key, "event backlog full; dropping the oldest event");
                }
                p.events.push_back(match change {
                    Change::Added(o) => EventItem::Added(o),
                    Change::Modified { old, new } => EventItem::Modified(old, new),
                    Change::Deleted(o) => EventItem::Deleted(o),
                });
            }
            if let Some(t) = level {
                p.reconcile.get_or_insert(t);
            }
            if let Some(u) = update {
                if p.updates.len() >= MAX_PENDING_EVENTS {
                    // Too many to judge one by one: reconcile to be safe.
                    p.reconcile.get_or_insert("update");
                    p.updates.clear();
                }
                p.updates.push(u);
            }
            p.bytes += cost;
            let held = self.held.fetch_add(cost, Ordering::Relaxed) + cost;
            if held > MAX_PENDING_BYTES && (!p.events.is_empty() || !p.updates.is_empty()) {
                let (dropped, freed) = p.collapse();
                self.held.fetch_sub(freed, Ordering::Relaxed);
                tracing::warn!(controller = %self.name, key = %key, dropped, "waiting events hold more than {} MiB of object versions; dropping this object's {dropped} events for one reconcile of its current state", MAX_PENDING_BYTES >> 20);
            }
        }
        self.queue.add(WorkKey::Primary(key));
    }

    /// A change the level-triggered reconcile need not see: with
    /// `generation_changed`, a status- or metadata-only update of an object that has a
    /// generation (unless it starts the object's deletion).
    pub(super) fn ignorable(&self, old: &Json, new: &Json) -> bool {
        let same_generation = generation(old).is_some() && generation(old) == generation(new);
        let deleting = new["metadata"]["deletionTimestamp"].is_string()
            && !old["metadata"]["deletionTimestamp"].is_string();
        self.spec.generation_changed && same_generation && !deleting
    }

    /// An event of a secondary informer.
    pub(super) fn on_secondary(&self, role: Role, change: Change) {
        let obj = change.object().clone();
        let Some(key) = Key::of(&obj) else { return };
        match role {
            Role::Related(i) => {
                self.related
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .insert((i, key.clone()), obj);
                self.queue.add(WorkKey::Related(i, key));
            }
            Role::Children | Role::Owned => {
                // Our own apply coming back is not news; anyone else's change is.
                if !matches!(change, Change::Deleted(_)) && self.writes.is_echo(&obj) {
                    return;
                }
                let ar = &self.target.resource.api_resource;
                let group_of = |api_version: &str| {
                    api_version
                        .split_once('/')
                        .map(|(g, _)| g.to_owned())
                        .unwrap_or_default()
                };
                for owner in obj["metadata"]["ownerReferences"]
                    .as_array()
                    .into_iter()
                    .flatten()
                {
                    if owner["kind"] != ar.kind.as_str()
                        || group_of(owner["apiVersion"].as_str().unwrap_or_default()) != ar.group
                    {
                        continue;
                    }
                    let Some(name) = owner["name"].as_str() else {
                        continue;
                    };
                    let namespace = if self.target.resource.namespaced {
                        key.namespace.clone()
                    } else {
                        String::new()
                    };
                    let parent = Key {
                        namespace,
                        name: name.to_owned(),
                    };
                    let trigger = if role == Role::Owned {
                        "owned"
                    } else {
                        "child"
                    };
                    self.pending
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .entry(parent.clone())
                        .or_default()
                        .reconcile
                        .get_or_insert(trigger);
                    self.queue.add(WorkKey::Primary(parent));
                }
            }
        }
    }

    /// Poll and resync: requeue every cached object.
    pub(super) fn requeue_all(&self, trigger: &'static str, as_events: bool) {
        // A resync re-delivers MODIFIED events, which already reach the two-argument
        // reconcile; a poll asks for the level reconcile, which reaches both forms.
        let events = as_events && self.wants_events();
        let level = self.wants_level() || (!events && self.spec.reconcile_arity == Some(2));
        for obj in self.store.objects() {
            let Some(key) = Key::of(&obj) else { continue };
            {
                let mut pending = self
                    .pending
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                let p = pending.entry(key.clone()).or_default();
                if events && p.events.len() < MAX_PENDING_EVENTS {
                    p.events
                        .push_back(EventItem::Modified(obj.clone(), obj.clone()));
                }
                if level {
                    p.reconcile.get_or_insert(trigger);
                }
            }
            self.queue.add(WorkKey::Primary(key));
        }
    }
}

fn generation(obj: &Json) -> Option<i64> {
    obj["metadata"]["generation"].as_i64()
}
