//! The webhook's HTTPS server: `POST <path>` answers admission reviews on blocking
//! threads (never a runtime worker), `GET /healthz`, `/readyz` and `/metrics` report on
//! it, on the same port.

use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
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

/// Binds `<ip>:<port>` (`--health-bind`: loopback unless a pod needs 0.0.0.0) and
/// returns the bound address and the server, which runs until `shutdown`.
///
/// # Errors
/// The port is in use or not allowed.
pub async fn bind(
    ip: IpAddr,
    webhook: Arc<Webhook>,
    tls: TlsAcceptor,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(SocketAddr, impl Future<Output = ()> + Send + 'static)> {
    let port = webhook.frozen.spec.port;
    let addr = SocketAddr::new(ip, port);
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
    let serve = crate::http::connections(
        listener,
        shutdown,
        crate::http::READ_TIMEOUT,
        crate::http::MAX_PER_PEER,
        open,
        handler,
    );
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
    // A declared length over the cap is refused before any of the body is read, so a
    // client waiting for `100 Continue` gets this answer instead of a reset connection.
    let declared = req
        .headers()
        .get(hyper::header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(len) = declared.filter(|len| *len > MAX_BODY as u64) {
        return crate::http::text(
            StatusCode::BAD_REQUEST,
            format!("length limit exceeded: the body is {len} bytes, more than {MAX_BODY}\n"),
        );
    }
    let body = match crate::http::read_body(req.into_body(), MAX_BODY).await {
        Ok(b) => b,
        Err(refused) => return refused,
    };
    let review = serde_json::from_slice(&body).and_then(|mut v: serde_json::Value| {
        complete(&mut v);
        serde_json::from_value::<AdmissionReview<DynamicObject>>(v)
    });
    let review = match review {
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

/// Fills in what the API server always sends but a hand-written review (upstream's own
/// curl examples) may leave out: the review's type, the request's uid, kind (from the
/// object), resource, user and operation (from which objects are present). Upstream
/// reads reviews into Go structs, where a missing field is simply empty.
fn complete(review: &mut serde_json::Value) {
    use serde_json::{Value as Json, json};
    let Some(top) = review.as_object_mut() else {
        return;
    };
    top.entry("apiVersion")
        .or_insert(json!("admission.k8s.io/v1"));
    top.entry("kind").or_insert(json!("AdmissionReview"));
    let Some(req) = top.get_mut("request").and_then(Json::as_object_mut) else {
        return;
    };
    let present = |k: &str| req.get(k).is_some_and(Json::is_object);
    let operation = match (present("object"), present("oldObject")) {
        (true, true) => "UPDATE",
        (false, true) => "DELETE",
        _ => "CREATE",
    };
    let obj = ["object", "oldObject"]
        .iter()
        .find_map(|k| req.get(*k).filter(|o| o.is_object()));
    let field = |k: &str| {
        obj.and_then(|o| o.get(k))
            .and_then(Json::as_str)
            .unwrap_or_default()
            .to_owned()
    };
    let api_version = field("apiVersion");
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", &api_version));
    let kind = json!({"group": group, "version": version, "kind": field("kind")});
    let resource = json!({"group": group, "version": version, "resource": ""});
    req.entry("uid").or_insert(json!(""));
    req.entry("kind").or_insert(kind);
    req.entry("resource").or_insert(resource);
    req.entry("operation").or_insert(json!(operation));
    req.entry("userInfo").or_insert(json!({}));
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
    match wire(response).and_then(|v| serde_json::to_vec(&v)) {
        Ok(body) => {
            let mut r = Response::new(Full::new(Bytes::from(body)));
            r.headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
            r
        }
        Err(e) => crate::http::text(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")),
    }
}

/// The review answering with `response`, its patch as base64 text: the API server's
/// (and upstream's) encoding of bytes, where kube would write an array of numbers.
fn wire(response: &AdmissionResponse) -> serde_json::Result<serde_json::Value> {
    use base64::Engine as _;
    let mut review = serde_json::to_value(response.clone().into_review())?;
    if let Some(patch) = response.patch.as_deref() {
        let text = base64::engine::general_purpose::STANDARD.encode(patch);
        review["response"]["patch"] = serde_json::Value::String(text);
    }
    Ok(review)
}

#[cfg(test)]
mod tests {
    use kube::core::admission::Operation;

    use super::*;

    fn parse(mut v: serde_json::Value) -> AdmissionRequest<DynamicObject> {
        complete(&mut v);
        let review: AdmissionReview<DynamicObject> = serde_json::from_value(v).unwrap();
        review.try_into().unwrap()
    }

    #[test]
    fn a_hand_written_review_gets_the_fields_the_api_server_sends() {
        // The shape of upstream's tutorial curl: no kind, resource, operation or user.
        let req = parse(serde_json::json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "req-1", "object": {"apiVersion": "apps/v1",
                "kind": "Deployment", "metadata": {"name": "bad-deploy"}}}
        }));
        assert_eq!(req.uid, "req-1");
        assert_eq!(req.kind.group, "apps");
        assert_eq!(req.kind.kind, "Deployment");
        assert_eq!(req.operation, Operation::Create);

        let req = parse(serde_json::json!({"request": {
            "oldObject": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}}}));
        assert_eq!(
            (req.kind.group.as_str(), req.kind.version.as_str()),
            ("", "v1")
        );
        assert_eq!(req.operation, Operation::Delete);
    }

    #[test]
    fn a_patch_goes_out_as_base64() {
        let req = parse(serde_json::json!({"request": {"uid": "u",
            "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}}}}));
        let patch: json_patch::Patch =
            serde_json::from_value(serde_json::json!([{"op": "remove", "path": "/a"}])).unwrap();
        let response = AdmissionResponse::from(&req).with_patch(patch).unwrap();
        let out = wire(&response).unwrap();
        assert_eq!(
            out["response"]["patch"],
            "W3sib3AiOiJyZW1vdmUiLCJwYXRoIjoiL2EifV0="
        );
        assert_eq!(out["response"]["patchType"], "JSONPatch");
        assert_eq!(out["kind"], "AdmissionReview");
    }

    #[test]
    fn what_the_api_server_sends_is_kept() {
        let req = parse(serde_json::json!({
            "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u", "operation": "UPDATE",
                "kind": {"group": "apps", "version": "v1", "kind": "StatefulSet"},
                "resource": {"group": "apps", "version": "v1", "resource": "statefulsets"},
                "userInfo": {"username": "alice"},
                "object": {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {}}}
        }));
        assert_eq!(req.kind.kind, "StatefulSet");
        assert_eq!(req.resource.resource, "statefulsets");
        assert_eq!(req.operation, Operation::Update);
        assert_eq!(req.user_info.username.as_deref(), Some("alice"));
    }
}
