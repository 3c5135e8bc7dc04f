//! `ssh.test_server`'s SSH server: password and test-key logins for one user, SCP
//! uploads kept in memory, downloads of files the script added, and every other
//! command answered by the script's `handle_exec` function, which runs on the
//! script's thread while an `ssh` call there waits ([`super::pump`]).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use russh::keys::{PrivateKey, PublicKey};
use russh::server::{self, Auth, Msg, Session};
use russh::{Channel, ChannelId, ChannelMsg, ChannelWriteHalf};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, mpsc, oneshot, watch};

use super::command::{self, Header};
use super::incoming::Incoming;

/// Connections served at once; more wait to be accepted.
const MAX_CONNECTIONS: usize = 16;
/// The largest file an upload may send (kept in memory).
const MAX_UPLOAD: u64 = 64 << 20;

/// A command for the script's handler; `reply` takes (stdout, stderr, exit code).
pub struct Call {
    pub server: u64,
    pub cmd: String,
    pub reply: oneshot::Sender<(String, String, u32)>,
}

/// A file on the server: added by the script, or uploaded.
#[derive(Debug, Clone)]
pub struct ScpFile {
    pub name: String,
    pub mode: String,
    pub content: Vec<u8>,
}

/// What the script's value and the server's tasks share.
pub struct Shared {
    pub id: u64,
    pub user: String,
    pub password: Option<String>,
    pub files: Mutex<HashMap<String, ScpFile>>,
    pub uploads: Mutex<HashMap<String, ScpFile>>,
    /// Set by `handle_exec`; without it commands succeed with no output (as upstream).
    pub has_handler: AtomicBool,
    /// The public keys `ssh.test_key()` made in this run: the ones logins may use.
    pub keys: Arc<Mutex<Vec<PublicKey>>>,
    pub calls: mpsc::Sender<Call>,
}

pub fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Serves `listener` until `stopped` turns true (or its sender is gone).
pub async fn serve(
    listener: TcpListener,
    host_key: PrivateKey,
    shared: Arc<Shared>,
    mut stopped: watch::Receiver<bool>,
) {
    let config = Arc::new(server::Config {
        keys: vec![host_key],
        // A test server: refusing slowly protects nothing here and slows tests down.
        auth_rejection_time: Duration::from_millis(10),
        auth_rejection_time_initial: Some(Duration::ZERO),
        inactivity_timeout: Some(Duration::from_mins(5)),
        ..server::Config::default()
    });
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else {
            return;
        };
        let socket = tokio::select! {
            a = listener.accept() => match a {
                Ok((socket, _)) => socket,
                Err(_) => continue,
            },
            _ = stopped.wait_for(|s| *s) => return,
        };
        let handler = Conn {
            shared: shared.clone(),
            stopped: stopped.clone(),
        };
        let (config, mut stopped) = (config.clone(), stopped.clone());
        tokio::spawn(async move {
            let _permit = permit;
            let Ok(session) = server::run_stream(config, socket, handler).await else {
                return;
            };
            let handle = session.handle();
            // The guard wait_for returns must not live across the disconnect below.
            let stop = async {
                let _ = stopped.wait_for(|s| *s).await;
            };
            tokio::select! {
                _ = session => {}
                () = stop => {
                    let _ = handle
                        .disconnect(russh::Disconnect::ByApplication, "shutdown".into(), String::new())
                        .await;
                }
            }
        });
    }
}

/// One client connection.
struct Conn {
    shared: Arc<Shared>,
    stopped: watch::Receiver<bool>,
}

impl server::Handler for Conn {
    type Error = russh::Error;

    async fn auth_password(&mut self, user: &str, password: &str) -> Result<Auth, Self::Error> {
        let ok = user == self.shared.user && self.shared.password.as_deref() == Some(password);
        Ok(if ok { Auth::Accept } else { Auth::reject() })
    }

    async fn auth_publickey(
        &mut self,
        user: &str,
        key: server::VerifiedPublicKey<'_>,
    ) -> Result<Auth, Self::Error> {
        let known = lock(&self.shared.keys)
            .iter()
            .any(|k| k.key_data() == key.public_key.key_data());
        Ok(if user == self.shared.user && known {
            Auth::Accept
        } else {
            Auth::reject()
        })
    }

    async fn channel_open_session(
        &mut self,
        channel: Channel<Msg>,
        reply: server::ChannelOpenHandle,
        _session: &mut Session,
    ) -> Result<(), Self::Error> {
        reply.accept().await;
        let (shared, mut stopped) = (self.shared.clone(), self.stopped.clone());
        tokio::spawn(async move {
            tokio::select! {
                () = run_channel(channel, &shared) => {}
                _ = stopped.wait_for(|s| *s) => {}
            }
        });
        Ok(())
    }

