//! A minimal HTTP/1.1 server for kubelet health probes and Prometheus scrapes.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::timeout;

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

const METRICS_CONTENT_TYPE: &str = "text/plain; version=0.0.4";
const TEXT_CONTENT_TYPE: &str = "text/plain; charset=utf-8";
// Without a pause, a persistent accept error (EMFILE) would spin a core.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
const READ_TIMEOUT: Duration = Duration::from_secs(5);
const WRITE_TIMEOUT: Duration = Duration::from_secs(5);
// Closing a socket with unread input sends a RST, which can make the client lose the
// response: drain for a while first.
const LINGER: Duration = Duration::from_secs(1);
const MAX_HEAD: usize = 8 * 1024;
// Probes and scrapes are few; more than this is a misbehaving client.
const MAX_CONNECTIONS: usize = 64;

/// Binds now (so a port conflict is reported at start-up) and returns the bound address
/// and a future that serves until `shutdown` resolves.
///
/// Connections already accepted when `shutdown` resolves finish in their own tasks,
/// bounded by the read and write timeouts.
///
/// # Errors
/// [`Error::Bind`] when the address cannot be bound.
pub async fn bind(
    addr: SocketAddr,
    probe: Arc<dyn Probe>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(SocketAddr, impl Future<Output = ()> + Send + 'static)> {
    let bind_err = |source| Error::Bind { addr, source };
    let listener = TcpListener::bind(addr).await.map_err(bind_err)?;
    let local = listener.local_addr().map_err(bind_err)?;
    Ok((local, serve(listener, probe, shutdown, READ_TIMEOUT)))
}

async fn serve(
    listener: TcpListener,
    probe: Arc<dyn Probe>,
    shutdown: impl Future<Output = ()> + Send + 'static,
    read_timeout: Duration,
) {
    let mut shutdown = std::pin::pin!(shutdown);
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let (stream, peer) = tokio::select! {
            biased;
            () = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    tracing::warn!(error = %e, "http: accepting a connection failed");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                    continue;
                }
            },
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            tracing::debug!(%peer, "http: too many connections; closing");
            continue;
        };
        let probe = probe.clone();
        tokio::spawn(async move {
            handle(stream, peer, &*probe, read_timeout).await;
            drop(permit);
        });
    }
    tracing::debug!(addr = ?listener.local_addr().ok(), "http: server stopped");
}

/// How reading the request head ended.
enum Head {
    /// The head, without the blank line that ends it.
    Complete(Vec<u8>),
    /// The peer closed before sending anything (a TCP probe).
    Empty,
    /// The peer closed mid-head.
    Truncated,
    TooLarge,
}

async fn handle(
    mut stream: TcpStream,
    peer: SocketAddr,
    probe: &dyn Probe,
    read_timeout: Duration,
) {
    let read = timeout(read_timeout, read_head(&mut stream)).await;
    let response = match read.unwrap_or_else(|_| Err(std::io::ErrorKind::TimedOut.into())) {
        Err(e) => return tracing::debug!(%peer, error = %e, "http: reading the request failed"),
        Ok(Head::Empty) => return,
        Ok(Head::Truncated) => text(400, "incomplete request"),
        Ok(Head::TooLarge) => text(431, "request header fields too large"),
        Ok(Head::Complete(head)) => {
            // Debug-formatted: the line is untrusted and may hold control characters.
            let line = String::from_utf8_lossy(head.split(|&b| b == b'\n').next().unwrap_or(&[]));
            tracing::debug!(%peer, request = ?line.trim_end(), "http: request");
            respond(&head, probe)
        }
    };
    tracing::debug!(%peer, status = response.status, "http: response");
    let bytes = response.encode();
    let written = timeout(WRITE_TIMEOUT, async {
        stream.write_all(&bytes).await?;
        stream.shutdown().await
    });
    match written.await {
        Ok(Ok(())) => {
            let _ = timeout(LINGER, tokio::io::copy(&mut stream, &mut tokio::io::sink())).await;
        }
        Ok(Err(e)) => tracing::debug!(%peer, error = %e, "http: writing the response failed"),
        Err(_) => tracing::debug!(%peer, "http: timed out writing the response"),
    }
}

