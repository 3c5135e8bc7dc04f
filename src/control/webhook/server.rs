//! The webhook's HTTPS server: `POST <path>` answers admission reviews on blocking
//! threads (never a runtime worker), `GET /healthz`, `/readyz` and `/metrics` report on
//! it, on the same port.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use tokio_rustls::TlsAcceptor;

use super::frozen::Frozen;
use super::metrics::Metrics;
use super::review::{self, Ending};
use super::spec::{FailurePolicy, WebhookSpec};
use crate::script::budget::Cancel;

/// The API server sends at most about 3 MiB; anything larger is not a review.
const MAX_BODY: usize = 4 << 20;
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Past the handlers' budget, how long a review may still take (decoding, the thread
/// pool) before it is answered by the failure policy regardless.
const SLACK: Duration = Duration::from_secs(1);

/// Why the webhook could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("k8s.webhook: reading {path}: {source}")]
    ReadTls {
        path: String,
        source: std::io::Error,
    },
    #[error("k8s.webhook: {0}")]
    Tls(#[from] crate::tls::Error),
    #[error("k8s.webhook: port {port}: {source}")]
    Bind {
        port: u16,
        source: crate::http::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The TLS acceptor for `spec`: its files, or a self-made certificate for 127.0.0.1 and
/// localhost (said on stderr, since no API server trusts it unless told its CA).
/// Reads files: call it before entering the runtime.
///
/// # Errors
/// Unreadable files, or text that is not a matching PEM certificate and key.
pub fn acceptor(spec: &WebhookSpec) -> Result<TlsAcceptor> {
    let Some((cert, key)) = &spec.tls else {
        let hosts = ["127.0.0.1".to_owned(), "localhost".to_owned()];
        let issued = crate::tls::issue("kite-webhook", &hosts, 365)?;
        eprintln!(
            "k8s.webhook: no tls_cert/tls_key given: serving a self-made certificate for 127.0.0.1 and localhost"
        );
        return Ok(crate::tls::acceptor(
            &issued.cert,
            &issued.key,
            "self-made certificate",
        )?);
    };
    let read = |p: &std::path::Path| {
        std::fs::read_to_string(p).map_err(|source| Error::ReadTls {
            path: p.display().to_string(),
            source,
        })
    };
    let what = format!("{} and {}", cert.display(), key.display());
    Ok(crate::tls::acceptor(&read(cert)?, &read(key)?, &what)?)
}

/// What the server shares between connections.
pub struct Webhook {
    pub frozen: Arc<Frozen>,
    metrics: Metrics,
    /// Set at shutdown: handler calls in progress are cancelled.
    stopping: Arc<AtomicBool>,
}

impl Webhook {
    pub fn new(frozen: Arc<Frozen>) -> Self {
        let metrics = Metrics::new(&frozen.spec.path);
        Self {
            frozen,
            metrics,
            stopping: Arc::default(),
        }
    }

    /// Cancels handler calls in progress (the server stops accepting on its own).
    pub fn stop(&self) {
        self.stopping.store(true, Ordering::Relaxed);
    }
}

/// Binds `0.0.0.0:<port>` and returns the bound address and the server, which runs
/// until `shutdown`.
///
/// # Errors
/// The port is in use or not allowed.
pub async fn bind(
    webhook: Arc<Webhook>,
    tls: TlsAcceptor,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(SocketAddr, impl Future<Output = ()> + Send + 'static)> {
    let port = webhook.frozen.spec.port;
    let addr = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port);
    let (listener, bound) = crate::http::listen(addr)
        .await
        .map_err(|source| Error::Bind { port, source })?;
    let open = move |tcp| {
        let tls = tls.clone();
        async move {
            tokio::time::timeout(HANDSHAKE_TIMEOUT, tls.accept(tcp))
                .await
                .ok()?
                .ok()
        }
    };
    let handler = move |req| {
        let webhook = webhook.clone();
        async move { handle(webhook, req).await }
    };
    let serve =
        crate::http::connections(listener, shutdown, crate::http::READ_TIMEOUT, open, handler);
    Ok((bound, serve))
}

async fn handle(webhook: Arc<Webhook>, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let path = req.uri().path().to_owned();
    match (req.method(), path.as_str()) {
        (&Method::GET, "/healthz" | "/readyz") => {
            let m = &webhook.metrics;
            let body = format!(
                "ok: {} reviews, {} handler errors\n",
                m.reviews(),
                m.errors()
            );
            crate::http::text(StatusCode::OK, body)
        }
        (&Method::GET, "/metrics") => {
            let mut r = crate::http::text(StatusCode::OK, webhook.metrics.render());
            r.headers_mut().insert(
                CONTENT_TYPE,
                HeaderValue::from_static(crate::control::metrics::CONTENT_TYPE),
            );
            r
        }
        (&Method::POST, p) if p == webhook.frozen.spec.path => admit(webhook, req).await,
        _ => crate::http::text(StatusCode::NOT_FOUND, "not found\n"),
    }
}

async fn admit(webhook: Arc<Webhook>, req: Request<Incoming>) -> Response<Full<Bytes>> {
    let started = Instant::now();
    let body = match Limited::new(req.into_body(), MAX_BODY).collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => return crate::http::text(StatusCode::BAD_REQUEST, format!("{e}\n")),
    };
    let review: AdmissionReview<DynamicObject> = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            let text = format!("not an AdmissionReview: {e}\n");
            return crate::http::text(StatusCode::BAD_REQUEST, text);
        }
    };
    let request: AdmissionRequest<DynamicObject> = match review.try_into() {
        Ok(r) => r,
        Err(e) => return json(&AdmissionResponse::invalid(e)),
    };
    let spec = &webhook.frozen.spec;
    let limit = spec.timeout + SLACK;
    let fallback = AdmissionResponse::from(&request);
    let work = {
        let webhook = webhook.clone();
        let request = request.clone();
        tokio::task::spawn_blocking(move || {
            let stopping = webhook.stopping.clone();
            let stop = Cancel::new(move || stopping.load(Ordering::Relaxed));
            review::review(
                &webhook.frozen.spec,
                &webhook.frozen.review(&stop),
                &request,
            )
        })
    };
    let (response, ending) = match tokio::time::timeout(limit, work).await {
        Ok(Ok(answer)) => answer,
        // Only a bug (a panic) or a thread pool too busy to start the call gets here.
        failed => {
            let why = match failed {
                Ok(Err(e)) => format!("{}: the review failed: {e}", spec.path),
                _ => format!(
                    "{}: no answer within {}",
                    spec.path,
                    crate::duration::format(limit)
                ),
            };
            match spec.failure_policy {
                FailurePolicy::Fail => (fallback.deny(&why), Ending::Failed(why)),
                FailurePolicy::Ignore => (fallback, Ending::Failed(why)),
            }
        }
    };
    log(&request, &ending);
    webhook.metrics.record(&ending, started.elapsed());
    json(&response)
}

fn log(req: &AdmissionRequest<DynamicObject>, ending: &Ending) {
    let what = match &req.namespace {
        Some(ns) => format!("{} {ns}/{}", req.kind.kind, req.name),
        None => format!("{} {}", req.kind.kind, req.name),
    };
    let op = &req.operation;
    match ending {
        Ending::Allowed => tracing::debug!(resource = %what, operation = ?op, "admitted"),
        Ending::Patched => {
            tracing::debug!(resource = %what, operation = ?op, "admitted with a patch");
        }
        Ending::Refused(m) => {
            tracing::info!(resource = %what, operation = ?op, reason = %m, "refused");
        }
        Ending::Failed(m) => {
            tracing::warn!(resource = %what, operation = ?op, error = %m, "handler failed");
        }
    }
}

fn json(response: &AdmissionResponse) -> Response<Full<Bytes>> {
    match serde_json::to_vec(&response.clone().into_review()) {
        Ok(body) => {
            let mut r = Response::new(Full::new(Bytes::from(body)));
            r.headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            r
        }
        Err(e) => crate::http::text(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")),
    }
}
