//! The pooled HTTP(S) client behind the `http` builtins: one per script host, with
//! redirects, a whole-request timeout and a response size cap.

use std::error::Error as StdError;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, LengthLimitError, Limited};
use hyper::header::{
    AUTHORIZATION, CONTENT_LENGTH, COOKIE, HeaderName, HeaderValue, LOCATION, USER_AGENT,
};
use hyper::{Method, Request, StatusCode, Uri};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};

/// A request's timeout when neither the call nor `http.config` gives one (upstream's).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Redirects followed before giving up (as Go's client, which upstream uses).
pub const MAX_REDIRECTS: usize = 10;
/// The largest response body read into memory; a script's heap holds all of it.
pub const MAX_BODY_BYTES: usize = 64 << 20;
/// Idle pooled connections close after this, so a quiet script holds no sockets.
const POOL_IDLE: Duration = Duration::from_secs(90);

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("invalid URL {url:?}: {reason}")]
    ParseUrl { url: String, reason: String },
    #[error("invalid header {name:?}: {reason}")]
    BuildHeader { name: String, reason: String },
    #[error(
        "{method} {url}: HTTPS is unavailable: loading the platform's root certificates failed: {reason}"
    )]
    LoadRoots {
        method: Method,
        url: String,
        reason: String,
    },
    #[error("{method} {url}: {reason}")]
    Send {
        method: Method,
        url: String,
        reason: String,
    },
    #[error("{method} {url}: reading the response body: {reason}")]
    ReadBody {
        method: Method,
        url: String,
        reason: String,
    },
    #[error("{method} {url}: the response body is larger than the {} MiB limit", MAX_BODY_BYTES >> 20)]
    BodyTooLarge { method: Method, url: String },
    #[error("{method} {url}: no complete response within {}", crate::duration::format(*.timeout))]
    TimedOut {
        method: Method,
        url: String,
        timeout: Duration,
    },
    #[error("{method} {url}: stopped after {MAX_REDIRECTS} redirects")]
    FollowRedirects { method: Method, url: String },
    #[error("{method} {url}: bad redirect location {location:?}: {reason}")]
    ResolveRedirect {
        method: Method,
        url: String,
        location: String,
        reason: String,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// One request as a builtin describes it.
#[derive(Debug, Clone)]
pub struct Outgoing {
    pub method: Method,
    pub url: String,
    /// In the order given; a later value for the same name replaces an earlier one.
    pub headers: Vec<(String, String)>,
    pub body: Option<Bytes>,
    pub timeout: Duration,
}

/// A response read in full.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    /// The status line's text, as Go prints it: `"200 OK"`.
    pub status_text: String,
    /// Canonical names (`Content-Type`), each with its values in arrival order.
    pub headers: Vec<(String, Vec<String>)>,
    pub body: Bytes,
}

/// Defaults `http.config(...)` sets for the rest of the run.
#[derive(Debug, Clone)]
pub struct Defaults {
    pub timeout: Duration,
    pub headers: Vec<(String, String)>,
}

impl Default for Defaults {
    fn default() -> Self {
        Defaults {
            timeout: DEFAULT_TIMEOUT,
            headers: Vec::new(),
        }
    }
}

type HyperClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// The client and its connection pool, kept per script host (`host.ext::<Pool>()`) so
/// that a script's requests to one server reuse connections.
#[derive(Default)]
pub struct Pool {
    client: OnceLock<Connector>,
    defaults: Mutex<Defaults>,
}

struct Connector {
    client: HyperClient,
    /// Why HTTPS cannot work (no root certificates); plain HTTP still does.
    roots_error: Option<String>,
}

impl Pool {
    /// The defaults requests start from.
    pub fn defaults(&self) -> Defaults {
        self.defaults
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Changes the defaults for later requests.
    pub fn configure(&self, f: impl FnOnce(&mut Defaults)) {
        f(&mut self
            .defaults
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner));
    }

    /// Builds the client on first use. It reads the root certificates from disk, so call
    /// it from the script's thread, not from a runtime worker.
    fn connector(&self) -> &Connector {
        self.client.get_or_init(|| {
            let provider = rustls::crypto::ring::default_provider();
            let (builder, roots_error) = match hyper_rustls::HttpsConnectorBuilder::new()
                .with_provider_and_native_roots(provider.clone())
            {
                Ok(b) => (b, None),
                Err(e) => {
                    // No roots: keep plain HTTP working and report the cause on HTTPS use.
                    let config = rustls::ClientConfig::builder_with_provider(provider.into())
                        .with_safe_default_protocol_versions()
                        .map(|b| {
                            b.with_root_certificates(rustls::RootCertStore::empty())
                                .with_no_client_auth()
                        });
                    match config {
                        Ok(c) => (
                            hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(c),
                            Some(e.to_string()),
                        ),
                        Err(e2) => (
                            hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(
                                rustls::ClientConfig::builder()
                                    .with_root_certificates(rustls::RootCertStore::empty())
                                    .with_no_client_auth(),
                            ),
                            Some(format!("{e}; {e2}")),
                        ),
                    }
                }
            };
            let connector = builder.https_or_http().enable_http1().build();
            let client = Client::builder(TokioExecutor::new())
                .pool_idle_timeout(POOL_IDLE)
                .pool_timer(TokioTimer::new())
                .build(connector);
            Connector {
                client,
                roots_error,
            }
        })
    }

