//! `http.server` end to end: scripts serve themselves over loopback.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use starlark::environment::Module;
use starlark::eval::Evaluator;
use starlark::syntax::{AstModule, Dialect};

use crate::script::builtins::snippets::{eval, eval_allowing, eval_cancellable};
use crate::script::host::Host;
use crate::script::library::Library;
use crate::script::permissions::Permissions;
use crate::script::vars::Vars;

/// Whether something still listens on `port` of loopback, waiting up to 5 s for it to
/// stop (a stop closes the socket on the runtime, just after).
fn stops_listening(port: u16) -> bool {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(5) {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

const ROUTES: &str = r#"
def tag(req, next):
    resp = next(req)
    if type(resp) == "dict" and "body" in resp:
        resp.setdefault("headers", {})["X-Tag"] = "mw"
    return resp

def user(req):
    return {"body": "user:%s q=%s %s" % (req.params["id"], req.query.get("q"), req.method)}

def echo(req):
    return {"status": 201, "body": req.body, "headers": {"X-Got": req.headers.get("X-In", "-")}}

srv = http.server()
srv.use(tag)
srv.handle("GET /users/{id}", user)
srv.handle("POST /echo", echo)
srv.handle("/none", lambda req: None)
srv.handle("/json", lambda req: {"a": [1, 2]})
srv.start(port = 0)
base = "http://127.0.0.1:%d" % srv.port()
"#;

#[test]
fn a_script_serves_itself() {
    let code = format!(
        r#"{ROUTES}
u = http.get(base + "/users/42?q=x&q=y")
e = http.url(base + "/echo").post("ping", headers = {{"X-In": "in"}})
n = http.get(base + "/none")
j = http.get(base + "/json")
missing = http.get(base + "/nope")
wrong = http.url(base + "/echo").get()
srv.shutdown()
after = http.try_get(base + "/none")
[u.get_text(), u.headers["X-Tag"], e.status_code, e.get_text(), e.headers["X-Got"],
 n.status_code, j.get_text(), j.headers["Content-Type"], missing.status_code,
 wrong.status_code, wrong.headers["Allow"], after.ok]"#
    );
    assert_eq!(
        eval_allowing(&code).unwrap(),
        r#"["user:42 q=[\"x\", \"y\"] GET", "mw", 201, "ping", "in", 204, "{\"a\":[1,2]}", "application/json; charset=utf-8", 404, 405, "POST", False]"#
    );
}

#[test]
fn a_server_stops_with_the_evaluation_that_started_it() {
    let port = eval_allowing(&format!("{ROUTES}\nsrv.port()")).unwrap();
    let port: u16 = port.parse().unwrap();
    assert!(stops_listening(port), "port {port} still listens");
}

#[test]
fn a_frozen_module_keeps_no_server() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let host = Host::new(
        Library::standard(),
        Vars::default(),
        Permissions::all(),
        rt.handle().clone(),
    );
    let (port, frozen) = Module::with_temp_heap(|module| {
        let ast = AstModule::parse(
            "t.star",
            format!("{ROUTES}\np = srv.port()"),
            &Dialect::Extended,
        )
        .unwrap();
        {
            let mut eval = Evaluator::new(&module);
            eval.extra = Some(&host);
            eval.eval_module(ast, host.library.globals()).unwrap();
        }
        let port = module.get("p").unwrap().unpack_i32().unwrap();
        (port, module.freeze().unwrap())
    });
    assert!(stops_listening(u16::try_from(port).unwrap()));
    // The frozen value says why it cannot serve.
    let srv = frozen.get("srv").unwrap();
    assert_eq!(srv.value().to_str(), "<http.server (stopped)>");
}

#[test]
fn a_handler_has_a_time_budget_and_errors_are_500s() {
    let code = r#"
calls = [0]
def slow(req):
    for _ in range(1000000000):
        pass
def flaky(req):
    calls[0] += 1
    if calls[0] == 1:
        fail("first call fails")
    return "recovered"
srv = http.server(write_timeout = "100ms")
srv.handle("/slow", slow)
srv.handle("/flaky", flaky)
srv.start()
base = "http://127.0.0.1:%d" % srv.port()
s = http.get(base + "/slow")
f1 = http.get(base + "/flaky")
f2 = http.get(base + "/flaky")
[s.status_code, s.get_text(), f1.status_code, f1.get_text(), f2.get_text()]"#;
    assert_eq!(
        eval_cancellable(Permissions::all(), code).unwrap(),
        r#"[500, "handler error: the handler ran longer than 100ms and was cancelled\n", 500, "handler error: first call fails\n", "recovered"]"#
    );
}

#[test]
fn serve_blocks_until_a_handler_shuts_the_server_down() {
    // A free port: bound, then let go for the script to take.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // Another test may take the port between; then try again.
    let client = std::thread::spawn(move || {
        let started = Instant::now();
        let mut last = String::new();
        while started.elapsed() < Duration::from_secs(20) {
            if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
                s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
                let req = "GET /stop HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";
                let _ = s.write_all(req.as_bytes());
                last.clear();
                let _ = s.read_to_string(&mut last);
                if last.ends_with("bye") {
                    break;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        last
    });
    let code = format!(
        r#"
def stop(req):
    srv.shutdown()
    return "bye"
srv = http.server()
srv.handle("/stop", stop)
srv.serve(port = {port})
"served""#
    );
    assert_eq!(eval_allowing(&code).unwrap(), "\"served\"");
    let reply = client.join().unwrap();
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(reply.ends_with("bye"), "{reply}");
}

#[test]
fn servers_need_allow_net_and_good_settings() {
    let err = eval("http.server()").unwrap_err();
    assert!(err.contains("http.server needs --allow-net"), "{err}");
    let err = eval("http.serve(lambda req: None)").unwrap_err();
    assert!(err.contains("http.serve needs --allow-net"), "{err}");
    for (code, want) in [
        ("http.server(port = 70000)", "port must be 0 to 65535"),
        (
            "http.server(read_timeout = \"0s\")",
            "must be more than zero",
        ),
        ("http.server(max_body_bytes = -1)", "must not be negative"),
        ("http.server().start()", "no handlers registered"),
        ("http.server().port()", "not started"),
        (
            "http.server().handle(\"nope\", str)",
            "the path must start with /",
        ),
        ("http.server().handle(\"/\", 3)", "handler must be callable"),
        (
            "s = http.server()\ns.handle(\"/a\", str)\ns.handle(\"/a\", str)",
            "conflicts with",
        ),
    ] {
        let err = eval_allowing(code).unwrap_err();
        assert!(err.contains(want), "{code}: {err}");
    }
    let err =
        eval_allowing("s = http.server(tls_cert = \"c.pem\")\ns.handle(\"/\", str)\ns.start()")
            .unwrap_err();
    assert!(err.contains("tls_cert and tls_key go together"), "{err}");
}
