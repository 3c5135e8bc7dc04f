//! Tests of the `http` builtins against a local hyper server.

use std::convert::Infallible;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;

use super::client::MAX_BODY_BYTES;
use crate::script::builtins::snippets::{eval, eval_allowing};

type Body = BoxBody<Bytes, Infallible>;

/// A server on 127.0.0.1 with the routes below, alive as long as the value.
struct Server {
    url: String,
    connections: Arc<AtomicUsize>,
    _rt: tokio::runtime::Runtime,
}

fn serve() -> Server {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let connections = Arc::new(AtomicUsize::new(0));
    let count = connections.clone();
    rt.spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(route);
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    Server {
        url: format!("http://{addr}"),
        connections,
        _rt: rt,
    }
}

fn full(status: u16, body: impl Into<Bytes>) -> Response<Body> {
    let mut r = Response::new(Full::new(body.into()).boxed());
    *r.status_mut() = StatusCode::from_u16(status).unwrap();
    r
}

fn redirect(status: u16, to: &str) -> Response<Body> {
    let mut r = full(status, "");
    r.headers_mut().insert("location", to.parse().unwrap());
    r
}

async fn route(req: Request<Incoming>) -> Result<Response<Body>, Infallible> {
    let path = req.uri().path().to_owned();
    Ok(match path.as_str() {
        "/teapot" => full(418, "short and stout"),
        "/found" => redirect(302, "/hop/2"),
        "/hop/2" => redirect(301, "1"),
        "/hop/1" => redirect(302, "/echo?no=1"),
        "/see-other" => redirect(303, "/echo"),
        "/temporary" => redirect(307, "/echo"),
        "/loop" => redirect(302, "/loop"),
        "/slow" => {
            tokio::time::sleep(Duration::from_secs(3)).await;
            full(200, "late")
        }
        "/big" => full(200, vec![b'x'; MAX_BODY_BYTES + 1]),
        "/big-chunked" => {
            let chunk = Bytes::from(vec![b'x'; 1 << 20]);
            let chunks = (0..=(MAX_BODY_BYTES >> 20))
                .map(move |_| Ok::<_, Infallible>(Frame::data(chunk.clone())));
            Response::new(BodyExt::boxed(StreamBody::new(futures::stream::iter(
                chunks,
            ))))
        }
        "/cookies" => {
            let mut r = full(200, "");
            r.headers_mut().append("set-cookie", "a=1".parse().unwrap());
            r.headers_mut().append("set-cookie", "b=2".parse().unwrap());
            r.headers_mut()
                .insert("x-request-id", "abc".parse().unwrap());
            r
        }
        _ => echo(req).await,
    })
}

/// Describes the request as JSON: method, URI, headers, body.
async fn echo(req: Request<Incoming>) -> Response<Body> {
    let (parts, body) = req.into_parts();
    let body = body
        .collect()
        .await
        .map(http_body_util::Collected::to_bytes)
        .unwrap_or_default();
    let headers: serde_json::Map<String, serde_json::Value> = parts
        .headers
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("?").into()))
        .collect();
    let out = serde_json::json!({
        "method": parts.method.as_str(),
        "uri": parts.uri.to_string(),
        "headers": headers,
        "body": String::from_utf8_lossy(&body),
    });
    let mut r = full(200, out.to_string());
    r.headers_mut()
        .insert("content-type", "application/json".parse().unwrap());
    r
}

/// Runs `code` with `URL` bound to the server's address.
fn run(server: &Server, code: &str) -> Result<String, String> {
    eval_allowing(&format!("URL = {:?}\n{code}", server.url))
}

#[test]
fn every_verb_sends_its_method_and_body() {
    let s = serve();
    let code = r#"
out = []
for f in [http.get, http.delete]:
    e = json.decode(f(URL + "/echo").get_text())
    out.append((e.method, e.body))
for f in [http.post, http.put, http.patch]:
    e = json.decode(f(URL + "/echo", "hi").get_text())
    out.append((e.method, e.body))
u = http.url(URL + "/echo")
for m in [u.get, u.delete]:
    out.append(json.decode(m().get_text()).method)
for m in [u.post, u.put, u.patch]:
    e = json.decode(m(body = b"raw").get_text())
    out.append((e.method, e.body))
out
"#;
    assert_eq!(
        run(&s, code).unwrap(),
        r#"[("GET", ""), ("DELETE", ""), ("POST", "hi"), ("PUT", "hi"), ("PATCH", "hi"), "GET", "DELETE", ("POST", "raw"), ("PUT", "raw"), ("PATCH", "raw")]"#
    );
}

#[test]
fn a_dict_body_goes_as_json() {
    let s = serve();
    let code = r#"
e = json.decode(http.post(URL + "/echo", {"name": "kite", "n": [1, 2]}).get_text())
m = json.decode(http.url(URL + "/echo").patch({"a": 1}, headers = {"Content-Type": "application/merge-patch+json"}).get_text())
(e.headers["content-type"], json.decode(e.body), m.headers["content-type"])
"#;
    assert_eq!(
        run(&s, code).unwrap(),
        r#"("application/json", {"name": "kite", "n": [1, 2]}, "application/merge-patch+json")"#
    );
}

#[test]
fn headers_go_out_and_come_back_canonical() {
    let s = serve();
    let code = r#"
http.config(headers = {"X-Team": "infra", "Authorization": "Bearer a"})
e = json.decode(http.get(URL + "/echo", headers = {"Authorization": "Bearer b", "X-Count": 3}).get_text())
r = http.get(URL + "/cookies")
(e.headers["x-team"], e.headers["authorization"], e.headers["x-count"], e.headers["user-agent"].startswith("kite/"),
 r.headers["Set-Cookie"], r.headers["X-Request-Id"])
"#;
    assert_eq!(
        run(&s, code).unwrap(),
        r#"("infra", "Bearer b", "3", True, ["a=1", "b=2"], "abc")"#
    );
}

