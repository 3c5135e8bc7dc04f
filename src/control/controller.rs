//! A running controller: the informer feeding a work queue, worker threads calling the
//! script's handlers, poll and resync timers, leader election, and a probe for health.
//! Start it with [`Controller::start`]; stop it with [`Controller::shutdown`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use tokio::sync::watch;

use super::handlers::Handlers;
use super::informer;
use super::informers::{self, Access};
use super::leader::{self, LeaderConfig, Validity};
use super::metrics::{Metrics, Scrape, Series};
use super::pool::Pool;
use super::queue::{QueueConfig, WorkQueue};
use super::shared::Shared;
use super::spec::ControlSpec;
use super::watches::{Role, Watches};
use crate::k8s::ops::Target;
use crate::k8s::session::Session;
use crate::k8s::write_log::WriteLog;
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
    #[error("watching {kind}: {source}")]
    Watch {
        kind: String,
        source: informers::Error,
    },
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
    /// A lease held by whoever hosts this controller (the operator's): nothing is
    /// written once it is no longer valid.
    pub outer_lease: Option<Arc<Validity>>,
    /// The worker threads to share (the operator's pool, and this controller's group
    /// in it); `None` starts a pool of `workers` threads for this controller alone.
    pub pool: Option<super::pool::Share>,
    /// The informers to subscribe to (the operator's, shared and gated); `None` starts
    /// informers for this controller alone, with its own client.
    pub informers: Option<Access>,
}

/// How long a stopping controller waits for its recorded Events to be written.
const EVENT_FLUSH: Duration = Duration::from_secs(5);

/// How long cancelled handlers get to unwind before the lease is released.
const CANCEL_WAIT: Duration = Duration::from_secs(5);

