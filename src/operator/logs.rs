//! The logs API: an aggregated API (`logs.starkite.io`, as metrics-server serves
//! `metrics.k8s.io`) through which a StarlarkController's author reads what it printed
//! and how its reconciles went, with the API server authenticating them
//! (docs/design/logs.md).
//!
//! Layout: [`front_proxy`] (whom the server trusts), `api` (the routes and who may
//! read a log), `forward` (to the replica that runs the controller), [`apiservice`]
//! (the APIService registration), [`reader`] (`kite logs`).

mod api;
pub mod apiservice;
mod followers;
mod forward;
pub mod front_proxy;
pub mod reader;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use super::registry::Registry;

/// The API group served.
pub const GROUP: &str = "logs.starkite.io";
/// Its one version.
pub const VERSION: &str = "v1alpha1";
/// The Service the APIService points at (in the operator's namespace).
pub const SERVICE: &str = "kite-operator-logs";

/// Every API call the logs server makes is bounded by this.
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

/// Why the logs API could not start, or a step of it failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading the API server's front-proxy settings ({what}): {reason}")]
    ReadFrontProxy { what: String, reason: String },
    #[error("setting up TLS for the logs API: {0}")]
    Tls(String),
    #[error("serving the logs API: {0}")]
    Listen(#[from] crate::http::Error),
    #[error("registering {what}: {source}")]
    Register { what: String, source: kube::Error },
    #[error("registering {what}: timed out")]
    RegisterTimeout { what: String },
    /// A local run found the APIService pointing at an install's Service.
    #[error(
        "the APIService {VERSION}.{GROUP} serves the logs of the kite installed in the cluster (Service {service}); a local run does not take it over: run it without --logs-port"
    )]
    Taken { service: String },
}

/// The result type of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How the logs API is served.
#[derive(Clone)]
pub struct Options {
    /// The operator's namespace, where the Service is.
    pub namespace: String,
    /// The operator's serving certificate (from its Secret, covering the logs
    /// Service's names), which replicas also present to each other.
    pub serving: Serving,
    /// A local run: an ExternalName Service points the APIService at `localhost`,
    /// and both go when the run ends. Otherwise the install's ClusterIP Service.
    pub local: bool,
    /// With `--shards`: a request for a controller another replica runs goes there.
    pub shards: Option<Arc<super::shard::Shards>>,
}

/// PEM texts of a serving certificate.
#[derive(Debug, Clone)]
pub struct Serving {
    pub cert: String,
    pub key: String,
    pub ca: String,
}

/// The logs API, serving.
pub struct Served {
    /// The CA the APIService trusts: withdrawing removes only a registration of ours.
    pub ca: String,
    pub local: bool,
}

/// The DNS names the API server asks the logs API's certificate for in `namespace`:
/// the install's Service's, and a local run's (the first is what replicas ask for).
pub fn hosts(namespace: &str) -> Vec<String> {
    [SERVICE, apiservice::LOCAL_SERVICE]
        .iter()
        .flat_map(|svc| {
            [
                format!("{svc}.{namespace}.svc"),
                format!("{svc}.{namespace}.svc.cluster.local"),
            ]
        })
        .collect()
}

/// Serves the logs API on `listener` until `shutdown` and registers it with the API
/// server.
///
/// # Errors
/// The API server has no aggregation layer (no front-proxy CA), the TLS material is
/// unusable, or the APIService cannot be registered.
pub async fn logs(
    client: &kube::Client,
    registry: Arc<Registry>,
    (listener, addr): (tokio::net::TcpListener, SocketAddr),
    opts: &Options,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<Served> {
    let front_proxy = front_proxy::FrontProxy::read(client).await?;
    let serving = opts.serving.clone();
    // The API server's front proxy, and the other replicas forwarding to this one
    // (each presents the operator's own certificate).
    let acceptor = front_proxy.acceptor(&serving.cert, &serving.key, &serving.ca)?;
    // A replica presents a certificate the operator's CA signed for the operator's
    // name: ours, or a renewal of it (replicas may hold different ones for a while).
    let own = front_proxy::common_name(&front_proxy::first_certificate(&serving.cert)?);
    let state = Arc::new(api::State {
        client: client.clone(),
        registry,
        front_proxy: front_proxy.clone(),
        followers: Arc::default(),
        forward: opts.shards.clone().map(|shards| forward::Forward {
            shards,
            serving: serving.clone(),
            server_name: hosts(&opts.namespace).remove(0),
        }),
    });
    let open = move |tcp: tokio::net::TcpStream| {
        let (acceptor, front_proxy, own) = (acceptor.clone(), front_proxy.clone(), own.clone());
        async move {
            let tls = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp))
                .await
                .ok()?
                .ok()?;
            // The handshake verified the chain (the front proxy's CA or ours); the
            // name is the API server's own check on top, or the operator's.
            let peer = tls.get_ref().1.peer_certificates()?.first()?.to_vec();
            let replica = own.is_some() && front_proxy::common_name(&peer) == own;
            (replica || front_proxy.allows(&peer)).then_some(tls)
        }
    };
    let handler = move |req| api::handle(state.clone(), req);
    tokio::spawn(crate::http::connections(
        listener,
        shutdown,
        Duration::from_secs(10),
        MAX_PER_PEER,
        open,
        handler,
    ));
    apiservice::register(
        client,
        &opts.namespace,
        addr.port(),
        &serving.ca,
        opts.local,
    )
    .await?;
    tracing::info!(bound = %addr, apiservice = %apiservice::name(), "serving the logs API");
    Ok(Served {
        ca: serving.ca,
        local: opts.local,
    })
}

/// How long a TLS handshake may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections one peer (the API server) may hold at once: each follower holds one.
const MAX_PER_PEER: usize = 256;
