//! `kite operator`: watches StarlarkControllers and runs each one in-process, with
//! leader election, health and metrics endpoints, batched status writes and a clean
//! shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::controller::Controller;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use serde_json::json;
use tokio::sync::watch;

use super::approval;
use super::certs;
use super::fanout::Taps;
use super::grants::OWNER_LABEL;
use super::reconciler::{self, Context};
use super::registration::{self, Endpoint, Registration};
use super::registry::{Key, Registry};
use super::resource::{ClusterStarlarkController, StarlarkController};
use super::shard::Shards;
use super::tenant::{Tenant, is_cluster_key};
use super::trigger;
use super::webhook::{self, Tls};
use crate::control::leader::{self, LeaderConfig};
use crate::control::metrics::Scrape;
use crate::k8s::discovery::Discovery;

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
    /// Approvals older than this no longer hold ([`approval::Key::with_max_age`]).
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
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Threads shared by the hosted controllers: two per core (at least four), growing to
/// three per core plus eight while every one is stuck in a handler. A hosted
/// controller's `workers` caps its share, so one cannot take them all.
fn hosted_threads() -> (usize, usize) {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let size = (2 * cores).clamp(4, 64);
    (size, (3 * cores + 8).max(size))
}

/// The name of the operator's own lease.
pub const LEASE: &str = "kite-operator";

