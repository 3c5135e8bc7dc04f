//! An informer: list+watch of one kind into a cache, turned into ADDED / MODIFIED /
//! DELETED changes. It resumes watches from the last resourceVersion (bookmarks keep
//! it current), re-lists only after 410 Gone, and diffs the new list against the cache
//! so no change is lost or invented.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use kube::api::{Api, DynamicObject, ListParams, WatchEvent, WatchParams};
use kube::discovery::ApiResource;
use serde_json::Value as Json;
use tokio::sync::watch;

/// A watch that has sent nothing this long (not an event, not a bookmark, not the end
/// the server sends at [`WATCH_TIMEOUT_SECS`]) is on a dead connection (half-open: no
/// FIN ever comes) and is resumed on a new one.
pub const IDLE_DEADLINE: Duration = Duration::from_secs(20);
pub use crate::k8s::session::WATCH_TIMEOUT_SECS;
/// One list page.
const LIST_PAGE: u32 = 500;
/// One list page.
const CALL_TIMEOUT: Duration = Duration::from_mins(1);
/// Starting a watch (a pooled connection may be dead too).
const WATCH_START_TIMEOUT: Duration = Duration::from_secs(5);

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
    /// What the cached objects take, as [`size_of`] estimates them: charged to the
    /// namespaces of the subscribers when the operator hosts them.
    bytes: AtomicUsize,
    synced: AtomicBool,
    /// Unix millis of the last event or list, to tell a stalled watch.
    last_activity_ms: AtomicU64,
}

impl Store {
    pub fn get(&self, key: &Key) -> Option<Arc<Json>> {
        self.objects
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(key)
            .cloned()
    }

    pub fn keys(&self) -> Vec<Key> {
        self.objects
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .keys()
            .cloned()
            .collect()
    }

    pub fn objects(&self) -> Vec<Arc<Json>> {
        self.objects
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }

