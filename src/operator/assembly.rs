//! The parts of an operator run, put together before anything is served: the CRDs
//! checked, the stop and release signals, the shared threads, informers and registry,
//! the certificates and what every reconcile shares.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use kube::Api;
use kube::api::ListParams;
use kube::runtime::events::{Recorder, Reporter};
use tokio::sync::watch;

use super::approval;
use super::certs::{self, Certs};
use super::manager::{Error, Options, Result};
use super::reconciler::Context;
use super::registration;
use super::registry::Registry;
use super::resource::{ClusterStarlarkController, StarlarkController};
use super::shard::Shards;
use super::webhook::Tls;
use crate::control::informers::Informers;
use crate::control::leader::Validity;
use crate::control::pool::Pool;
use crate::k8s::discovery::Discovery;

/// What a run is made of, shared by its phases (`manager::run`).
pub(super) struct Parts {
    pub(super) client: kube::Client,
    /// What `client` was built from: the leases' threads connect with it.
    pub(super) config: kube::Config,
    pub(super) opts: Options,
    /// True once the run is to stop.
    pub(super) stop: watch::Receiver<bool>,
    /// Sent true once the hosted controllers have stopped: the leader and shard leases
    /// go then (or when it is dropped, as the run returns early).
    pub(super) release: (watch::Sender<bool>, watch::Receiver<bool>),
    /// Whether this replica leads (always, without leader election).
    pub(super) leading: watch::Receiver<bool>,
    /// Its sender, taken by the elector; without leader election it is kept for the
    /// whole run: were it dropped, `leading` would close, which reads as lost leadership.
    pub(super) leading_tx: Option<watch::Sender<bool>>,
    /// The StarlarkControllers have been listed (readiness).
    pub(super) synced: Arc<AtomicBool>,
    pub(super) registry: Arc<Registry>,
    pub(super) pool: Pool,
    pub(super) informers: Arc<Informers>,
    /// The logs API's listener, until it is served.
    pub(super) logs_listener: Option<(tokio::net::TcpListener, SocketAddr)>,
    pub(super) shards: Option<Arc<Shards>>,
    pub(super) lease: Option<Arc<Validity>>,
    /// The admission webhook's host, for a run outside the cluster.
    pub(super) endpoint_host: String,
    /// The names the serving certificate covers.
    pub(super) hosts: Vec<String>,
    pub(super) material: Certs,
    pub(super) object_selector: Option<serde_json::Value>,
    pub(super) ctx: Arc<Context>,
    pub(super) tls: Arc<Tls>,
}

/// Completes once `rx` is true (or its sender is gone).
pub(super) fn stopped(rx: &watch::Receiver<bool>) -> impl Future<Output = ()> + Send + 'static {
    let mut rx = rx.clone();
    async move {
        let _ = rx.wait_for(|s| *s).await;
    }
}