    /// Returns a future that sends `req`, following redirects, and reads the whole
    /// response. The client is built here (on the caller's thread); await the future on
    /// the host's runtime.
    pub fn send(&self, req: Outgoing) -> impl Future<Output = Result<Reply>> + Send + use<> {
        let connector = self.connector();
        let client = connector.client.clone();
        let roots_error = connector.roots_error.clone();
        async move {
            let (method, url, timeout) = (req.method.clone(), req.url.clone(), req.timeout);
            match tokio::time::timeout(timeout, exchange(&client, roots_error.as_deref(), req))
                .await
            {
                Ok(out) => out,
                Err(_) => Err(Error::TimedOut {
                    method,
                    url,
                    timeout,
                }),
            }
        }
    }
}

/// Sends `req` and follows up to [`MAX_REDIRECTS`] redirects, as Go's client does:
/// 301/302/303 turn into a body-less GET (HEAD stays HEAD), 307/308 repeat the request.
async fn exchange(client: &HyperClient, roots_error: Option<&str>, req: Outgoing) -> Result<Reply> {
    let mut uri = parse_url(&req.url)?;
    let mut method = req.method.clone();
    let mut body = req.body.clone();
    let mut headers = header_map(&req.headers)?;
    let first_host = uri.host().map(str::to_owned);
    for _ in 0..=MAX_REDIRECTS {
        let url = uri.to_string();
        if uri.scheme_str() == Some("https")
            && let Some(reason) = roots_error
        {
            return Err(Error::LoadRoots {
                method,
                url,
                reason: reason.to_owned(),
            });
        }
        let mut request = Request::builder()
            .method(method.clone())
            .uri(uri.clone())
            .body(Full::new(body.clone().unwrap_or_default()))
            .map_err(|e| Error::Send {
                method: method.clone(),
                url: url.clone(),
                reason: e.to_string(),
            })?;
        *request.headers_mut() = headers.clone();
        let response = client.request(request).await.map_err(|e| Error::Send {
            method: method.clone(),
            url: url.clone(),
            reason: chain(&e),
        })?;
        let status = response.status();
        let location = response
            .headers()
            .get(LOCATION)
            .and_then(|l| l.to_str().ok())
            .map(str::to_owned);
        let redirect = matches!(status.as_u16(), 301 | 302 | 303 | 307 | 308);
        let Some(location) = location.filter(|_| redirect) else {
            return read(method, url, response).await;
        };
        let next = resolve(&uri, &location).map_err(|reason| Error::ResolveRedirect {
            method: method.clone(),
            url: url.clone(),
            location: location.clone(),
            reason,
        })?;
        if matches!(status.as_u16(), 301..=303) && method != Method::HEAD {
            method = Method::GET;
            body = None;
            headers.remove(hyper::header::CONTENT_TYPE);
        }
        // Credentials stay with the host they were meant for.
        if next.host().map(str::to_owned) != first_host {
            headers.remove(AUTHORIZATION);
            headers.remove(COOKIE);
        }
        uri = next;
    }
    Err(Error::FollowRedirects {
        method,
        url: uri.to_string(),
    })
}

/// Reads a response whole, refusing a body over [`MAX_BODY_BYTES`].
async fn read(
    method: Method,
    url: String,
    response: hyper::Response<hyper::body::Incoming>,
) -> Result<Reply> {
    let declared = response
        .headers()
        .get(CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > MAX_BODY_BYTES as u64) {
        return Err(Error::BodyTooLarge { method, url });
    }
    let (parts, incoming) = response.into_parts();
    let body = match Limited::new(incoming, MAX_BODY_BYTES).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(e) if e.downcast_ref::<LengthLimitError>().is_some() => {
            return Err(Error::BodyTooLarge { method, url });
        }
        Err(e) => {
            return Err(Error::ReadBody {
                method,
                url,
                reason: chain(e.as_ref()),
            });
        }
    };
    Ok(Reply {
        status: parts.status.as_u16(),
        status_text: status_text(parts.status, parts.extensions.get()),
        headers: group_headers(&parts.headers),
        body,
    })
}

/// `"200 OK"`; the server's own phrase when it sent a non-standard one.
fn status_text(status: StatusCode, phrase: Option<&hyper::ext::ReasonPhrase>) -> String {
    let reason = phrase
        .map(|p| String::from_utf8_lossy(p.as_bytes()).into_owned())
        .or_else(|| status.canonical_reason().map(str::to_owned))
        .unwrap_or_default();
    format!("{} {reason}", status.as_u16())
        .trim_end()
        .to_owned()
}