async fn read_head(stream: &mut TcpStream) -> std::io::Result<Head> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Ok(if buf.is_empty() {
                Head::Empty
            } else {
                Head::Truncated
            });
        }
        // The terminator may straddle two reads.
        let scan_from = buf.len().saturating_sub(2);
        buf.extend_from_slice(&chunk[..n]);
        if let Some(end) = head_end(&buf, scan_from) {
            if end > MAX_HEAD {
                return Ok(Head::TooLarge);
            }
            buf.truncate(end);
            return Ok(Head::Complete(buf));
        }
        if buf.len() > MAX_HEAD {
            return Ok(Head::TooLarge);
        }
    }
}

/// The length of the head (through the last header line's `\n`) if `buf` holds a blank
/// line at or after `from`. Bare `\n` line endings are accepted, as RFC 9112 allows.
fn head_end(buf: &[u8], from: usize) -> Option<usize> {
    (from..buf.len()).find_map(|i| {
        let rest = &buf[i..];
        (rest.starts_with(b"\n\n") || rest.starts_with(b"\n\r\n")).then_some(i + 1)
    })
}

/// A response; `headers` holds extra header lines, each ending in CRLF.
struct Response {
    status: u16,
    content_type: &'static str,
    headers: &'static str,
    body: String,
    head_only: bool,
}

fn text(status: u16, body: impl Into<String>) -> Response {
    let (content_type, headers, body) = (TEXT_CONTENT_TYPE, "", body.into());
    Response {
        status,
        content_type,
        headers,
        body,
        head_only: false,
    }
}

impl Response {
    fn encode(&self) -> Vec<u8> {
        let reason = match self.status {
            200 => "OK",
            400 => "Bad Request",
            404 => "Not Found",
            405 => "Method Not Allowed",
            431 => "Request Header Fields Too Large",
            503 => "Service Unavailable",
            _ => "",
        };
        let (status, content_type, headers) = (self.status, self.content_type, self.headers);
        let length = self.body.len();
        let mut out = format!(
            "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\n\
             Content-Length: {length}\r\n{headers}Connection: close\r\n\r\n"
        )
        .into_bytes();
        if !self.head_only {
            out.extend_from_slice(self.body.as_bytes());
        }
        out
    }
}

/// The response to a complete request head; never panics, whatever the bytes.
fn respond(head: &[u8], probe: &dyn Probe) -> Response {
    let Some((method, path)) = parse(head) else {
        return text(400, "bad request");
    };
    let status = |result: Result<(), String>| match result {
        Ok(()) => text(200, "ok"),
        Err(reason) => text(503, reason),
    };
    let head_only = method == "HEAD";
    let response = match (path, head_only || method == "GET") {
        ("/healthz" | "/readyz" | "/metrics", false) => Response {
            headers: "Allow: GET, HEAD\r\n",
            ..text(405, "method not allowed")
        },
        ("/healthz", true) => status(probe.healthz()),
        ("/readyz", true) => status(probe.readyz()),
        ("/metrics", true) => Response {
            content_type: METRICS_CONTENT_TYPE,
            ..text(200, probe.metrics())
        },
        _ => text(404, "not found"),
    };
    Response {
        head_only,
        ..response
    }
}

