//! A TCP fault proxy between kite and the API server: it passes bytes through, or holds
//! them (a blackhole: the connection stays open, no FIN, nothing arrives), or drops
//! them (a partition), or delays them. The API server's certificate names 127.0.0.1, so a
//! kubeconfig pointing at the proxy works unchanged.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};

use super::*;

/// What the proxy does with traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Pass,
    /// Connections established before this moment stay open and carry nothing (new ones
    /// pass): a half-open connection, as a dropped NAT entry or a dead peer leaves.
    Blackhole(Instant),
    /// A network partition: every byte, either way, on every connection old or new, is
    /// lost (never delivered later, as held bytes would be). Connections stay open.
    Partition,
    /// Every chunk waits this long.
    Delay(Duration),
}

/// A running proxy; stops when dropped.
pub struct Proxy {
    pub port: u16,
    mode: Arc<Mutex<Mode>>,
    task: tokio::task::JoinHandle<()>,
    /// A kubeconfig (the admin's) that reaches the API server through the proxy.
    pub kubeconfig: std::path::PathBuf,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.kubeconfig);
    }
}

impl Proxy {
    /// Starts a proxy to the local API server.
    pub async fn start() -> Self {
        let text = std::fs::read_to_string(kubeconfig()).expect("the admin kubeconfig");
        let server = text
            .lines()
            .find_map(|l| l.trim().strip_prefix("server: "))
            .expect("a server line")
            .trim()
            .to_owned();
        let upstream = server
            .trim_start_matches("https://")
            .trim_end_matches('/')
            .to_owned();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let mode = Arc::new(Mutex::new(Mode::Pass));
        let task = {
            let mode = mode.clone();
            tokio::spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    let Ok(server) = TcpStream::connect(&upstream).await else {
                        continue;
                    };
                    let (client, server) = (Arc::new(client), Arc::new(server));
                    let born = Instant::now();
                    tokio::spawn(pipe(client.clone(), server.clone(), mode.clone(), born));
                    tokio::spawn(pipe(server, client, mode.clone(), born));
                }
            })
        };
        let path = std::env::temp_dir().join(format!("{}.kubeconfig", unique_name("proxy")));
        let proxied = text.replace(&server, &format!("https://127.0.0.1:{port}"));
        std::fs::write(&path, proxied).unwrap();
        Proxy {
            port,
            mode,
            task,
            kubeconfig: path,
        }
    }

    pub fn set(&self, mode: Mode) {
        *self.mode.lock().unwrap() = mode;
    }
}

/// Copies `from` to `to` as the mode allows.
async fn pipe(from: Arc<TcpStream>, to: Arc<TcpStream>, mode: Arc<Mutex<Mode>>, born: Instant) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        if from.readable().await.is_err() {
            return;
        }
        let n = match from.try_read(&mut buf) {
            Ok(0) => return,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(_) => return,
        };
        loop {
            let current = *mode.lock().unwrap();
            match current {
                Mode::Pass => break,
                Mode::Blackhole(since) if born < since => {
                    tokio::time::sleep(Duration::from_millis(50)).await
                }
                Mode::Blackhole(_) => break,
                Mode::Partition => break,
                Mode::Delay(d) => {
                    tokio::time::sleep(d).await;
                    break;
                }
            }
        }
        if *mode.lock().unwrap() == Mode::Partition {
            continue;
        }
        let mut written = 0;
        while written < n {
            if to.writable().await.is_err() {
                return;
            }
            match to.try_write(&buf[written..n]) {
                Ok(k) => written += k,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
                Err(_) => return,
            }
        }
    }
}
