//! The network side of `http.server`, on the host's runtime: it accepts connections,
//! reads requests, routes them, and queues each one for the script's thread, which runs
//! its handler and sends back the answer. Nothing here touches a Starlark value.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{ALLOW, CONTENT_TYPE, HOST, HeaderName, HeaderValue};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, oneshot, watch};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

use super::routes::{Routed, Router};
use crate::script::builtins::http::client::canonical_name;

/// Requests waiting for the script at once; more are answered 503 at once.
pub const MAX_PENDING: usize = 64;
/// Connections one server holds at once; more wait in the accept queue.
const MAX_CONNECTIONS: usize = 256;
/// How long a request may wait in the queue for the script to take it up, on top of
/// its handler's time.
pub const QUEUE_WAIT: Duration = Duration::from_secs(30);
/// Without a pause, a persistent accept error (EMFILE) would spin a core.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);

/// What a server's connections are held to.
#[derive(Debug, Clone)]
pub struct Limits {
    /// A request's head, and then its body, must arrive within this; an idle
    /// keep-alive connection closes after it too.
    pub read: Duration,
    /// The longest a request waits for its answer: its time in the queue and its
    /// handler's.
    pub reply: Duration,
    /// How long connections get to finish once the server stops.
    pub shutdown: Duration,
    pub max_header_bytes: usize,
    pub max_body_bytes: usize,
}

/// A request as the script's thread receives it.
#[derive(Debug)]
pub struct Received {
    pub method: String,
    pub path: String,
    /// The whole URL, as Go's server rebuilds it: `http://host/path?query`.
    pub url: String,
    pub raw_query: String,
    /// Canonical names, each with its values; `Host` is [`Received::host`] instead.
    pub headers: Vec<(String, Vec<String>)>,
    pub body: Bytes,
    pub remote_addr: String,
    pub host: String,
}

/// A request routed to the pattern at `route`, waiting for the script.
pub struct Pending {
    pub route: usize,
    pub params: Vec<(String, String)>,
    pub request: Received,
    pub reply: oneshot::Sender<Answer>,
}

/// The answer to a request.
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: Vec<(HeaderName, HeaderValue)>,
    pub body: Bytes,
}

/// The requests waiting for the script's thread, and what wakes it.
#[derive(Default)]
pub struct Inbox {
    queue: Mutex<VecDeque<Pending>>,
    /// Told of each request queued, and of the server stopping.
    pub notify: Notify,
    closed: AtomicBool,
}

impl Inbox {
    fn queue(&self) -> std::sync::MutexGuard<'_, VecDeque<Pending>> {
        self.queue
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Queues a request, unless the server stopped or too many wait already (false).
    fn push(&self, p: Pending) -> bool {
        let mut queue = self.queue();
        if self.is_closed() || queue.len() >= MAX_PENDING {
            return false;
        }
        queue.push_back(p);
        drop(queue);
        self.notify.notify_one();
        true
    }

    /// The next request whose client still waits.
    pub fn pop(&self) -> Option<Pending> {
        let mut queue = self.queue();
        while let Some(p) = queue.pop_front() {
            if !p.reply.is_closed() {
                return Some(p);
            }
        }
        None
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Takes no more requests; those waiting are answered 503 (their senders drop).
    fn close(&self) {
        self.closed.store(true, Ordering::Release);
        let waiting: Vec<Pending> = self.queue().drain(..).collect();
        drop(waiting);
        self.notify.notify_one();
    }
}

/// A listening server. Dropping it stops it.
pub struct Listening {
    pub addr: SocketAddr,
    pub inbox: Arc<Inbox>,
    stop: watch::Sender<bool>,
    /// How far the stop went: [`CLOSED`], then [`DRAINED`].
    closed: watch::Receiver<u8>,
}

/// The listening socket is closed.
const CLOSED: u8 = 1;
/// And the connections have finished (or were cut after the grace).
const DRAINED: u8 = 2;

impl std::fmt::Debug for Listening {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Listening({})", self.addr)
    }
}

impl Listening {
    /// Stops taking requests and connections, without waiting; connections get
    /// [`Limits::shutdown`] to finish what they are sending.
    pub fn stop(&self) {
        self.inbox.close();
        let _ = self.stop.send(true);
    }

