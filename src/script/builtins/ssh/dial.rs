//! Connecting to one host: TCP (or a tunnel through `jump_host`), the host key checked
//! against known_hosts when asked, then the key, password and agent tried in upstream's
//! order; connection failures retried with upstream's backoff (1 s, doubling).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use russh::client::{self, Handle};
use russh::keys::agent::AgentIdentity;
use russh::keys::agent::client::AgentClient;
use russh::keys::{PrivateKey, PrivateKeyWithHashAlg, PublicKeyOrCertificate};

use super::Settings;

/// What connecting needs, read on the script's thread (files, variables) before the
/// work moves to the runtime.
pub struct Dialer {
    pub settings: Arc<Settings>,
    pub key: Option<Arc<PrivateKey>>,
    /// Where host keys are checked, when they are.
    pub known_hosts: Option<PathBuf>,
    /// The SSH agent's socket, when the script's environment names one.
    pub agent: Option<PathBuf>,
}

/// A connection, with the jump host's it runs through (kept open while it is used).
pub struct Conn {
    pub handle: Handle<Verifier>,
    /// The jump host's connection, which the tunnel runs through.
    jump: Option<Handle<Verifier>>,
}

impl Conn {
    pub async fn close(self) {
        let _ = self
            .handle
            .disconnect(russh::Disconnect::ByApplication, "", "en")
            .await;
        if let Some(jump) = self.jump {
            let _ = jump
                .disconnect(russh::Disconnect::ByApplication, "", "en")
                .await;
        }
    }
}

/// Why connecting failed; only `Retry` is worth another attempt.
enum Failure {
    Retry(String),
    Final(String),
}

/// Checks the server's host key, when known_hosts is to be checked.
pub struct Verifier {
    host: String,
    port: u16,
    known_hosts: Option<PathBuf>,
    /// Why the key was refused, for the error message.
    refused: Arc<Mutex<Option<String>>>,
}

impl client::Handler for Verifier {
    type Error = russh::Error;

    async fn check_server_key(
        &mut self,
        key: &PublicKeyOrCertificate,
    ) -> Result<bool, Self::Error> {
        let Some(path) = &self.known_hosts else {
            return Ok(true);
        };
        let shown = path.display();
        let why = match key {
            PublicKeyOrCertificate::Certificate(_) => {
                format!(
                    "{}:{} offered a host certificate; only plain host keys are checked against {shown}",
                    self.host, self.port
                )
            }
            PublicKeyOrCertificate::PublicKey { key, .. } => {
                match russh::keys::check_known_hosts_path(&self.host, self.port, key, path) {
                    Ok(true) => return Ok(true),
                    Ok(false) => format!(
                        "the host key of {}:{} is not in {shown} (add it, e.g. with ssh-keyscan, or pass host_key_check=False)",
                        self.host, self.port
                    ),
                    Err(russh::keys::Error::KeyChanged { line }) => format!(
                        "the host key of {}:{} does not match line {line} of {shown}: it changed, or someone is in the middle",
                        self.host, self.port
                    ),
                    Err(e) => format!("reading {shown}: {e}"),
                }
            }
        };
        if let Ok(mut slot) = self.refused.lock() {
            *slot = Some(why);
        }
        Ok(false)
    }
}

impl Dialer {
    fn config(&self) -> Arc<client::Config> {
        let s = &self.settings;
        Arc::new(client::Config {
            keepalive_interval: s.keep_alive_interval,
            keepalive_max: s.keep_alive_max,
            ..client::Config::default()
        })
    }

    fn verifier(&self, host: &str, port: u16) -> (Verifier, Arc<Mutex<Option<String>>>) {
        let refused = Arc::new(Mutex::new(None));
        let v = Verifier {
            host: host.to_owned(),
            port,
            known_hosts: self.known_hosts.clone(),
            refused: refused.clone(),
        };
        (v, refused)
    }

    /// Connects to `host:port`, retrying failures to reach it `max_retries` times.
    pub async fn connect_to(&self, host: &str, port: u16) -> Result<Conn, String> {
        let mut delay = Duration::from_secs(1);
        let attempts = self.settings.max_retries.saturating_add(1);
        let mut attempt = 1;
        loop {
            // A zero timeout is none (as Go's); the call's budget still bounds it.
            let limit = Some(self.settings.timeout).filter(|t| !t.is_zero());
            let once = tokio::time::timeout(
                limit.unwrap_or(Duration::MAX),
                self.connect_once(host, port),
            );
            let err = match once.await {
                Ok(Ok(conn)) => return Ok(conn),
                Ok(Err(Failure::Final(e))) => return Err(e),
                Ok(Err(Failure::Retry(e))) => e,
                Err(_) => format!(
                    "no connection within {} (timeout=)",
                    crate::duration::format(self.settings.timeout)
                ),
            };
            if attempt >= attempts {
                return Err(if attempts > 1 {
                    format!("failed after {attempts} attempts: {err}")
                } else {
                    err
                });
            }
            tokio::time::sleep(delay).await;
            delay = delay.saturating_mul(2);
            attempt += 1;
        }
    }

