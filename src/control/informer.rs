//! An informer: list+watch of one kind into a cache, turned into ADDED / MODIFIED /
//! DELETED changes. It re-lists after 410 Gone and after any API server restart, and
//! diffs the new list against the cache so no change is lost or invented.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::discovery::ApiResource;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use serde_json::Value as Json;
use tokio::sync::watch;

/// Longer than the server-side watch timeout plus a bookmark interval: a watch that is
/// silent this long is assumed dead (a half-open connection) and is restarted.
pub const IDLE_DEADLINE: Duration = Duration::from_secs(300);
/// Below the API server's 240 s limit on client-requested watch timeouts... and well
/// below kube's own default of 290 s, so proxies do not cut the watch first.
pub const WATCH_TIMEOUT_SECS: u32 = 230;

/// The cache key of an object.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    /// Empty for cluster-scoped objects.
    pub namespace: String,
    pub name: String,
}

impl Key {
    /// The key of a JSON object.
    pub fn of(obj: &Json) -> Option<Self> {
        let meta = &obj["metadata"];
        Some(Self {
            namespace: meta["namespace"].as_str().unwrap_or_default().to_owned(),
            name: meta["name"].as_str()?.to_owned(),
        })
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{}", self.name)
        } else {
            write!(f, "{}/{}", self.namespace, self.name)
        }
    }
}

/// A change seen by the informer. `old` is the previously cached object.
#[derive(Debug, Clone)]
pub enum Change {
    Added(Arc<Json>),
    Modified { old: Arc<Json>, new: Arc<Json> },
    Deleted(Arc<Json>),
}

impl Change {
    /// The object as it is now (the last known state for a deletion).
    pub fn object(&self) -> &Arc<Json> {
        match self {
            Change::Added(o) | Change::Deleted(o) | Change::Modified { new: o, .. } => o,
        }
    }
}

/// The cache of one informer, shared with the worker threads.
#[derive(Default)]
pub struct Store {
    objects: RwLock<HashMap<Key, Arc<Json>>>,
    synced: AtomicBool,
    /// Unix millis of the last event or list, to tell a stalled watch.
    last_activity_ms: AtomicU64,
}

impl Store {
    pub fn get(&self, key: &Key) -> Option<Arc<Json>> {
        self.objects
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .cloned()
    }

    pub fn keys(&self) -> Vec<Key> {
        self.objects
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect()
    }

    pub fn objects(&self) -> Vec<Arc<Json>> {
        self.objects
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .cloned()
            .collect()
    }