/// A started controller.
pub struct Controller {
    shared: Arc<Shared>,
    pool: Pool,
    /// This controller's membership in `pool`.
    member: u64,
    /// The pool is this controller's own, stopped with it.
    own_pool: bool,
    /// The informers are this controller's own, awaited when it stops.
    own_informers: bool,
    shutdown_tx: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Controller {
    /// Resolves the kind, starts the informer, timers, leader election and workers.
    ///
    /// # Errors
    /// An unknown kind, or discovery failing.
    pub async fn start(mut config: Config) -> Result<Self> {
        let given = config.pool.take();
        let own_informers = config.informers.is_none();
        let workers = config.spec.workers;
        let (shared, shutdown_tx, tasks) = launch(config, None).await?;
        let runtime = tokio::runtime::Handle::current();
        let (pool, group, own_pool) = match given {
            Some(share) => (share.pool, Some(share.group), false),
            None => match Pool::new(workers, workers, "kite-worker") {
                Ok(p) => (p, None, true),
                Err(source) => {
                    // Stop what started, so nothing of this controller keeps running.
                    shared.queue.shut_down();
                    let _ = shutdown_tx.send(true);
                    shared.watches.close();
                    for t in &tasks {
                        t.abort();
                    }
                    return Err(Error::SpawnWorker(source));
                }
            },
        };
        let member = pool.join_group(
            Arc::new(super::worker::QueueSource {
                shared: shared.clone(),
                runtime,
            }),
            workers,
            group.as_deref(),
        );
        let waker = pool.waker(member);
        shared.queue.set_waker(waker.clone());
        // A key added before the waker was set put nobody in line: look once more.
        waker();
        let ns = shared.spec.namespace.as_deref().unwrap_or("*");
        tracing::info!(controller = %shared.name, kind = %shared.target.display_name(), namespace = %ns, workers, pool = pool.size(), "controller started");
        Ok(Self {
            shared,
            pool,
            member,
            own_pool,
            own_informers,
            shutdown_tx,
            tasks,
        })
    }
}

/// What [`launch`] starts: the shared state, the shutdown trigger and the tasks.
pub(super) type Launched = (
    Arc<Shared>,
    watch::Sender<bool>,
    Vec<tokio::task::JoinHandle<()>>,
);

/// Resolves the kinds and starts the informer and watches. With a `manual` clock (a
/// test drives the controller, `k8s.testing`), the queue runs on that clock and the
/// timers and leader election are left to the caller; otherwise they start here.
pub(super) async fn launch(
    config: Config,
    manual: Option<super::queue::Clock>,
) -> Result<Launched> {
    let Config {
        name,
        spec,
        handlers,
        host,
        session,
        handler_budget,
        leader,
        outer_lease,
        pool: _,
        informers,
    } = config;
    // Every kind resolves before anything starts, so a failure leaves nothing running.
    let (target, owned, related) = resolve_kinds(&session, &spec).await?;
    // The primary informer first: a refusal leaves nothing running.
    let access = informers.unwrap_or_else(Access::private);
    let primary = access
        .open(
            &session,
            &informers::Want {
                resource: &target.resource.api_resource,
                namespaced: target.resource.namespaced,
                namespace: target.namespace.as_deref().filter(|n| *n != "*"),
                labels: spec.labels.as_deref(),
                fields: spec.field_selector.as_deref(),
            },
        )
        .await
        .map_err(|source| Error::Watch {
            kind: spec.kind.clone(),
            source,
        })?;
    let (shutdown_tx, shutdown_rx) = watch::channel(false);
    let (leading_tx, leading_rx) = watch::channel(leader.is_none());
    let own_lease = Validity::new();
    let leader = if manual.is_some() { None } else { leader };
    let queue = WorkQueue::new(QueueConfig {
        base_backoff: spec.backoff,
        clock: manual.clone().unwrap_or_default(),
        ..QueueConfig::default()
    });
    let shared = Arc::new_cyclic(|me: &Weak<Shared>| Shared {
        watches: {
            let (on_change, on_restart) = (me.clone(), me.clone());
            Watches::new(
                access,
                move |role, c| {
                    if let Some(s) = on_change.upgrade() {
                        s.on_secondary(role, c);
                    }
                },
                move || {
                    if let Some(s) = on_restart.upgrade() {
                        s.metrics.record_watch_restart();
                    }
                },
            )
        },
        related: Mutex::default(),
        with_children: Mutex::default(),
        name,
        leader_election: leader.is_some(),
        store: primary.store(),
        pending: Mutex::default(),
        held: std::sync::atomic::AtomicUsize::new(0),
        metrics: Arc::new(Metrics::new()),
        leading: leading_rx,
        stop: Arc::new(AtomicBool::new(false)),
        term: Mutex::new(Arc::new(AtomicBool::new(false))),
        lease: leader.as_ref().map(|_| own_lease.clone()),
        outer_lease,
        budget: handler_budget,
        queue,
        target,
        spec,
        handlers,
        writes: host.ext::<WriteLog>(),
        host,
        session,
    });
    let mut tasks = Vec::new();
    subscribe(&shared, primary);
    if manual.is_none() {
        tasks.extend(timers(&shared, &shutdown_rx));
    }
    if let Some(cfg) = leader {
        tasks.extend(elect(&shared, cfg, leading_tx, own_lease, &shutdown_rx));
    } else {
        drop(leading_tx);
    }
    if let Err(e) = watch_secondary(&shared, owned, related).await {
        // Stop what started, so nothing of this controller keeps running.
        shared.queue.shut_down();
        let _ = shutdown_tx.send(true);
        shared.watches.close();
        for t in &tasks {
            t.abort();
        }
        return Err(e);
    }
    Ok((shared, shutdown_tx, tasks))
}

/// The primary kind's target, and the owned and related kinds' resources.
async fn resolve_kinds(
    session: &Session,
    spec: &ControlSpec,
) -> Result<(
    Target,
    Vec<crate::k8s::discovery::Resource>,
    Vec<crate::k8s::discovery::Resource>,
)> {
    let ns = spec.namespace.clone().unwrap_or_else(|| "*".to_owned());
    let target = Target::resolve(session, &spec.kind, Some(&ns))
        .await
        .map_err(|source| Error::ResolveKind {
            kind: spec.kind.clone(),
            source,
        })?;
    let mut owned = Vec::new();
    for kind in &spec.watch_owned {
        owned.push(resolve(session, kind).await?);
    }
    let mut related = Vec::new();
    for kind in &spec.watch_related {
        related.push(resolve(session, kind).await?);
    }
    Ok((target, owned, related))
}

/// Feeds the primary informer's changes to the controller.
fn subscribe(shared: &Arc<Shared>, primary: informers::Opened) {
    // Weak: the informer may outlive this controller (others subscribe to it).
    let (cb, restarts) = (Arc::downgrade(shared), Arc::downgrade(shared));
    shared.watches.hold_primary(primary.subscribe(
        move |c| {
            if let Some(s) = cb.upgrade() {
                s.on_change(c);
            }
        },
        move || {
            if let Some(s) = restarts.upgrade() {
                s.metrics.record_watch_restart();
            }
        },
    ));
}

/// The poll and resync timers the spec asks for.
fn timers(
    shared: &Arc<Shared>,
    shutdown_rx: &watch::Receiver<bool>,
) -> Vec<tokio::task::JoinHandle<()>> {
    let mut tasks = Vec::new();
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
    tasks
}

/// Contends for the lease, and follows who holds it: the elector and the follower.
fn elect(
    shared: &Arc<Shared>,
    cfg: LeaderConfig,
    leading_tx: watch::Sender<bool>,
    own_lease: Arc<Validity>,
    shutdown_rx: &watch::Receiver<bool>,
) -> [tokio::task::JoinHandle<()>; 2] {
    let client = shared.session.client.clone();
    let mut rx = shutdown_rx.clone();
    let elector = tokio::spawn(leader::run(
        client,
        cfg,
        leading_tx,
        own_lease,
        async move {
            let _ = rx.wait_for(|s| *s).await;
        },
    ));
    // A new leader reconciles everything, as a freshly started controller would.
    let s = shared.clone();
    let mut leading = shared.leading.clone();
    let mut rx = shutdown_rx.clone();
    let follower = tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = rx.wait_for(|s| *s) => return,
                changed = leading.changed() => if changed.is_err() { return },
            }
            let now_leading = *leading.borrow();
            if now_leading {
                tracing::info!(controller = %s.name, "became the leader");
                s.new_term();
                s.requeue_all("leader", false);
            } else {
                // What runs stops now: the standby may take over once the
                // lease expires.
                s.end_term();
                tracing::warn!(controller = %s.name, "lost leadership; in-flight handlers cancelled, reconciling stops");
            }
        }
    });
    [elector, follower]
}