    /// A future that completes once the listening socket is closed.
    pub fn closed(&self) -> impl Future<Output = ()> + Send + 'static {
        self.reached(CLOSED)
    }

    /// A future that completes once the connections have finished too.
    pub fn drained(&self) -> impl Future<Output = ()> + Send + 'static {
        self.reached(DRAINED)
    }

    fn reached(&self, stage: u8) -> impl Future<Output = ()> + Send + 'static {
        let mut closed = self.closed.clone();
        async move {
            // An error means the accept loop is gone, and its sockets with it.
            let _ = closed.wait_for(|c| *c >= stage).await;
        }
    }
}

impl Drop for Listening {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What every connection of a server shares.
struct Shared {
    router: Router,
    inbox: Arc<Inbox>,
    limits: Limits,
    tls: Option<TlsAcceptor>,
}

/// Binds `listener`'s server: the accept loop runs on `runtime` until stopped.
pub fn start(
    runtime: &tokio::runtime::Handle,
    listener: TcpListener,
    router: Router,
    limits: Limits,
    tls: Option<TlsAcceptor>,
) -> std::io::Result<Listening> {
    let addr = listener.local_addr()?;
    let inbox = Arc::new(Inbox::default());
    let (stop, stopped) = watch::channel(false);
    let (closed_tx, closed) = watch::channel(0);
    let shared = Arc::new(Shared {
        router,
        inbox: inbox.clone(),
        limits,
        tls,
    });
    runtime.spawn(accept_loop(listener, shared, stopped, closed_tx));
    Ok(Listening {
        addr,
        inbox,
        stop,
        closed,
    })
}

/// Completes once the server stops, or its [`Listening`] is gone.
async fn until_stopped(stopped: &mut watch::Receiver<bool>) {
    let _ = stopped.wait_for(|s| *s).await;
}

async fn accept_loop(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut stopped: watch::Receiver<bool>,
    closed: watch::Sender<u8>,
) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            // Stopped, or the server's owner is gone.
            () = until_stopped(&mut stopped) => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept(), if connections.len() < MAX_CONNECTIONS => match accepted {
                Ok((tcp, peer)) => {
                    connections.spawn(connection(tcp, peer, shared.clone(), stopped.clone()));
                }
                Err(e) => {
                    tracing::debug!(error = %e, "http.server: accepting a connection");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            },
        }
    }
    drop(listener);
    let _ = closed.send(CLOSED);
    // Connections finish what they are sending; those still open after the grace are
    // cut.
    let drained = async { while connections.join_next().await.is_some() {} };
    let _ = tokio::time::timeout(shared.limits.shutdown, drained).await;
    connections.shutdown().await;
    let _ = closed.send(DRAINED);
}

async fn connection(
    tcp: TcpStream,
    peer: SocketAddr,
    shared: Arc<Shared>,
    stopped: watch::Receiver<bool>,
) {
    match shared.tls.clone() {
        None => serve_io(tcp, peer, shared, stopped).await,
        Some(acceptor) => {
            let read = shared.limits.read;
            if let Ok(Ok(tls)) = tokio::time::timeout(read, acceptor.accept(tcp)).await {
                serve_io(tls, peer, shared, stopped).await;
            }
        }
    }
}

