//! A running controller: the informer feeding a work queue, worker threads calling the
//! script's handlers, poll and resync timers, leader election, and a probe for health.
//! Start it with [`Controller::start`]; stop it with [`Controller::shutdown`].

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use serde_json::Value as Json;
use tokio::sync::watch;

use super::handlers::Handlers;
use super::informer::{self, Change, Key, Source, Store};
use super::leader::{self, LeaderConfig};
use super::metrics::Metrics;
use super::queue::{QueueConfig, WorkQueue};
use super::spec::ControlSpec;
use super::watches::{Role, Watches};
use crate::k8s::ops::Target;
use crate::k8s::session::Session;
use crate::script::host::Host;

/// Why a controller could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("resolving kind {kind:?}: {source}")]
    ResolveKind {
        kind: String,
        source: crate::k8s::ops::Error,
    },
    #[error("spawning a worker thread: {0}")]
    SpawnWorker(#[source] std::io::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything a controller is built from.
pub struct Config {
    /// The controller's name in logs and metrics.
    pub name: String,
    pub spec: ControlSpec,
    pub handlers: Handlers,
    /// The host the handlers run with (vars, permissions, the echo log).
    pub host: Arc<Host>,
    /// The cluster connection (with its own identity in the operator).
    pub session: Arc<Session>,
    /// A handler running longer than this is cancelled.
    pub handler_budget: Duration,
    /// Leader election settings, when `leader_election=True`.
    pub leader: Option<LeaderConfig>,
}

/// An item of work: a primary object to reconcile, or an object of a `watch_related`
/// kind whose map function must run.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum WorkKey {
    Primary(Key),
    Related(usize, Key),
}

/// A watch event waiting to be delivered to the event-form handlers, in order.
#[derive(Debug, Clone)]
pub(super) enum EventItem {
    Added(Arc<Json>),
    Modified(Arc<Json>, Arc<Json>),
    Deleted(Arc<Json>),
}

/// The work waiting for one key.
#[derive(Debug, Default)]
pub(super) struct Pending {
    pub events: VecDeque<EventItem>,
    /// Set when the level-triggered reconcile should run; the first trigger is kept for
    /// the log line.
    pub reconcile: Option<&'static str>,
    /// Updates that may trigger the reconcile. Whether one is our own echo is decided by
    /// the worker, because the watch event of our write can arrive before the write's
    /// response has been recorded; the worker runs only after that key's previous
    /// processing (and so its writes) finished.
    pub updates: Vec<(Arc<Json>, Arc<Json>)>,
}

/// Per-key event backlog limit: a key that somehow never gets processed cannot grow
/// without bound; the oldest events go first.
const MAX_PENDING_EVENTS: usize = 1000;

/// State shared by the informer callback, the timers and the workers.
pub(super) struct Shared {
    pub name: String,
    pub spec: ControlSpec,
    pub handlers: Handlers,
    pub host: Arc<Host>,
    pub session: Arc<Session>,
    pub target: Target,
    pub store: Arc<Store>,
    pub queue: WorkQueue<WorkKey>,
    pub pending: Mutex<HashMap<Key, Pending>>,
    /// The latest state of related objects waiting for their map function.
    pub related: Mutex<HashMap<(usize, Key), Arc<Json>>>,
    /// Children, watch_owned and watch_related informers.
    pub watches: Watches,
    /// Primaries whose reconcile returned children: they get a Ready condition.
    pub with_children: Mutex<HashSet<Key>>,
    pub metrics: Metrics,
    pub leading: watch::Receiver<bool>,
    pub leader_election: bool,
    /// Set on a hard stop: cancels handlers that are still running.
    pub stop: Arc<AtomicBool>,
    pub budget: Duration,
}

impl Shared {
    /// Handlers that see each watch event (the pod logger's form).
    pub fn wants_events(&self) -> bool {
        self.spec.reconcile_arity == Some(2)
            || self.handlers.on_create.is_some()
            || self.handlers.on_update.is_some()
            || self.handlers.on_delete.is_some()
    }

