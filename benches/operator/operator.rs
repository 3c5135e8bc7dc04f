//! A `kite operator` process (the release build) for the bench: started, measured,
//! stopped or killed.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::fleet::Fleet;

pub struct Operator {
    child: Child,
    name: String,
}

fn kite_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/release/kite")
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_or(0, |a| a.port())
}

/// The body of `GET http://127.0.0.1:<port><path>`, if it answers.
pub async fn get(port: u16, path: &str) -> Option<String> {
    let fetch = async {
        let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .ok()?;
        s.write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
            .await
            .ok()?;
        let mut buf = Vec::new();
        s.read_to_end(&mut buf).await.ok()?;
        let text = String::from_utf8_lossy(&buf).into_owned();
        text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())
    };
    tokio::time::timeout(Duration::from_secs(5), fetch)
        .await
        .ok()?
}

impl Operator {
    /// Starts an operator for the fleet (its ceiling, selector and namespace), with
    /// `extra` arguments, and waits until it serves /readyz.
    pub async fn start(fleet: &Fleet, name: &str, extra: &[&str]) -> anyhow::Result<Self> {
        let port = free_port();
        let log = crate::out_dir().join(format!("operator-{name}.log"));
        let file = std::fs::File::create(&log)?;
        let mut args = vec![
            "operator".to_owned(),
            "--ceiling".into(),
            fleet.ceiling(),
            "--selector".into(),
            fleet.selector(),
            "--operator-namespace".into(),
            fleet.operator_namespace().into(),
            "--health-port".into(),
            port.to_string(),
            "--webhook-port".into(),
            "0".into(),
            "--webhook-configuration".into(),
            fleet.webhook(),
        ];
        args.extend(extra.iter().map(|a| (*a).to_owned()));
        // KITE_BENCH_HEAPTRACK=1: each operator runs under heaptrack (its figures are then
        // heaptrack's own process, not the operator's), for a memory profile.
        let mut command = if std::env::var_os("KITE_BENCH_HEAPTRACK").is_some() {
            let mut c = Command::new("heaptrack");
            c.arg("-o")
                .arg(crate::out_dir().join(format!("heaptrack-{name}")))
                .arg(kite_bin());
            c
        } else {
            Command::new(kite_bin())
        };
        let child = command
            .args(&args)
            .env("KUBECONFIG", crate::cluster::kubeconfig())
            // The replica's identity (status.replica), as in a pod.
            .env("POD_NAME", format!("kite-bench-{name}"))
            .stdout(Stdio::null())
            .stderr(file)
            .spawn()
            .with_context(|| {
                format!(
                    "starting {}: run `make bench-operator`",
                    kite_bin().display()
                )
            })?;
        let op = Operator {
            child,
            name: name.to_owned(),
        };
        let deadline = Instant::now() + Duration::from_secs(60);
        while get(port, "/readyz").await.as_deref().map(str::trim) != Some("ok") {
            if Instant::now() > deadline {
                bail!(
                    "operator {name} not ready after 60 s; see {}",
                    log.display()
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Ok(op)
    }

    /// `status.replica` of what it runs.
    pub fn identity(&self) -> String {
        format!("kite-bench-{}", self.name)
    }

    /// Resident memory now and the thread count.
    pub fn rss_and_threads(&self) -> (u64, u64) {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        let field = |name: &str| -> u64 {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
                .unwrap_or(0)
        };
        (field("VmRSS:") * 1024, field("Threads:"))
    }

    /// The operator's pid: the child's, or under heaptrack (a shell script that runs it
    /// and, beside it, the profile's interpreter) that of the child's child running
    /// kite, which a signal to heaptrack never reaches.
    fn operator_pid(&self) -> u32 {
        let me = self.child.id();
        let children =
            std::fs::read_to_string(format!("/proc/{me}/task/{me}/children")).unwrap_or_default();
        children
            .split_whitespace()
            .filter_map(|p| p.parse::<u32>().ok())
            .find(|p| {
                std::fs::read_link(format!("/proc/{p}/exe"))
                    .is_ok_and(|exe| exe.file_name().is_some_and(|n| n == "kite"))
            })
            .unwrap_or(me)
    }

    /// Sends `signal` to the operator (heaptrack, if it wraps it, ends with it and
    /// writes its profile).
    fn signal(&self, signal: &str) {
        let _ = Command::new("kill")
            .args([signal, &self.operator_pid().to_string()])
            .status();
    }

    /// SIGTERM, then waits for a clean exit (SIGKILL after 60 s).
    pub async fn stop(mut self) {
        self.signal("-TERM");
        let deadline = Instant::now() + Duration::from_secs(60);
        while matches!(self.child.try_wait(), Ok(None)) {
            if Instant::now() > deadline {
                self.signal("-KILL");
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let _ = self.child.wait();
    }

    /// SIGKILL: a replica dying.
    pub fn kill(mut self) {
        self.signal("-KILL");
        let _ = self.child.wait();
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        if matches!(self.child.try_wait(), Ok(None)) {
            self.signal("-KILL");
            let _ = self.child.wait();
        }
    }
}
