//! An in-memory Kubernetes API server for `kite test` and `k8s.fake(...)`.
//!
//! [`FakeCluster`] answers the Kubernetes REST API at the HTTP level: it is a
//! `tower::Service` wrapped in a real `kube::Client`, so every kite code path (get,
//! list, apply, patch, delete, waits, watches, the controller runtime's informers,
//! children by server-side apply, pruning, status patches, finalizers, events) runs
//! unchanged against it.
//!
//! The parts: the kinds it serves (`kinds`), the objects and their history (`store`),
//! the verbs (`verbs`), server-side apply (`apply`), patches (`patch`), deletion and
//! garbage collection (`gc`), selectors (`selector`), watches (`watch`), discovery
//! (`discovery`), the scale subresource (`scale`), the HTTP routing (`service`), and
//! the `k8s.fake(...)` builtin
//! (`builtin`).
//!
//! # Caveats
//!
//! What a real API server does that this one simplifies or leaves out:
//! - No admission: no webhooks, no validation against CRD schemas or built-in types,
//!   no quotas, no name validation beyond "present".
//! - No defaulting: objects keep exactly the fields they were given (no
//!   `spec.strategy`, no `imagePullPolicy`), and no controllers run: a Deployment gets
//!   no ReplicaSet and no Pods, a Namespace no ServiceAccount.
//! - Strategic merge patch knows only `name`-keyed lists (containers, volumes, env,
//!   ports, ...) and `$patch: delete` in them; every other list is replaced, and CRD
//!   fields are merged as by a JSON merge patch.
//! - Server-side apply tracks ownership by leaf path (lists are atomic except lists of
//!   objects with a `name`), and `managedFields` is a simplified rendering of that.
//! - Garbage collection runs synchronously within the delete that triggers it, as
//!   background propagation whatever the policy says; foreground and orphan are not
//!   modelled.
//! - No RBAC: every request is allowed (access reviews answer allowed).
//! - One version per kind: the path's version is not checked against the kind's.
//! - Watches end after `timeoutSeconds` (15 s when absent) and keep the last 10,000
//!   events; an older resourceVersion is answered with 410 Expired.
//! - A namespace need not exist before objects are created in it (tests need not
//!   create one), and deleting a CRD leaves its kind served.
//! - The write log behind `k8s.testing`'s reports keeps the last 10,000 writes.
//! - The `scale` subresource is served for Deployments, StatefulSets, ReplicaSets and
//!   ReplicationControllers only (not for CRDs that declare one).

pub mod apply;
pub mod builtin;
mod discovery;
mod gc;
mod kinds;
mod patch;
mod scale;
mod selector;
mod service;
mod store;
mod verbs;
mod watch;

#[cfg(test)]
mod tests;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};

use serde_json::{Value as Json, json};

use store::Store;

/// Why a request to the fake failed, named after the API server's `reason`; each
/// becomes a `Status` object with the real server's code and message.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    #[error("{message}")]
    NotFound { message: String, details: Json },
    #[error("{message}")]
    AlreadyExists { message: String, details: Json },
    #[error("{message}")]
    Conflict { message: String, details: Json },
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    MethodNotAllowed(String),
    #[error("{0}")]
    Expired(String),
    /// Seeding an object (`objects=` / `yaml=`) failed.
    #[error("seeding {what}: {message}")]
    Seed { what: String, message: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The HTTP status code the real server answers with.
    pub fn code(&self) -> u16 {
        match self {
            Error::NotFound { .. } => 404,
            Error::AlreadyExists { .. } | Error::Conflict { .. } => 409,
            Error::BadRequest(_) | Error::Seed { .. } => 400,
            Error::Invalid(_) => 422,
            Error::MethodNotAllowed(_) => 405,
            Error::Expired(_) => 410,
        }
    }

    fn reason(&self) -> &'static str {
        match self {
            Error::NotFound { .. } => "NotFound",
            Error::AlreadyExists { .. } => "AlreadyExists",
            Error::Conflict { .. } => "Conflict",
            Error::BadRequest(_) | Error::Seed { .. } => "BadRequest",
            Error::Invalid(_) => "Invalid",
            Error::MethodNotAllowed(_) => "MethodNotAllowed",
            Error::Expired(_) => "Expired",
        }
    }

    /// The `Status` object the real server sends for this error.
    pub fn status(&self) -> Json {
        let mut status = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": self.to_string(),
            "reason": self.reason(), "code": self.code(),
        });
        if let Error::NotFound { details, .. }
        | Error::AlreadyExists { details, .. }
        | Error::Conflict { details, .. } = self
        {
            status["details"] = details.clone();
        }
        status
    }

    /// `pods "x" not found`.
    pub(crate) fn not_found(group: &str, plural: &str, name: &str) -> Self {
        Error::NotFound {
            message: format!("{} {name:?} not found", qualified(group, plural)),
            details: details(group, plural, name),
        }
    }

    pub(crate) fn already_exists(group: &str, plural: &str, name: &str) -> Self {
        Error::AlreadyExists {
            message: format!("{} {name:?} already exists", qualified(group, plural)),
            details: details(group, plural, name),
        }
    }

    pub(crate) fn conflict(group: &str, plural: &str, name: &str, why: &str) -> Self {
        Error::Conflict {
            message: format!(
                "Operation cannot be fulfilled on {} {name:?}: {why}",
                qualified(group, plural)
            ),
            details: details(group, plural, name),
        }
    }
}

