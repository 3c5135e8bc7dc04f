//! The connection to the API server: every call multiplexed over HTTP/2, upgrades over HTTP/1.1.
//!
//! kube's own client speaks HTTP/1.1 only, so each request in flight holds a TLS
//! connection of its own, with hyper's buffers and the TLS state: a heap profile of the
//! operator restarting 1000 controllers put 84 MB of its peak there. client-go speaks
//! HTTP/2 to the API server, which multiplexes every request of a process over one
//! connection; [`transport`] does the same. The websocket upgrades behind `k8s.exec`,
//! `k8s.cp` and `k8s.port_forward` cannot ride an HTTP/2 stream (the API server does not
//! take extended CONNECT), so a request asking for an upgrade goes through an HTTP/1.1
//! client of its own, as client-go keeps a separate transport for them.
//!
//! The API server takes a bounded number of streams per connection (100 for
//! kube-apiserver), and watches hold theirs for as long as they run. Like Go's HTTP/2
//! transport (client-go's), which opens another connection when one is at its limit,
//! [`transport`] spreads requests over up to [`LANES`] clients, each with its own
//! connection: a request takes the first lane with fewer than [`STREAMS_PER_LANE`]
//! requests in flight. A lane left idle closes its connection after [`IDLE`].
//!
//! One shared connection changes what a read timeout means. kube's client closes a
//! connection that has been silent for its read timeout, which on HTTP/1.1 is a
//! deadline for the one request on it; on a multiplexed connection, one busy stream
//! would keep every stalled one alive. So the deadline is per request here: its answer
//! must start, and each later piece of its body arrive, within the configured read
//! timeout ([`Deadline`]). A dead connection (a peer gone without a FIN) is found by
//! HTTP/2 PINGs instead, and then closed, as client-go's `ReadIdleTimeout` does.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::http;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::ConfigExt;
use tower::{BoxError, ServiceBuilder};

type Connector = hyper_rustls::HttpsConnector<HttpConnector>;
type Request = http::Request<kube::client::Body>;

/// How often an HTTP/2 connection is pinged, and how long a PING may go unanswered
/// before the connection is taken for dead and closed (with every request on it).
const PING_INTERVAL: Duration = Duration::from_secs(10);
const PING_TIMEOUT: Duration = Duration::from_secs(10);

/// How many connections the multiplexed client may open at most, and how many requests
/// (a watch's or a follow's for as long as its body is read) each carries before the
/// next one is used: below kube-apiserver's 100 streams, so that a request is not queued
/// behind a full connection while another could take it.
pub const LANES: usize = 16;
pub const STREAMS_PER_LANE: usize = 80;

/// How long an unused connection stays open.
const IDLE: Duration = Duration::from_secs(30);

/// How long a handler thread's connection (`super::local`) may sit unused and still be
/// taken for the next call. Nobody polls it between calls, so nothing notices a peer
/// that vanished without a FIN (kube's client closes such a connection after its read
/// timeout of silence, [`super::session::READ_TIMEOUT`]); past this a call opens a fresh
/// one instead of waiting out the read timeout on a dead one.
const THREAD_IDLE: Duration = Duration::from_secs(5);

/// HTTP/2 flow control, as Go's HTTP/2 client sets it. A body nobody reads (a follow
/// whose handler sleeps) stops its own stream once it has a stream window buffered,
/// never the connection: the connection's window is far above what all the streams one
/// lane carries can hold ([`STREAMS_PER_LANE`] x [`STREAM_WINDOW`]), so one stalled
/// stream cannot hold back the others on its connection.
const STREAM_WINDOW: u32 = 1 << 20;
const CONNECTION_WINDOW: u32 = 1 << 30;

