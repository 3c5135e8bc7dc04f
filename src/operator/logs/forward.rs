//! A log request for a controller that another replica runs (`--shards`), passed on to
//! it: the replica is the one `status.replica` names, its address the one its shard
//! lease carries, and it is reached over TLS with the operator's own certificate, which
//! every replica holds and accepts from the others.

use std::sync::Arc;
use std::time::Duration;

use hyper::body::Incoming;
use hyper::{Request, Response};
use hyper_util::rt::TokioIo;
use kube::Api;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, pem::PemObject};

use super::Serving;
use crate::operator::resource::{ClusterStarlarkController, StarlarkController};
use crate::operator::shard::Shards;

/// Set on a forwarded request: the replica that gets it answers itself, so a request
/// never goes round in a circle.
pub const FORWARDED: &str = "x-kite-forwarded";

/// How long reaching the other replica may take (a followed log then streams on).
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// What forwarding needs.
pub struct Forward {
    pub shards: Arc<Shards>,
    pub serving: Serving,
    /// The name the serving certificate covers (the logs Service's).
    pub server_name: String,
}

/// Where a controller runs, when not here.
pub enum Owner {
    /// Another live replica, at this logs address.
    At(String),
    /// Another replica, which serves no logs API (or is not live).
    Unreachable(String),
}

impl Forward {
    /// The replica that runs `(namespace, name)` (an empty namespace: a
    /// ClusterStarlarkController), if it is another one.
    pub async fn owner(&self, client: &kube::Client, key: &(String, String)) -> Option<Owner> {
        let replica = tokio::time::timeout(CONNECT_TIMEOUT, replica_of(client, key))
            .await
            .ok()
            .flatten()?;
        if replica == self.shards.identity() {
            return None;
        }
        Some(match self.shards.logs_address(&replica) {
            Some(address) => Owner::At(address),
            None => Owner::Unreachable(replica),
        })
    }

    /// Sends `req` (its path, query and the front proxy's headers) to `address`.
    ///
    /// # Errors
    /// Why the other replica could not be asked.
    pub async fn send(
        &self,
        address: &str,
        req: &Request<Incoming>,
    ) -> Result<Response<Incoming>, String> {
        let connector = self.connector()?;
        let server_name = ServerName::try_from(self.server_name.clone())
            .map_err(|e| format!("the logs Service's name: {e}"))?;
        let connect = async {
            let tcp = tokio::net::TcpStream::connect(address)
                .await
                .map_err(|e| format!("connecting to {address}: {e}"))?;
            let tls = connector
                .connect(server_name, tcp)
                .await
                .map_err(|e| format!("TLS with {address}: {e}"))?;
            hyper::client::conn::http1::handshake(TokioIo::new(tls))
                .await
                .map_err(|e| format!("HTTP with {address}: {e}"))
        };
        let (mut sender, conn) = tokio::time::timeout(CONNECT_TIMEOUT, connect)
            .await
            .map_err(|_| {
                format!(
                    "{address} did not answer within {}s",
                    CONNECT_TIMEOUT.as_secs()
                )
            })??;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let path = req.uri().path_and_query().map_or("/", |p| p.as_str());
        let mut out = Request::get(path);
        for (name, value) in req.headers() {
            if !matches!(
                name.as_str(),
                "host" | "connection" | "content-length" | "transfer-encoding"
            ) {
                out = out.header(name, value);
            }
        }
        let out = out
            .header(hyper::header::HOST, &self.server_name)
            .header(FORWARDED, "1")
            .body(http_body_util::Empty::<bytes::Bytes>::new())
            .map_err(|e| e.to_string())?;
        tokio::time::timeout(CONNECT_TIMEOUT, sender.send_request(out))
            .await
            .map_err(|_| {
                format!(
                    "{address} did not answer within {}s",
                    CONNECT_TIMEOUT.as_secs()
                )
            })?
            .map_err(|e| format!("asking {address}: {e}"))
    }

    /// A TLS client that trusts the operator's CA and presents its certificate.
    fn connector(&self) -> Result<tokio_rustls::TlsConnector, String> {
        let mut roots = rustls::RootCertStore::empty();
        for ca in CertificateDer::pem_slice_iter(self.serving.ca.as_bytes()) {
            roots
                .add(ca.map_err(|e| e.to_string())?)
                .map_err(|e| e.to_string())?;
        }
        let chain = CertificateDer::pem_slice_iter(self.serving.cert.as_bytes())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())?;
        let key = PrivateKeyDer::from_pem_slice(self.serving.key.as_bytes())
            .map_err(|e| e.to_string())?;
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| e.to_string())?
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)
            .map_err(|e| e.to_string())?;
        Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
    }
}

/// `status.replica` of the resource at `key`.
async fn replica_of(client: &kube::Client, (namespace, name): &(String, String)) -> Option<String> {
    if namespace.is_empty() {
        let api: Api<ClusterStarlarkController> = Api::all(client.clone());
        api.get_opt(name).await.ok()??.status?.replica
    } else {
        let api: Api<StarlarkController> = Api::namespaced(client.clone(), namespace);
        api.get_opt(name).await.ok()??.status?.replica
    }
}