#[test]
fn query_strings_are_sent_as_written() {
    let s = serve();
    let code = r#"json.decode(http.get(http.url(URL + "/echo?a=1&b=x%20y")).get_text()).uri"#;
    assert_eq!(run(&s, code).unwrap(), r#""/echo?a=1&b=x%20y""#);
}

#[test]
fn redirects_are_followed_as_go_does() {
    let s = serve();
    let code = r#"
chain = json.decode(http.get(URL + "/found").get_text())
other = json.decode(http.post(URL + "/see-other", "gone").get_text())
temp = json.decode(http.post(URL + "/temporary", "kept").get_text())
[chain.uri, (other.method, other.body), (temp.method, temp.body)]
"#;
    assert_eq!(
        run(&s, code).unwrap(),
        r#"["/echo?no=1", ("GET", ""), ("POST", "kept")]"#
    );
    let e = run(&s, r#"http.get(URL + "/loop")"#).unwrap_err();
    assert!(
        e.contains("http.get: GET ") && e.contains("stopped after 10 redirects"),
        "{e}"
    );
}

#[test]
fn other_statuses_are_responses_not_errors() {
    let s = serve();
    let code = r#"
r = http.get(URL + "/teapot")
(r.status_code, r.status, r.body, r.get_text(), r.get_bytes(), r.try_get_text().value, str(r))
"#;
    assert_eq!(
        run(&s, code).unwrap(),
        r#"(418, "418 I'm a teapot", b"short and stout", "short and stout", b"short and stout", "short and stout", "<http.response 418 I'm a teapot>")"#
    );
}

#[test]
fn a_slow_server_times_out() {
    let s = serve();
    let e = run(&s, r#"http.get(URL + "/slow", timeout = "200ms")"#).unwrap_err();
    assert!(
        e.contains("http.get: GET ") && e.contains("/slow: no complete response within 200ms"),
        "{e}"
    );
    let code = r#"
http.config(timeout = "150ms")
r = http.url(URL + "/slow").try_get()
(r.ok, r.value, "within 150ms" in r.error)
"#;
    assert_eq!(run(&s, code).unwrap(), "(False, None, True)");
}

#[test]
fn oversize_bodies_are_refused() {
    let s = serve();
    for path in ["/big", "/big-chunked"] {
        let e = run(&s, &format!("http.get(URL + {path:?})")).unwrap_err();
        assert!(
            e.contains("the response body is larger than the 64 MiB limit"),
            "{path}: {e}"
        );
    }
}

#[test]
fn a_refused_connection_is_an_error_naming_the_url() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/x");
    let e = eval_allowing(&format!("http.get({url:?})")).unwrap_err();
    assert!(
        e.contains(&format!("http.get: GET {url}: ")) && e.contains("refused"),
        "{e}"
    );
    let r = eval_allowing(&format!(
        "r = http.try_post({url:?}, 'x')\n(r.ok, r.error.startswith('http.try_post: POST'))"
    ));
    assert_eq!(r.unwrap(), "(False, True)");
}

#[test]
fn requests_need_allow_net() {
    for code in [
        "http.get('http://127.0.0.1:1/')",
        "http.url('http://127.0.0.1:1/').post('x')",
        "http.config(timeout = '1s')",
    ] {
        let e = eval(code).unwrap_err();
        assert!(e.contains("permission denied: http."), "{code}: {e}");
        assert!(e.contains("needs --allow-net"), "{code}: {e}");
    }
}

#[test]
fn connections_are_reused_within_a_run() {
    let s = serve();
    let code = r#"len([http.get(URL + "/echo").status_code for _ in range(10)])"#;
    assert_eq!(run(&s, code).unwrap(), "10");
    // A connection goes back to the pool on its own task, so the next request may race
    // it and open a second one; it must not open one per request.
    let opened = s.connections.load(Ordering::SeqCst);
    assert!(opened <= 3, "{opened} connections for 10 requests");
}

#[test]
fn bad_arguments_say_what_is_wrong() {
    let cases = [
        (
            "http.get('example.com')",
            "http.get: invalid URL \"example.com\": no scheme",
        ),
        (
            "http.get('ftp://example.com')",
            "unsupported scheme \"ftp\"",
        ),
        (
            "http.get('http://127.0.0.1:1/', timeout = 'soon')",
            "http.get: timeout: invalid duration",
        ),
        (
            "http.get('http://127.0.0.1:1/', timeout = '0s')",
            "must be more than zero",
        ),
        (
            "http.get('http://127.0.0.1:1/', headers = [1])",
            "headers must be a dict, got list",
        ),
        (
            "http.get('http://127.0.0.1:1/', headers = {'a': None})",
            "value of \"a\" must be a string",
        ),
        (
            "http.get('http://127.0.0.1:1/', headers = {'a b': 'c'})",
            "invalid header \"a b\"",
        ),
        (
            "http.post('http://127.0.0.1:1/', {'f': len})",
            "http.post: body: cannot convert",
        ),
    ];
    for (code, want) in cases {
        let e = eval_allowing(code).unwrap_err();
        assert!(e.contains(want), "{code}: {e}");
    }
    let r = eval_allowing("r = http.try_get('nope')\n(r.ok, 'no scheme' in r.error)");
    assert_eq!(r.unwrap(), "(False, True)");
}

#[test]
fn url_values_print_as_upstream() {
    assert_eq!(
        eval(r#"u = http.url("https://a.test/x"); (str(u), type(u), bool(u))"#).unwrap(),
        r#"("http.url(\"https://a.test/x\")", "http.url", True)"#
    );
}
