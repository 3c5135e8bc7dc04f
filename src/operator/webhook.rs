//! The HTTPS server the API server calls for admission reviews (`POST /approve`), with
//! a serving certificate that can be swapped while it runs.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::{Method, Request, Response, StatusCode};
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tokio_rustls::TlsAcceptor;

use super::admission::admission;
use super::certs::Certs;
use super::reconciler::Context;

/// The path the webhook configuration names.
pub const PATH: &str = "/approve";

/// The path the webhook answers on: [`PATH`] and a secret derived from the operator's
/// approval key, registered in its webhook configuration. A peer that reaches the port
/// without knowing it (anyone but the API server and whoever may read that
/// configuration) gets 404 and learns nothing about objects or approvals.
pub fn path(approval_key: &[u8]) -> String {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, approval_key);
    let tag = ring::hmac::sign(&key, b"kite-operator webhook path");
    let secret: String = tag.as_ref()[..16]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{PATH}/{secret}")
}
/// The API server sends at most about 3 MiB; anything larger is not a review.
const MAX_BODY: usize = 4 << 20;
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// The API server gives up after the configuration's timeout (15 s) anyway.
const REVIEW_TIMEOUT: Duration = Duration::from_secs(14);
/// Reviews of one namespace's controllers under way at once; more are refused at once
/// with "try again". Each holds one of the API server's connections (HTTP/1.1, at most
/// [`crate::http::MAX_PER_PEER`] from one address) while it waits for its namespace's
/// analysis turn: without this, one author sending dry-run creates in a loop would hold
/// them all, and with `failurePolicy: Fail` no controller anywhere could be created.
const REVIEWS_PER_NAMESPACE: usize = 8;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("the webhook server: {0}")]
    Bind(#[from] crate::http::Error),
    #[error("loading the webhook's serving certificate: {0}")]
    LoadCertificate(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The serving certificate in use, replaced when it is renewed.
pub struct Tls {
    acceptor: RwLock<(TlsAcceptor, String)>,
}

impl Tls {
    /// # Errors
    /// A certificate or key that does not parse.
    pub fn new(certs: &Certs) -> Result<Self> {
        Ok(Tls {
            acceptor: RwLock::new((acceptor(certs)?, certs.cert.clone())),
        })
    }

    /// Serves `certs` from now on, if they differ from those in use.
    ///
    /// # Errors
    /// A certificate or key that does not parse (the old one stays).
    pub fn renew(&self, certs: &Certs) -> Result<()> {
        if self.current().1 == certs.cert {
            return Ok(());
        }
        let next = acceptor(certs)?;
        *self
            .acceptor
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = (next, certs.cert.clone());
        tracing::info!("serving the renewed webhook certificate");
        Ok(())
    }

    fn current(&self) -> (TlsAcceptor, String) {
        self.acceptor
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }
}

fn acceptor(certs: &Certs) -> Result<TlsAcceptor> {
    let bad = |e: &dyn std::fmt::Display| Error::LoadCertificate(e.to_string());
    let chain = CertificateDer::pem_slice_iter(certs.cert.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| bad(&e))?;
    let key = PrivateKeyDer::from_pem_slice(certs.key.as_bytes()).map_err(|e| bad(&e))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| bad(&e))?
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .map_err(|e| bad(&e))?;
    Ok(TlsAcceptor::from(Arc::new(config)))
}

/// Binds `addr` and returns the bound address and the server, which runs until
/// `shutdown`.
///
/// # Errors
/// The address is in use or not allowed.
pub async fn webhook(
    addr: SocketAddr,
    tls: Arc<Tls>,
    ctx: Arc<Context>,
    path: String,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(SocketAddr, impl Future<Output = ()> + Send + 'static)> {
    let path: Arc<str> = Arc::from(path);
    let reviews = Arc::new(super::turns::Turns::new(REVIEWS_PER_NAMESPACE));
    let (listener, bound) = crate::http::listen(addr).await?;
    let open = move |tcp| {
        let (acceptor, _) = tls.current();
        async move {
            tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp))
                .await
                .ok()?
                .ok()
        }
    };
    let handler = move |req| {
        let (ctx, path, reviews) = (ctx.clone(), path.clone(), reviews.clone());
        async move { handle(&ctx, &path, &reviews, req).await }
    };
    let serve = crate::http::connections(
        listener,
        shutdown,
        Duration::from_secs(30),
        crate::http::MAX_PER_PEER,
        open,
        handler,
    );
    Ok((bound, serve))
}