    /// Tunnels (what `jump_host` asks of a bastion) to this machine's loopback only:
    /// a test server is no way out to anywhere else.
    async fn channel_open_direct_tcpip(
        &mut self,
        channel: Channel<Msg>,
        host_to_connect: &str,
        port_to_connect: u32,
        _originator_address: &str,
        _originator_port: u32,
        reply: server::ChannelOpenHandle,
        _session: &mut Session,
    ) -> Result<(), Self::Error> {
        let loopback = matches!(host_to_connect, "127.0.0.1" | "localhost" | "::1");
        let Ok(port) = u16::try_from(port_to_connect) else {
            return Ok(());
        };
        if !loopback {
            reply
                .reject(russh::ChannelOpenFailure::AdministrativelyProhibited)
                .await;
            return Ok(());
        }
        let Ok(mut target) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
            reply.reject(russh::ChannelOpenFailure::ConnectFailed).await;
            return Ok(());
        };
        reply.accept().await;
        let mut stopped = self.stopped.clone();
        tokio::spawn(async move {
            let mut stream = channel.into_stream();
            tokio::select! {
                _ = tokio::io::copy_bidirectional(&mut stream, &mut target) => {}
                _ = stopped.wait_for(|s| *s) => {}
            }
        });
        Ok(())
    }

    async fn exec_request(
        &mut self,
        channel: ChannelId,
        _data: &[u8],
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        session.channel_success(channel)
    }

    async fn env_request(
        &mut self,
        channel: ChannelId,
        _name: &str,
        _value: &str,
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        session.channel_success(channel)
    }
}

type Out = ChannelWriteHalf<Msg>;

/// Waits for the channel's command and runs it.
async fn run_channel(channel: Channel<Msg>, shared: &Shared) {
    let (mut rx, tx) = channel.split();
    let cmd = loop {
        match rx.wait().await {
            Some(ChannelMsg::Exec { command, .. }) => {
                break String::from_utf8_lossy(&command).into_owned();
            }
            Some(ChannelMsg::Eof | ChannelMsg::Close) | None => return,
            Some(_) => {}
        }
    };
    let incoming = Incoming::new(rx);
    let code = if let Some(path) = command::scp_target(&cmd, "-t") {
        sink(incoming, &tx, shared, path).await
    } else if let Some(path) = command::scp_target(&cmd, "-f") {
        source(incoming, &tx, shared, &path).await
    } else {
        run_command(&tx, shared, cmd).await
    };
    let _ = tx.exit_status(code).await;
    let _ = tx.eof().await;
    let _ = tx.close().await;
}

async fn run_command(tx: &Out, shared: &Shared, cmd: String) -> u32 {
    if !shared.has_handler.load(Ordering::Relaxed) {
        return 0;
    }
    let (reply, answer) = oneshot::channel();
    let call = Call {
        server: shared.id,
        cmd,
        reply,
    };
    let (stdout, stderr, code) = match shared.calls.send(call).await {
        Ok(()) => answer.await.unwrap_or_else(|_| {
            (
                String::new(),
                "the script's handler did not answer".into(),
                1,
            )
        }),
        Err(_) => (String::new(), "the script has ended".into(), 1),
    };
    if !stdout.is_empty() {
        let _ = tx.data_bytes(stdout.into_bytes()).await;
    }
    if !stderr.is_empty() {
        let _ = tx.extended_data_bytes(1, stderr.into_bytes()).await;
    }
    code
}

/// Says `message` as SCP's error (code 2) and fails.
async fn refuse(tx: &Out, message: &str) -> u32 {
    let mut line = vec![2u8];
    line.extend_from_slice(format!("scp: {message}\n").as_bytes());
    let _ = tx.data_bytes(line).await;
    1
}

/// SCP's "go on" byte; false when the client is gone.
async fn ok(tx: &Out) -> bool {
    tx.data_bytes(vec![0u8]).await.is_ok()
}

/// `scp -t PATH`: receives one file and keeps it as uploaded to `path`.
async fn sink(mut incoming: Incoming, tx: &Out, shared: &Shared, path: String) -> u32 {
    if !ok(tx).await {
        return 1;
    }
    let header = loop {
        let Ok(line) = incoming.line().await else {
            return 1;
        };
        // Modification times (`scp -p`) are acknowledged and ignored.
        if line.starts_with('T') {
            if !ok(tx).await {
                return 1;
            }
            continue;
        }
        match Header::parse(&line) {
            Ok(h) => break h,
            Err(e) => return refuse(tx, &e).await,
        }
    };
    if header.size > MAX_UPLOAD {
        return refuse(tx, "the test server keeps files of at most 64 MiB").await;
    }
    if !ok(tx).await {
        return 1;
    }
    let Ok(content) = incoming.take(header.size).await else {
        return 1;
    };
    if incoming.byte().await != Ok(0) {
        return 1;
    }
    lock(&shared.uploads).insert(
        path,
        ScpFile {
            name: header.name,
            mode: header.mode,
            content,
        },
    );
    u32::from(!ok(tx).await)
}

/// `scp -f PATH`: sends a file the script added.
async fn source(mut incoming: Incoming, tx: &Out, shared: &Shared, path: &str) -> u32 {
    if incoming.byte().await.is_err() {
        return 1;
    }
    let Some(file) = lock(&shared.files).get(path).cloned() else {
        return refuse(tx, &format!("{path}: No such file or directory")).await;
    };
    let header = Header {
        mode: file.mode,
        size: file.content.len() as u64,
        name: file.name,
    };
    if tx.data_bytes(header.line()).await.is_err() || incoming.byte().await != Ok(0) {
        return 1;
    }
    if tx.data_bytes(file.content).await.is_err() || tx.data_bytes(vec![0u8]).await.is_err() {
        return 1;
    }
    u32::from(incoming.byte().await != Ok(0))
}