/// Parses an absolute `http://` or `https://` URL.
///
/// # Errors
/// [`Error::ParseUrl`] naming the URL and what is wrong with it.
pub fn parse_url(url: &str) -> Result<Uri> {
    let err = |reason: String| Error::ParseUrl {
        url: url.to_owned(),
        reason,
    };
    if !url.contains("://") {
        return Err(err(
            "no scheme (write e.g. \"https://host/path\")".to_owned()
        ));
    }
    let uri: Uri = url
        .trim()
        .parse()
        .map_err(|e: hyper::http::uri::InvalidUri| err(e.to_string()))?;
    match uri.scheme_str() {
        Some("http" | "https") => {}
        Some(other) => {
            return Err(err(format!(
                "unsupported scheme {other:?} (use http or https)"
            )));
        }
        None => {
            return Err(err(
                "no scheme (write e.g. \"https://host/path\")".to_owned()
            ));
        }
    }
    if uri.host().is_none_or(str::is_empty) {
        return Err(err("no host".to_owned()));
    }
    Ok(uri)
}

/// Builds the request headers; a `User-Agent` naming kite unless one is given.
fn header_map(headers: &[(String, String)]) -> Result<hyper::HeaderMap> {
    let mut map = hyper::HeaderMap::new();
    map.insert(
        USER_AGENT,
        HeaderValue::from_static(concat!("kite/", env!("CARGO_PKG_VERSION"))),
    );
    for (name, value) in headers {
        let err = |reason: String| Error::BuildHeader {
            name: name.clone(),
            reason,
        };
        let n = HeaderName::from_bytes(name.as_bytes()).map_err(|e| err(e.to_string()))?;
        let v = HeaderValue::from_str(value).map_err(|e| err(format!("value: {e}")))?;
        map.insert(n, v);
    }
    Ok(map)
}

/// Resolves a `Location` against the URL that sent it.
fn resolve(base: &Uri, location: &str) -> std::result::Result<Uri, String> {
    let scheme = base.scheme_str().unwrap_or("http");
    let authority = base.authority().map_or("", |a| a.as_str());
    let absolute = if location.contains("://") {
        location.to_owned()
    } else if location.starts_with("//") {
        format!("{scheme}:{location}")
    } else if location.starts_with('/') {
        format!("{scheme}://{authority}{location}")
    } else {
        let path = base.path();
        let dir = if location.starts_with('?') {
            path
        } else {
            path.rfind('/').map_or("/", |i| &path[..=i])
        };
        format!("{scheme}://{authority}{dir}{location}")
    };
    parse_url(&absolute).map_err(|e| match e {
        Error::ParseUrl { reason, .. } => reason,
        other => other.to_string(),
    })
}

/// Response headers grouped by name, with names as Go writes them (`Content-Type`),
/// since that is what scripts written for upstream look up.
fn group_headers(headers: &hyper::HeaderMap) -> Vec<(String, Vec<String>)> {
    let mut out: Vec<(String, Vec<String>)> = Vec::new();
    for name in headers.keys() {
        let values = headers
            .get_all(name)
            .iter()
            .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
            .collect();
        out.push((canonical_name(name.as_str()), values));
    }
    out
}

/// `content-type` → `Content-Type`: upper case at the start and after each hyphen.
pub fn canonical_name(name: &str) -> String {
    let mut upper = true;
    name.chars()
        .map(|c| {
            let out = if upper {
                c.to_ascii_uppercase()
            } else {
                c.to_ascii_lowercase()
            };
            upper = c == '-';
            out
        })
        .collect()
}

/// An error and its causes, joined the way Go prints wrapped errors.
fn chain(e: &(dyn StdError + 'static)) -> String {
    let mut parts = vec![e.to_string()];
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if parts.last().is_none_or(|last| !last.contains(&text)) {
            parts.push(text);
        }
        source = s.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_resolve_against_the_sender() {
        let base: Uri = "http://a.test:8/x/y?q=1".parse().unwrap();
        let r = |l| resolve(&base, l).unwrap().to_string();
        assert_eq!(r("https://b.test/z"), "https://b.test/z");
        assert_eq!(r("//c.test/z"), "http://c.test/z");
        assert_eq!(r("/z"), "http://a.test:8/z");
        assert_eq!(r("z?w=2"), "http://a.test:8/x/z?w=2");
        assert_eq!(r("?w=2"), "http://a.test:8/x/y?w=2");
    }

    #[test]
    fn urls_need_a_web_scheme_and_host() {
        assert!(parse_url("https://example.com/a").is_ok());
        let e = parse_url("example.com/a").unwrap_err().to_string();
        assert!(e.contains("no scheme"), "{e}");
        let e = parse_url("ftp://example.com").unwrap_err().to_string();
        assert!(e.contains("unsupported scheme \"ftp\""), "{e}");
    }

    #[test]
    fn header_names_are_canonical() {
        assert_eq!(canonical_name("content-type"), "Content-Type");
        assert_eq!(canonical_name("x-request-id"), "X-Request-Id");
        assert_eq!(canonical_name("etag"), "Etag");
    }
}