    /// Handlers that run on the object's current state (level-triggered).
    pub fn wants_level(&self) -> bool {
        self.handlers.reconcile.is_some() || self.handlers.finalize.is_some()
    }

    pub(super) fn is_leading(&self) -> bool {
        !self.leader_election || *self.leading.borrow()
    }

    /// An informer change of the primary kind.
    fn on_change(&self, change: Change) {
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
        {
            let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
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
        }
        self.queue.add(WorkKey::Primary(key));
    }

    /// A change the level-triggered reconcile need not see: with
    /// `generation_changed`, a status- or metadata-only update of an object that has a
    /// generation (unless it starts the object's deletion).
    fn ignorable(&self, old: &Json, new: &Json) -> bool {
        let same_generation = generation(old).is_some() && generation(old) == generation(new);
        let deleting = new["metadata"]["deletionTimestamp"].is_string()
            && !old["metadata"]["deletionTimestamp"].is_string();
        self.spec.generation_changed && same_generation && !deleting
    }

    /// An event of a secondary informer.
    fn on_secondary(&self, role: Role, change: Change) {
        let obj = change.object().clone();
        let Some(key) = Key::of(&obj) else { return };
        match role {
            Role::Related(i) => {
                self.related
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert((i, key.clone()), obj);
                self.queue.add(WorkKey::Related(i, key));
            }
            Role::Children | Role::Owned => {
                // Our own apply coming back is not news; anyone else's change is.
                if !matches!(change, Change::Deleted(_)) && self.host.writes.is_echo(&obj) {
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
                        .unwrap_or_else(|p| p.into_inner())
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
    fn requeue_all(&self, trigger: &'static str, as_events: bool) {
        // A resync re-delivers MODIFIED events, which already reach the two-argument
        // reconcile; a poll asks for the level reconcile, which reaches both forms.
        let events = as_events && self.wants_events();
        let level = self.wants_level() || (!events && self.spec.reconcile_arity == Some(2));
        for obj in self.store.objects() {
            let Some(key) = Key::of(&obj) else { continue };
            {
                let mut pending = self.pending.lock().unwrap_or_else(|p| p.into_inner());
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

/// A started controller.
pub struct Controller {
    shared: Arc<Shared>,
    workers: Vec<std::thread::JoinHandle<()>>,
    shutdown_tx: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Controller {
    /// Resolves the kind, starts the informer, timers, leader election and workers.
    ///
    /// # Errors
    /// An unknown kind, or discovery failing.
    pub async fn start(config: Config) -> Result<Self> {
        let Config {
            name,
            spec,
            handlers,
            host,
            session,
            handler_budget,
            leader,
        } = config;
        let ns = spec.namespace.clone().unwrap_or_else(|| "*".to_owned());
        let target = Target::resolve(&session, &spec.kind, Some(&ns))
            .await
            .map_err(|source| Error::ResolveKind {
                kind: spec.kind.clone(),
                source,
            })?;
        // Every kind resolves before anything starts, so a failure leaves nothing running.
        let mut owned = Vec::new();
        for kind in &spec.watch_owned {
            owned.push(resolve(&session, kind).await?);
        }
        let mut related = Vec::new();
        for kind in &spec.watch_related {
            related.push(resolve(&session, kind).await?);
        }
        let (shutdown_tx, shutdown_rx) = watch::channel(false);
        let (leading_tx, leading_rx) = watch::channel(leader.is_none());
        let queue = WorkQueue::new(QueueConfig {
            base_backoff: spec.backoff,
            ..QueueConfig::default()
        });
        let runtime = tokio::runtime::Handle::current();
        let shared = Arc::new_cyclic(|me: &Weak<Shared>| Shared {
            watches: {
                let (on_change, on_restart) = (me.clone(), me.clone());
                Watches::new(
                    runtime.clone(),
                    shutdown_rx.clone(),
                    move |role, c| {
                        if let Some(s) = on_change.upgrade() {
                            s.on_secondary(role, c)
                        }
                    },
                    move || {
                        if let Some(s) = on_restart.upgrade() {
                            s.metrics.record_watch_restart()
                        }
                    },
                )
            },
            related: Mutex::default(),
            with_children: Mutex::default(),
            name,
            leader_election: leader.is_some(),
            store: Arc::new(Store::default()),
            pending: Mutex::default(),
            metrics: Metrics::new(),
            leading: leading_rx,
            stop: Arc::new(AtomicBool::new(false)),
            budget: handler_budget,
            queue,
            target,
            spec,
            handlers,
            host,
            session,
        });
        let mut tasks = Vec::new();
        let source = Source {
            api: shared.target.api(&shared.session),
            resource: shared.target.resource.api_resource.clone(),
            labels: shared.spec.labels.clone(),
            fields: shared.spec.field_selector.clone(),
        };
        let cb = shared.clone();
        let restarts = shared.clone();
        tasks.push(tokio::spawn(informer::run(
            source,
            shared.store.clone(),
            move |c| cb.on_change(c),
            move || restarts.metrics.record_watch_restart(),
            shutdown_rx.clone(),
        )));
        if let Some(period) = shared.spec.poll {
            tasks.push(tokio::spawn(every(
                period,
                shared.clone(),
                shutdown_rx.clone(),
                |s| s.requeue_all("poll", false),
            )));
        }
        if let Some(period) = shared.spec.resync {
            tasks.push(tokio::spawn(every(
                period,
                shared.clone(),
                shutdown_rx.clone(),
                |s| s.requeue_all("resync", true),
            )));
        }
        if let Some(cfg) = leader {
            let client = shared.session.client.clone();
            let mut rx = shutdown_rx.clone();
            tasks.push(tokio::spawn(leader::run(
                client,
                cfg,
                leading_tx,
                async move {
                    let _ = rx.wait_for(|s| *s).await;
                },
            )));
            // A new leader reconciles everything, as a freshly started controller would.
            let s = shared.clone();
            let mut leading = shared.leading.clone();
            let mut rx = shutdown_rx.clone();
            tasks.push(tokio::spawn(async move {
                loop {
                    tokio::select! {
                        _ = rx.wait_for(|s| *s) => return,
                        changed = leading.changed() => if changed.is_err() { return },
                    }
                    let now_leading = *leading.borrow();
                    if now_leading {
                        tracing::info!(controller = %s.name, "became the leader");
                        s.requeue_all("leader", false);
                    } else {
                        tracing::warn!(controller = %s.name, "lost leadership; reconciling stops");
                    }
                }
            }));
        } else {
            drop(leading_tx);
        }
        for resource in owned {
            shared.watches.ensure(
                &shared.session,
                &resource,
                Role::Owned,
                shared.spec.namespace.as_deref(),
            );
        }
        for (i, resource) in related.into_iter().enumerate() {
            shared.watches.ensure(
                &shared.session,
                &resource,
                Role::Related(i),
                shared.spec.namespace.as_deref(),
            );
        }
        let mut workers = Vec::with_capacity(shared.spec.workers);
        for i in 0..shared.spec.workers {
            let s = shared.clone();
            let rt = runtime.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("kite-worker-{i}"))
                .spawn(move || super::worker::run(&s, &rt));
            match spawned {
                Ok(w) => workers.push(w),
                Err(source) => {
                    // Stop what started, so nothing of this controller keeps running.
                    shared.queue.shut_down();
                    let _ = shutdown_tx.send(true);
                    for t in tasks.iter().chain(shared.watches.take_tasks().iter()) {
                        t.abort();
                    }
                    for w in workers {
                        let _ = w.join();
                    }
                    return Err(Error::SpawnWorker(source));
                }
            }
        }
        tracing::info!(controller = %shared.name, kind = %shared.target.display_name(), namespace = %ns, workers = shared.spec.workers, "controller started");
        Ok(Self {
            shared,
            workers,
            shutdown_tx,
            tasks,
        })
    }

    /// The probe for /healthz, /readyz and /metrics.
    pub fn probe(&self) -> Arc<dyn crate::http::Probe> {
        Arc::new(ControllerProbe(self.shared.clone()))
    }

    /// Reconcile and error counts so far.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.shared.metrics.reconciles(),
            self.shared.metrics.errors(),
        )
    }

    /// Appends this controller's metric series, with extra labels (e.g. the operator's
    /// `starlarkcontroller`), to `out`; the caller writes the headers once.
    pub fn render_metrics(&self, extra_labels: &[(&str, &str)], out: &mut String) {
        self.shared.metrics.set_queue_depth(self.shared.queue.len());
        self.shared
            .metrics
            .render(&self.shared.name, extra_labels, out);
    }

    /// The latest reconcile time and handler error.
    pub fn latest(&self) -> crate::control::metrics::Latest {
        self.shared.metrics.latest()
    }

    /// True once the informer cache is synced.
    pub fn is_synced(&self) -> bool {
        self.shared.store.is_synced()
    }

    /// Stops taking new work, lets in-flight handlers finish within `grace` (then
    /// cancels them), stops the watches and releases the lease.
    pub async fn shutdown(self, grace: Duration) {
        let Controller {
            shared,
            workers,
            shutdown_tx,
            tasks,
        } = self;
        shared.queue.shut_down();
        let joined = tokio::task::spawn_blocking(move || {
            for w in workers {
                let _ = w.join();
            }
        });
        if tokio::time::timeout(grace, joined).await.is_err() {
            tracing::warn!(controller = %shared.name, "handlers still running after {grace:?}; cancelling them");
            shared.stop.store(true, Ordering::Relaxed);
        }
        let _ = shutdown_tx.send(true);
        for t in tasks.into_iter().chain(shared.watches.take_tasks()) {
            // The leader task releases the lease on shutdown; give it a moment.
            let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
        }
        tracing::info!(controller = %shared.name, "controller stopped");
    }
}

async fn resolve(session: &Session, kind: &str) -> Result<crate::k8s::discovery::Resource> {
    Target::resolve(session, kind, None)
        .await
        .map(|t| t.resource)
        .map_err(|source| Error::ResolveKind {
            kind: kind.to_owned(),
            source,
        })
}

/// Runs `f` every `period` (±10 % jitter, so many controllers do not poll in step).
async fn every(
    period: Duration,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
    f: fn(&Shared),
) {
    loop {
        let jitter = 0.9
            + 0.2
                * (std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.subsec_nanos())
                    .unwrap_or(0) as f64
                    / 1e9);
        tokio::select! {
            _ = shutdown.wait_for(|s| *s) => return,
            _ = tokio::time::sleep(period.mul_f64(jitter)) => {}
        }
        if shared.store.is_synced() {
            f(&shared);
        }
    }
}

struct ControllerProbe(Arc<Shared>);

impl crate::http::Probe for ControllerProbe {
    fn healthz(&self) -> Result<(), String> {
        let idle = self.0.store.idle_for();
        if idle > informer::IDLE_DEADLINE * 2 {
            return Err(format!("watch stalled for {}s", idle.as_secs()));
        }
        Ok(())
    }

    fn readyz(&self) -> Result<(), String> {
        if !self.0.store.is_synced() || !self.0.watches.synced() {
            return Err("caches not synced".into());
        }
        if !self.0.is_leading() {
            return Err("not the leader".into());
        }
        Ok(())
    }

    fn metrics(&self) -> String {
        let mut out = String::new();
        Metrics::render_headers(&mut out);
        self.0.metrics.set_queue_depth(self.0.queue.len());
        self.0.metrics.render(&self.0.name, &[], &mut out);
        out
    }
}