/// Runs the operator until `shutdown` completes, then stops every hosted controller.
///
/// # Errors
/// A missing CRD, a busy health port, or lost leadership.
pub async fn run(
    client: kube::Client,
    opts: Options,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    tokio::spawn(crate::k8s::support::warn_if_unsupported(client.clone()));
    let crs: Api<StarlarkController> = match &opts.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    match crs.list(&ListParams::default().limit(1)).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => return Err(Error::FindCrd),
        Err(e) => return Err(Error::CheckCrd(e)),
    }
    if opts.namespace.is_none() {
        let cluster: Api<ClusterStarlarkController> = Api::all(client.clone());
        match cluster.list(&ListParams::default().limit(1)).await {
            Ok(_) => {}
            Err(kube::Error::Api(s)) if s.code == 404 => return Err(Error::FindCrd),
            Err(e) => return Err(Error::CheckCrd(e)),
        }
    }
    let (stop_tx, stop_rx) = watch::channel(false);
    let (release_tx, release_rx) = watch::channel(false);
    let mut elector = None;
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };

    let registry = Arc::new(Registry::default());
    // One pool of worker threads for every hosted controller: their number follows the
    // cores, not the number of controllers.
    let (size, cap) = hosted_threads();
    super::quota::warn_if_oversized(cap, opts.limits.memory, opts.namespace_memory);
    let pool =
        crate::control::pool::Pool::new(size, cap, "kite-hosted").map_err(Error::StartPool)?;
    // One informer per (resource, namespace, selectors) for every hosted controller,
    // run as the operator and entered only by controllers that may read it themselves.
    let informers = crate::control::informers::Informers::new(
        tokio::runtime::Handle::current(),
        Some(Arc::new(super::gate::ReadGate::new(client.clone()))),
    );
    informers.limit_groups(opts.namespace_watches);
    // Bound first: other replicas learn its address from this one's shard lease.
    let logs_listener = match opts.logs_bind {
        Some(bind) => Some(
            crate::http::listen(bind)
                .await
                .map_err(super::logs::Error::from)?,
        ),
        None => None,
    };
    let logs_address =
        logs_listener.as_ref().map(
            |(_, addr)| match opts.logs_host.parse::<std::net::IpAddr>() {
                // [v6]:port
                Ok(ip) => SocketAddr::new(ip, addr.port()).to_string(),
                Err(_) => format!("{}:{}", opts.logs_host, addr.port()),
            },
        );
    // With shards, each replica holds a membership lease (released only once its hosted
    // controllers have stopped); hosted controllers write only while it is valid.
    let shards = opts.shards.then(|| {
        Shards::join(
            client.clone(),
            &opts.operator_namespace,
            &opts.identity,
            logs_address.clone(),
            release_rx.clone(),
        )
    });
    let lease = match &shards {
        Some(s) => Some(s.validity()),
        None => opts
            .leader_election
            .as_ref()
            .map(|_| crate::control::leader::Validity::new()),
    };
    // The admission webhook: every replica serves it (inside a pod, behind the Service,
    // so reviews go on while the lease changes hands); the leader keeps it registered.
    let endpoint_host = match opts.webhook_bind.ip() {
        ip if ip.is_unspecified() => "127.0.0.1".to_owned(),
        ip => ip.to_string(),
    };
    let mut hosts = match &opts.webhook_service {
        Some(svc) => vec![
            format!("{svc}.{}.svc", opts.operator_namespace),
            format!("{svc}.{}.svc.cluster.local", opts.operator_namespace),
        ],
        None => vec![endpoint_host.clone(), "localhost".to_owned()],
    };
    // The logs API serves the same certificate, under its Service's names (which the
    // API server asks for, in a cluster and locally alike).
    if opts.logs_bind.is_some() {
        hosts.extend(super::logs::hosts(&opts.operator_namespace));
    }
    let material = certs::certs(&client, &opts.operator_namespace, &hosts).await?;
    let object_selector = opts
        .selector
        .as_deref()
        .map(registration::label_selector)
        .transpose()?;
    let ctx = Arc::new(Context {
        client: client.clone(),
        logs: opts.logs_bind.is_some(),
        registry: registry.clone(),
        recorder: Recorder::new(
            client.clone(),
            Reporter {
                controller: "kite-operator".into(),
                instance: Some(opts.identity.clone()),
            },
        ),
        discovery: Discovery::new(client.clone()),
        ceiling: opts.ceiling.clone(),
        handler_budget: opts.handler_budget,
        limits: opts.limits.clone(),
        operator_namespace: opts.operator_namespace.clone(),
        approval: approval::Key::new(&material.approval_key).with_max_age(opts.approval_max_age),
        turns: Arc::new(super::turns::Turns::new(4)),
        analyses: super::turns::Turns::new(1),
        modules: Arc::default(),
        lease: lease.clone(),
        pool: pool.clone(),
        informers: informers.clone(),
        shards: shards.clone(),
        recheck: opts.recheck_period,
        quota: super::quota::Quota::new(opts.namespace_memory),
    });
    let tls = Arc::new(Tls::new(&material)?);
    let path = webhook::path(&material.approval_key);
    let (bound, serve) = webhook::webhook(
        opts.webhook_bind,
        tls.clone(),
        ctx.clone(),
        path.clone(),
        stopped(stop_rx.clone()),
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
            None => Endpoint::Url(format!("https://{endpoint_host}:{}{path}", bound.port())),
        },
        namespace: opts.namespace.clone(),
        object_selector,
    };
    tracing::info!(%bound, "serving the admission webhook");
    let (leading_tx, mut leading) = watch::channel(opts.leader_election.is_none());
    let synced = Arc::new(AtomicBool::new(false));
    if let Some(addr) = opts.health {
        let probe = Arc::new(Probe {
            registry: registry.clone(),
            leading: leading.clone(),
            synced: synced.clone(),
            informers: informers.clone(),
            modules: ctx.modules.clone(),
            shards: shards.clone(),
        });
        let gate: Option<Arc<dyn crate::http::MetricsGate>> = (opts.secure_metrics
            || !addr.ip().is_loopback())
        .then(|| Arc::new(super::metrics_access::MetricsAccess::new(client.clone())) as _);
        let secured = gate.is_some();
        let (bound, serve) =
            crate::http::bind_gated(addr, probe, gate, stopped(stop_rx.clone())).await?;
        tracing::info!(%bound, secured, "serving /healthz, /readyz and /metrics");
        tokio::spawn(serve);
    }
    if let Some(lease_ns) = &opts.leader_election {
        let lc = LeaderConfig::new(LEASE, lease_ns.clone(), opts.identity.clone());
        let validity = lease
            .clone()
            .unwrap_or_else(crate::control::leader::Validity::new);
        // The lease goes only once the hosted controllers have stopped (or when this
        // function returns early): a standby must never run them beside ours.
        elector = Some(tokio::spawn(leader::run(
            client.clone(),
            lc,
            leading_tx,
            validity,
            stopped(release_rx.clone()),
        )));
        tracing::info!(lease = LEASE, namespace = %lease_ns, identity = %opts.identity, "waiting to lead");
        let mut stop = stop_rx.clone();
        tokio::select! {
            _ = leading.wait_for(|l| *l) => {}
            _ = stop.wait_for(|s| *s) => return Ok(()),
        }
        tracing::info!("leading: starting the StarlarkController controllers");
    }
    // Registered before anything is reconciled: a resource created before the webhook
    // is in place is never approved.
    let mut delay = Duration::from_millis(500);
    loop {
        let mut stop = stop_rx.clone();
        let attempt = registration::register(
            &client,
            &registration,
            &tls,
            &opts.operator_namespace,
            &hosts,
            true,
        );
        let failed = tokio::select! {
            r = attempt => match r {
                Ok(()) => break,
                Err(e) => e,
            },
            _ = stop.wait_for(|s| *s) => return Ok(()),
        };
        tracing::warn!(error = %failed, "registering the admission webhook; retrying");
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            _ = stop.wait_for(|s| *s) => return Ok(()),
        }
        delay = (delay * 2).min(Duration::from_secs(30));
    }
    let logs = match logs_listener {
        Some(listener) => {
            let logs_opts = super::logs::Options {
                namespace: opts.operator_namespace.clone(),
                serving: super::logs::Serving {
                    cert: material.cert.clone(),
                    key: material.key.clone(),
                    ca: material.ca.clone(),
                },
                local: opts.webhook_service.is_none(),
                shards: shards.clone(),
            };
            let served = super::logs::logs(
                &client,
                registry.clone(),
                listener,
                &logs_opts,
                stopped(stop_rx.clone()),
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
        tls,
        opts.operator_namespace.clone(),
        hosts,
        stopped(stop_rx.clone()),
    ));

    let flusher = tokio::spawn(flush_statuses(
        client.clone(),
        registry.clone(),
        opts.status_period,
        stopped(stop_rx.clone()),
    ));
    // Controllers stopped for what their caches hold, to be decided again.
    let (audited, _) = tokio::sync::broadcast::channel(1024);
    let auditor = tokio::spawn(super::caches::caches(
        registry.clone(),
        informers.clone(),
        audited.clone(),
        stopped(stop_rx.clone()),
    ));
    let lost = Arc::new(AtomicBool::new(false));
    let (lost_flag, mut lead_watch, stop_for_lead) =
        (lost.clone(), leading.clone(), stop_rx.clone());
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
    let taps = Taps::new(&client, opts.namespace.as_ref(), &opts.ceiling);
    let namespaced = controller::<StarlarkController>(
        &client,
        &opts,
        &tenants,
        (&registry, &audited),
        &ctx,
        &taps,
        end.clone(),
    );
    // A namespace-scoped operator hosts no cluster-wide controllers.
    let cluster = async {
        if opts.namespace.is_none() {
            controller::<ClusterStarlarkController>(
                &client,
                &opts,
                &tenants,
                (&registry, &audited),
                &ctx,
                &taps,
                end.clone(),
            )
            .await;
        }
    };
    let crs_synced = namespaced_synced(&client, &opts, &tenants);
    tokio::spawn(async move {
        crs_synced.await;
        synced.store(true, Ordering::Relaxed);
    });
    futures::join!(namespaced, cluster);
    // The webhook stops with the run: creates must not wait for it meanwhile.
    keeper.abort();
    if let Some((name, url)) = &local
        && let Some(command) = registration::withdraw(&client, name, url).await
    {
        tracing::warn!(configuration = %name, "could not remove this run's admission webhook configuration, which refuses creates while no operator serves it; remove it with: {command}");
    }
    // A local run's logs API goes with it too (in a cluster, the other replicas serve it).
    if let Some(served) = logs.filter(|s| s.local)
        && let Some(command) =
            super::logs::apiservice::withdraw(&client, &opts.operator_namespace, &served.ca).await
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
    let grace = if lost.load(Ordering::Relaxed) {
        Duration::ZERO
    } else {
        opts.grace
    };
    futures::future::join_all(hosted.into_iter().map(|h| h.controller.shutdown(grace))).await;
    let _ = tokio::task::spawn_blocking(move || pool.shut_down()).await;
    informers.join(Duration::from_secs(5)).await;
    // Events of scripts' other identities (`k8s.config(kubeconfig=...)`), before the
    // lease goes.
    crate::k8s::recorder::flush_all(Duration::from_secs(5)).await;
    flusher.abort();
    auditor.abort();
    let _ = release_tx.send(true);
    if let Some(elector) = elector {
        let _ = tokio::time::timeout(Duration::from_secs(5), elector).await;
    }
    if lost.load(Ordering::Relaxed) {
        return Err(Error::LoseLeadership);
    }
    Ok(())
}

