//! `kite operator`: watches StarlarkControllers and runs each one in-process, with
//! leader election, health and metrics endpoints, batched status writes and a clean
//! shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::ops::ControlFlow;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::FutureExt;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::runtime::watcher;
use serde_json::json;
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

use super::assembly::{Parts, stopped};
use super::certs;
use super::fanout::Taps;
use super::kinds;
use super::registration::{self, Endpoint, Registration};
use super::registry::{Key, PendingStatus, Registry};
use super::resource::{ClusterStarlarkController, StarlarkController, StarlarkControllerStatus};
use super::tenant::is_cluster_key;
use super::trigger;
use super::webhook;
use crate::control::leader::{self, LeaderConfig};

/// How `kite operator` runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Watch StarlarkControllers in this namespace only (and no
    /// ClusterStarlarkControllers).
    pub namespace: Option<String>,
    /// Host only StarlarkControllers and ClusterStarlarkControllers with these labels.
    pub selector: Option<String>,
    /// Where ClusterStarlarkControllers' ServiceAccounts and scripts live.
    pub operator_namespace: String,
    pub health: Option<SocketAddr>,
    /// Contend for a Lease in this namespace; None runs without leader election.
    pub leader_election: Option<String>,
    /// Spread the controllers over the live replicas ([`super::shard`]).
    pub shards: bool,
    pub identity: String,
    pub ceiling: String,
    pub handler_budget: Duration,
    /// The floors and caps every hosted script runs within.
    pub limits: crate::script::host::Limits,
    /// At most one status write per StarlarkController per period.
    pub status_period: Duration,
    /// How often a running controller's author, approval and read access are checked
    /// again.
    pub recheck_period: Duration,
    /// The memory one namespace's hosted controllers may keep ([`super::quota`]).
    pub namespace_memory: usize,
    /// The informers one namespace's hosted controllers may start
    /// ([`Informers::limit_groups`](crate::control::informers::Informers::limit_groups)).
    pub namespace_watches: usize,
    /// Reconciles of one kind under way at once (`--concurrent-reconciles`).
    pub concurrent_reconciles: u16,
    pub grace: Duration,
    /// Where the admission webhook listens.
    pub webhook_bind: SocketAddr,
    /// Where the logs API listens (None: not served).
    pub logs_bind: Option<SocketAddr>,
    /// The host other replicas reach this one's logs API at (its pod IP in a cluster).
    pub logs_host: String,
    /// Register the webhook through this Service in the operator's namespace (inside a
    /// pod); None registers `https://<bind>:<port>` (beside the API server).
    pub webhook_service: Option<String>,
    /// The MutatingWebhookConfiguration's name; None: one per `--namespace`/`--selector`.
    pub webhook_configuration: Option<String>,
    /// Approvals older than this no longer hold ([`super::approval::Key::with_max_age`]).
    pub approval_max_age: Option<Duration>,
    /// `/metrics` behind TokenReview and SubjectAccessReview even on loopback (it always
    /// is on any other address: it lists every tenant's controllers).
    pub secure_metrics: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "the StarlarkController and ClusterStarlarkController CRDs are not installed (kubectl apply -f crds/starlarkcontroller.yaml, or kite crd | kubectl apply -f -)"
    )]
    FindCrd,
    #[error("checking for the StarlarkController CRD: {0}")]
    CheckCrd(#[source] kube::Error),
    #[error(transparent)]
    Serve(#[from] crate::http::Error),
    #[error(transparent)]
    Certify(#[from] certs::Error),
    #[error(transparent)]
    ServeWebhook(#[from] webhook::Error),
    #[error(transparent)]
    ServeLogs(#[from] super::logs::Error),
    #[error(transparent)]
    Register(#[from] registration::Error),
    #[error("lost the leader-election lease; exiting so a standby takes over")]
    LoseLeadership,
    #[error("starting the hosted controllers' worker threads: {0}")]
    StartPool(#[source] std::io::Error),
    #[error("building the hosted controllers' client: {0}")]
    BuildTenantClient(#[source] tower::BoxError),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The name of the operator's own lease.
pub const LEASE: &str = "kite-operator";

/// Runs the operator until `shutdown` completes, then stops every hosted controller.
///
/// In phases: assemble its parts, serve the admission webhook and the probes, lead (with
/// leader election), register the webhook, drive the controllers of both kinds, and
/// shut down. Stopped while it waits to lead or to register, it returns at once.
///
/// # Errors
/// A missing CRD, a busy health port, or lost leadership.
pub async fn run(
    (client, config): (kube::Client, kube::Config),
    opts: Options,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    tokio::spawn(crate::k8s::support::warn_if_unsupported(client.clone()));
    let mut parts = Parts::assemble((client, config), opts, shutdown).await?;
    let registration = serve(&parts).await?;
    let ControlFlow::Continue(elector) = lead(&mut parts).await else {
        return Ok(());
    };
    // Registered before anything is reconciled: a resource created before the webhook
    // is in place is never approved.
    let ControlFlow::Continue(()) = register(&parts, &registration).await else {
        return Ok(());
    };
    let background = Background::start(&mut parts, registration).await?;
    let lost = drive(&parts, &background.audited).await;
    shut_down(parts, background, elector, lost).await
}

/// Serves the admission webhook and, when asked, the probes; gives the webhook's
/// registration, made once this replica leads.
async fn serve(parts: &Parts) -> Result<Registration> {
    let opts = &parts.opts;
    let path = webhook::path(&parts.material.approval_key);
    let (bound, serve) = webhook::webhook(
        opts.webhook_bind,
        parts.tls.clone(),
        parts.ctx.clone(),
        path.clone(),
        stopped(&parts.stop),
    )
    .await?;
    tokio::spawn(serve);
    let registration = Registration {
        name: opts.webhook_configuration.clone().unwrap_or_else(|| {
            Registration::default_name(
                opts.namespace.as_deref(),
                opts.selector.as_deref(),
                opts.webhook_service.is_none(),
            )
        }),
        endpoint: match &opts.webhook_service {
            Some(name) => Endpoint::Service {
                namespace: opts.operator_namespace.clone(),
                name: name.clone(),
                path,
            },
            None => Endpoint::Url(format!(
                "https://{}:{}{path}",
                parts.endpoint_host,
                bound.port()
            )),
        },
        namespace: opts.namespace.clone(),
        object_selector: parts.object_selector.clone(),
    };
    tracing::info!(%bound, "serving the admission webhook");
    if let Some(addr) = opts.health {
        super::probe::serve(parts, addr).await?;
    }
    Ok(registration)
}

/// With leader election: contends for the lease and waits to lead; gives the elector's
/// task. Breaks when the run is stopped first.
async fn lead(parts: &mut Parts) -> ControlFlow<(), Option<leader::Done>> {
    let Some(lease_ns) = &parts.opts.leader_election else {
        return ControlFlow::Continue(None);
    };
    // Taken only with leader election (and once): see `Parts::leading_tx`.
    let Some(leading_tx) = parts.leading_tx.take() else {
        return ControlFlow::Continue(None);
    };
    let opts = &parts.opts;
    let lc = LeaderConfig::new(LEASE, lease_ns.clone(), opts.identity.clone());
    let validity = parts
        .lease
        .clone()
        .unwrap_or_else(crate::control::leader::Validity::new);
    // The lease goes only once the hosted controllers have stopped (or when `run`
    // returns early): a standby must never run them beside ours.
    // On a thread of its own, so that a busy runtime cannot make it late
    // (`leader::isolated`).
    let release = stopped(&parts.release.1);
    let elector = leader::isolated(
        "kite-leader",
        (parts.client.clone(), parts.config.clone()),
        move |client| leader::run(client, lc, leading_tx, validity, release),
    );
    tracing::info!(lease = LEASE, namespace = %lease_ns, identity = %opts.identity, "waiting to lead");
    let (mut leading, mut stop) = (parts.leading.clone(), parts.stop.clone());
    tokio::select! {
        _ = leading.wait_for(|l| *l) => {}
        _ = stop.wait_for(|s| *s) => return ControlFlow::Break(()),
    }
    tracing::info!("leading: starting the StarlarkController controllers");
    ControlFlow::Continue(Some(elector))
}

/// Registers the admission webhook, retrying until it is; breaks when the run is
/// stopped first.
async fn register(parts: &Parts, registration: &Registration) -> ControlFlow<()> {
    let mut delay = Duration::from_millis(500);
    loop {
        let mut stop = parts.stop.clone();
        let attempt = registration::register(
            &parts.client,
            registration,
            &parts.tls,
            &parts.opts.operator_namespace,
            &parts.hosts,
            true,
        );
        let failed = tokio::select! {
            r = attempt => match r {
                Ok(()) => return ControlFlow::Continue(()),
                Err(e) => e,
            },
            _ = stop.wait_for(|s| *s) => return ControlFlow::Break(()),
        };
        tracing::warn!(error = %failed, "registering the admission webhook; retrying");
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            _ = stop.wait_for(|s| *s) => return ControlFlow::Break(()),
        }
        delay = (delay * 2).min(Duration::from_secs(30));
    }
}

/// What runs beside the hosted controllers until the run shuts down.
struct Background {
    /// The logs API, when served.
    logs: Option<super::logs::Served>,
    /// A local run's webhook configuration (its name and URL), withdrawn with it.
    local: Option<(String, String)>,
    /// Keeps the webhook registered.
    keeper: JoinHandle<()>,
    /// Writes the statuses.
    flusher: JoinHandle<()>,
    /// Audits what the hosted controllers' caches hold.
    auditor: JoinHandle<()>,
    /// Controllers stopped for what their caches hold, to be decided again.
    audited: broadcast::Sender<Key>,
}

impl Background {
    /// Serves the logs API (when asked) and starts keeping the webhook registered,
    /// writing statuses and auditing caches.
    async fn start(parts: &mut Parts, registration: Registration) -> Result<Self> {
        let (client, opts) = (&parts.client, &parts.opts);
        let logs = match parts.logs_listener.take() {
            Some(listener) => {
                let logs_opts = super::logs::Options {
                    namespace: opts.operator_namespace.clone(),
                    serving: super::logs::Serving {
                        cert: parts.material.cert.clone(),
                        key: parts.material.key.clone(),
                        ca: parts.material.ca.clone(),
                    },
                    local: opts.webhook_service.is_none(),
                    shards: parts.shards.clone(),
                };
                let served = super::logs::logs(
                    client,
                    parts.registry.clone(),
                    listener,
                    &logs_opts,
                    stopped(&parts.stop),
                )
                .await?;
                Some(served)
            }
            None => None,
        };
        // A local run's configuration goes with it (see `registration::withdraw`).
        let local = match &registration.endpoint {
            Endpoint::Url(url) => Some((registration.name.clone(), url.clone())),
            Endpoint::Service { .. } => None,
        };
        let keeper = tokio::spawn(registration::keep_registered(
            client.clone(),
            registration,
            parts.tls.clone(),
            opts.operator_namespace.clone(),
            parts.hosts.clone(),
            stopped(&parts.stop),
        ));

        let flusher = tokio::spawn(flush_statuses(
            client.clone(),
            parts.registry.clone(),
            opts.status_period,
            stopped(&parts.stop),
        ));
        let (audited, _) = broadcast::channel(1024);
        let auditor = tokio::spawn(super::caches::caches(
            parts.registry.clone(),
            parts.informers.clone(),
            audited.clone(),
            stopped(&parts.stop),
        ));
        Ok(Background {
            logs,
            local,
            keeper,
            flusher,
            auditor,
            audited,
        })
    }
}

/// Runs the controllers of both kinds until the run stops or loses the lease; true if
/// it lost the lease.
async fn drive(parts: &Parts, audited: &broadcast::Sender<Key>) -> bool {
    let Parts {
        client,
        opts,
        registry,
        ctx,
        ..
    } = parts;
    let lost = Arc::new(AtomicBool::new(false));
    let (lost_flag, mut lead_watch, stop_for_lead) =
        (lost.clone(), parts.leading.clone(), parts.stop.clone());
    // Losing the lease ends the run: a standby takes over with fresh state.
    let end = async move {
        let mut stop = stop_for_lead;
        tokio::select! {
            _ = stop.wait_for(|s| *s) => {}
            _ = lead_watch.wait_for(|l| !*l) => lost_flag.store(true, Ordering::Relaxed),
        }
    }
    .boxed()
    .shared();
    let tenants = watcher::Config {
        label_selector: opts.selector.clone(),
        ..trigger::watch_config()
    };
    let taps = Taps::new(client, opts.namespace.as_ref(), &opts.ceiling, &ctx.seen);
    let namespaced = kinds::controller::<StarlarkController>(
        client,
        opts,
        &tenants,
        (registry, audited),
        ctx,
        &taps,
        end.clone(),
    );
    // A namespace-scoped operator hosts no cluster-wide controllers.
    let cluster = async {
        if opts.namespace.is_none() {
            kinds::controller::<ClusterStarlarkController>(
                client,
                opts,
                &tenants,
                (registry, audited),
                ctx,
                &taps,
                end.clone(),
            )
            .await;
        }
    };
    let crs_synced = kinds::namespaced_synced(client, opts, &tenants);
    let synced = parts.synced.clone();
    tokio::spawn(async move {
        crs_synced.await;
        synced.store(true, Ordering::Relaxed);
    });
    futures::join!(namespaced, cluster);
    lost.load(Ordering::Relaxed)
}

/// Withdraws what a local run registered, stops the hosted controllers (at once after
/// losing the lease), then lets go of the lease.
async fn shut_down(
    parts: Parts,
    background: Background,
    elector: Option<leader::Done>,
    lost: bool,
) -> Result<()> {
    let Parts {
        client,
        opts,
        registry,
        pool,
        informers,
        release,
        ..
    } = &parts;
    // The webhook stops with the run: creates must not wait for it meanwhile.
    background.keeper.abort();
    if let Some((name, url)) = &background.local
        && let Some(command) = registration::withdraw(client, name, url).await
    {
        tracing::warn!(configuration = %name, "could not remove this run's admission webhook configuration, which refuses creates while no operator serves it; remove it with: {command}");
    }
    // A local run's logs API goes with it too (in a cluster, the other replicas serve it).
    if let Some(served) = background.logs.filter(|s| s.local)
        && let Some(command) =
            super::logs::apiservice::withdraw(client, &opts.operator_namespace, &served.ca).await
    {
        tracing::warn!(
            "could not remove this run's logs APIService, which makes discovery fail while no operator serves it; remove it with: {command}"
        );
    }

    let hosted = registry.drain();
    tracing::info!(
        controllers = hosted.len(),
        "stopping the hosted controllers"
    );
    // After losing the lease, nothing waits: the standby may already be running them.
    let grace = if lost { Duration::ZERO } else { opts.grace };
    futures::future::join_all(hosted.into_iter().map(|h| h.controller.shutdown(grace))).await;
    let pool = pool.clone();
    let _ = tokio::task::spawn_blocking(move || pool.shut_down()).await;
    informers.join(Duration::from_secs(5)).await;
    // Events of scripts' other identities (`k8s.config(kubeconfig=...)`), before the
    // lease goes.
    crate::k8s::recorder::flush_all(Duration::from_secs(5)).await;
    parts.ctx.events.flush(Duration::from_secs(5)).await;
    background.flusher.abort();
    background.auditor.abort();
    let _ = release.0.send(true);
    if let Some(elector) = elector {
        let _ = tokio::time::timeout(Duration::from_secs(5), elector).await;
    }
    if let Some(shards) = &parts.shards {
        shards.left(Duration::from_secs(5)).await;
    }
    if lost {
        return Err(Error::LoseLeadership);
    }
    Ok(())
}

/// Writes the statuses that changed, once per `period`.
async fn flush_statuses(
    client: kube::Client,
    registry: Arc<Registry>,
    period: Duration,
    stop: impl Future<Output = ()>,
) {
    let mut stop = std::pin::pin!(stop);
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = &mut stop => return,
            _ = tick.tick() => {}
        }
        // A few at a time: after a restart every controller's status is new, and one
        // write after another left thousands of Ready controllers unreported for a minute.
        // Shared by the running controllers only: refused resources cost a tenant
        // nothing, so their number must not slow everyone's counts.
        let (decided, counts) = registry.pending_statuses(
            counts_every(period, registry.running()),
            counts_per_tick(period),
        );
        let write = |(key, status): PendingStatus| {
            let (client, registry) = (client.clone(), registry.clone());
            async move { write_status(&client, &registry, key, status).await }
        };
        let decided = futures::StreamExt::for_each_concurrent(
            futures::stream::iter(decided.into_iter().map(write)),
            STATUS_WRITES,
            |w| w,
        );
        // The counts at their rate, one after another's start: a burst of them, even
        // a capped one, is what every controller's own calls then wait behind.
        let start = tokio::time::Instant::now();
        let paced = counts.into_iter().enumerate().map(|(i, w)| {
            // Within the period: the cap keeps `i` below its share of it.
            let delay = count_pace().saturating_mul(u32::try_from(i).unwrap_or(u32::MAX));
            let at = start + delay.min(period);
            let write = write(w);
            async move {
                tokio::time::sleep_until(at).await;
                write.await;
            }
        });
        let counts = futures::StreamExt::for_each_concurrent(
            futures::stream::iter(paced),
            STATUS_WRITES,
            |w| w,
        );
        // Paced writes take about a period: one that was built before the lease was
        // lost must not land after it.
        tokio::select! {
            () = &mut stop => return,
            _ = futures::future::join(decided, counts) => {}
        }
    }
}

/// The time between two writes of counts alone: [`COUNT_WRITES_PER_SECOND`] apart.
fn count_pace() -> Duration {
    Duration::from_secs(1) / COUNT_WRITES_PER_SECOND
}

/// Status writes under way at once.
const STATUS_WRITES: usize = 16;

/// Writes a second of statuses whose counts alone changed, across all controllers: a
/// reconcile changes its controller's counts, and 5000 busy controllers written every
/// 2 s would be 2500 writes a second, the API server's whole capacity.
const COUNT_WRITES_PER_SECOND: u32 = 50;

/// How often one controller's counts alone are written when `hosted` controllers
/// share [`COUNT_WRITES_PER_SECOND`]: every `period` up to 100 of them (at 2 s).
fn counts_every(period: Duration, hosted: usize) -> Duration {
    let share = Duration::from_secs(1) * u32::try_from(hosted).unwrap_or(u32::MAX)
        / COUNT_WRITES_PER_SECOND;
    period.max(share)
}

/// Writes of counts alone in one `period`: [`COUNT_WRITES_PER_SECOND`] as a cap, not
/// only as an average, and at least one.
fn counts_per_tick(period: Duration) -> usize {
    let per_tick = period.as_millis() * u128::from(COUNT_WRITES_PER_SECOND) / 1000;
    usize::try_from(per_tick).unwrap_or(usize::MAX).max(1)
}

/// Writes one controller's status, and records it as written.
async fn write_status(
    client: &kube::Client,
    registry: &Registry,
    key: Key,
    status: StarlarkControllerStatus,
) {
    let body = Patch::Merge(json!({ "status": status }));
    let params = PatchParams::default();
    let (ns, name) = &key;
    let write = async {
        if is_cluster_key(&key) {
            let api: Api<ClusterStarlarkController> = Api::all(client.clone());
            api.patch_status(name, &params, &body).await.map(drop)
        } else {
            let api: Api<StarlarkController> = Api::namespaced(client.clone(), ns);
            api.patch_status(name, &params, &body).await.map(drop)
        }
    };
    let shown = if ns.is_empty() {
        name.clone()
    } else {
        format!("{ns}/{name}")
    };
    match tokio::time::timeout(Duration::from_secs(10), write).await {
        Ok(Ok(())) => registry.written(&key, status),
        // Deleted meanwhile: its entry goes with the finalizer.
        Ok(Err(kube::Error::Api(s))) if s.code == 404 => {}
        Ok(Err(e)) => {
            tracing::warn!(controller = %shown, error = %e, "writing status");
        }
        Err(_) => {
            tracing::warn!(controller = %shown, "writing status timed out");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_written_every_period_until_the_writes_would_pass_their_rate() {
        let period = Duration::from_secs(2);
        assert_eq!(counts_every(period, 1), period);
        assert_eq!(counts_every(period, 100), period);
        assert_eq!(counts_every(period, 1000), Duration::from_secs(20));
        assert_eq!(counts_every(period, 5000), Duration::from_secs(100));
        // No overflow, however many.
        assert!(counts_every(period, usize::MAX) > Duration::from_secs(85_899_345));
    }

    #[test]
    fn counts_written_in_one_period_stay_within_their_rate() {
        assert_eq!(counts_per_tick(Duration::from_secs(2)), 100);
        assert_eq!(counts_per_tick(Duration::from_millis(10)), 1);
        assert_eq!(counts_per_tick(Duration::ZERO), 1);
        assert!(counts_per_tick(Duration::MAX) > 1_000_000);
    }
}