/// Reviews answered since the start, by result: approved, refused, timed out (the
/// review did not finish in time), malformed (not an AdmissionReview) and busy (its
/// namespace had [`REVIEWS_PER_NAMESPACE`] under way).
static REVIEWS: [std::sync::atomic::AtomicU64; Reviewed::ALL.len()] =
    [const { std::sync::atomic::AtomicU64::new(0) }; Reviewed::ALL.len()];

/// A review's result, for [`reviews`].
#[derive(Debug, Clone, Copy)]
enum Reviewed {
    Approved = 0,
    Refused = 1,
    TimedOut = 2,
    Malformed = 3,
    /// Refused at once: its namespace had [`REVIEWS_PER_NAMESPACE`] under way.
    Busy = 4,
}

impl Reviewed {
    const ALL: [Reviewed; 5] = [
        Reviewed::Approved,
        Reviewed::Refused,
        Reviewed::TimedOut,
        Reviewed::Malformed,
        Reviewed::Busy,
    ];

    fn label(self) -> &'static str {
        match self {
            Reviewed::Approved => "approved",
            Reviewed::Refused => "refused",
            Reviewed::TimedOut => "timed_out",
            Reviewed::Malformed => "malformed",
            Reviewed::Busy => "busy",
        }
    }

    fn count(self) {
        REVIEWS[self as usize].fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The admission reviews answered since the start, as (result, count).
pub fn reviews() -> Vec<(&'static str, u64)> {
    Reviewed::ALL
        .iter()
        .map(|r| {
            let n = REVIEWS[*r as usize].load(std::sync::atomic::Ordering::Relaxed);
            (r.label(), n)
        })
        .collect()
}

async fn handle(
    ctx: &Context,
    path: &str,
    reviews: &super::turns::Turns,
    req: Request<Incoming>,
) -> Response<Full<Bytes>> {
    if req.method() != Method::POST || req.uri().path() != path {
        return reply(StatusCode::NOT_FOUND, Bytes::from_static(b"not found\n"));
    }
    let body = match crate::http::read_body(req.into_body(), MAX_BODY).await {
        Ok(b) => b,
        Err(refused) => return refused,
    };
    let review: AdmissionReview<DynamicObject> = match serde_json::from_slice(&body) {
        Ok(r) => r,
        Err(e) => {
            Reviewed::Malformed.count();
            let text = format!("not an AdmissionReview: {e}\n");
            return reply(StatusCode::BAD_REQUEST, Bytes::from(text));
        }
    };
    let request: Result<AdmissionRequest<DynamicObject>, _> = review.try_into();
    let response = match request {
        Err(e) => {
            Reviewed::Malformed.count();
            AdmissionResponse::invalid(e)
        }
        Ok(request) => {
            // Cluster-scoped kinds (an administrator's) share the "" turns.
            let namespace = request.namespace.clone().unwrap_or_default();
            let Some(_review) = reviews.try_turn(&namespace) else {
                Reviewed::Busy.count();
                let r = AdmissionResponse::from(&request).deny(format!(
                    "{REVIEWS_PER_NAMESPACE} reviews of controllers in namespace {namespace} are under way, the kite operator's limit per namespace; try again"
                ));
                log(&request, &r);
                return answer(r);
            };
            if let Ok(r) = tokio::time::timeout(REVIEW_TIMEOUT, admission(ctx, &request)).await {
                log(&request, &r);
                if r.allowed {
                    Reviewed::Approved.count();
                } else {
                    Reviewed::Refused.count();
                }
                r
            } else {
                Reviewed::TimedOut.count();
                AdmissionResponse::from(&request)
                    .deny("the kite operator could not finish the review in time; try again")
            }
        }
    };
    answer(response)
}

/// The HTTP response carrying `response`.
fn answer(response: AdmissionResponse) -> Response<Full<Bytes>> {
    match serde_json::to_vec(&response.into_review()) {
        Ok(json) => {
            let mut r = reply(StatusCode::OK, Bytes::from(json));
            r.headers_mut().insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("application/json"),
            );
            r
        }
        Err(e) => reply(
            StatusCode::INTERNAL_SERVER_ERROR,
            Bytes::from(format!("{e}\n")),
        ),
    }
}

fn log(req: &AdmissionRequest<DynamicObject>, r: &AdmissionResponse) {
    let user = req.user_info.username.as_deref().unwrap_or("");
    let what = match &req.namespace {
        Some(ns) => format!("{} {ns}/{}", req.kind.kind, req.name),
        None => format!("{} {}", req.kind.kind, req.name),
    };
    if r.allowed {
        tracing::info!(user, resource = %what, operation = ?req.operation, "approved");
    } else {
        tracing::info!(user, resource = %what, operation = ?req.operation, reason = %r.result.message, "refused");
    }
}

fn reply(status: StatusCode, body: Bytes) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(body));
    *r.status_mut() = status;
    r
}
