//! The HTTP/1.1 server for kubelet health probes and Prometheus scrapes (hyper), and
//! the connection loop the operator's admission webhook shares.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{ALLOW, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// What the server asks of the process.
pub trait Probe: Send + Sync + 'static {
    /// Ok while alive; Err(reason) otherwise.
    ///
    /// # Errors
    /// The reason the process is unhealthy, sent as the body of a 503.
    fn healthz(&self) -> Result<(), String>;
    /// Ok once ready; Err(short reason) otherwise (e.g. "caches not synced", "not the leader").
    ///
    /// # Errors
    /// The reason the process is not ready, sent as the body of a 503.
    fn readyz(&self) -> Result<(), String>;
    /// Prometheus text exposition.
    fn metrics(&self) -> String;
}

/// A gate's answer: Ok to serve, or the status (401, 403, 503) and why.
pub type Verdict = std::result::Result<(), (StatusCode, String)>;

/// What [`MetricsGate::check`] returns.
pub type GateFuture<'a> = std::pin::Pin<Box<dyn Future<Output = Verdict> + Send + 'a>>;

/// Who may read `/metrics`: asked for each scrape with the request's bearer token
/// (controller-runtime's secure metrics serving). The probes stay open.
pub trait MetricsGate: Send + Sync + 'static {
    /// Ok to serve the scrape; otherwise the status and why.
    fn check(&self, bearer: Option<String>) -> GateFuture<'_>;
}

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The address could not be bound (typically: the port is in use).
    #[error("binding {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        source: std::io::Error,
    },
}

/// The result type of this module.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The `Content-Type` of a Prometheus scrape: the text format (version 0.0.4) that
/// `prometheus-client` encodes the controllers' metrics in.
pub const METRICS_CONTENT_TYPE: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;
const TEXT_CONTENT_TYPE: &str = "text/plain; charset=utf-8";
// Without a pause, a persistent accept error (EMFILE) would spin a core.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// A client must send a request's head within this; an idle keep-alive connection is
/// closed after it too, so idle clients cannot hold the connection slots.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);
/// Connections served at once; the next ones wait in the accept queue. Far above what
/// probes and scrapes need, and each idle one goes after [`READ_TIMEOUT`].
const MAX_CONNECTIONS: usize = 1024;
/// Connections one peer address may hold at once on a webhook port: one client (a pod
/// sending slow requests) cannot take every slot from the API server. The probe
/// server has no such cap: its callers are the kubelet and a scraper.
pub const MAX_PER_PEER: usize = 32;
/// A request's body must arrive within this once its head has.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// Reads a request body of at most `max` bytes within [`BODY_TIMEOUT`].
///
/// # Errors
/// The response to send instead: 413 past `max`, 408 when the body is too slow, 400
/// when the connection broke.
pub async fn read_body(
    body: Incoming,
    max: usize,
) -> std::result::Result<Bytes, Response<Full<Bytes>>> {
    read_body_within(body, max, BODY_TIMEOUT).await
}

async fn read_body_within(
    body: Incoming,
    max: usize,
    within: Duration,
) -> std::result::Result<Bytes, Response<Full<Bytes>>> {
    use http_body_util::{BodyExt, Limited};
    match tokio::time::timeout(within, Limited::new(body, max).collect()).await {
        Err(_) => Err(text(
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "the request body did not arrive within {}ms\n",
                within.as_millis()
            ),
        )),
        Ok(Err(e)) => Err(text(StatusCode::BAD_REQUEST, format!("{e}\n"))),
        Ok(Ok(b)) => Ok(b.to_bytes()),
    }
}

/// Counts each peer address's open connections.
#[derive(Default)]
struct Peers(std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>);

/// One connection of a peer, counted until dropped.
struct PeerSlot {
    peers: Arc<Peers>,
    ip: std::net::IpAddr,
}