    /// What the cached objects take in memory (an estimate, see [`size_of`]).
    pub fn bytes(&self) -> usize {
        self.bytes.load(Ordering::Relaxed)
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
        let size = size_of(&obj);
        let new = Arc::new(obj);
        let mut map = self
            .objects
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let old = map.insert(key, new.clone());
        // Under the map's lock, so the count never drifts from what is cached.
        self.bytes.fetch_add(size, Ordering::Relaxed);
        if let Some(old) = &old {
            self.bytes.fetch_sub(size_of(old), Ordering::Relaxed);
        }
        match old {
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
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(key);
        if let Some(c) = &cached {
            self.bytes.fetch_sub(size_of(c), Ordering::Relaxed);
        }
        let obj = last.map(Arc::new).or(cached)?;
        Some(Change::Deleted(obj))
    }
}

/// About what `json` takes in memory: each value's slot, each string's and key's bytes,
/// and each map entry's share of its table. An estimate (the allocator rounds up), but
/// one that grows with the object, which is what a charge needs.
pub fn size_of(json: &Json) -> usize {
    const SLOT: usize = std::mem::size_of::<Json>();
    match json {
        Json::String(s) => SLOT + s.len(),
        Json::Array(items) => SLOT + items.iter().map(size_of).sum::<usize>(),
        Json::Object(map) => {
            SLOT + map
                .iter()
                .map(|(k, v)| 3 * SLOT + k.len() + size_of(v))
                .sum::<usize>()
        }
        Json::Null | Json::Bool(_) | Json::Number(_) => SLOT,
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, crate::duration::millis)
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

/// Completes a listed or watched object as scripts see it: apiVersion and kind filled
/// in (list items lack them), managedFields dropped (large, and of no use to handlers)
/// to keep the cache small. Objects are decoded straight into JSON, never through a
/// typed object, so this is the only pass over them before they are cached.
fn to_json(mut json: Json, ar: &ApiResource) -> Option<Json> {
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
///
/// Lists (in pages) once, then watches from the list's resourceVersion with bookmarks.
/// A watch the server ends (its timeout) or that goes silent (a half-open connection)
/// is resumed from the last resourceVersion seen, so a quiet kind is never listed
/// again; only 410 Gone (the version was compacted away) lists again, and the new list
/// is diffed against the cache so no change is lost or invented.
pub async fn run(
    source: Source,
    store: Arc<Store>,
    on_change: impl Fn(Change) + Send + Sync + 'static,
    on_restart: impl Fn() + Send + Sync + 'static,
    mut shutdown: watch::Receiver<bool>,
) {
    store.touch();
    let mut backoff = Backoff::default();
    // None: the cache must be (re)listed before watching.
    let mut version: Option<String> = None;
    loop {
        let Some(from) = version.clone() else {
            let listed = tokio::select! {
                _ = shutdown.wait_for(|stop| *stop) => return,
                listed = list(&source, &store, &on_change) => listed,
            };
            match listed {
                Ok(v) => {
                    version = Some(v);
                    backoff.reset();
                }
                Err(e) => {
                    on_restart();
                    tracing::warn!(kind = %source.resource.kind, error = %e, "list failed; retrying with backoff");
                    if pause(&mut shutdown, backoff.next()).await {
                        return;
                    }
                }
            }
            continue;
        };
        let mut params = WatchParams::default().timeout(WATCH_TIMEOUT_SECS);
        if let Some(l) = &source.labels {
            params = params.labels(l);
        }
        if let Some(f) = &source.fields {
            params = params.fields(f);
        }
        let started = tokio::select! {
            _ = shutdown.wait_for(|stop| *stop) => return,
            started = tokio::time::timeout(WATCH_START_TIMEOUT, watch_json(&source, &params, &from)) => started,
        };
        let mut stream = match started {
            Ok(Ok(stream)) => stream.boxed(),
            Ok(Err(e)) if is_gone(&e) => {
                version = None;
                continue;
            }
            Ok(Err(e)) => {
                on_restart();
                tracing::warn!(kind = %source.resource.kind, error = %e, "watch failed; retrying with backoff");
                if pause(&mut shutdown, backoff.next()).await {
                    return;
                }
                continue;
            }
            Err(_) => {
                on_restart();
                tracing::warn!(kind = %source.resource.kind, "starting the watch timed out; retrying");
                if pause(&mut shutdown, backoff.next()).await {
                    return;
                }
                continue;
            }
        };
        store.touch();
        let followed = follow(
            &mut stream,
            &source,
            &store,
            (&on_change, &on_restart),
            &mut shutdown,
            &mut backoff,
            &mut version,
        )
        .await;
        if followed.is_break() {
            return;
        }
    }
}

/// Follows one watch into the cache until it ends, goes silent or fails (the loop then
/// resumes it, or lists again when `version` is None); breaks on shutdown.
async fn follow(
    stream: &mut (impl futures::Stream<Item = kube::Result<WatchEvent<Json>>> + Unpin),
    source: &Source,
    store: &Store,
    (on_change, on_restart): (&(impl Fn(Change) + Send + Sync), &(impl Fn() + Send + Sync)),
    shutdown: &mut watch::Receiver<bool>,
    backoff: &mut Backoff,
    version: &mut Option<String>,
) -> ControlFlow<()> {
    let opened = std::time::Instant::now();
    let mut events = 0u64;
    loop {
        let next = tokio::select! {
            _ = shutdown.wait_for(|stop| *stop) => return ControlFlow::Break(()),
            next = tokio::time::timeout(IDLE_DEADLINE, stream.next()) => next,
        };
        let event = match next {
            Err(_) => {
                // Past the server's own timeout without a byte: the connection is
                // dead. Resume from where we were.
                on_restart();
                tracing::warn!(kind = %source.resource.kind, "watch silent for {IDLE_DEADLINE:?}; resuming it");
                break;
            }
            // The server ended the watch (its timeout): resume. One that ends at
            // once, again and again, is retried with backoff, not in a tight loop.
            Ok(None) => {
                if events == 0
                    && opened.elapsed() < Duration::from_secs(1)
                    && pause(shutdown, backoff.next()).await
                {
                    return ControlFlow::Break(());
                }
                break;
            }
            Ok(Some(Err(e))) => {
                if is_gone(&e) {
                    *version = None;
                } else {
                    on_restart();
                    tracing::warn!(kind = %source.resource.kind, error = %e, "watch error; resuming with backoff");
                    if pause(shutdown, backoff.next()).await {
                        return ControlFlow::Break(());
                    }
                }
                break;
            }
            Ok(Some(Ok(event))) => event,
        };
        store.touch();
        backoff.reset();
        events += 1;
        match event {
            WatchEvent::Added(obj) | WatchEvent::Modified(obj) => {
                if let Some(v) = rv(&obj) {
                    *version = Some(v.to_owned());
                }
                if let Some(change) = to_json(obj, &source.resource).and_then(|j| store.upsert(j)) {
                    on_change(change);
                }
            }
            WatchEvent::Deleted(obj) => {
                if let Some(v) = rv(&obj) {
                    *version = Some(v.to_owned());
                }
                let Some(json) = to_json(obj, &source.resource) else {
                    continue;
                };
                if let Some(change) = Key::of(&json).and_then(|k| store.remove(&k, Some(json))) {
                    on_change(change);
                }
            }
            WatchEvent::Bookmark(b) => *version = Some(b.metadata.resource_version),
            WatchEvent::Error(status) => {
                if status.code == 410 {
                    *version = None;
                } else {
                    on_restart();
                    tracing::warn!(kind = %source.resource.kind, error = %status.message, "watch error; resuming with backoff");
                    if pause(shutdown, backoff.next()).await {
                        return ControlFlow::Break(());
                    }
                }
                break;
            }
        }
    }
    ControlFlow::Continue(())
}

/// Lists every object in pages into the cache; what the list lacks was deleted while we
/// were not watching. Returns the list's resourceVersion, to watch from.
async fn list(
    source: &Source,
    store: &Store,
    on_change: &(impl Fn(Change) + Send + Sync),
) -> kube::Result<String> {
    let mut params = ListParams::default().limit(LIST_PAGE);
    if let Some(l) = &source.labels {
        params = params.labels(l);
    }
    if let Some(f) = &source.fields {
        params = params.fields(f);
    }
    let mut seen = HashSet::new();
    let version = loop {
        let mut page = tokio::time::timeout(CALL_TIMEOUT, list_json(source, &params))
            .await
            .map_err(|_| kube::Error::Service("listing timed out".into()))??;
        let items = match page.get_mut("items").map(Json::take) {
            Some(Json::Array(items)) => items,
            _ => Vec::new(),
        };
        for obj in items {
            let Some(json) = to_json(obj, &source.resource) else {
                continue;
            };
            if let Some(key) = Key::of(&json) {
                seen.insert(key);
            }
            if let Some(change) = store.upsert(json) {
                on_change(change);
            }
        }
        let meta = &page["metadata"];
        match meta["continue"].as_str().filter(|c| !c.is_empty()) {
            Some(token) => params.continue_token = Some(token.to_owned()),
            None => {
                break meta["resourceVersion"]
                    .as_str()
                    .unwrap_or_default()
                    .to_owned();
            }
        }
    };
    for key in store.keys().into_iter().filter(|k| !seen.contains(k)) {
        if let Some(change) = store.remove(&key, None) {
            on_change(change);
        }
    }
    store.synced.store(true, Ordering::Release);
    Ok(version)
}

/// One page of the source's list, as JSON.
async fn list_json(source: &Source, params: &ListParams) -> kube::Result<Json> {
    let request = kube::core::Request::new(source.api.resource_url())
        .list(params)
        .map_err(kube::Error::BuildRequest)?;
    source
        .api
        .clone()
        .into_client()
        .request::<Json>(request)
        .await
}

/// The source's watch from `version`, its objects decoded as JSON.
async fn watch_json(
    source: &Source,
    params: &WatchParams,
    version: &str,
) -> kube::Result<impl futures::Stream<Item = kube::Result<WatchEvent<Json>>> + use<>> {
    let request = kube::core::Request::new(source.api.resource_url())
        .watch(params, version)
        .map_err(kube::Error::BuildRequest)?;
    source
        .api
        .clone()
        .into_client()
        .request_events::<Json>(request)
        .await
}

fn is_gone(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 410)
}

/// Waits `delay` unless shutdown comes first (then true).
async fn pause(shutdown: &mut watch::Receiver<bool>, delay: Duration) -> bool {
    tokio::select! {
        _ = shutdown.wait_for(|stop| *stop) => true,
        () = tokio::time::sleep(delay) => false,
    }
}

/// Exponential backoff with jitter, from 200 ms to 30 s (as kube's default watcher
/// backoff), reset by any successful event.
#[derive(Debug)]
struct Backoff(Duration);

impl Default for Backoff {
    fn default() -> Self {
        Backoff(Duration::from_millis(200))
    }
}

impl Backoff {
    fn next(&mut self) -> Duration {
        let now = self.0;
        self.0 = (self.0 * 2).min(Duration::from_secs(30));
        let jitter = 0.8
            + 0.4
                * f64::from(
                    SystemTime::now()
                        .duration_since(UNIX_EPOCH)
                        .map_or(0, |d| d.subsec_nanos() % 1000),
                )
                / 1000.0;
        now.mul_f64(jitter)
    }

    fn reset(&mut self) {
        self.0 = Duration::from_millis(200);
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
    fn the_store_counts_what_it_caches() {
        let store = Store::default();
        let big = |rv: &str, n: usize| {
            json!({"metadata": {"name": "a", "namespace": "ns", "resourceVersion": rv},
                   "data": {"k": "x".repeat(n)}})
        };
        store.upsert(big("1", 100_000));
        let first = store.bytes();
        assert!((100_000..103_000).contains(&first), "{first}");
        store.upsert(big("2", 10));
        assert!(
            store.bytes() < 2000,
            "a replaced object gives its bytes back: {}",
            store.bytes()
        );
        store.upsert(obj("b", "1"));
        store.remove(&Key::of(&big("3", 0)).unwrap(), None);
        assert_eq!(store.bytes(), size_of(&obj("b", "1")));
        store.remove(&Key::of(&obj("b", "1")).unwrap(), None);
        assert_eq!(store.bytes(), 0);
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