/// Why a client could not be built from a configuration.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("setting up TLS to the API server: {0}")]
    ConfigureTls(#[source] kube::Error),
    #[error("tls-server-name {name:?} is not a valid server name")]
    ParseServerName { name: String },
    #[error("setting up authentication to the API server: {0}")]
    ConfigureAuth(#[source] kube::Error),
    #[error("setting up the configured request headers: {0}")]
    ConfigureHeaders(#[source] kube::Error),
    #[error("a proxy (proxy-url) is configured, which this client does not support")]
    UseProxy,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A client for `config` that multiplexes its calls over HTTP/2 where the API server
/// offers it (ALPN), with kube's authentication, headers, base URL and retries of 429,
/// 503 and 504.
///
/// # Errors
/// The TLS settings, the server name, the credentials or the extra headers of
/// `config` cannot be used.
///
/// # Caveats
/// A proxy (`proxy-url`) is not supported here; [`client`] falls back to kube's own
/// HTTP/1.1 client for it. Client certificates from an exec credential plugin are read
/// once, as kube's client reads them.
pub fn transport(config: &kube::Config) -> Result<kube::Client> {
    build(config, LANES, true, IDLE)
}

/// A client for `config` over HTTP/1.1 only, with the same deadlines and layers as
/// [`transport`]: a handler thread's own (`super::local`), which makes one request at a
/// time and has nothing to multiplex.
///
/// # Errors
/// As [`transport`], and [`Error::UseProxy`] when `config` names a proxy (kube's own
/// client serves that one).
pub fn http1(config: &kube::Config) -> Result<kube::Client> {
    if config.proxy_url.is_some() {
        return Err(Error::UseProxy);
    }
    build(config, 1, false, THREAD_IDLE)
}

/// A client whose requests go over `lanes` pooled hyper clients (offering HTTP/2 when
/// `multiplex`), whose connections are reused for `idle` after their last request.
fn build(
    config: &kube::Config,
    lanes: usize,
    multiplex: bool,
    idle: Duration,
) -> Result<kube::Client> {
    // Read once: an exec credential plugin runs for each read.
    let tls = config.rustls_client_config().map_err(Error::ConfigureTls)?;
    let lanes = (0..lanes)
        .map(|_| {
            Ok(Lane {
                client: hyper_client(config, tls.clone(), multiplex, idle)?,
                in_flight: Arc::default(),
            })
        })
        .collect::<Result<Vec<_>>>()?;
    let router = Router {
        lanes: lanes.into(),
        upgrades: hyper_client(config, tls, false, idle)?,
        read_timeout: config.read_timeout,
    };
    let retry = config
        .default_retry
        .then(|| tower::retry::RetryLayer::new(kube::client::retry::RetryPolicy::server_retry()));
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(retry)
        .option_layer(config.auth_layer().map_err(Error::ConfigureAuth)?)
        .layer(
            config
                .extra_headers_layer()
                .map_err(Error::ConfigureHeaders)?,
        )
        .service(router);
    Ok(kube::Client::new(service, config.default_namespace.clone()))
}

/// [`transport`], or kube's own client where it cannot serve `config` (a proxy).
///
/// # Errors
/// As [`transport`], or kube's when it builds the client.
pub fn client(config: &kube::Config) -> std::result::Result<kube::Client, BoxError> {
    if config.proxy_url.is_some() {
        return Ok(kube::Client::try_from(config.clone())?);
    }
    Ok(transport(config)?)
}

/// A pooled hyper client over TLS (or plain HTTP for an `http://` server), offering
/// HTTP/2 by ALPN when `multiplex`, else HTTP/1.1 only; a connection unused for
/// `idle` is not reused.
fn hyper_client(
    config: &kube::Config,
    tls: rustls::ClientConfig,
    multiplex: bool,
    idle: Duration,
) -> Result<HyperClient<Connector, kube::client::Body>> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_connect_timeout(config.connect_timeout);
    // HTTP/2 writes a request as several frames; Nagle's algorithm would hold the
    // last of them back for the peer's delayed ACK (Go's dialer sets this too).
    http.set_nodelay(true);
    let mut builder = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    if let Some(name) = &config.tls_server_name {
        let server = rustls::pki_types::ServerName::try_from(name.clone())
            .map_err(|_| Error::ParseServerName { name: name.clone() })?;
        builder =
            builder.with_server_name_resolver(hyper_rustls::FixedServerNameResolver::new(server));
    }
    let executor = TokioExecutor::new();
    let mut client = HyperClient::builder(executor);
    client
        .timer(TokioTimer::new())
        .pool_timer(TokioTimer::new())
        .pool_idle_timeout(idle)
        // hyper's default, said because it is relied on: a request not yet written
        // when its pooled connection turns out closed is sent again on a new one. A
        // handler thread's own connection (`super::local`) is polled only during its
        // calls, so it learns of a server's close only when the next call uses it.
        .retry_canceled_requests(true);
    let connector = if multiplex {
        client
            .http2_keep_alive_interval(PING_INTERVAL)
            .http2_keep_alive_timeout(PING_TIMEOUT)
            .http2_keep_alive_while_idle(true)
            .http2_initial_stream_window_size(STREAM_WINDOW)
            .http2_initial_connection_window_size(CONNECTION_WINDOW);
        builder.enable_all_versions().wrap_connector(http)
    } else {
        builder.enable_http1().wrap_connector(http)
    };
    Ok(client.build(connector))
}

/// Sends upgrade requests over HTTP/1.1 and every other request over a lane of the
/// multiplexed client, each under its [`Deadline`].
#[derive(Clone)]
struct Router {
    lanes: Arc<[Lane]>,
    upgrades: HyperClient<Connector, kube::client::Body>,
    read_timeout: Option<Duration>,
}

/// One HTTP/2 connection's client and the requests in flight on it.
struct Lane {
    client: HyperClient<Connector, kube::client::Body>,
    in_flight: Arc<AtomicUsize>,
}

/// A request counted in flight on its lane until it fails or its body is dropped.
struct InFlight(Arc<AtomicUsize>);

impl InFlight {
    fn on(lane: &Lane) -> Self {
        lane.in_flight.fetch_add(1, Ordering::Relaxed);
        Self(lane.in_flight.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// The lane for the next request: the first with room, else the least loaded.
fn lane(loads: impl Iterator<Item = usize>) -> usize {
    let mut least = (usize::MAX, 0);
    for (i, load) in loads.enumerate() {
        if load < STREAMS_PER_LANE {
            return i;
        }
        least = least.min((load, i));
    }
    least.1
}

type Answer = http::Response<Deadline<Incoming>>;

impl tower::Service<Request> for Router {
    type Response = Answer;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Answer, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request) -> Self::Future {
        if wants_upgrade(&request) {
            // An exec or port-forward stream may rightly be silent for long once open:
            // the deadline is on its answer only.
            let answer = answer_within(self.read_timeout, self.upgrades.request(request));
            return Box::pin(async move { Ok(answer.await?.map(Deadline::none)) });
        }
        let chosen = &self.lanes[lane(
            self.lanes
                .iter()
                .map(|l| l.in_flight.load(Ordering::Relaxed)),
        )];
        let counted = InFlight::on(chosen);
        let limit = self.read_timeout;
        let answer = answer_within(limit, chosen.client.request(request));
        Box::pin(async move {
            let body = |body| match limit {
                Some(limit) => Deadline::new(body, limit),
                None => Deadline::none(body),
            };
            Ok(answer.await?.map(|b| body(b).counted(counted)))
        })
    }
}

/// The answer's head, failing when it has not come within `limit` (if any).
async fn answer_within<F, E>(
    limit: Option<Duration>,
    answer: F,
) -> Result<http::Response<Incoming>, BoxError>
where
    F: Future<Output = Result<http::Response<Incoming>, E>>,
    E: Into<BoxError>,
{
    match limit {
        Some(limit) => tokio::time::timeout(limit, answer)
            .await
            .map_err(|_| timed_out(limit))?
            .map_err(Into::into),
        None => answer.await.map_err(Into::into),
    }
}

/// Whether `request` asks to switch protocols (a websocket).
fn wants_upgrade(request: &Request) -> bool {
    request.headers().contains_key(http::header::UPGRADE)
}

fn timed_out(limit: Duration) -> BoxError {
    Box::new(std::io::Error::new(
        std::io::ErrorKind::TimedOut,
        format!("the API server sent nothing for {limit:?}"),
    ))
}

/// A response body that fails when no part of it has arrived for its limit: the read
/// timeout of one request, whatever the other streams on its connection do.
pub struct Deadline<B> {
    inner: B,
    limit: Option<(Duration, Pin<Box<tokio::time::Sleep>>)>,
    _in_flight: Option<InFlight>,
}

impl<B> Deadline<B> {
    fn new(inner: B, limit: Duration) -> Self {
        Self {
            inner,
            limit: Some((limit, Box::pin(tokio::time::sleep(limit)))),
            _in_flight: None,
        }
    }

    fn none(inner: B) -> Self {
        Self {
            inner,
            limit: None,
            _in_flight: None,
        }
    }

    /// Counted in flight on its lane for as long as it is read.
    fn counted(self, in_flight: InFlight) -> Self {
        Self {
            _in_flight: Some(in_flight),
            ..self
        }
    }
}

impl<B> Body for Deadline<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.get_mut();
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Ready(frame) => {
                if let Some((limit, sleep)) = &mut this.limit
                    && let Some(next) = tokio::time::Instant::now().checked_add(*limit)
                {
                    sleep.as_mut().reset(next);
                }
                Poll::Ready(frame.map(|f| f.map_err(Into::into)))
            }
            Poll::Pending => {
                if let Some((limit, sleep)) = &mut this.limit
                    && sleep.as_mut().poll(cx).is_ready()
                {
                    return Poll::Ready(Some(Err(timed_out(*limit))));
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, StreamBody};

    fn request(upgrade: bool) -> Request {
        let mut r = http::Request::get("/api/v1/namespaces/t/pods/p/exec");
        if upgrade {
            r = r
                .header(http::header::CONNECTION, "Upgrade")
                .header(http::header::UPGRADE, "websocket");
        }
        r.body(kube::client::Body::empty()).unwrap()
    }

    #[test]
    fn a_request_takes_the_first_lane_with_room_else_the_least_loaded() {
        let full = STREAMS_PER_LANE;
        assert_eq!(lane([0, 0, 0].into_iter()), 0);
        assert_eq!(lane([full - 1, 0].into_iter()), 0);
        assert_eq!(lane([full, 3, 0].into_iter()), 1);
        assert_eq!(lane([full + 5, full + 1, full + 2].into_iter()), 1);
    }

    #[test]
    fn only_upgrades_leave_the_multiplexed_connection() {
        assert!(wants_upgrade(&request(true)));
        assert!(!wants_upgrade(&request(false)));
    }

    /// A body whose first piece comes at once and whose second never does.
    fn stalled() -> impl Body<Data = Bytes, Error = BoxError> + Unpin {
        let first =
            futures::stream::iter([Ok::<_, BoxError>(Frame::data(Bytes::from_static(b"{}")))]);
        StreamBody::new(futures::StreamExt::chain(first, futures::stream::pending()))
    }

    #[tokio::test]
    async fn a_body_silent_for_its_limit_fails_with_a_timeout() {
        let limit = Duration::from_millis(200);
        let mut body = Deadline::new(stalled(), limit);
        let first = body.frame().await.unwrap().unwrap();
        assert_eq!(first.into_data().unwrap(), Bytes::from_static(b"{}"));
        let started = tokio::time::Instant::now();
        let err = tokio::time::timeout(Duration::from_secs(30), body.frame())
            .await
            .expect("the deadline never fired")
            .unwrap()
            .unwrap_err();
        assert!(started.elapsed() >= limit);
        let io = err.downcast_ref::<std::io::Error>().unwrap();
        assert_eq!(io.kind(), std::io::ErrorKind::TimedOut);
        assert!(io.to_string().contains("nothing for 200ms"), "{io}");
    }

    #[tokio::test]
    async fn a_body_without_a_limit_waits() {
        let mut body = Deadline::none(stalled());
        body.frame().await.unwrap().unwrap();
        let waited = tokio::time::timeout(Duration::from_millis(500), body.frame()).await;
        assert!(waited.is_err(), "a body without a limit ended: {waited:?}");
    }

    #[test]
    fn a_bad_server_name_is_named() {
        let mut config = kube::Config::new("https://127.0.0.1:6443".parse().unwrap());
        config.tls_server_name = Some("not a name!".into());
        let err = transport(&config).err().unwrap();
        assert!(err.to_string().contains("\"not a name!\""), "{err}");
    }
}