async fn serve_io<IO>(
    io: IO,
    peer: SocketAddr,
    shared: Arc<Shared>,
    mut stopped: watch::Receiver<bool>,
) where
    IO: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let scheme = if shared.tls.is_some() {
        "https"
    } else {
        "http"
    };
    let handler_shared = shared.clone();
    let service = hyper::service::service_fn(move |req| {
        let shared = handler_shared.clone();
        async move { Ok::<_, Infallible>(answer(req, peer, scheme, &shared).await) }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(shared.limits.read)
        // hyper refuses a buffer under 8 KiB.
        .max_buf_size(shared.limits.max_header_bytes.max(8192))
        .serve_connection(TokioIo::new(io), service);
    let mut conn = std::pin::pin!(conn);
    tokio::select! {
        _ = conn.as_mut() => {}
        () = until_stopped(&mut stopped) => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}

fn text(status: StatusCode, body: &str) -> Response<Full<Bytes>> {
    let mut r = Response::new(Full::new(Bytes::from(body.to_owned())));
    *r.status_mut() = status;
    r.headers_mut().insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    r
}

/// Routes a request, queues it for the script and returns its answer.
async fn answer(
    req: Request<Incoming>,
    peer: SocketAddr,
    scheme: &str,
    shared: &Shared,
) -> Response<Full<Bytes>> {
    if shared.inbox.is_closed() {
        return text(
            StatusCode::SERVICE_UNAVAILABLE,
            "the server is shutting down\n",
        );
    }
    let host = req
        .headers()
        .get(HOST)
        .and_then(|h| h.to_str().ok())
        .or_else(|| {
            req.uri()
                .authority()
                .map(hyper::http::uri::Authority::as_str)
        })
        .unwrap_or_default()
        .to_owned();
    let bare_host = host
        .rsplit_once(':')
        .filter(|(h, port)| !port.contains(']') && !h.is_empty())
        .map_or(host.as_str(), |(h, _)| h);
    let method = req.method().as_str().to_owned();
    let path = req.uri().path().to_owned();
    let (route, params) = match shared.router.route(&method, bare_host, &path) {
        Routed::Found { index, params } => (index, params),
        Routed::NotFound => return text(StatusCode::NOT_FOUND, "404 page not found\n"),
        Routed::MethodNotAllowed(allowed) => {
            let mut r = text(StatusCode::METHOD_NOT_ALLOWED, "Method Not Allowed\n");
            if let Ok(v) = HeaderValue::from_str(&allowed.join(", ")) {
                r.headers_mut().insert(ALLOW, v);
            }
            return r;
        }
    };
    let raw_query = req.uri().query().unwrap_or_default().to_owned();
    let mut headers: Vec<(String, Vec<String>)> = Vec::new();
    for (name, value) in req.headers() {
        if name == HOST {
            continue;
        }
        let name = canonical_name(name.as_str());
        let value = String::from_utf8_lossy(value.as_bytes()).into_owned();
        match headers.iter_mut().find(|(n, _)| *n == name) {
            Some((_, values)) => values.push(value),
            None => headers.push((name, vec![value])),
        }
    }
    let url = match req.uri().path_and_query() {
        Some(pq) => format!("{scheme}://{host}{pq}"),
        None => format!("{scheme}://{host}{path}"),
    };
    let body = match read_body(req.into_body(), &shared.limits).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let (reply, answered) = oneshot::channel();
    let pending = Pending {
        route,
        params,
        request: Received {
            method,
            path,
            url,
            raw_query,
            headers,
            body,
            remote_addr: peer.to_string(),
            host,
        },
        reply,
    };
    if !shared.inbox.push(pending) {
        return text(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many requests are waiting for the script\n",
        );
    }
    match tokio::time::timeout(shared.limits.reply, answered).await {
        Ok(Ok(a)) => {
            let mut r = Response::new(Full::new(a.body));
            *r.status_mut() = a.status;
            for (name, value) in a.headers {
                r.headers_mut().append(name, value);
            }
            r
        }
        Ok(Err(_)) => text(
            StatusCode::SERVICE_UNAVAILABLE,
            "the server stopped before answering\n",
        ),
        Err(_) => text(
            StatusCode::SERVICE_UNAVAILABLE,
            "the script did not answer in time\n",
        ),
    }
}

/// The body, within the size and time limits; otherwise the response to send.
async fn read_body(body: Incoming, limits: &Limits) -> Result<Bytes, Response<Full<Bytes>>> {
    use http_body_util::{BodyExt, Limited};
    let read = Limited::new(body, limits.max_body_bytes).collect();
    match tokio::time::timeout(limits.read, read).await {
        Err(_) => Err(text(
            StatusCode::REQUEST_TIMEOUT,
            "the request body did not arrive in time\n",
        )),
        Ok(Err(e))
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            Err(text(
                StatusCode::PAYLOAD_TOO_LARGE,
                "http: request body too large\n",
            ))
        }
        Ok(Err(e)) => Err(text(StatusCode::BAD_REQUEST, &format!("{e}\n"))),
        Ok(Ok(b)) => Ok(b.to_bytes()),
    }
}