/// `deployments.apps` or `pods`, as the API server names a resource in messages.
fn qualified(group: &str, plural: &str) -> String {
    if group.is_empty() {
        plural.to_owned()
    } else {
        format!("{plural}.{group}")
    }
}

fn details(group: &str, plural: &str, name: &str) -> Json {
    json!({"name": name, "group": group, "kind": plural})
}

/// One write to the fake, as [`FakeCluster::writes_since`] reports it.
#[derive(Debug, Clone)]
pub struct Write {
    pub seq: u64,
    /// `create`, `update`, `patch`, `apply`, `status` or `delete`.
    pub verb: &'static str,
    pub kind: String,
    pub namespace: String,
    pub name: String,
    /// The field manager that wrote it; only the tests read it.
    #[cfg(test)]
    pub manager: Option<String>,
    /// None when the object was removed.
    pub after: Option<Json>,
}

/// An in-memory API server; clones share it.
#[derive(Clone)]
pub struct FakeCluster {
    shared: Arc<Shared>,
}

pub(crate) struct Shared {
    store: Mutex<Store>,
    /// Live events for open watches, sent under the store's lock so they stay in order.
    events: tokio::sync::broadcast::Sender<Arc<store::Event>>,
    /// The resourceVersion each open watch has handed to its reader.
    watches: Mutex<Vec<Weak<AtomicU64>>>,
}

impl Default for FakeCluster {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for FakeCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeCluster")
            .field("resource_version", &self.resource_version())
            .finish_non_exhaustive()
    }
}

impl FakeCluster {
    /// An empty cluster serving the built-in kinds.
    pub fn new() -> Self {
        let (events, _) = tokio::sync::broadcast::channel(store::HISTORY);
        Self {
            shared: Arc::new(Shared {
                store: Mutex::new(Store::new()),
                events,
                watches: Mutex::new(Vec::new()),
            }),
        }
    }

    /// A client whose requests this fake answers (cheap; many may exist).
    ///
    /// Must be called within a tokio runtime: kube's client spawns its request buffer
    /// on it.
    pub fn client(&self, default_namespace: &str) -> kube::Client {
        kube::Client::new(
            service::FakeService {
                shared: self.shared.clone(),
            },
            default_namespace,
        )
    }

    /// Stores an object as given (status kept; resourceVersion, uid,
    /// creationTimestamp and generation filled), for `objects=` and `yaml=`.
    ///
    /// # Errors
    /// [`Error::Seed`] naming the object and the problem: no apiVersion, kind or name,
    /// a kind the fake does not serve, an object that exists already.
    pub fn seed(&self, obj: Json) -> Result<Json> {
        let mut store = self.shared.lock();
        verbs::seed(&mut store, &self.shared.events, obj)
    }

    /// Every stored object (apiVersion and kind set), sorted by (apiVersion, kind,
    /// namespace, name).
    #[cfg(test)]
    pub fn objects(&self) -> Vec<Json> {
        let mut all = self.shared.lock().all_objects();
        all.sort_by_key(sort_key);
        all
    }

    /// The current resourceVersion (bumped on every write).
    pub fn resource_version(&self) -> u64 {
        self.shared.lock().rv
    }

    /// Every write with a sequence number above `seq`, oldest first.
    pub fn writes_since(&self, seq: u64) -> Vec<Write> {
        self.shared.lock().writes_since(seq)
    }

    /// The sequence number of the latest write (0 before any).
    pub fn write_seq(&self) -> u64 {
        self.shared.lock().write_seq()
    }

    /// How many watch streams are open (their reader has not dropped them yet).
    pub fn open_watches(&self) -> usize {
        let mut watches = self
            .shared
            .watches
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        watches.retain(|w| w.strong_count() > 0);
        watches.len()
    }

    /// True when every open watch has handed its reader every event up to the current
    /// resourceVersion. A watch between two requests (kube resumes them) is not open.
    pub fn watches_caught_up(&self) -> bool {
        let rv = self.resource_version();
        let mut watches = self
            .shared
            .watches
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        watches.retain(|w| w.strong_count() > 0);
        watches
            .iter()
            .filter_map(Weak::upgrade)
            .all(|seen| seen.load(Ordering::SeqCst) >= rv)
    }
}

impl Shared {
    // The store stays consistent when a holder panicked: each request's changes are
    // made on copies and committed at the end.
    fn lock(&self) -> MutexGuard<'_, Store> {
        self.store.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn register_watch(&self, seen: &Arc<AtomicU64>) {
        self.watches
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Arc::downgrade(seen));
    }
}

#[cfg(test)]
fn sort_key(obj: &Json) -> (String, String, String, String) {
    let text = |v: &Json| v.as_str().unwrap_or_default().to_owned();
    (
        text(&obj["apiVersion"]),
        text(&obj["kind"]),
        text(&obj["metadata"]["namespace"]),
        text(&obj["metadata"]["name"]),
    )
}
