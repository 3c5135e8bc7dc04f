use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use starlark::environment::Module;
use starlark::eval::Evaluator;
use starlark::syntax::{AstModule, Dialect};

use super::command::{self, Header, Wrap};
use super::dial::{Dialer, split_host_port};
use super::server::{self, Shared};
use crate::script::budget::{self, Budget};
use crate::script::host::Host;
use crate::script::library::Library;
use crate::script::permissions::{Access, Permissions};
use crate::script::vars::Vars;

/// The library `kite test` scripts see the `ssh` module in.
fn library() -> &'static Library {
    static LIB: OnceLock<Library> = OnceLock::new();
    LIB.get_or_init(|| Library::builder().globals(super::test_namespace).build())
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Runs `code` with `permissions` (within `budget` when given); the repr of its last
/// expression, or the error.
fn run_in(
    rt: &tokio::runtime::Runtime,
    permissions: Permissions,
    deadline: Option<Duration>,
    code: &str,
) -> Result<String, String> {
    let host = Host::new(library(), Vars::default(), permissions, rt.handle().clone());
    let eval = || {
        Module::with_temp_heap(|module| {
            let ast = AstModule::parse("t.star", code.to_owned(), &Dialect::Extended)
                .map_err(|e| e.to_string())?;
            let mut eval = Evaluator::new(&module);
            eval.extra = Some(&host);
            eval.eval_module(ast, library().globals())
                .map(starlark::values::Value::to_repr)
                .map_err(|e| e.to_string())
        })
    };
    match deadline {
        None => eval(),
        Some(d) => budget::scope(
            Budget {
                deadline: Instant::now() + d,
                stop: None,
            },
            eval,
        ),
    }
}

fn run(code: &str) -> Result<String, String> {
    run_in(&runtime(), Permissions::all(), None, code)
}

const SERVER: &str = r#"
srv = ssh.test_server(user = "u", password = "p")
srv.start()
def client(hosts = ["127.0.0.1"], **kw):
    return ssh.config(hosts = hosts, user = "u", password = "p", port = srv.port(), max_retries = 0, **kw)
"#;

#[test]
fn commands_are_wrapped_and_quoted() {
    assert_eq!(command::quote("/opt/app"), "/opt/app");
    assert_eq!(command::quote("it's here"), r"'it'\''s here'");
    assert_eq!(command::quote(""), "''");
    let mut wrap = Wrap::default();
    assert_eq!(command::build("ls", &wrap).unwrap(), "ls");
    wrap.cwd = "/srv/my app".into();
    wrap.env.insert("PORT".into(), "80 80".into());
    assert_eq!(
        command::build("ls", &wrap).unwrap(),
        "export PORT='80 80'; cd '/srv/my app' && ls"
    );
    wrap.sudo = true;
    wrap.as_user = "www-data".into();
    let line = command::build("ls", &wrap).unwrap();
    assert!(
        line.starts_with("sudo -u www-data sh -c 'export PORT="),
        "{line}"
    );
    let bare = Wrap {
        sudo: true,
        ..Wrap::default()
    };
    assert_eq!(command::build("reboot", &bare).unwrap(), "sudo reboot");
    let mut bad = Wrap::default();
    bad.env.insert("A;rm -rf /".into(), "x".into());
    assert!(
        command::build("ls", &bad)
            .unwrap_err()
            .contains("not a valid variable name")
    );
}

#[test]
fn scp_parts_parse_and_refuse_junk() {
    assert_eq!(command::scp_mode("0755").unwrap(), "0755");
    assert_eq!(command::scp_mode("644").unwrap(), "0644");
    assert!(command::scp_mode("rw-r--r--").is_err());
    assert!(command::scp_mode("17777").is_err());
    let h = Header::parse("C0644 12 a file.txt").unwrap();
    assert_eq!((h.size, h.name.as_str()), (12, "a file.txt"));
    assert_eq!(h.line(), "C0644 12 a file.txt\n");
    for bad in [
        "",
        "C",
        "C0644",
        "C0644 x name",
        "D0755 0 dir",
        "C06a4 1 f",
        "C0644 1 ",
    ] {
        assert!(Header::parse(bad).is_err(), "{bad:?}");
    }
    assert_eq!(
        command::scp_target("scp -t '/a b'", "-t").as_deref(),
        Some("/a b")
    );
    assert_eq!(command::scp_target("scp -f /x", "-t"), None);
    assert_eq!(split_host_port("web:2222", 22), ("web".into(), 2222));
    assert_eq!(split_host_port("web", 22), ("web".into(), 22));
    assert_eq!(split_host_port("::1", 22), ("::1".into(), 22));
    assert_eq!(split_host_port("[::1]:2200", 22), ("::1".into(), 2200));
}