impl Peers {
    /// A slot for `ip`, unless it holds [`MAX_PER_PEER`] already.
    fn enter(self: &Arc<Self>, ip: std::net::IpAddr, cap: usize) -> Option<PeerSlot> {
        let mut map = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let n = map.entry(ip).or_insert(0);
        if *n >= cap {
            return None;
        }
        *n += 1;
        Some(PeerSlot {
            peers: self.clone(),
            ip,
        })
    }
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut map = self
            .peers
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(n) = map.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                map.remove(&self.ip);
            }
        }
    }
}

/// Binds now (so a port conflict is reported at start-up) and returns the bound address
/// and a future that serves until `shutdown` resolves.
///
/// Connections already accepted when `shutdown` resolves finish in their own tasks,
/// bounded by the read timeout.
///
/// # Errors
/// [`Error::Bind`] when the address cannot be bound.
pub async fn bind(
    addr: SocketAddr,
    probe: Arc<dyn Probe>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(SocketAddr, impl Future<Output = ()> + Send + 'static)> {
    bind_gated(addr, probe, None, shutdown).await
}

/// [`bind`], with `/metrics` behind `gate` when there is one.
///
/// # Errors
/// [`Error::Bind`] when the address cannot be bound.
pub async fn bind_gated(
    addr: SocketAddr,
    probe: Arc<dyn Probe>,
    gate: Option<Arc<dyn MetricsGate>>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(SocketAddr, impl Future<Output = ()> + Send + 'static)> {
    let (listener, local) = listen(addr).await?;
    Ok((local, serve(listener, probe, gate, shutdown, READ_TIMEOUT)))
}

/// Binds `addr`; returns the listener and the address it got.
///
/// # Errors
/// [`Error::Bind`] when the address cannot be bound.
pub async fn listen(addr: SocketAddr) -> Result<(TcpListener, SocketAddr)> {
    let bind_err = |source| Error::Bind { addr, source };
    let listener = TcpListener::bind(addr).await.map_err(bind_err)?;
    let local = listener.local_addr().map_err(bind_err)?;
    Ok((listener, local))
}

async fn serve(
    listener: TcpListener,
    probe: Arc<dyn Probe>,
    gate: Option<Arc<dyn MetricsGate>>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    read_timeout: Duration,
) {
    let handler = move |req: Request<Incoming>| {
        let probe = probe.clone();
        let gate = gate.clone();
        async move {
            if let Some(gate) = gate
                && req.uri().path() == "/metrics"
            {
                let bearer = req
                    .headers()
                    .get(hyper::header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.strip_prefix("Bearer "))
                    .map(|t| t.trim().to_owned());
                if let Err((status, why)) = gate.check(bearer).await {
                    return text(status, format!("{why}\n"));
                }
            }
            respond(req.method(), req.uri().path(), &*probe)
        }
    };
    let plain = |tcp: TcpStream| async move { Some(tcp) };
    connections(
        listener,
        shutdown,
        read_timeout,
        MAX_CONNECTIONS,
        plain,
        handler,
    )
    .await;
}

/// Serves HTTP/1.1 on each connection `listener` accepts until `shutdown`: `open` turns
/// the TCP stream into the transport (None drops it, e.g. a failed TLS handshake), and
/// `handler` answers each request.
pub async fn connections<O, OF, IO, H, HF, B>(
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send + 'static,
    read_timeout: Duration,
    per_peer: usize,
    open: O,
    handler: H,
) where
    O: Fn(TcpStream) -> OF + Send + Sync + 'static,
    OF: Future<Output = Option<IO>> + Send + 'static,
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    H: Fn(Request<Incoming>) -> HF + Clone + Send + Sync + 'static,
    HF: Future<Output = Response<B>> + Send + 'static,
    B: hyper::body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let peers = Arc::new(Peers::default());
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        let (tcp, peer) = tokio::select! {
            () = &mut shutdown => return,
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    tracing::warn!(error = %e, "accepting a connection");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
        };
        let Some(peer_slot) = peers.enter(peer.ip(), per_peer) else {
            tracing::debug!(%peer, "refusing a connection: the peer holds {per_peer} already");
            drop(tcp);
            continue;
        };
        let opening = open(tcp);
        let handler = handler.clone();
        tokio::spawn(async move {
            let _permit = permit;
            let _peer_slot = peer_slot;
            let Some(io) = opening.await else {
                return;
            };
            let service = hyper::service::service_fn(move |req| {
                let answer = handler(req);
                async move { Ok::<_, std::convert::Infallible>(answer.await) }
            });
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(read_timeout)
                .max_buf_size(64 * 1024)
                .serve_connection(TokioIo::new(io), service);
            if let Err(e) = conn.await {
                tracing::debug!(error = %e, "connection ended");
            }
        });
    }
}

