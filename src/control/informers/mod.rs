//! Informers shared by the controllers of one process: one list+watch and one cache per
//! distinct (resource, namespace, selectors), each interested controller a subscriber.
//!
//! `kite run` gives each controller a private registry ([`Access::private`]), so it
//! watches with its own client as before. `kite operator` shares one registry between
//! every hosted controller: the watch runs under the operator's identity, and a
//! [`Gate`] first asks whether the subscriber's own identity may list and watch what
//! it asks for, so reads stay exactly as authorised as an impersonated watch would be.
//! See `docs/design/sharing.md`.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use futures::future::BoxFuture;
use kube::discovery::ApiResource;
use tokio::sync::watch;

use super::informer::{self, Change, Source, Store};
use crate::k8s::session::Session;

/// Why a subscription was not made.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// The subscriber may not read what it asked to watch. The message names the
    /// account and the missing permission.
    #[error("{0}")]
    Refuse(String),
    /// Asking whether it may failed (the subscription is refused rather than guessed).
    #[error("checking read access: {0}")]
    Review(String),
    /// The subscriber is stopping: it starts no new watch.
    #[error("the controller is stopping: it starts no new watch")]
    Closed,
    /// The subscriber's group already has as many informers of its own as it may.
    #[error(
        "{group}'s controllers already watch {limit} distinct (kind, namespace, selectors), the operator's limit per namespace (--namespace-watches): watching {what} would start one more"
    )]
    Limit {
        group: String,
        limit: usize,
        what: String,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How a gate lets a subscriber in.
pub enum Admission {
    /// Into the shared informer, which runs with this (the host's) client.
    Shared(kube::Client),
    /// Into an informer of its own, under its own client: the host may not read this
    /// itself, so it cannot share a watch of it.
    Own,
}

/// Decides who may subscribe to what (the operator's SubjectAccessReviews).
pub trait Gate: Send + Sync {
    /// Whether `user` may list and watch `resource` in `namespace` (None: every
    /// namespace, or a cluster-scoped resource).
    ///
    /// # Errors
    /// [`Error::Refuse`] naming the missing permission, or [`Error::Review`].
    fn admit<'a>(
        &'a self,
        user: &'a str,
        resource: &'a ApiResource,
        namespace: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Admission>>;
}

/// What one informer watches; equal wants share one informer.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Scope {
    group: String,
    version: String,
    plural: String,
    /// None: every namespace (or a cluster-scoped kind).
    namespace: Option<String>,
    labels: Option<String>,
    fields: Option<String>,
    /// The identity of an informer that is not shared (admitted as [`Admission::Own`]).
    owner: Option<String>,
}

impl Scope {
    /// Whether both watch the same resource, namespace and selectors (whoever runs
    /// them).
    fn same_watch(&self, other: &Scope) -> bool {
        (
            &self.group,
            &self.version,
            &self.plural,
            &self.namespace,
            &self.labels,
            &self.fields,
        ) == (
            &other.group,
            &other.version,
            &other.plural,
            &other.namespace,
            &other.labels,
            &other.fields,
        )
    }

    /// `apps/deployments in t with labels a=b`, for messages.
    fn describe(&self) -> String {
        let mut s = if self.group.is_empty() {
            self.plural.clone()
        } else {
            format!("{}/{}", self.group, self.plural)
        };
        if let Some(ns) = &self.namespace {
            s.push_str(&format!(" in {ns}"));
        }
        for (what, v) in [("labels", &self.labels), ("fields", &self.fields)] {
            if let Some(v) = v {
                s.push_str(&format!(" with {what} {v}"));
            }
        }
        s
    }
}

/// What a controller asks to watch.
pub struct Want<'a> {
    pub resource: &'a ApiResource,
    pub namespaced: bool,
    /// None: every namespace. Ignored for a cluster-scoped kind.
    pub namespace: Option<&'a str>,
    pub labels: Option<&'a str>,
    pub fields: Option<&'a str>,
}

type ChangeFn = Arc<dyn Fn(Change) + Send + Sync>;
type RestartFn = Arc<dyn Fn() + Send + Sync>;

/// One subscription of an informer, and whose it is.
struct Subscriber {
    id: u64,
    /// The [`Access`] that made it: one controller, however many subscriptions it has.
    access: u64,
    /// Whom its cache is charged to (the operator's hosted controllers: their namespace).
    group: Option<Arc<str>>,
    on_change: ChangeFn,
    on_restart: RestartFn,
}

