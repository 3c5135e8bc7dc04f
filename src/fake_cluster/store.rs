//! The stored objects, the resourceVersion counter, the event history watches resume
//! from, and the write log.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use serde_json::{Value as Json, json};
use tokio::sync::broadcast::Sender;

use super::Write;
use super::apply::Owners;
use super::kinds::{Kinds, has_status};
use crate::k8s::discovery::Resource;

/// How many events watches can resume from; an older resourceVersion is 410 Expired.
pub const HISTORY: usize = 10_000;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Added,
    Modified,
    Deleted,
}

/// One change, as watches see it.
#[derive(Debug)]
pub struct Event {
    pub rv: u64,
    pub kind: EventType,
    pub group: String,
    pub plural: String,
    pub namespace: String,
    /// The object after the change (its final state, for a removal).
    pub object: Json,
    /// The object before the change, so a watch can tell it left its selector.
    pub previous: Option<Json>,
}

/// (group, plural, namespace, name); namespace is "" for cluster-scoped objects.
pub type Key = (String, String, String, String);

/// A stored object and who owns which of its fields.
#[derive(Clone, Debug)]
pub struct Entry {
    pub object: Json,
    pub owners: Owners,
}

/// A change to commit: the object after it (None removes it).
pub struct Change<'a> {
    pub resource: &'a Resource,
    pub key: Key,
    pub verb: &'static str,
    /// The field manager, for the [`Write`] the tests read.
    #[cfg(test)]
    pub manager: Option<String>,
    pub before: Option<Json>,
    pub after: Option<Json>,
    pub owners: Owners,
}

/// The writes a fake keeps for reports: far more than one reconcile makes, so that a
/// long-lived fake's memory stays bounded.
pub const WRITES_KEPT: usize = 10_000;

pub struct Store {
    pub kinds: Kinds,
    pub objects: BTreeMap<Key, Entry>,
    pub rv: u64,
    history: VecDeque<Arc<Event>>,
    /// The latest writes, oldest first; `write_seq` counts every write ever made.
    writes: std::collections::VecDeque<Write>,
    write_seq: u64,
    uids: u64,
}

impl Store {
    pub fn new() -> Self {
        Self {
            kinds: Kinds::new(),
            objects: BTreeMap::new(),
            rv: 0,
            history: VecDeque::new(),
            writes: std::collections::VecDeque::new(),
            write_seq: 0,
            uids: 0,
        }
    }

    pub fn get(&self, key: &Key) -> Option<&Entry> {
        self.objects.get(key)
    }