/// Runs the controller of one kind until `end`.
async fn controller<K: Tenant>(
    client: &kube::Client,
    opts: &Options,
    tenants: &watcher::Config,
    (registry, audited): (&Arc<Registry>, &tokio::sync::broadcast::Sender<Key>),
    ctx: &Arc<Context>,
    taps: &Taps,
    end: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let crs = K::api_all(client, opts.namespace.as_deref());
    let (mapper_registry, ceiling_registry) = (registry.clone(), registry.clone());
    let of_kind = |keys: Vec<Key>| {
        keys.into_iter()
            .filter_map(object_ref::<K>)
            .collect::<Vec<_>>()
    };
    let mut controller = Controller::new(crs, tenants.clone())
        .watches_stream(
            taps.configmaps.take(),
            move |cm: kube::core::PartialObjectMeta<ConfigMap>| {
                let ns = cm.namespace().unwrap_or_default();
                of_kind(mapper_registry.referencing(&ns, &cm.name_any()))
            },
        )
        // A change to the ceiling (or to a role aggregated into it) re-checks everything.
        .watches_stream(taps.ceiling.take(), move |_: ClusterRole| {
            of_kind(ceiling_registry.keys())
        })
        // Someone deleting or editing a generated role, binding or account: restore it.
        .watches_stream(
            taps.service_accounts.take(),
            generated::<K, ServiceAccount>(registry.clone()),
        )
        .watches_stream(taps.roles.take(), generated::<K, Role>(registry.clone()))
        .watches_stream(
            taps.role_bindings.take(),
            generated::<K, RoleBinding>(registry.clone()),
        );
    if let Some(cluster) = &taps.cluster {
        controller = controller
            .watches_stream(
                cluster.0.take(),
                generated::<K, ClusterRole>(registry.clone()),
            )
            .watches_stream(
                cluster.1.take(),
                generated::<K, ClusterRoleBinding>(registry.clone()),
            );
    }
    // A controller the cache audit stopped: report it, and retry it later.
    let stopped = futures::stream::unfold(audited.subscribe(), |mut rx| async move {
        loop {
            match rx.recv().await {
                Ok(key) => return Some((key, rx)),
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
            }
        }
    })
    .filter_map(|key| std::future::ready(object_ref::<K>(key)));
    controller = controller.reconcile_on(stopped);
    if let Some(shards) = &ctx.shards {
        // The live replicas changed: every resource may have a new owner.
        let changes = futures::stream::unfold(shards.changes(), |mut rx| async move {
            rx.changed().await.ok()?;
            Some(((), rx))
        });
        controller = controller.reconcile_all_on(changes);
    }
    controller
        .trigger_backoff(trigger::TriggerBackoff::default())
        .graceful_shutdown_on(end)
        .run(
            reconciler::reconcile::<K>,
            reconciler::error_policy::<K>,
            ctx.clone(),
        )
        .for_each(|result| {
            let ctx = ctx.clone();
            async move {
                if let Err(kube::runtime::controller::Error::ObjectNotFound(gone)) = result {
                    let key = (
                        gone.namespace.clone().unwrap_or_default(),
                        gone.name.clone(),
                    );
                    reconciler::forget(&ctx, &key, gone.extra.uid.as_deref()).await;
                }
            }
        })
        .await;
}