/// Subscribes to the owned and related kinds' informers.
async fn watch_secondary(
    shared: &Shared,
    owned: Vec<crate::k8s::discovery::Resource>,
    related: Vec<crate::k8s::discovery::Resource>,
) -> Result<()> {
    let secondary = owned.into_iter().map(|r| (r, Role::Owned)).chain(
        related
            .into_iter()
            .enumerate()
            .map(|(i, r)| (r, Role::Related(i))),
    );
    for (resource, role) in secondary {
        shared
            .watches
            .ensure(
                &shared.session,
                &resource,
                role,
                shared.spec.namespace.as_deref(),
            )
            .await
            .map_err(|source| Error::Watch {
                kind: resource.api_resource.kind.clone(),
                source,
            })?;
    }
    Ok(())
}

impl Controller {
    /// The probe for /healthz, /readyz and /metrics.
    pub fn probe(&self) -> Arc<dyn crate::http::Probe> {
        Arc::new(ControllerProbe(self.shared.clone()))
    }

    /// How this controller reaches its informers: [`Access::reauthorize`] asks again
    /// whether it may still read what it watches.
    pub fn access(&self) -> Access {
        self.shared.watches.access().clone()
    }

    /// Reconcile and error counts so far.
    pub fn counts(&self) -> (u64, u64) {
        (
            self.shared.metrics.reconciles(),
            self.shared.metrics.errors(),
        )
    }