    /// The objects of one resource, in one namespace or all (None), in key order.
    pub fn of_resource<'a>(
        &'a self,
        resource: &'a Resource,
        namespace: Option<&'a str>,
    ) -> impl Iterator<Item = (&'a Key, &'a Entry)> + 'a {
        let ar = &resource.api_resource;
        self.objects.iter().filter(move |(k, _)| {
            k.0 == ar.group && k.1 == ar.plural && namespace.is_none_or(|ns| k.2 == ns)
        })
    }

    #[cfg(test)]
    pub fn all_objects(&self) -> Vec<Json> {
        self.objects.values().map(|e| e.object.clone()).collect()
    }

    /// A fresh uid, unique within this fake.
    pub fn next_uid(&mut self) -> String {
        self.uids += 1;
        format!("fa4e0000-0000-4000-8000-{:012x}", self.uids)
    }

    /// Fills what the server sets on create: uid, creationTimestamp, generation,
    /// apiVersion and kind.
    pub fn stamp_new(&mut self, resource: &Resource, obj: &mut Json) {
        let uid = self.next_uid();
        set_type(resource, obj);
        let meta = &mut obj["metadata"];
        if !meta.is_object() {
            *meta = json!({});
        }
        if meta["uid"].as_str().is_none_or(str::is_empty) {
            meta["uid"] = json!(uid);
        }
        if meta["creationTimestamp"].as_str().is_none_or(str::is_empty) {
            meta["creationTimestamp"] = json!(now());
        }
        if !meta["generation"].is_u64() {
            meta["generation"] = json!(1);
        }
    }

    /// Stores a change: bumps the resourceVersion and generation, renders
    /// managedFields, records the write and the event, and tells open watches.
    /// Returns the stored object (or the removed one's final state).
    pub fn commit(&mut self, events: &Sender<Arc<Event>>, change: Change) -> Json {
        self.rv += 1;
        let rv = self.rv;
        let Change {
            resource,
            key,
            verb,
            #[cfg(test)]
            manager,
            before,
            after,
            owners,
        } = change;
        let (kind, object) = if let Some(mut obj) = after {
            set_type(resource, &mut obj);
            if let Some(before) = &before {
                let generation = before["metadata"]["generation"].as_u64().unwrap_or(1);
                let bumped = spec_of(resource, before) != spec_of(resource, &obj);
                obj["metadata"]["generation"] = json!(generation + u64::from(bumped));
            }
            obj["metadata"]["resourceVersion"] = json!(rv.to_string());
            owners.render(&mut obj);
            self.objects.insert(
                key.clone(),
                Entry {
                    object: obj.clone(),
                    owners,
                },
            );
            let kind = if before.is_some() {
                EventType::Modified
            } else {
                EventType::Added
            };
            (kind, obj)
        } else {
            let mut last = self
                .objects
                .remove(&key)
                .map(|e| e.object)
                .or_else(|| before.clone())
                .unwrap_or(Json::Null);
            if last.is_object() {
                last["metadata"]["resourceVersion"] = json!(rv.to_string());
            }
            (EventType::Deleted, last)
        };
        let event = Arc::new(Event {
            rv,
            kind,
            group: key.0.clone(),
            plural: key.1.clone(),
            namespace: key.2.clone(),
            object: object.clone(),
            previous: before.clone(),
        });
        if self.history.len() >= HISTORY {
            self.history.pop_front();
        }
        self.history.push_back(event.clone());
        // No receivers is fine: nobody watches.
        let _ = events.send(event);
        self.write_seq += 1;
        let seq = self.write_seq;
        if self.writes.len() >= WRITES_KEPT {
            self.writes.pop_front();
        }
        self.writes.push_back(Write {
            seq,
            verb,
            kind: resource.api_resource.kind.clone(),
            namespace: key.2,
            name: key.3,
            #[cfg(test)]
            manager,
            after: (kind != EventType::Deleted).then(|| object.clone()),
        });
        object
    }

    /// The events after `rv`, or None when they are no longer all retained.
    pub fn history_after(&self, rv: u64) -> Option<Vec<Arc<Event>>> {
        if let Some(first) = self.history.front()
            && rv + 1 < first.rv
        {
            return None;
        }
        Some(self.history.iter().filter(|e| e.rv > rv).cloned().collect())
    }

    /// The writes after `seq` that are still kept (the last [`WRITES_KEPT`]).
    pub fn writes_since(&self, seq: u64) -> Vec<Write> {
        self.writes
            .iter()
            .filter(|w| w.seq > seq)
            .cloned()
            .collect()
    }

    pub fn write_seq(&self) -> u64 {
        self.write_seq
    }
}

/// Sets apiVersion and kind, which a path-addressed body may lack.
pub fn set_type(resource: &Resource, obj: &mut Json) {
    if let Some(map) = obj.as_object_mut() {
        map.insert(
            "apiVersion".into(),
            json!(resource.api_resource.api_version),
        );
        map.insert("kind".into(), json!(resource.api_resource.kind));
    }
}

/// What a generation counts: everything outside metadata (and status, for kinds with
/// a status subresource).
fn spec_of(resource: &Resource, obj: &Json) -> Json {
    let mut copy = obj.clone();
    if let Some(map) = copy.as_object_mut() {
        map.remove("metadata");
        map.remove("apiVersion");
        map.remove("kind");
        if has_status(resource) {
            map.remove("status");
        }
    }
    copy
}

/// Now, in RFC 3339 to the second, as object timestamps are.
pub fn now() -> String {
    format!("{:.0}", jiff::Timestamp::now())
}