/// The method and the path (query and fragment removed) of a well-formed head.
fn parse(head: &[u8]) -> Option<(&str, &str)> {
    let mut lines = head
        .split(|&b| b == b'\n')
        .map(|line| line.strip_suffix(b"\r").unwrap_or(line));
    let request_line = std::str::from_utf8(lines.next()?).ok()?;
    let mut parts = request_line.split(' ');
    let (method, target, version) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some()
        || method.is_empty()
        || !method.bytes().all(is_tchar)
        || !matches!(version, "HTTP/1.0" | "HTTP/1.1")
    {
        return None;
    }
    for line in lines.filter(|line| !line.is_empty()) {
        // A header needs a token name before its colon; obs-fold continuation lines
        // (leading whitespace) are rejected, as RFC 9112 permits.
        let colon = line.iter().position(|&b| b == b':')?;
        if colon == 0 || !line[..colon].iter().copied().all(is_tchar) {
            return None;
        }
    }
    // Absolute-form targets ("http://host/path") come from proxies.
    let target = match target.split_once("://") {
        Some((scheme, rest)) if scheme.eq_ignore_ascii_case("http") => {
            rest.find('/').map_or("/", |i| &rest[i..])
        }
        _ => target,
    };
    if !target.starts_with('/') {
        return None;
    }
    let path = target.split(['?', '#']).next().unwrap_or(target);
    Some((method, path))
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        tokio::spawn(serve(listener, Arc::new(Unready), stop, read_timeout));
        (addr, tx)
    }

    /// Sends `raw`, half-closes, and returns everything the server sent.
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
        format!("GET {path} HTTP/1.1\r\n{headers}\r\n")
    }

    /// The exact response expected; `extra` is more header lines.
    fn expect(status: &str, content_type: &str, extra: &str, body: &str) -> String {
        let len = body.len();
        let head = format!("Content-Type: {content_type}\r\nContent-Length: {len}\r\n{extra}");
        format!("HTTP/1.1 {status}\r\n{head}Connection: close\r\n\r\n{body}")
    }

    #[tokio::test]
    async fn curl_style_requests() {
        let (addr, _stop) = start(READ_TIMEOUT).await;
        let (text, metrics) = (TEXT_CONTENT_TYPE, METRICS_CONTENT_TYPE);
        assert_eq!(metrics, "text/plain; version=0.0.4");
        let reply = exchange(addr, get("/healthz")).await;
        assert_eq!(reply, expect("200 OK", text, "", "ok"));
        let reply = exchange(addr, get("/readyz?verbose")).await;
        let unready = "503 Service Unavailable";
        assert_eq!(reply, expect(unready, text, "", "caches not synced"));
        let reply = exchange(addr, get("/metrics")).await;
        assert_eq!(reply, expect("200 OK", metrics, "", "kite_up 1\n"));
        let reply = exchange(addr, get("/nope")).await;
        assert_eq!(reply, expect("404 Not Found", text, "", "not found"));

        let reply = exchange(addr, "POST /healthz HTTP/1.1\r\nContent-Length: 0\r\n\r\n").await;
        let allow = "Allow: GET, HEAD\r\n";
        let status = "405 Method Not Allowed";
        assert_eq!(reply, expect(status, text, allow, "method not allowed"));
        // HEAD: GET's headers, Content-Length included, and no body.
        let reply = exchange(addr, "HEAD /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
        let get_reply = expect("200 OK", metrics, "", "kite_up 1\n");
        assert_eq!(Some(reply.as_str()), get_reply.strip_suffix("kite_up 1\n"));
        // HTTP/1.0 with bare LF line endings, as a minimal client might send.
        let reply = exchange(addr, "GET /healthz HTTP/1.0\n\n").await;
        assert_eq!(reply, expect("200 OK", text, "", "ok"));
    }

    #[tokio::test]
    async fn garbage_gets_400_or_close() {
        let (addr, _stop) = start(READ_TIMEOUT).await;
        let inputs: [&[u8]; 9] = [
            b"\x00\xff\xfe\r\n\r\n",
            b"\r\n\r\n",
            b"GET\r\n\r\n",
            b"GET /healthz HTTP/2.0\r\n\r\n",
            b"GET  /healthz HTTP/1.1\r\n\r\n",
            b"GET healthz HTTP/1.1\r\n\r\n",
            b"GET /healthz HTTP/1.1\r\nno colon here\r\n\r\n",
            b"GET /healthz HTTP/1.1\r\n folded: x\r\n\r\n",
            b"GET /healthz HTT",
        ];
        for raw in inputs {
            let reply = exchange(addr, raw).await;
            assert!(reply.starts_with("HTTP/1.1 400 "), "{raw:?}: {reply}");
        }
        assert_eq!(exchange(addr, b"").await, "", "a TCP probe gets no reply");
        let huge = format!("GET /healthz HTTP/1.1\r\nX: {}\r\n\r\n", "a".repeat(9000));
        let reply = exchange(addr, huge).await;
        assert!(reply.starts_with("HTTP/1.1 431 "), "{reply}");
        let reply = exchange(addr, get("/healthz")).await;
        assert!(reply.starts_with("HTTP/1.1 200 OK\r\n"), "{reply}");
    }

    #[test]
    fn respond_never_panics() {
        let sample = b"GET http://h/readyz?x#y HTTP/1.1\r\nHost: h\r\nA: b\r\n";
        assert_eq!(respond(sample, &Unready).status, 503);
        // Every prefix, and every substitution of one byte by a delimiter or invalid UTF-8.
        for i in 0..sample.len() {
            let prefix = &sample[..i];
            let _ = (respond(prefix, &Unready), head_end(prefix, i / 2));
            for byte in *b"\0\n\r :?/\xff" {
                let mut bytes = sample.to_vec();
                bytes[i] = byte;
                let _ = respond(&bytes, &Unready);
            }
        }
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
        assert!(out.is_empty());
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