    /// The controller's series for a [`Scrape`], with `extra` labels; current (the
    /// queue depth is read now).
    pub fn series(&self, extra: Vec<(&'static str, String)>) -> Series {
        self.shared.series(extra)
    }

    /// The latest reconcile time and handler error.
    pub fn latest(&self) -> crate::control::metrics::Latest {
        self.shared.metrics.latest()
    }

    /// Its name in logs and metrics.
    pub fn name(&self) -> &str {
        &self.shared.name
    }

    /// What its waiting events keep alive, in bytes of object versions.
    pub fn waiting(&self) -> usize {
        self.shared.held.load(Ordering::Relaxed)
    }

    /// Collapses its waiting events to one reconcile per object of its current state;
    /// returns how many events went.
    pub fn collapse_waiting(&self) -> usize {
        self.shared.collapse_waiting()
    }

    /// Takes no more work and drops its watches and waiting events now, before a
    /// [`Controller::shutdown`] that waits for its running handlers: what they keep is
    /// given back at once (for a controller stopped for the memory it keeps).
    pub fn close_watches(&self) {
        self.shared.queue.shut_down();
        self.shared.watches.close();
        self.shared.drop_waiting();
    }

    /// Stops taking new work, lets in-flight handlers finish within `grace` (then
    /// cancels them), stops the watches and releases the lease.
    pub async fn shutdown(self, grace: Duration) {
        let Controller {
            shared,
            pool,
            member,
            own_pool,
            own_informers,
            shutdown_tx,
            tasks,
        } = self;
        shared.queue.shut_down();
        // No worker takes them now: what they keep alive goes before the grace.
        shared.drop_waiting();
        let leave = |pool: Pool, wait: Duration| async move {
            tokio::task::spawn_blocking(move || pool.leave(member, wait))
                .await
                .unwrap_or(false)
        };
        let mut stopped = leave(pool.clone(), grace).await;
        if !stopped {
            tracing::warn!(controller = %shared.name, "handlers still running after {grace:?}; cancelling them");
            shared.stop.store(true, Ordering::Relaxed);
            shared.end_term();
            stopped = leave(pool.clone(), CANCEL_WAIT).await;
        }
        if own_pool {
            let _ = tokio::task::spawn_blocking(move || pool.shut_down()).await;
        }
        // The lease is released only once nothing of ours can still write; otherwise it
        // is left to expire, and the standby waits for that.
        if stopped {
            tracing::info!(controller = %shared.name, "workers stopped");
        } else {
            tracing::error!(controller = %shared.name, "workers did not stop; not releasing the lease");
            if let Some(l) = &shared.lease {
                l.end();
            }
            for t in &tasks {
                t.abort();
            }
        }
        // The events its handlers recorded are written before the lease goes: the
        // standby would otherwise count them again, or never see them.
        shared.session.flush_events(EVENT_FLUSH).await;
        let _ = shutdown_tx.send(true);
        shared.watches.close();
        for t in tasks {
            // The leader task releases the lease on shutdown; give it a moment.
            let _ = tokio::time::timeout(Duration::from_secs(5), t).await;
        }
        if own_informers {
            shared
                .watches
                .access()
                .informers()
                .join(Duration::from_secs(5))
                .await;
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
                * (f64::from(
                    std::time::SystemTime::now()
                        .duration_since(std::time::UNIX_EPOCH)
                        .map_or(0, |d| d.subsec_nanos()),
                ) / 1e9);
        tokio::select! {
            _ = shutdown.wait_for(|s| *s) => return,
            () = tokio::time::sleep(period.mul_f64(jitter)) => {}
        }
        if shared.store.is_synced() {
            // A walk over every cached object (tens of thousands, for a poll of a big
            // namespace) is blocking work: off the runtime's threads, which every
            // controller's watches and the operator's probes share.
            let shared = shared.clone();
            let _ = tokio::task::spawn_blocking(move || f(&shared)).await;
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
        let mut scrape = Scrape::new();
        scrape.events();
        scrape.controllers(vec![self.0.series(Vec::new())]);
        scrape.render()
    }
}