#[test]
fn config_refuses_bad_keywords_by_name() {
    let rt = runtime();
    let cases = [
        (
            "ssh.config(hosts = 'h')",
            "hosts must be a list of strings, got string",
        ),
        ("ssh.config(hosts = [1])", "hosts[0] is int, not a string"),
        ("ssh.config(hosts = ['a b'])", "is not a host name"),
        ("ssh.config(port = 70000)", "port 70000 is not a TCP port"),
        (
            "ssh.config(exec_policy = 'parallel')",
            "exec_policy \"parallel\"",
        ),
        ("ssh.config(timeout = 'soon')", "timeout:"),
        (
            "ssh.config(max_retries = -1)",
            "max_retries -1 must not be negative",
        ),
        ("ssh.config(env = [1])", "env must be a dict"),
        (
            "ssh.config(user = 'u', dry_run = True).exec('x', env = {'A-B': '1'})",
            "not a valid variable name",
        ),
        (
            "ssh.config(user = 'u', dry_run = True).upload('a', 'b', mode = 'x')",
            "not an octal file mode",
        ),
    ];
    for (code, want) in cases {
        let e = run_in(&rt, Permissions::all(), None, code).unwrap_err();
        assert!(e.contains(want), "{code}: {e}");
    }
    let r = run_in(
        &rt,
        Permissions::all(),
        None,
        "ssh.try_config(port = -1).error",
    )
    .unwrap();
    assert!(r.contains("ssh.config: port -1"), "{r}");
}

#[test]
fn dry_runs_need_no_permission_and_touch_nothing() {
    let rt = runtime();
    let code = r#"
c = ssh.config(hosts = ["a", "b"], user = "u", dry_run = True, sudo = True, env = {"N": 1})
r = c.exec("ls")[1]
u = c.download("/r", "/l")[1]
(r.host, r.stdout, r.dry_run, u.dst, u.bytes, str(c), bool(c), c.hosts)
"#;
    let out = run_in(&rt, Permissions::none(), None, code).unwrap();
    assert_eq!(
        out,
        r#"("b", "[DRY RUN] Would execute on b: sudo sh -c 'export N=1; ls'", True, "/l", 0, "<ssh.client hosts=[a b]>", True, ["a", "b"])"#
    );
}

#[test]
fn calls_need_their_permissions() {
    let rt = runtime();
    let net_only = Permissions::only(Access::Net);
    let cases = [
        (
            Permissions::none(),
            "ssh.config(hosts = ['h'], user = 'u').exec('ls')",
            "ssh.client.exec needs --allow-net",
        ),
        (
            net_only,
            "ssh.config(hosts = ['h'], user = 'u', key = '/k').exec('ls')",
            "ssh.client.exec needs --allow-fs",
        ),
        (
            net_only,
            "ssh.config(hosts = ['h'], user = 'u').upload('/a', '/b')",
            "ssh.client.upload needs --allow-fs",
        ),
        (
            Permissions::none(),
            "ssh.test_server()",
            "ssh.test_server needs --allow-net",
        ),
        (
            Permissions::none(),
            "ssh.test_key()",
            "ssh.test_key needs --allow-fs",
        ),
    ];
    for (perms, code, want) in cases {
        let e = run_in(&rt, perms, None, code).unwrap_err();
        assert!(e.contains(want), "{code}: {e}");
    }
}