/// Maps a change to a generated object (labelled with its owner's uid) to the
/// controller resource of kind `K` that owns it, and marks its grants for re-applying.
fn generated<K: Tenant, G: kube::Resource>(
    registry: Arc<Registry>,
) -> impl Fn(G) -> Vec<ObjectRef<K>> + Send + Sync + 'static {
    move |obj: G| {
        let Some(uid) = obj.labels().get(OWNER_LABEL) else {
            return Vec::new();
        };
        registry
            .grants_changed(uid)
            .and_then(object_ref::<K>)
            .into_iter()
            .collect()
    }
}

/// The object a registry key names, if it is of kind `K`.
fn object_ref<K: Tenant>(key: Key) -> Option<ObjectRef<K>> {
    if is_cluster_key(&key) == K::CONFINED {
        return None;
    }
    let (ns, name) = key;
    let r = ObjectRef::<K>::new(&name);
    Some(if K::CONFINED { r.within(&ns) } else { r })
}

/// Completes once the StarlarkControllers have been listed (readiness).
fn namespaced_synced(
    client: &kube::Client,
    opts: &Options,
    tenants: &watcher::Config,
) -> impl Future<Output = ()> + Send + 'static {
    let api = StarlarkController::api_all(client, opts.namespace.as_deref());
    let params = ListParams {
        label_selector: tenants.label_selector.clone(),
        limit: Some(1),
        ..Default::default()
    };
    async move {
        let mut delay = Duration::from_millis(200);
        loop {
            if let Ok(Ok(_)) =
                tokio::time::timeout(Duration::from_secs(10), api.list(&params)).await
            {
                return;
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(10));
        }
    }
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
        for (key, status) in registry.pending_statuses() {
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
    }
}