impl Parts {
    /// Checks that the CRDs are installed and puts the parts of a run together; the run
    /// is to stop once `shutdown` completes.
    ///
    /// # Errors
    /// A missing CRD, a busy logs port, no threads, or unusable certificates.
    pub(super) async fn assemble(
        (client, config): (kube::Client, kube::Config),
        opts: Options,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<Self> {
        check_crds(&client, &opts).await?;
        let (stop_tx, stop) = watch::channel(false);
        let release = watch::channel(false);
        tokio::spawn(async move {
            shutdown.await;
            let _ = stop_tx.send(true);
        });

        let registry = Arc::new(Registry::default());
        // One pool of worker threads for every hosted controller: their number follows the
        // cores, not the number of controllers.
        let (size, cap) = hosted_threads();
        super::quota::warn_if_oversized(cap, opts.limits.memory, opts.namespace_memory);
        let pool = Pool::new(size, cap, "kite-hosted").map_err(Error::StartPool)?;
        // One informer per (resource, namespace, selectors) for every hosted controller,
        // run as the operator and entered only by controllers that may read it themselves.
        let informers = Informers::new(
            tokio::runtime::Handle::current(),
            Some(Arc::new(super::gate::ReadGate::new(client.clone()))),
        );
        informers.limit_groups(opts.namespace_watches);
        let (logs_listener, logs_address) = listen_logs(&opts).await?;
        // With shards, each replica holds a membership lease (released only once its hosted
        // controllers have stopped); hosted controllers write only while it is valid.
        let shards = opts.shards.then(|| {
            Shards::join(
                (client.clone(), config.clone()),
                &opts.operator_namespace,
                &opts.identity,
                logs_address,
                release.1.clone(),
            )
        });
        let lease = match &shards {
            Some(s) => Some(s.validity()),
            None => opts.leader_election.as_ref().map(|_| Validity::new()),
        };
        let (endpoint_host, hosts) = hosts(&opts);
        let material = certs::certs(&client, &opts.operator_namespace, &hosts).await?;
        let object_selector = opts
            .selector
            .as_deref()
            .map(registration::label_selector)
            .transpose()?;
        // Hosted scripts reach the API server over connections of their own: a tenant's
        // streams (a watch, a follow) never share one with the operator's own calls.
        let tenants = crate::k8s::transport::client(&config).map_err(Error::BuildTenantClient)?;
        let ctx = Arc::new(context(
            (&client, tenants),
            &opts,
            &material,
            &registry,
            &pool,
            &informers,
            (shards.as_ref(), lease.as_ref()),
        ));
        let tls = Arc::new(Tls::new(&material)?);
        let (leading_tx, leading) = watch::channel(opts.leader_election.is_none());
        Ok(Parts {
            client,
            config,
            opts,
            stop,
            release,
            leading,
            leading_tx: Some(leading_tx),
            synced: Arc::new(AtomicBool::new(false)),
            registry,
            pool,
            informers,
            logs_listener,
            shards,
            lease,
            endpoint_host,
            hosts,
            material,
            object_selector,
            ctx,
            tls,
        })
    }
}

/// Fails unless the CRDs this operator watches are installed.
async fn check_crds(client: &kube::Client, opts: &Options) -> Result<()> {
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
    Ok(())
}

/// Threads shared by the hosted controllers: two per core (at least four), growing to
/// three per core plus eight while every one is stuck in a handler. A hosted
/// controller's `workers` caps its share, so one cannot take them all.
fn hosted_threads() -> (usize, usize) {
    let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let size = (2 * cores).clamp(4, 64);
    (size, (3 * cores + 8).max(size))
}

/// The logs API's listener, when it is served, and the address other replicas reach it
/// at.
async fn listen_logs(
    opts: &Options,
) -> Result<(
    Option<(tokio::net::TcpListener, SocketAddr)>,
    Option<String>,
)> {
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
    Ok((logs_listener, logs_address))
}

/// The admission webhook's host outside the cluster, and the names the serving
/// certificate covers.
fn hosts(opts: &Options) -> (String, Vec<String>) {
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
    (endpoint_host, hosts)
}

/// What every reconcile (and every admission review) shares.
fn context(
    (client, tenants): (&kube::Client, kube::Client),
    opts: &Options,
    material: &Certs,
    registry: &Arc<Registry>,
    pool: &Pool,
    informers: &Arc<Informers>,
    (shards, lease): (Option<&Arc<Shards>>, Option<&Arc<Validity>>),
) -> Context {
    Context {
        client: client.clone(),
        tenants,
        logs: opts.logs_bind.is_some(),
        registry: registry.clone(),
        events: super::events::Events::start(&Recorder::new(
            client.clone(),
            Reporter {
                controller: "kite-operator".into(),
                instance: Some(opts.identity.clone()),
            },
        )),
        discovery: Discovery::new(client.clone()),
        ceiling: opts.ceiling.clone(),
        seen: Arc::default(),
        ceilings: Arc::default(),
        reviews: Arc::default(),
        handler_budget: opts.handler_budget,
        limits: opts.limits.clone(),
        operator_namespace: opts.operator_namespace.clone(),
        approval: approval::Key::new(&material.approval_key).with_max_age(opts.approval_max_age),
        turns: Arc::new(super::turns::Turns::new(4)),
        analyses: super::turns::Turns::new(1),
        admission_analyses: super::turns::Turns::new(1),
        shares: super::turns::Turns::new(super::reconciler::share(opts.concurrent_reconciles)),
        modules: Arc::default(),
        lease: lease.cloned(),
        pool: pool.clone(),
        informers: informers.clone(),
        shards: shards.cloned(),
        recheck: opts.recheck_period,
        quota: super::quota::Quota::new(opts.namespace_memory),
    }
}