#[test]
fn exec_runs_the_handler_with_the_wrapped_command() {
    let code = format!(
        "{SERVER}{}",
        r#"
seen = []
def handler(cmd):
    seen.append(cmd)
    return ("out:" + cmd, "warn", 7 if "fail" in cmd else 0)
srv.handle_exec(handler)
r = client(hosts = ["127.0.0.1", "127.0.0.1"], cwd = "/app").exec("fail now", env = {"X": "1"})
lin = client(exec_policy = "linear").exec("ok")
(len(seen), r[1].stdout, r[1].stderr, r[1].code, r[1].ok, lin[0].ok)
"#
    );
    assert_eq!(
        run(&code).unwrap(),
        r#"(3, "out:export X=1; cd /app && fail now", "warn", 7, False, True)"#
    );
}

#[test]
fn a_jump_host_tunnels_to_the_target() {
    let code = format!(
        "{SERVER}{}",
        r#"
srv.handle_exec(lambda cmd: ("via jump: " + cmd, "", 0))
target = ssh.test_server(user = "u", password = "p")
target.handle_exec(lambda cmd: ("target: " + cmd, "", 0))
target.start()
c = ssh.config(hosts = ["127.0.0.1"], user = "u", password = "p", port = target.port(),
               jump_host = srv.addr(), max_retries = 0)
far = ssh.config(hosts = ["192.0.2.1"], user = "u", password = "p", port = 22,
                 jump_host = srv.addr(), max_retries = 0).try_exec("x")
(c.exec("hostname")[0].stdout, far.error)
"#
    );
    let out = run(&code).unwrap();
    assert!(out.starts_with(r#"("target: hostname", "#), "{out}");
    assert!(out.contains("tunnel from 127.0.0.1:"), "{out}");
}

#[test]
fn files_go_up_and_come_down() {
    let dir = std::env::temp_dir().join(format!("kite-ssh-test-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let d = dir.display();
    let body = format!(
        r#"
write_text("{d}/up.txt", "hello\n")
up = client().upload("{d}/up.txt", "/srv/up.txt", mode = "755")
got = srv.uploaded("/srv/up.txt")
srv.add_file("/srv/data.bin", "abc" * 50000)
down = client(hosts = ["127.0.0.1", "localhost"]).download("/srv/data.bin", "{d}/sub/data")
(up[0].bytes, got.content, got.mode, got.name, down[1].dst, down[1].bytes,
 len(read_text("{d}/sub/data.localhost")), srv.uploaded("/nope"))
"#
    );
    let code = format!("{SERVER}{body}");
    let out = run(&code);
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        out.unwrap(),
        format!(
            r#"(6, "hello\n", "0755", "up.txt", "{d}/sub/data.localhost", 150000, 150000, None)"#
        )
    );
}

#[test]
fn logins_take_the_password_or_a_test_key_only() {
    let foreign = std::env::temp_dir().join(format!("kite-ssh-foreign-{}", std::process::id()));
    let key = super::test_server::random_key().unwrap();
    std::fs::write(
        &foreign,
        key.to_openssh(russh::keys::ssh_key::LineEnding::LF)
            .unwrap(),
    )
    .unwrap();
    let foreign_path = foreign.display();
    let body = format!(
        r#"
k = ssh.test_key()
ok = ssh.config(hosts = ["127.0.0.1"], user = "u", key = k.path, port = srv.port(), max_retries = 0).exec("x")[0].ok
other = ssh.config(hosts = ["127.0.0.1"], user = "u", key = "{foreign_path}", port = srv.port(), max_retries = 0).try_exec("x")
wrong = ssh.config(hosts = ["127.0.0.1"], user = "u", password = "no", port = srv.port(), max_retries = 0).try_exec("x")
(ok, other.error, wrong.error, k.public_key.startswith("ssh-ed25519 "))
"#
    );
    let code = format!("{SERVER}{body}");
    let out = run(&code);
    let _ = std::fs::remove_file(&foreign);
    let out = out.unwrap();
    assert!(out.starts_with("(True, "), "{out}");
    assert_eq!(
        out.matches("authentication as u failed").count(),
        2,
        "{out}"
    );
    assert!(out.ends_with(", True)"), "{out}");
}

#[test]
fn servers_and_key_files_end_with_the_run() {
    let rt = runtime();
    let out = run_in(
        &rt,
        Permissions::all(),
        None,
        "srv = ssh.test_server()\nsrv.start()\nk = ssh.test_key()\n(srv.port(), k.path)",
    )
    .unwrap();
    let inner = out.trim_start_matches('(').trim_end_matches(')');
    let (port, path) = inner.split_once(", ").unwrap();
    let port: u16 = port.parse().unwrap();
    let path = path.trim_matches('"');
    assert!(
        !std::path::Path::new(path).exists(),
        "{path} outlived the run"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
        assert!(Instant::now() < deadline, "port {port} still listens");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_silent_host_ends_with_the_budget() {
    let rt = runtime();
    let silent = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
    let port = silent.local_addr().unwrap().port();
    let started = Instant::now();
    let e = run_in(
        &rt,
        Permissions::all(),
        Some(Duration::from_millis(300)),
        &format!(
            "ssh.config(hosts = ['127.0.0.1'], user = 'u', password = 'p', port = {port}).exec('x')"
        ),
    )
    .unwrap_err();
    assert!(e.contains("ran out of its time budget"), "{e}");
    assert!(started.elapsed() < Duration::from_secs(5));
}

/// A server with a known host key, and a dialer for it.
fn keyed_server(rt: &tokio::runtime::Runtime) -> (u16, russh::keys::PrivateKey, watch_stop::Stop) {
    let host_key = super::test_server::random_key().unwrap();
    let (tx, _rx) = tokio::sync::mpsc::channel(1);
    let shared = Arc::new(Shared {
        id: 1,
        user: "u".into(),
        password: Some("p".into()),
        files: Mutex::default(),
        uploads: Mutex::default(),
        has_handler: false.into(),
        keys: Arc::default(),
        calls: tx,
    });
    let std_listener = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
    std_listener.set_nonblocking(true).unwrap();
    let port = std_listener.local_addr().unwrap().port();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let key = host_key.clone();
    rt.spawn(async move {
        let listener = tokio::net::TcpListener::from_std(std_listener).unwrap();
        server::serve(listener, key, shared, stopped).await;
    });
    (port, host_key, watch_stop::Stop(stop))
}

mod watch_stop {
    pub struct Stop(pub tokio::sync::watch::Sender<bool>);
    impl Drop for Stop {
        fn drop(&mut self) {
            self.0.send_replace(true);
        }
    }
}

#[test]
fn host_keys_are_checked_against_known_hosts() {
    let rt = runtime();
    let (port, host_key, _stop) = keyed_server(&rt);
    let file = std::env::temp_dir().join(format!("kite-ssh-kh-{}", std::process::id()));
    let line =
        |k: &russh::keys::PublicKey| format!("[127.0.0.1]:{port} {}\n", k.to_openssh().unwrap());
    let settings = super::Settings {
        hosts: Vec::new(),
        user: "u".into(),
        key: None,
        key_passphrase: None,
        password: Some("p".into()),
        port,
        timeout: Duration::from_secs(10),
        max_retries: 0,
        linear: false,
        jump_host: None,
        known_hosts_file: None,
        host_key_check: true,
        keep_alive_interval: None,
        keep_alive_max: 3,
        wrap: Wrap::default(),
        dry_run: false,
    };
    let dial = |kh: Option<std::path::PathBuf>| {
        let dialer = Dialer {
            settings: Arc::new(settings.clone()),
            key: None,
            known_hosts: kh,
            agent: None,
        };
        rt.block_on(async move {
            match dialer.connect_to("127.0.0.1", port).await {
                Ok(conn) => {
                    conn.close().await;
                    Ok(())
                }
                Err(e) => Err(e),
            }
        })
    };
    std::fs::write(&file, line(host_key.public_key())).unwrap();
    assert_eq!(dial(Some(file.clone())), Ok(()));
    let other = super::test_server::random_key().unwrap();
    std::fs::write(&file, line(other.public_key())).unwrap();
    let e = dial(Some(file.clone())).unwrap_err();
    assert!(e.contains("does not match line 1"), "{e}");
    std::fs::write(&file, "# nothing\n").unwrap();
    let e = dial(Some(file.clone())).unwrap_err();
    assert!(e.contains("is not in"), "{e}");
    // Unchecked, as upstream's default.
    assert_eq!(dial(None), Ok(()));
    let _ = std::fs::remove_file(&file);
}