struct Probe {
    registry: Arc<Registry>,
    leading: watch::Receiver<bool>,
    synced: Arc<AtomicBool>,
    informers: Arc<crate::control::informers::Informers>,
    modules: Arc<super::modules::Modules>,
    shards: Option<Arc<Shards>>,
}

impl crate::http::Probe for Probe {
    fn healthz(&self) -> Result<(), String> {
        Ok(())
    }

    fn readyz(&self) -> Result<(), String> {
        if !*self.leading.borrow() {
            return Err("not the leader".into());
        }
        if !self.synced.load(Ordering::Relaxed) {
            return Err("StarlarkControllers not listed yet".into());
        }
        Ok(())
    }

    fn metrics(&self) -> String {
        let mut scrape = Scrape::new();
        scrape.events();
        let running = i64::try_from(self.registry.running()).unwrap_or(i64::MAX);
        scrape.gauge(
            "kite_operator_controllers",
            "Hosted controllers running",
            running,
        );
        let leading = i64::from(*self.leading.borrow());
        scrape.gauge(
            "kite_operator_leader",
            "Whether this operator holds the lease",
            leading,
        );
        scrape.gauge(
            "kite_operator_informers",
            "Watches the hosted controllers share (one per resource, namespace and selectors)",
            i64::try_from(self.informers.running()).unwrap_or(i64::MAX),
        );
        scrape.gauge(
            "kite_operator_modules",
            "Distinct top levels the hosted controllers run (one per namespace, script and vars that reached nothing outside)",
            i64::try_from(self.modules.len()).unwrap_or(i64::MAX),
        );
        if let Some(shards) = &self.shards {
            scrape.gauge(
                "kite_operator_shard_controllers",
                "StarlarkControllers this replica runs (its share)",
                running,
            );
            scrape.gauge(
                "kite_operator_shard_replicas",
                "Live replicas sharing the StarlarkControllers, as this one sees them",
                i64::try_from(shards.members().len()).unwrap_or(i64::MAX),
            );
        }
        scrape.gauge(
            "kite_script_threads_parked",
            "Threads parked for good because a hosted script asked for more than its whole memory budget at once",
            i64::try_from(crate::script::memory::parked()).unwrap_or(i64::MAX),
        );
        let ready = self
            .registry
            .readiness()
            .into_iter()
            .map(|(cr, reason, ok)| {
                let labels = vec![
                    ("starlarkcontroller".to_owned(), cr),
                    ("reason".to_owned(), reason),
                ];
                (labels, i64::from(ok))
            })
            .collect();
        scrape.labelled_gauge(
            "kite_operator_ready",
            "Whether each StarlarkController's Ready condition is True, with its reason",
            ready,
        );
        let reviews = super::webhook::reviews()
            .into_iter()
            .map(|(result, n)| (vec![("result".to_owned(), result.to_owned())], n))
            .collect();
        scrape.labelled_counter(
            "kite_operator_admission_reviews",
            "Admission reviews answered, by result (approved, refused, timed_out, malformed, busy)",
            reviews,
        );
        self.registry.add_metrics(&mut scrape);
        scrape.render()
    }
}