/// The subscribers of one informer. A change goes to the subscribers listed when it is
/// delivered, called outside the lock (a callback may drop a subscription). A late
/// subscriber is replayed the cache under the lock and listed after it: a change it is
/// not listed for is already in the cache it was replayed, since the informer updates
/// the cache before it delivers.
#[derive(Default)]
struct Fanout {
    subscribers: Mutex<Vec<Subscriber>>,
    next: AtomicU64,
}

impl Fanout {
    fn deliver(&self, change: &Change) {
        let listed: Vec<ChangeFn> = self.lock().iter().map(|s| s.on_change.clone()).collect();
        for on_change in listed {
            on_change(change.clone());
        }
    }

    fn restarted(&self) {
        let listed: Vec<RestartFn> = self.lock().iter().map(|s| s.on_restart.clone()).collect();
        for on_restart in listed {
            on_restart();
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Subscriber>> {
        self.subscribers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// One running informer. It stops when the last handle to it goes.
struct Entry {
    store: Arc<Store>,
    fanout: Arc<Fanout>,
    shutdown: watch::Sender<bool>,
    /// The group whose subscriber started it: counted against that group's limit until
    /// a subscriber is listed.
    opened_by: Option<Arc<str>>,
}

impl Entry {
    /// Whether it counts against `group`'s limit: one of its subscribers is of the
    /// group, or (before anyone is listed) the group started it.
    fn counts_for(&self, group: &str) -> bool {
        let subscribers = self.fanout.lock();
        if subscribers.is_empty() {
            return self.opened_by.as_deref() == Some(group);
        }
        subscribers
            .iter()
            .any(|s| s.group.as_deref() == Some(group))
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        let _ = self.shutdown.send(true);
    }
}

/// The informers of a process (or of one controller, for `kite run`).
pub struct Informers {
    runtime: tokio::runtime::Handle,
    gate: Option<Arc<dyn Gate>>,
    entries: Mutex<HashMap<Scope, Weak<Entry>>>,
    /// How many informers one group's subscribers may use ([`Informers::limit_groups`]).
    group_limit: std::sync::atomic::AtomicUsize,
    /// The informer tasks, to await at shutdown.
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
}

impl Informers {
    /// A registry whose subscriptions pass `gate` (none: every subscriber is admitted
    /// into informers run with its own client).
    pub fn new(runtime: tokio::runtime::Handle, gate: Option<Arc<dyn Gate>>) -> Arc<Self> {
        Arc::new(Self {
            runtime,
            gate,
            entries: Mutex::default(),
            group_limit: usize::MAX.into(),
            tasks: Mutex::default(),
        })
    }

    /// Lets the subscribers of one group (the operator: one namespace's controllers) use
    /// at most `limit` informers, each a watch on the API server and a cache. Joining an
    /// informer that already runs for another group costs nothing: the limit bounds what
    /// one tenant makes the process and the API server keep, not what it shares.
    pub fn limit_groups(&self, limit: usize) {
        self.group_limit.store(limit, Ordering::Relaxed);
    }

    /// How subscriber `user` (the identity its session acts as) reaches this registry;
    /// the caches it subscribes to are charged to `group` ([`Informers::shares`]).
    pub fn access(self: &Arc<Self>, user: Option<String>, group: Option<&str>) -> Access {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Access {
            informers: self.clone(),
            user,
            admitted: Arc::default(),
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            group: group.map(Arc::from),
        }
    }

    /// Informers running now.
    pub fn running(&self) -> usize {
        self.lock_entries()
            .values()
            .filter(|e| e.strong_count() > 0)
            .count()
    }

    /// Waits (up to `wait` each) for the informer tasks to end. Call it once every
    /// subscription has gone: a live informer's task would be waited for in vain.
    pub async fn join(&self, wait: std::time::Duration) {
        let tasks = std::mem::take(&mut *self.tasks.lock().unwrap_or_else(PoisonError::into_inner));
        for t in tasks {
            let _ = tokio::time::timeout(wait, t).await;
        }
    }

    /// Stops every informer task at once (a test's controller is dropped).
    pub fn abort(&self) {
        for t in self
            .tasks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain(..)
        {
            t.abort();
        }
    }

    /// Each subscriber's share of the caches it subscribes to, in bytes, by
    /// [`Access::id`]: each cache is split evenly between the subscribers of one group
    /// that use it, so a group pays for each cache once, however many of its
    /// controllers share it, and in full for every cache it alone makes the process
    /// keep (a distinct selector is a copy). One pass over every subscription.
    pub fn shares(&self) -> HashMap<u64, usize> {
        let live: Vec<Arc<Entry>> = self
            .lock_entries()
            .values()
            .filter_map(Weak::upgrade)
            .collect();
        let mut shares: HashMap<u64, usize> = HashMap::new();
        for entry in live {
            let bytes = entry.store.bytes();
            let mut groups: HashMap<Option<Arc<str>>, Vec<u64>> = HashMap::new();
            for s in entry.fanout.lock().iter() {
                groups.entry(s.group.clone()).or_default().push(s.access);
            }
            for mut accesses in groups.into_values() {
                accesses.sort_unstable();
                accesses.dedup();
                let each = bytes / accesses.len().max(1);
                for a in accesses {
                    let share = shares.entry(a).or_default();
                    *share = share.saturating_add(each);
                }
            }
        }
        shares
    }

    fn lock_entries(&self) -> std::sync::MutexGuard<'_, HashMap<Scope, Weak<Entry>>> {
        self.entries.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Refuses at once `scope` (whoever's) for `group` when the group is at its limit
    /// and no informer of that resource, namespace and selectors runs.
    ///
    /// # Errors
    /// [`Error::Limit`].
    fn within_limit(&self, group: Option<&Arc<str>>, scope: &Scope) -> Result<()> {
        let entries = self.lock_entries();
        if entries
            .iter()
            .any(|(s, e)| e.strong_count() > 0 && s.same_watch(scope))
        {
            return Ok(());
        }
        self.room_for(&entries, group, scope)
    }

    /// Whether `group` may start one more informer (`scope`) besides `entries`.
    ///
    /// # Errors
    /// [`Error::Limit`] when it already uses as many as [`Informers::limit_groups`]
    /// allows.
    fn room_for(
        &self,
        entries: &HashMap<Scope, Weak<Entry>>,
        group: Option<&Arc<str>>,
        scope: &Scope,
    ) -> Result<()> {
        let limit = self.group_limit.load(Ordering::Relaxed);
        let Some(g) = group.filter(|_| limit != usize::MAX) else {
            return Ok(());
        };
        let used = entries
            .values()
            .filter_map(Weak::upgrade)
            .filter(|e| e.counts_for(g))
            .count();
        if used >= limit {
            return Err(Error::Limit {
                group: g.to_string(),
                limit,
                what: scope.describe(),
            });
        }
        Ok(())
    }

    /// The informer for `scope`, started with `client` when none runs.
    ///
    /// # Errors
    /// [`Error::Limit`] when starting it would give `group` more informers than
    /// [`Informers::limit_groups`] allows.
    fn entry(
        &self,
        scope: Scope,
        client: kube::Client,
        want: &Want<'_>,
        group: Option<&Arc<str>>,
    ) -> Result<Arc<Entry>> {
        let mut entries = self.lock_entries();
        if let Some(e) = entries.get(&scope).and_then(Weak::upgrade) {
            return Ok(e);
        }
        entries.retain(|_, e| e.strong_count() > 0);
        self.room_for(&entries, group, &scope)?;
        let ar = want.resource;
        let api = match scope.namespace.as_deref() {
            Some(ns) => kube::Api::namespaced_with(client, ns, ar),
            None => kube::Api::all_with(client, ar),
        };
        let source = Source {
            api,
            resource: ar.clone(),
            labels: scope.labels.clone(),
            fields: scope.fields.clone(),
        };
        let (shutdown, stopped) = watch::channel(false);
        let entry = Arc::new(Entry {
            store: Arc::new(Store::default()),
            fanout: Arc::new(Fanout::default()),
            shutdown,
            opened_by: group.cloned(),
        });
        let (changes, restarts) = (entry.fanout.clone(), entry.fanout.clone());
        let task = self.runtime.spawn(informer::run(
            source,
            entry.store.clone(),
            move |c| changes.deliver(&c),
            move || restarts.restarted(),
            stopped,
        ));
        let mut tasks = self.tasks.lock().unwrap_or_else(PoisonError::into_inner);
        tasks.retain(|t| !t.is_finished());
        tasks.push(task);
        tracing::info!(kind = %format!("{}/{}", ar.group, ar.plural), namespace = scope.namespace.as_deref().unwrap_or("*"), shared = scope.owner.is_none(), "watching");
        entries.insert(scope, Arc::downgrade(&entry));
        Ok(entry)
    }
}

/// A resource and namespace (None: all) a subscriber was admitted to read.
type Read = (ApiResource, Option<String>);

/// A controller's way into a registry, with the identity it is checked as.
#[derive(Clone)]
pub struct Access {
    informers: Arc<Informers>,
    user: Option<String>,
    /// What the gate let this subscriber read: asked again by [`Access::reauthorize`].
    admitted: Arc<Mutex<Vec<Read>>>,
    /// Tells this subscriber's subscriptions from others' (clones are one subscriber).
    id: u64,
    group: Option<Arc<str>>,
}

impl Access {
    /// A registry of one's own, with no gate: informers run with the subscriber's client.
    pub fn private() -> Self {
        Informers::new(tokio::runtime::Handle::current(), None).access(None, None)
    }

    /// The registry.
    pub fn informers(&self) -> &Arc<Informers> {
        &self.informers
    }

    /// The informer for `want`, started if none runs, once the gate admits this
    /// subscriber. Nothing is delivered until [`Opened::subscribe`].
    ///
    /// # Errors
    /// The gate refused, or could not decide.
    pub async fn open(&self, session: &Session, want: &Want<'_>) -> Result<Opened> {
        let ar = want.resource;
        let namespace = want.namespace.filter(|_| want.namespaced);
        let mut scope = Scope {
            group: ar.group.clone(),
            version: ar.version.clone(),
            plural: ar.plural.clone(),
            namespace: namespace.map(str::to_owned),
            labels: want.labels.map(str::to_owned),
            fields: want.fields.map(str::to_owned),
            owner: None,
        };
        // Before the gate's reviews: a group at its limit asking for a watch that no
        // one runs costs the API server nothing.
        self.informers.within_limit(self.group.as_ref(), &scope)?;
        let (client, owner) = match (&self.informers.gate, &self.user) {
            (Some(gate), Some(user)) => {
                let admission = gate.admit(user, ar, namespace).await?;
                let mut admitted = self.admitted.lock().unwrap_or_else(PoisonError::into_inner);
                let read = (ar.clone(), namespace.map(str::to_owned));
                if !admitted.contains(&read) {
                    admitted.push(read);
                }
                match admission {
                    Admission::Shared(client) => (client, None),
                    Admission::Own => (session.client.clone(), Some(user.clone())),
                }
            }
            // No gate: a registry of one identity. A gate with no identity to check
            // (never the operator's case) shares nothing.
            (None, _) => (session.client.clone(), None),
            (Some(_), None) => (session.client.clone(), Some(String::new())),
        };
        scope.owner = owner;
        Ok(Opened {
            entry: self
                .informers
                .entry(scope, client, want, self.group.as_ref())?,
            access: self.id,
            group: self.group.clone(),
        })
    }

    /// Tells this subscriber from others in [`Informers::shares`] (its clones are the
    /// same subscriber).
    pub fn id(&self) -> u64 {
        self.id
    }
}

impl Access {
    /// Asks the gate again about everything it let this subscriber read (its
    /// permissions may have been taken away since).
    ///
    /// # Errors
    /// The first refusal, or a review that failed.
    pub async fn reauthorize(&self) -> Result<()> {
        let (Some(gate), Some(user)) = (&self.informers.gate, &self.user) else {
            return Ok(());
        };
        let admitted = self
            .admitted
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        for (ar, namespace) in &admitted {
            gate.admit(user, ar, namespace.as_deref()).await?;
        }
        Ok(())
    }
}

/// An informer a controller may subscribe to.
pub struct Opened {
    entry: Arc<Entry>,
    access: u64,
    group: Option<Arc<str>>,
}

impl Opened {
    /// The informer's cache, shared by every subscriber.
    pub fn store(&self) -> Arc<Store> {
        self.entry.store.clone()
    }

    /// Starts delivering changes: first `Added` for every object already cached, then
    /// every live change. A change racing the replay may arrive once more as
    /// `Modified`; handlers are level-based, so it costs one reconcile at most.
    pub fn subscribe(
        self,
        on_change: impl Fn(Change) + Send + Sync + 'static,
        on_restart: impl Fn() + Send + Sync + 'static,
    ) -> Subscription {
        let fanout = &self.entry.fanout;
        let id = fanout.next.fetch_add(1, Ordering::Relaxed);
        {
            let mut subscribers = fanout.lock();
            for obj in self.entry.store.objects() {
                on_change(Change::Added(obj));
            }
            subscribers.push(Subscriber {
                id,
                access: self.access,
                group: self.group,
                on_change: Arc::new(on_change),
                on_restart: Arc::new(on_restart),
            });
        }
        Subscription {
            entry: self.entry,
            id,
        }
    }
}

/// A controller's subscription; dropping it unsubscribes, and the informer stops when
/// its last subscriber goes.
pub struct Subscription {
    entry: Arc<Entry>,
    id: u64,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.entry.fanout.lock().retain(|s| s.id != self.id);
    }
}

#[cfg(test)]
mod tests;
