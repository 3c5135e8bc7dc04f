//! The logs API: an aggregated API (`logs.starkite.io`, as metrics-server serves
//! `metrics.k8s.io`) through which a StarlarkController's author reads what it printed
//! and how its reconciles went, with the API server authenticating them
//! (docs/design/logs.md).
//!
//! Layout: [`front_proxy`] (whom the server trusts), `api` (the routes and who may
//! read a log), [`apiservice`] (the APIService registration), [`reader`] (`kite logs`).

mod api;
pub mod apiservice;
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
    #[error("issuing the logs API's serving certificate: {0}")]
    Issue(#[from] crate::tls::Error),
    #[error("serving the logs API: {0}")]
    Listen(#[from] crate::http::Error),
    #[error("registering {what}: {source}")]
    Register { what: String, source: kube::Error },
    #[error("registering {what}: timed out")]
    RegisterTimeout { what: String },
}

/// The result type of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How the logs API is served.
#[derive(Debug, Clone)]
pub struct Options {
    /// Where to listen.
    pub bind: SocketAddr,
    /// The operator's namespace, where the Service is.
    pub namespace: String,
    /// In a cluster: the serving certificate, key and CA the operator's Secret holds
    /// (covering the Service's DNS names), and a ClusterIP Service that the install
    /// made. None: a local run, which issues its own and points an ExternalName
    /// Service at `localhost`.
    pub in_cluster: Option<Serving>,
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

/// The DNS names the Service gives the logs API in `namespace`.
pub fn hosts(namespace: &str) -> Vec<String> {
    vec![
        format!("{SERVICE}.{namespace}.svc"),
        format!("{SERVICE}.{namespace}.svc.cluster.local"),
    ]
}

/// Serves the logs API until `shutdown` and registers it with the API server.
///
/// # Errors
/// The API server has no aggregation layer (no front-proxy CA), the port cannot be
/// bound, or the APIService cannot be registered.
pub async fn logs(
    client: &kube::Client,
    registry: Arc<Registry>,
    opts: &Options,
    shutdown: impl std::future::Future<Output = ()> + Send + 'static,
) -> Result<Served> {
    let front_proxy = front_proxy::FrontProxy::read(client).await?;
    let serving = if let Some(s) = &opts.in_cluster {
        s.clone()
    } else {
        let mut names = hosts(&opts.namespace);
        names.push("localhost".into());
        let issued = crate::tls::issue(SERVICE, &names, 365)?;
        Serving {
            cert: issued.cert,
            key: issued.key,
            ca: issued.ca,
        }
    };
    let acceptor = front_proxy.acceptor(&serving.cert, &serving.key)?;
    let (listener, addr) = crate::http::listen(opts.bind).await?;
    let state = Arc::new(api::State {
        client: client.clone(),
        registry,
        front_proxy: front_proxy.clone(),
    });
    let open = move |tcp: tokio::net::TcpStream| {
        let (acceptor, front_proxy) = (acceptor.clone(), front_proxy.clone());
        async move {
            let tls = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp))
                .await
                .ok()?
                .ok()?;
            // Verified against the front-proxy CA by the handshake; the name is the
            // API server's own check on top.
            let peer = tls.get_ref().1.peer_certificates()?.first()?.to_vec();
            front_proxy.allows(&peer).then_some(tls)
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
    let local = opts.in_cluster.is_none();
    apiservice::register(client, &opts.namespace, addr.port(), &serving.ca, local).await?;
    tracing::info!(bound = %addr, apiservice = %apiservice::name(), "serving the logs API");
    Ok(Served {
        ca: serving.ca,
        local,
    })
}

/// How long a TLS handshake may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections one peer (the API server) may hold at once: each follower holds one.
const MAX_PER_PEER: usize = 256;