/// A plain-text response.
pub fn text(status: StatusCode, body: impl Into<String>) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body.into())));
    *r.status_mut() = status;
    r.headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static(TEXT_CONTENT_TYPE));
    r
}

/// The answer to `method path`; never panics.
fn respond(method: &Method, path: &str, probe: &dyn Probe) -> Response<Full<Bytes>> {
    let status = |result: Result<(), String>| match result {
        Ok(()) => text(StatusCode::OK, "ok"),
        Err(reason) => text(StatusCode::SERVICE_UNAVAILABLE, reason),
    };
    let readable = method == Method::GET || method == Method::HEAD;
    match (path, readable) {
        ("/healthz" | "/readyz" | "/metrics", false) => {
            let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "method not allowed");
            r.headers_mut()
                .insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
            r
        }
        ("/healthz", true) => status(probe.healthz()),
        ("/readyz", true) => status(probe.readyz()),
        ("/metrics", true) => {
            let mut r = text(StatusCode::OK, probe.metrics());
            r.headers_mut()
                .insert(CONTENT_TYPE, HeaderValue::from_static(METRICS_CONTENT_TYPE));
            r
        }
        _ => text(StatusCode::NOT_FOUND, "not found"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::time::timeout;

    struct Unready;

    impl Probe for Unready {
        fn healthz(&self) -> Result<(), String> {
            Ok(())
        }
        fn readyz(&self) -> Result<(), String> {
            Err("caches not synced".to_owned())
        }
        fn metrics(&self) -> String {
            "kite_up 1\n".to_owned()
        }
    }

    /// A running server; dropping the sender shuts it down.
    async fn start(read_timeout: Duration) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel();
        let stop = async { drop(rx.await) };
        tokio::spawn(serve(listener, Arc::new(Unready), None, stop, read_timeout));
        (addr, tx)
    }

    /// Sends `raw` with `Connection: close` semantics (half-closes) and returns
    /// everything the server sent.
    async fn exchange(addr: SocketAddr, raw: impl AsRef<[u8]>) -> String {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(raw.as_ref()).await.unwrap();
        stream.shutdown().await.unwrap();
        let mut out = Vec::new();
        let read = timeout(Duration::from_secs(10), stream.read_to_end(&mut out));
        read.await.unwrap().unwrap();
        String::from_utf8_lossy(&out).into_owned()
    }

    /// What curl sends.
    fn get(path: &str) -> String {
        let headers = "Host: 127.0.0.1\r\nUser-Agent: curl/8.5.0\r\nAccept: */*\r\n";
        format!("GET {path} HTTP/1.1\r\n{headers}Connection: close\r\n\r\n")
    }

    fn status_line(reply: &str) -> &str {
        reply.lines().next().unwrap_or("")
    }

    fn body(reply: &str) -> &str {
        reply.split_once("\r\n\r\n").map_or("", |(_, b)| b)
    }

    #[tokio::test]
    async fn curl_style_requests() {
        let (addr, _stop) = start(READ_TIMEOUT).await;
        let reply = exchange(addr, get("/healthz")).await;
        assert_eq!(status_line(&reply), "HTTP/1.1 200 OK");
        assert_eq!(body(&reply), "ok");
        assert!(
            reply.contains("content-type: text/plain; charset=utf-8"),
            "{reply}"
        );
        let reply = exchange(addr, get("/readyz?verbose")).await;
        assert_eq!(status_line(&reply), "HTTP/1.1 503 Service Unavailable");
        assert_eq!(body(&reply), "caches not synced");
        let reply = exchange(addr, get("/metrics")).await;
        assert_eq!(body(&reply), "kite_up 1\n");
        assert!(
            reply.contains("content-type: text/plain; version=0.0.4"),
            "{reply}"
        );
        let reply = exchange(addr, get("/nope")).await;
        assert_eq!(status_line(&reply), "HTTP/1.1 404 Not Found");

        let reply = exchange(addr, "POST /healthz HTTP/1.1\r\nContent-Length: 0\r\n\r\n").await;
        assert_eq!(status_line(&reply), "HTTP/1.1 405 Method Not Allowed");
        assert!(reply.contains("allow: GET, HEAD"), "{reply}");
        // HEAD: no body.
        let reply = exchange(addr, "HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
        assert_eq!(status_line(&reply), "HTTP/1.1 200 OK");
        assert_eq!(body(&reply), "");
        let reply = exchange(addr, "GET /healthz HTTP/1.0\r\n\r\n").await;
        assert!(reply.starts_with("HTTP/1.0 200 OK"), "{reply}");
    }

    #[tokio::test]
    async fn garbage_gets_400_or_close() {
        let (addr, _stop) = start(READ_TIMEOUT).await;
        let inputs: [&[u8]; 4] = [
            b"\x00\xff\xfe\r\n\r\n",
            b"GET\r\n\r\n",
            b"GET /healthz HTTP/1.1\r\nno colon here\r\n\r\n",
            b"GET /healthz HTT",
        ];
        for raw in inputs {
            let reply = exchange(addr, raw).await;
            assert!(
                reply.is_empty() || reply.starts_with("HTTP/1.1 400 "),
                "{raw:?}: {reply}"
            );
        }
        assert_eq!(exchange(addr, b"").await, "", "a TCP probe gets no reply");
        // A huge head is bounded by hyper's buffer limit; whatever the answer, the
        // server goes on serving.
        let huge = format!(
            "GET /healthz HTTP/1.1\r\nX: {}\r\n\r\n",
            "a".repeat(1_000_000)
        );
        let _ = exchange(addr, huge).await;
        let reply = exchange(addr, get("/healthz")).await;
        assert!(reply.starts_with("HTTP/1.1 200 OK\r\n"), "{reply}");
    }

    #[tokio::test]
    async fn stalled_clients_time_out() {
        let (addr, _stop) = start(Duration::from_millis(100)).await;
        let mut stream = TcpStream::connect(addr).await.unwrap();
        let partial = b"GET /healthz HTTP/1.1\r\n";
        stream.write_all(partial).await.unwrap();
        let mut out = Vec::new();
        let read = timeout(Duration::from_secs(5), stream.read_to_end(&mut out));
        assert!(read.await.is_ok(), "the connection stayed open");
    }

    #[tokio::test]
    async fn idle_connections_do_not_block_probes() {
        let (addr, _stop) = start(READ_TIMEOUT).await;
        let mut idle = Vec::new();
        for _ in 0..200 {
            idle.push(TcpStream::connect(addr).await.unwrap());
        }
        for _ in 0..20 {
            let reply = timeout(Duration::from_secs(1), exchange(addr, get("/healthz"))).await;
            assert!(
                reply
                    .as_deref()
                    .is_ok_and(|r| r.starts_with("HTTP/1.1 200 OK")),
                "{reply:?}"
            );
        }
        drop(idle);
    }

    /// Serves `handler` on a loopback port with at most 4 connections per peer; the
    /// address, and the sender that stops it when dropped.
    async fn serve_four<H, HF>(handler: H) -> (SocketAddr, tokio::sync::oneshot::Sender<()>)
    where
        H: Fn(Request<Incoming>) -> HF + Clone + Send + Sync + 'static,
        HF: Future<Output = Response<Full<Bytes>>> + Send + 'static,
    {
        let (listener, addr) = listen(SocketAddr::from(([127, 0, 0, 1], 0))).await.unwrap();
        let plain = |tcp: TcpStream| async move { Some(tcp) };
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(connections(
            listener,
            async move {
                let _ = stopped.await;
            },
            Duration::from_secs(30),
            4,
            plain,
            handler,
        ));
        (addr, stop)
    }

    /// One peer that holds its share of a webhook port's connections is refused more;
    /// another peer is still served.
    #[tokio::test]
    async fn a_peer_holds_no_more_than_its_share() {
        let handler = |_req: Request<Incoming>| async { text(StatusCode::OK, "ok") };
        let (addr, _stop) = serve_four(handler).await;
        let mut held = Vec::new();
        for _ in 0..4 {
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
            held.push(s);
        }
        // Held connections are counted once accepted: wait until the fifth is refused.
        let refused = async {
            loop {
                let mut s = TcpStream::connect(addr).await.unwrap();
                let _ = s.write_all(get("/").as_bytes()).await;
                let mut out = Vec::new();
                let _ = s.read_to_end(&mut out).await;
                if out.is_empty() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        };
        timeout(Duration::from_secs(5), refused)
            .await
            .expect("a fifth connection of the same peer is closed unanswered");
        let other = tokio::net::TcpSocket::new_v4().unwrap();
        other.bind(SocketAddr::from(([127, 0, 0, 2], 0))).unwrap();
        let mut other = other.connect(addr).await.unwrap();
        other.write_all(get("/").as_bytes()).await.unwrap();
        let mut out = Vec::new();
        timeout(Duration::from_secs(5), other.read_to_end(&mut out))
            .await
            .unwrap()
            .unwrap();
        assert!(
            String::from_utf8_lossy(&out).starts_with("HTTP/1.1 200 OK"),
            "another peer is served"
        );
        drop(held);
    }

    /// A body that trickles in is answered 408 once its time is up.
    #[tokio::test]
    async fn slow_bodies_time_out() {
        let handler = |req: Request<Incoming>| async move {
            match read_body_within(req.into_body(), 1024, Duration::from_millis(200)).await {
                Ok(b) => text(StatusCode::OK, format!("{} bytes", b.len())),
                Err(refused) => refused,
            }
        };
        let (addr, _stop) = serve_four(handler).await;
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"POST / HTTP/1.1\r\nContent-Length: 10\r\n\r\nab")
            .await
            .unwrap();
        let mut out = vec![0; 256];
        let n = timeout(Duration::from_secs(5), s.read(&mut out))
            .await
            .expect("answered while the body is still missing")
            .unwrap();
        let reply = String::from_utf8_lossy(&out[..n]).into_owned();
        assert!(reply.starts_with("HTTP/1.1 408 "), "{reply}");
        // A whole body is read.
        let reply = exchange(addr, "POST / HTTP/1.1\r\nContent-Length: 3\r\n\r\nabc").await;
        assert!(reply.ends_with("3 bytes"), "{reply}");
    }

    #[tokio::test]
    async fn shutdown_stops_accepting() {
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let any = SocketAddr::from(([127, 0, 0, 1], 0));
        let stop = async { drop(rx.await) };
        let (addr, server) = bind(any, Arc::new(Unready), stop).await.unwrap();
        let server = tokio::spawn(server);
        let reply = exchange(addr, get("/healthz")).await;
        assert!(reply.starts_with("HTTP/1.1 200 OK\r\n"), "{reply}");

        tx.send(()).unwrap();
        let stopped = timeout(Duration::from_secs(5), server).await;
        assert!(matches!(stopped, Ok(Ok(()))), "{stopped:?}");
        assert!(TcpStream::connect(addr).await.is_err());

        // A port conflict is reported by bind itself.
        let _holder = TcpListener::bind(addr).await.unwrap();
        let err = bind(addr, Arc::new(Unready), async {}).await.err().unwrap();
        let prefix = format!("binding {addr}: ");
        assert!(err.to_string().starts_with(&prefix), "{err}");
    }
}