    pub fn len(&self) -> usize {
        self.objects.read().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// True once the first list has been fully received.
    pub fn is_synced(&self) -> bool {
        self.synced.load(Ordering::Acquire)
    }

    /// Time since the watch last showed signs of life.
    pub fn idle_for(&self) -> Duration {
        let last = self.last_activity_ms.load(Ordering::Relaxed);
        Duration::from_millis(now_ms().saturating_sub(last))
    }

    fn touch(&self) {
        self.last_activity_ms.store(now_ms(), Ordering::Relaxed);
    }

    fn upsert(&self, obj: Json) -> Option<Change> {
        let key = Key::of(&obj)?;
        let new = Arc::new(obj);
        let mut map = self.objects.write().unwrap_or_else(|p| p.into_inner());
        match map.insert(key, new.clone()) {
            None => Some(Change::Added(new)),
            // A re-list returns unchanged objects; they are not changes.
            Some(old) if rv(&old) == rv(&new) => None,
            Some(old) => Some(Change::Modified { old, new }),
        }
    }

    fn remove(&self, key: &Key, last: Option<Json>) -> Option<Change> {
        let cached = self
            .objects
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .remove(key);
        let obj = last.map(Arc::new).or(cached)?;
        Some(Change::Deleted(obj))
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

fn rv(obj: &Json) -> Option<&str> {
    obj["metadata"]["resourceVersion"].as_str()
}

/// What to watch.
#[derive(Clone)]
pub struct Source {
    pub api: Api<DynamicObject>,
    pub resource: ApiResource,
    pub labels: Option<String>,
    pub fields: Option<String>,
}

/// Converts a watched object to the JSON scripts see: apiVersion and kind filled in,
/// managedFields dropped (large, and of no use to handlers) to keep the cache small.
fn to_json(obj: DynamicObject, ar: &ApiResource) -> Option<Json> {
    let mut json = serde_json::to_value(obj).ok()?;
    let map = json.as_object_mut()?;
    map.entry("apiVersion")
        .or_insert_with(|| Json::from(ar.api_version.clone()));
    map.entry("kind")
        .or_insert_with(|| Json::from(ar.kind.clone()));
    if let Some(meta) = map.get_mut("metadata").and_then(Json::as_object_mut) {
        meta.remove("managedFields");
    }
    Some(json)
}

/// Runs the informer until `shutdown` turns true, calling `on_change` for each change
/// and `on_restart` when the watch had to be restarted (both on the async runtime: they
/// must not block).
pub async fn run(
    source: Source,
    store: Arc<Store>,
    on_change: impl Fn(Change) + Send + Sync + 'static,
    on_restart: impl Fn() + Send + Sync + 'static,
    mut shutdown: watch::Receiver<bool>,
) {
    let mut config = watcher::Config::default().timeout(WATCH_TIMEOUT_SECS);
    if let Some(l) = &source.labels {
        config = config.labels(l);
    }
    if let Some(f) = &source.fields {
        config = config.fields(f);
    }
    store.touch();
    loop {
        let mut stream = watcher::watcher(source.api.clone(), config.clone())
            .default_backoff()
            .boxed();
        let mut listing: Option<HashSet<Key>> = None;
        loop {
            let next = tokio::select! {
                _ = shutdown.wait_for(|stop| *stop) => return,
                next = tokio::time::timeout(IDLE_DEADLINE, stream.next()) => next,
            };
            let event = match next {
                Err(_) => {
                    tracing::warn!(kind = %source.resource.kind, "watch idle for {IDLE_DEADLINE:?}; restarting it");
                    break;
                }
                Ok(None) => break,
                Ok(Some(Err(e))) => {
                    // The watcher backs off and resumes (re-listing on 410) by itself.
                    on_restart();
                    tracing::warn!(kind = %source.resource.kind, error = %e, "watch error; retrying with backoff");
                    continue;
                }
                Ok(Some(Ok(event))) => event,
            };
            store.touch();
            match event {
                Event::Init => listing = Some(HashSet::new()),
                Event::InitApply(obj) => {
                    let Some(json) = to_json(obj, &source.resource) else {
                        continue;
                    };
                    if let (Some(seen), Some(key)) = (listing.as_mut(), Key::of(&json)) {
                        seen.insert(key);
                    }
                    if let Some(change) = store.upsert(json) {
                        on_change(change);
                    }
                }
                Event::InitDone => {
                    // Whatever the new list lacks was deleted while we were not watching.
                    let seen = listing.take().unwrap_or_default();
                    for key in store.keys().into_iter().filter(|k| !seen.contains(k)) {
                        if let Some(change) = store.remove(&key, None) {
                            on_change(change);
                        }
                    }
                    store.synced.store(true, Ordering::Release);
                }
                Event::Apply(obj) => {
                    if let Some(change) =
                        to_json(obj, &source.resource).and_then(|j| store.upsert(j))
                    {
                        on_change(change);
                    }
                }
                Event::Delete(obj) => {
                    let Some(json) = to_json(obj, &source.resource) else {
                        continue;
                    };
                    if let Some(change) = Key::of(&json).and_then(|k| store.remove(&k, Some(json)))
                    {
                        on_change(change);
                    }
                }
            }
        }
        on_restart();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(name: &str, rv: &str) -> Json {
        json!({"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}})
    }

    #[test]
    fn upserts_classify_changes_and_ignore_unchanged_relists() {
        let store = Store::default();
        assert!(matches!(
            store.upsert(obj("a", "1")),
            Some(Change::Added(_))
        ));
        assert!(store.upsert(obj("a", "1")).is_none());
        match store.upsert(obj("a", "2")) {
            Some(Change::Modified { old, new }) => {
                assert_eq!(rv(&old), Some("1"));
                assert_eq!(rv(&new), Some("2"));
            }
            other => panic!("{other:?}"),
        }
        let key = Key {
            namespace: "ns".into(),
            name: "a".into(),
        };
        assert!(matches!(store.remove(&key, None), Some(Change::Deleted(_))));
        assert!(store.remove(&key, None).is_none());
        assert_eq!(key.to_string(), "ns/a");
    }
}
