//! `kite operator`: watches StarlarkControllers and runs each one in-process, with
//! leader election, health and metrics endpoints, batched status writes and a clean
//! shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use k8s_openapi::api::rbac::v1::ClusterRole;
use kube::api::{ListParams, Patch, PatchParams};
use kube::runtime::controller::Controller;
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;
use kube::{Api, ResourceExt};
use serde_json::json;
use tokio::sync::watch;

use super::reconciler::{self, Context};
use super::registry::Registry;
use super::resource::StarlarkController;
use crate::control::leader::{self, LeaderConfig};
use crate::k8s::discovery::Discovery;

/// How `kite operator` runs.
#[derive(Debug, Clone)]
pub struct Options {
    /// Watch StarlarkControllers in this namespace only.
    pub namespace: Option<String>,
    pub health: Option<SocketAddr>,
    /// Contend for a Lease in this namespace; None runs without leader election.
    pub leader_election: Option<String>,
    pub identity: String,
    pub ceiling: String,
    pub handler_budget: Duration,
    /// At most one status write per StarlarkController per period.
    pub status_period: Duration,
    pub grace: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "the StarlarkController CRD is not installed (kubectl apply -f crds/starlarkcontroller.yaml, or kite crd | kubectl apply -f -)"
    )]
    FindCrd,
    #[error("checking for the StarlarkController CRD: {0}")]
    CheckCrd(#[source] kube::Error),
    #[error(transparent)]
    Serve(#[from] crate::http::Error),
    #[error("lost the leader-election lease; exiting so a standby takes over")]
    LoseLeadership,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The name of the operator's own lease.
pub const LEASE: &str = "kite-operator";

/// Runs the operator until `shutdown` completes, then stops every hosted controller.
///
/// # Errors
/// A missing CRD, a busy health port, or lost leadership.
pub async fn run(
    client: kube::Client,
    config: kube::Config,
    opts: Options,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<()> {
    let crs: Api<StarlarkController> = match &opts.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    match crs.list(&ListParams::default().limit(1)).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => return Err(Error::FindCrd),
        Err(e) => return Err(Error::CheckCrd(e)),
    }
    let (stop_tx, stop_rx) = watch::channel(false);
    tokio::spawn(async move {
        shutdown.await;
        let _ = stop_tx.send(true);
    });
    let stopped = |mut rx: watch::Receiver<bool>| async move {
        let _ = rx.wait_for(|s| *s).await;
    };

    let registry = Arc::new(Registry::default());
    let (leading_tx, mut leading) = watch::channel(opts.leader_election.is_none());
    let synced = Arc::new(AtomicBool::new(false));
    if let Some(addr) = opts.health {
        let probe = Arc::new(Probe {
            registry: registry.clone(),
            leading: leading.clone(),
            synced: synced.clone(),
        });
        let (bound, serve) = crate::http::bind(addr, probe, stopped(stop_rx.clone())).await?;
        tracing::info!(%bound, "serving /healthz, /readyz and /metrics");
        tokio::spawn(serve);
    }
    if let Some(lease_ns) = &opts.leader_election {
        let lc = LeaderConfig::new(LEASE, lease_ns.clone(), opts.identity.clone());
        tokio::spawn(leader::run(
            client.clone(),
            lc,
            leading_tx,
            stopped(stop_rx.clone()),
        ));
        tracing::info!(lease = LEASE, namespace = %lease_ns, identity = %opts.identity, "waiting to lead");
        let mut stop = stop_rx.clone();
        tokio::select! {
            _ = leading.wait_for(|l| *l) => {}
            _ = stop.wait_for(|s| *s) => return Ok(()),
        }
        tracing::info!("leading: starting the StarlarkController controllers");
    }

    let ctx = Arc::new(Context {
        client: client.clone(),
        config,
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
    });
    let flusher = tokio::spawn(flush_statuses(
        client.clone(),
        registry.clone(),
        opts.status_period,
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
    };
    let cms: Api<ConfigMap> = match &opts.namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let mapper_registry = registry.clone();
    let ceiling_registry = registry.clone();
    let ceilings: Api<ClusterRole> = Api::all(client.clone());
    let only_ceiling =
        watcher::Config::default().fields(&format!("metadata.name={}", opts.ceiling));
    let controller = Controller::new(crs, watcher::Config::default());
    let store = controller.store();
    // kube-runtime's readiness signal wakes only one waiter (the controller's own), so
    // readiness is polled rather than awaited once.
    tokio::spawn(async move {
        loop {
            match tokio::time::timeout(Duration::from_millis(200), store.wait_until_ready()).await {
                Ok(Ok(())) => return synced.store(true, Ordering::Relaxed),
                Ok(Err(_)) => return,
                Err(_) => {}
            }
        }
    });
    controller
        .watches(cms, watcher::Config::default(), move |cm: ConfigMap| {
            let ns = cm.namespace().unwrap_or_default();
            mapper_registry
                .referencing(&ns, &cm.name_any())
                .into_iter()
                .map(|(ns, name)| ObjectRef::new(&name).within(&ns))
        })
        // A change to the ceiling (or to a role aggregated into it) re-checks everything.
        .watches(ceilings, only_ceiling, move |_: ClusterRole| {
            ceiling_registry
                .keys()
                .into_iter()
                .map(|(ns, name)| ObjectRef::new(&name).within(&ns))
        })
        .graceful_shutdown_on(end)
        .run(reconciler::reconcile, reconciler::error_policy, ctx)
        .for_each(|_| futures::future::ready(()))
        .await;

    let hosted = registry.drain();
    tracing::info!(
        controllers = hosted.len(),
        "stopping the hosted controllers"
    );
    futures::future::join_all(
        hosted
            .into_iter()
            .map(|h| h.controller.shutdown(opts.grace)),
    )
    .await;
    flusher.abort();
    if lost.load(Ordering::Relaxed) {
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
            _ = &mut stop => return,
            _ = tick.tick() => {}
        }
        for ((ns, name), status) in registry.pending_statuses() {
            let api: Api<StarlarkController> = Api::namespaced(client.clone(), &ns);
            let body = Patch::Merge(json!({ "status": status }));
            let params = PatchParams::default();
            let write = api.patch_status(&name, &params, &body);
            match tokio::time::timeout(Duration::from_secs(10), write).await {
                Ok(Ok(_)) => registry.written(&(ns, name), status),
                // Deleted meanwhile: its entry goes with the finalizer.
                Ok(Err(kube::Error::Api(s))) if s.code == 404 => {}
                Ok(Err(e)) => {
                    tracing::warn!(starlarkcontroller = %format!("{ns}/{name}"), error = %e, "writing status")
                }
                Err(_) => {
                    tracing::warn!(starlarkcontroller = %format!("{ns}/{name}"), "writing status timed out")
                }
            }
        }
    }
}

struct Probe {
    registry: Arc<Registry>,
    leading: watch::Receiver<bool>,
    synced: Arc<AtomicBool>,
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
        let mut out = String::new();
        out += "# HELP kite_operator_controllers Hosted controllers running.\n";
        out += "# TYPE kite_operator_controllers gauge\n";
        out += &format!("kite_operator_controllers {}\n", self.registry.running());
        out += &format!(
            "kite_operator_leader {}\n",
            u8::from(*self.leading.borrow())
        );
        crate::control::metrics::Metrics::render_headers(&mut out);
        self.registry.render_metrics(&mut out);
        out
    }
}
