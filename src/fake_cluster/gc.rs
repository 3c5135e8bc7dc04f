//! Deletion: finalizers hold an object (marked with a deletionTimestamp) until they are
//! gone; removing an object deletes its dependents (by ownerReferences) and a
//! namespace's contents, synchronously and in the background style.

use std::sync::Arc;

use serde_json::{Value as Json, json};
use tokio::sync::broadcast::Sender;

use super::store::{Change, Event, Key, Store, now};
use super::{Error, Result};

/// Deletes the object at `key`: marks it when it has finalizers, otherwise removes it
/// and what depends on it. Returns the object's state after the call.
///
/// # Errors
/// [`Error::NotFound`] when there is no such object.
pub fn delete(store: &mut Store, events: &Sender<Arc<Event>>, key: &Key) -> Result<Json> {
    let Some(entry) = store.get(key).cloned() else {
        return Err(Error::not_found(&key.0, &key.1, &key.3));
    };
    let Some(resource) = store.kinds.by_plural(&key.0, &key.1).cloned() else {
        return Err(Error::not_found(&key.0, &key.1, &key.3));
    };
    let obj = entry.object.clone();
    if has_finalizers(&obj) {
        if obj["metadata"]["deletionTimestamp"].is_string() {
            return Ok(obj);
        }
        let mut marked = obj.clone();
        marked["metadata"]["deletionTimestamp"] = json!(now());
        marked["metadata"]["deletionGracePeriodSeconds"] = json!(0);
        return Ok(store.commit(
            events,
            Change {
                resource: &resource,
                key: key.clone(),
                verb: "delete",
                #[cfg(test)]
                manager: None,
                before: Some(obj),
                after: Some(marked),
                owners: entry.owners,
            },
        ));
    }
    Ok(remove(store, events, &resource, key, obj))
}

/// Removes a marked object once an update has emptied its finalizers.
pub fn release_if_done(store: &mut Store, events: &Sender<Arc<Event>>, key: &Key) {
    let Some(entry) = store.get(key) else {
        return;
    };
    let obj = entry.object.clone();
    if obj["metadata"]["deletionTimestamp"].is_string()
        && !has_finalizers(&obj)
        && let Some(resource) = store.kinds.by_plural(&key.0, &key.1).cloned()
    {
        remove(store, events, &resource, key, obj);
    }
}

fn remove(
    store: &mut Store,
    events: &Sender<Arc<Event>>,
    resource: &crate::k8s::discovery::Resource,
    key: &Key,
    obj: Json,
) -> Json {
    let uid = obj["metadata"]["uid"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let last = store.commit(
        events,
        Change {
            resource,
            key: key.clone(),
            verb: "delete",
            #[cfg(test)]
            manager: None,
            before: Some(obj),
            after: None,
            owners: super::apply::Owners::default(),
        },
    );
    let mut dependents: Vec<Key> = store
        .objects
        .iter()
        .filter(|(_, e)| owned_by(&e.object, &uid))
        .map(|(k, _)| k.clone())
        .collect();
    if key.0.is_empty() && key.1 == "namespaces" {
        dependents.extend(store.objects.keys().filter(|k| k.2 == key.3).cloned());
    }
    for dependent in dependents {
        // A dependent may have gone with an earlier one; that is not an error here.
        let _ = delete(store, events, &dependent);
    }
    last
}

fn has_finalizers(obj: &Json) -> bool {
    obj["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| !f.is_empty())
}

fn owned_by(obj: &Json, uid: &str) -> bool {
    !uid.is_empty()
        && obj["metadata"]["ownerReferences"]
            .as_array()
            .is_some_and(|refs| refs.iter().any(|r| r["uid"].as_str() == Some(uid)))
}
