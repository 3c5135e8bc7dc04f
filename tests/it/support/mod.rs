//! Test support for integration tests against the local control plane.
//!
//! Every test gets its own namespace ([`TestNamespace`]), waits with deadlines
//! ([`wait_until`]), and runs `kite` through [`Kite`], which kills the process when the
//! test ends, passed or failed. Tests may run in parallel.
#![allow(
    dead_code,
    unused_imports,
    reason = "the `apiserver` binary uses only a part of this module"
)]

pub mod certs;
pub mod etcd;
pub mod exclusive;

pub use exclusive::exclusive;
pub mod operator;
pub mod proxy;

use std::path::PathBuf;
use std::process::{Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::time::Instant;

/// The repository root.
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The path of a Go tool the tests use (promtool, actionlint), built and cached by
/// tests/tools/build.sh (`make test` builds them first).
pub fn tool(name: &str) -> PathBuf {
    let out = std::process::Command::new(repo_root().join("tests/tools/build.sh"))
        .arg(name)
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("running tests/tools/build.sh {name}: {e}"));
    assert!(out.status.success(), "tests/tools/build.sh {name} failed");
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// The local cluster's state directory, as `tests/cluster/up.sh` writes it.
pub fn cluster_dir() -> PathBuf {
    std::env::var_os("KITE_CLUSTER_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join(".cluster"))
}

/// The admin kubeconfig of the local cluster.
pub fn kubeconfig() -> PathBuf {
    let path = cluster_dir().join("kubeconfig");
    assert!(
        path.exists(),
        "{} does not exist: start the local cluster with `make cluster-up`",
        path.display()
    );
    path
}

/// The kubeconfig of the unprivileged user `kite-unprivileged`.
pub fn unprivileged_kubeconfig() -> PathBuf {
    cluster_dir().join("kubeconfig-unprivileged")
}

/// A client for the local cluster, as the admin user.
pub async fn client() -> kube::Client {
    client_from(&kubeconfig()).await
}

/// A client built from the given kubeconfig file.
pub async fn client_from(path: &std::path::Path) -> kube::Client {
    let kc = Kubeconfig::read_from(path).expect("read kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .expect("kubeconfig is valid");
    kube::Client::try_from(config).expect("build client")
}

/// A name unique across tests and test runs, of the form `<prefix>-<suffix>`.
pub fn unique_name(prefix: &str) -> String {
    static COUNTER: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!(
        "{prefix}-{:x}{:x}{n}",
        std::process::id() % 0xfff,
        nanos % 0xffff
    )
}

/// A namespace that exists for one test and is deleted when it is dropped.
pub struct TestNamespace {
    pub name: String,
    _claim: exclusive::Shared,
}

impl TestNamespace {
    /// Creates a fresh namespace named after `prefix`.
    pub async fn new(prefix: &str) -> Self {
        let claim = exclusive::shared().await;
        let name = unique_name(prefix);
        kubectl_ok(&["create", "namespace", &name]).await;
        kubectl_ok(&["label", "namespace", &name, "kite.test/owned=true"]).await;
        // Pods need the namespace's default ServiceAccount, which a controller creates.
        wait_until(
            "the default ServiceAccount",
            Duration::from_secs(30),
            || async {
                kubectl(&["get", "serviceaccount", "default", "-n", &name])
                    .await
                    .status
                    .success()
            },
        )
        .await;
        Self {
            name,
            _claim: claim,
        }
    }
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        // Drop cannot be async; a detached kubectl keeps teardown off the test's runtime.
        let _ = std::process::Command::new("kubectl")
            .args([
                "delete",
                "namespace",
                &self.name,
                "--wait=false",
                "--ignore-not-found",
            ])
            .env("KUBECONFIG", kubeconfig())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// Polls `check` until it returns true; panics naming `what` after `timeout`.
pub async fn wait_until<F, Fut>(what: &str, timeout: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    wait_for(what, timeout, || {
        let fut = check();
        async move { fut.await.then_some(()) }
    })
    .await
}

/// Polls `check` until it returns Some; returns the value, or panics after `timeout`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = Instant::now() + timeout;
    let mut interval = Duration::from_millis(50);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if Instant::now() >= deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(interval.min(deadline - Instant::now())).await;
        interval = (interval * 2).min(Duration::from_millis(500));
    }
}

/// Runs kubectl as the admin user.
pub async fn kubectl(args: &[&str]) -> Output {
    kubectl_as(&kubeconfig(), args).await
}

/// Runs kubectl with the given kubeconfig.
pub async fn kubectl_as(kubeconfig: &std::path::Path, args: &[&str]) -> Output {
    tokio::process::Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .kill_on_drop(true)
        .output()
        .await
        .expect("run kubectl")
}

/// Runs kubectl as the admin user and returns its stdout; panics with stderr on failure.
pub async fn kubectl_ok(args: &[&str]) -> String {
    let out = kubectl(args).await;
    assert!(
        out.status.success(),
        "kubectl {} failed: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("utf-8 output")
}

/// Runs kubectl with a manifest on stdin.
pub async fn kubectl_stdin(args: &[&str], stdin: &str) -> Output {
    use tokio::io::AsyncWriteExt;
    let mut child = tokio::process::Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", kubeconfig())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run kubectl");
    let mut pipe = child.stdin.take().unwrap();
    pipe.write_all(stdin.as_bytes()).await.unwrap();
    drop(pipe);
    child.wait_with_output().await.expect("kubectl output")
}

/// A running `kite` process whose output is captured line by line. It is killed when
/// dropped, so a failing test never leaves it behind.
pub struct Kite {
    child: tokio::process::Child,
    stdout: Arc<Mutex<Vec<String>>>,
    stderr: Arc<Mutex<Vec<String>>>,
    readers: Vec<tokio::task::JoinHandle<()>>,
    /// The pid it started with (names its log file after it has exited).
    started: u32,
}

/// The path of the `kite` binary under test.
pub fn kite_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_kite"))
}

impl Kite {
    /// Starts `kite ARGS` with the local cluster's admin kubeconfig.
    pub fn spawn(args: &[&str]) -> Self {
        let mut child = tokio::process::Command::new(kite_bin())
            .args(args)
            .env("KUBECONFIG", kubeconfig())
            .current_dir(repo_root())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("start kite");
        let (stdout, out_reader) = collect(child.stdout.take().unwrap());
        let (stderr, err_reader) = collect(child.stderr.take().unwrap());
        Self {
            started: child.id().unwrap_or_default(),
            child,
            stdout,
            stderr,
            readers: vec![out_reader, err_reader],
        }
    }

    /// The exit status, if the process has exited.
    pub fn try_wait(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Kills the process and waits (up to 5 s) until it is gone.
    pub fn kill(&mut self) {
        let _ = self.child.start_kill();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while std::time::Instant::now() < deadline {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The stdout lines so far.
    pub fn stdout(&self) -> Vec<String> {
        self.stdout.lock().unwrap().clone()
    }

    /// The stderr lines so far.
    pub fn stderr(&self) -> Vec<String> {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits until a stdout line contains `needle`, and returns that line.
    pub async fn wait_stdout(&mut self, needle: &str, timeout: Duration) -> String {
        wait_line(&self.stdout, "stdout", needle, timeout).await
    }

    /// Waits until a stderr (log) line contains `needle`, and returns that line.
    pub async fn wait_stderr_line(&mut self, needle: &str, timeout: Duration) -> String {
        wait_line(&self.stderr, "stderr", needle, timeout).await
    }

    /// The process id, for sending signals.
    pub fn pid(&self) -> u32 {
        self.child.id().expect("kite is running")
    }

    /// Waits for the process to exit and returns its exit status; its output has then
    /// been read to the end.
    pub async fn wait(&mut self, timeout: Duration) -> std::process::ExitStatus {
        let status = tokio::time::timeout(timeout, self.child.wait())
            .await
            .expect("kite exits in time")
            .expect("wait for kite");
        for reader in self.readers.drain(..) {
            let _ = tokio::time::timeout(Duration::from_secs(5), reader).await;
        }
        status
    }
}

impl Drop for Kite {
    fn drop(&mut self) {
        // KITE_TEST_LOGS=DIR keeps everything each kite said, for reading a failure
        // whose cause scrolled out of the tail below.
        if let Some(dir) = std::env::var_os("KITE_TEST_LOGS") {
            let path = PathBuf::from(dir).join(format!("kite-{}.log", self.started));
            let all = [self.stdout(), vec!["--- stderr ---".into()], self.stderr()].concat();
            let _ = std::fs::write(path, all.join("\n"));
        }
        // A failing test shows what kite said; the process itself is killed on drop.
        if std::thread::panicking() {
            let tail = |lines: Vec<String>| lines[lines.len().saturating_sub(60)..].join("\n");
            eprintln!("--- kite stdout (tail) ---\n{}", tail(self.stdout()));
            eprintln!("--- kite stderr (tail) ---\n{}", tail(self.stderr()));
        }
    }
}

/// Polls captured output for a line containing `needle`; on timeout the panic names
/// what was awaited, and dropping the [`Kite`] prints its output.
async fn wait_line(
    lines: &Arc<Mutex<Vec<String>>>,
    stream: &str,
    needle: &str,
    timeout: Duration,
) -> String {
    let what = format!("kite {stream} to contain {needle:?}");
    wait_for(&what, timeout, || {
        let hit = lines
            .lock()
            .unwrap()
            .iter()
            .find(|l| l.contains(needle))
            .cloned();
        async move { hit }
    })
    .await
}

fn collect<R>(pipe: R) -> (Arc<Mutex<Vec<String>>>, tokio::task::JoinHandle<()>)
where
    R: tokio::io::AsyncRead + Unpin + Send + 'static,
{
    let lines = Arc::new(Mutex::new(Vec::new()));
    let sink = lines.clone();
    let reader = tokio::spawn(async move {
        let mut reader = BufReader::new(pipe).lines();
        while let Ok(Some(line)) = reader.next_line().await {
            sink.lock().unwrap().push(line);
        }
    });
    (lines, reader)
}

/// Runs `kite ARGS` to completion (with a deadline) and returns its output.
pub async fn kite_output(args: &[&str], timeout: Duration) -> Output {
    let child = tokio::process::Command::new(kite_bin())
        .args(args)
        .env("KUBECONFIG", kubeconfig())
        .current_dir(repo_root())
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    tokio::time::timeout(timeout, child)
        .await
        .unwrap_or_else(|_| panic!("kite {} did not finish within {timeout:?}", args.join(" ")))
        .expect("run kite")
}

/// The audit log entries of the local cluster whose raw line contains `needle` (a cheap
/// filter, since the log holds every request of every test), parsed.
pub fn audit_events(needle: &str) -> Vec<serde_json::Value> {
    use std::io::BufRead;
    let Ok(file) = std::fs::File::open(cluster_dir().join("audit.log")) else {
        return Vec::new();
    };
    std::io::BufReader::new(file)
        .lines()
        .map_while(Result::ok)
        .filter(|l| l.contains(needle))
        .filter_map(|l| serde_json::from_str(&l).ok())
        .collect()
}

/// A field of one object by kubectl's jsonpath, or "" when it cannot be read.
pub async fn jsonpath(kind: &str, name: &str, ns: &str, path: &str) -> String {
    let out = kubectl(&[
        "get",
        kind,
        name,
        "-n",
        ns,
        "-o",
        &format!("jsonpath={path}"),
    ])
    .await;
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Sends SIGTERM to a process.
pub fn sigterm(pid: u32) {
    let _ = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status();
}

/// How many lines contain `needle`.
pub fn count(lines: &[String], needle: &str) -> usize {
    lines.iter().filter(|l| l.contains(needle)).count()
}

/// A loopback port that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// Installs the seed's StaticSite CRD (idempotent) and waits until it is served.
pub async fn install_staticsite_crd() {
    apply_shared("examples/staticsite/crd.yaml").await;
    kubectl_ok(&[
        "wait",
        "--for=condition=Established",
        "crd/staticsites.tutorial.starkite.io",
    ])
    .await;
}

/// Applies a file that tests running in parallel all apply: two creates of the same new
/// object race, and the loser's AlreadyExists (or Conflict) is retried, once it exists.
async fn apply_shared(path: &str) {
    wait_until(
        &format!("kubectl apply -f {path}"),
        Duration::from_secs(30),
        || async {
            let out = kubectl(&["apply", "-f", path]).await;
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(
                out.status.success() || err.contains("AlreadyExists") || err.contains("conflict"),
                "kubectl apply -f {path}: {err}"
            );
            out.status.success()
        },
    )
    .await;
}

/// Installs the StarlarkController and ClusterStarlarkController CRDs (idempotent) and
/// waits until they are served.
pub async fn install_starlarkcontroller_crd() {
    apply_shared("crds/starlarkcontroller.yaml").await;
    kubectl_ok(&[
        "wait",
        "--for=condition=Established",
        "--timeout=60s",
        "crd/starlarkcontrollers.starkite.io",
        "crd/clusterstarlarkcontrollers.starkite.io",
    ])
    .await;
}

/// Creates Deployment `name` with `replicas` and then labels it for the max-replicas
/// controller, as the seed's walkthrough does.
pub async fn create_enforced_deployment(ns: &str, name: &str, replicas: u32) {
    let replicas = format!("--replicas={replicas}");
    kubectl_ok(&[
        "create",
        "deployment",
        name,
        "-n",
        ns,
        "--image=nginx",
        &replicas,
    ])
    .await;
    kubectl_ok(&[
        "label",
        "deployment",
        name,
        "-n",
        ns,
        "enforce-max-replicas=true",
    ])
    .await;
}

/// Sends a signal (`-STOP`, `-CONT`) to a process the test started.
pub fn signal(pid: u32, sig: &str) {
    let status = std::process::Command::new("kill")
        .args([sig, &pid.to_string()])
        .status()
        .unwrap();
    assert!(status.success(), "kill {sig} {pid}");
}

/// Kills the local API server (as a crash would) and starts it again with the same
/// state, waiting until it is ready.
pub async fn restart_apiserver() {
    let out = tokio::process::Command::new(repo_root().join("tests/cluster/restart-apiserver.sh"))
        .output()
        .await
        .unwrap();
    assert!(
        out.status.success(),
        "restart failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `tests/scripts/control/cap.star` (Deployments in `ns` capped at 2 replicas) on a
/// free health port, started; returns it and the port.
pub async fn cap_controller(ns: &str) -> (Kite, u16) {
    let port = free_port();
    let mut kite = Kite::spawn(&[
        "run",
        "tests/scripts/control/cap.star",
        "--allow-k8s",
        "--var",
        &format!("namespace={ns}"),
        "--var",
        &format!("port={port}"),
    ]);
    kite.wait_stdout("cap controller started", Duration::from_secs(30))
        .await;
    (kite, port)
}

/// A process's resident memory in KiB (0 once it is gone).
pub fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Every version of one object's field, in order, as `kubectl get --watch` sees it.
pub struct Versions {
    _watch: tokio::process::Child,
    seen: Arc<Mutex<Vec<String>>>,
    reader: tokio::task::JoinHandle<()>,
}

impl Versions {
    /// Starts recording `jsonpath` (e.g. `{.data.by}`) of `kind/name` in `ns`.
    pub fn record(kind: &str, name: &str, ns: &str, jsonpath: &str) -> Self {
        let mut watch = tokio::process::Command::new("kubectl")
            .args([
                "get",
                kind,
                name,
                "-n",
                ns,
                "--watch",
                "-o",
                &format!("jsonpath={jsonpath}{{\"\\n\"}}"),
            ])
            .env("KUBECONFIG", kubeconfig())
            .stdout(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let (seen, reader) = collect(watch.stdout.take().unwrap());
        Versions {
            _watch: watch,
            seen,
            reader,
        }
    }

    /// Stops recording; the versions seen.
    pub fn stop(self) -> Vec<String> {
        self.reader.abort();
        self.seen.lock().unwrap().clone()
    }
}

/// The port of the local cluster's API server, from its kubeconfig.
pub fn apiserver_port() -> u16 {
    let text = std::fs::read_to_string(kubeconfig()).unwrap_or_default();
    text.lines()
        .find_map(|l| l.trim().strip_prefix("server:"))
        .and_then(|url| {
            url.trim()
                .rsplit(':')
                .next()?
                .trim_matches('/')
                .parse()
                .ok()
        })
        .expect("the kubeconfig names the API server's port")
}

/// The established TCP connections process `pid` holds to the local API server: its
/// sockets (`/proc/<pid>/fd`) matched by inode against the kernel's TCP tables.
pub fn apiserver_connections(pid: u32) -> usize {
    let port = apiserver_port();
    let sockets: std::collections::HashSet<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .filter_map(|link| {
            let link = link.to_string_lossy().into_owned();
            Some(link.strip_prefix("socket:[")?.strip_suffix(']')?.to_owned())
        })
        .collect();
    ["/proc/net/tcp", "/proc/net/tcp6"]
        .iter()
        .flat_map(|table| {
            std::fs::read_to_string(table)
                .unwrap_or_default()
                .lines()
                .skip(1)
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .filter(|line| {
            let cols: Vec<&str> = line.split_whitespace().collect();
            // rem_address is HEXIP:HEXPORT, st 01 is ESTABLISHED, column 9 the inode.
            cols.len() > 9
                && cols[3] == "01"
                && cols[2]
                    .rsplit(':')
                    .next()
                    .and_then(|p| u16::from_str_radix(p, 16).ok())
                    == Some(port)
                && sockets.contains(cols[9])
        })
        .count()
}