    async fn connect_once(&self, host: &str, port: u16) -> Result<Conn, Failure> {
        let Some(jump) = &self.settings.jump_host else {
            let handle = self.open(host, port, None).await?;
            return Ok(Conn { handle, jump: None });
        };
        let (jhost, jport) = split_host_port(jump, self.settings.port);
        let jumped = self.open(&jhost, jport, None).await.map_err(|f| match f {
            Failure::Retry(e) => Failure::Retry(format!("jump host {jhost}:{jport}: {e}")),
            Failure::Final(e) => Failure::Final(format!("jump host {jhost}:{jport}: {e}")),
        })?;
        let tunnel = jumped
            .channel_open_direct_tcpip(host, u32::from(port), "127.0.0.1", 0)
            .await
            .map_err(|e| {
                Failure::Retry(format!("tunnel from {jhost}:{jport} to {host}:{port}: {e}"))
            })?;
        let handle = self.open(host, port, Some(tunnel.into_stream())).await?;
        Ok(Conn {
            handle,
            jump: Some(jumped),
        })
    }

    /// One SSH session to `host:port`, over `tunnel` when given, authenticated.
    async fn open(
        &self,
        host: &str,
        port: u16,
        tunnel: Option<russh::ChannelStream<client::Msg>>,
    ) -> Result<Handle<Verifier>, Failure> {
        let (verifier, refused) = self.verifier(host, port);
        let connected = match tunnel {
            None => client::connect(self.config(), (host, port), verifier).await,
            Some(stream) => client::connect_stream(self.config(), stream, verifier).await,
        };
        let mut handle = connected.map_err(|e| {
            let refused = refused.lock().ok().and_then(|mut r| r.take());
            match (refused, e) {
                (Some(why), _) => Failure::Final(why),
                (None, russh::Error::IO(io)) => {
                    Failure::Retry(format!("connecting to {host}:{port}: {io}"))
                }
                (None, e) => Failure::Retry(format!("SSH handshake with {host}:{port}: {e}")),
            }
        })?;
        self.authenticate(&mut handle)
            .await
            .map_err(Failure::Final)?;
        Ok(handle)
    }

    /// Tries the key, then the password, then the agent's keys (upstream's order).
    async fn authenticate(&self, handle: &mut Handle<Verifier>) -> Result<(), String> {
        let user = self.settings.user.clone();
        let fail = |e: russh::Error| format!("authenticating as {user}: {e}");
        let mut tried = Vec::new();
        if let Some(key) = &self.key {
            let hash = handle.best_supported_rsa_hash().await.map_err(fail)?;
            let key = PrivateKeyWithHashAlg::new(key.clone(), hash.flatten());
            if handle
                .authenticate_publickey(&user, key)
                .await
                .map_err(fail)?
                .success()
            {
                return Ok(());
            }
            tried.push("key");
        }
        if let Some(password) = &self.settings.password {
            if handle
                .authenticate_password(&user, password)
                .await
                .map_err(fail)?
                .success()
            {
                return Ok(());
            }
            tried.push("password");
        }
        if let Some(socket) = &self.agent
            && self.with_agent(handle, socket).await?
        {
            return Ok(());
        }
        if self.agent.is_some() {
            tried.push("agent");
        }
        if tried.is_empty() {
            return Err(
                "no authentication method: give key= or password=, or run an SSH agent (SSH_AUTH_SOCK)"
                    .into(),
            );
        }
        Err(format!(
            "authentication as {user} failed (tried: {})",
            tried.join(", ")
        ))
    }

    /// Offers each of the agent's keys; an agent that cannot be reached is skipped.
    async fn with_agent(
        &self,
        handle: &mut Handle<Verifier>,
        socket: &PathBuf,
    ) -> Result<bool, String> {
        let Ok(mut agent) = AgentClient::connect_uds(socket).await else {
            return Ok(false);
        };
        let Ok(identities) = agent.request_identities().await else {
            return Ok(false);
        };
        let hash = handle
            .best_supported_rsa_hash()
            .await
            .map_err(|e| e.to_string())?
            .flatten();
        for identity in identities {
            let AgentIdentity::PublicKey { key, .. } = identity else {
                continue;
            };
            let user = self.settings.user.clone();
            match handle
                .authenticate_publickey_with(user, key, hash, &mut agent)
                .await
            {
                Ok(r) if r.success() => return Ok(true),
                _ => {}
            }
        }
        Ok(false)
    }
}

/// `host` or `host:port` (a bare IPv6 address keeps its colons; `[v6]:port` works).
pub fn split_host_port(text: &str, default_port: u16) -> (String, u16) {
    if let Some(rest) = text.strip_prefix('[')
        && let Some((h, p)) = rest.split_once("]:")
        && let Ok(port) = p.parse()
    {
        return (h.to_owned(), port);
    }
    match text.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') => match p.parse() {
            Ok(port) => (h.to_owned(), port),
            Err(_) => (text.to_owned(), default_port),
        },
        _ => (text.to_owned(), default_port),
    }
}
