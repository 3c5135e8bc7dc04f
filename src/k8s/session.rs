//! A connection to one cluster: the client, its discovery cache and default namespace.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

/// Derived sessions (the same connection, another namespace) a [`SessionCell`] keeps.
const MAX_DERIVED: usize = 64;

use kube::config::{KubeConfigOptions, Kubeconfig};

use super::discovery::Discovery;

/// Where and how to reach the cluster (`--kubeconfig`, `--context`, `--dry-run`); kept
/// in the script host's extensions for a run.
#[derive(Debug, Clone, Default)]
pub struct KubeOptions {
    pub kubeconfig: Option<std::path::PathBuf>,
    pub context: Option<String>,
    pub dry_run: bool,
}

/// Why a session could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading kubeconfig {path}: {source}")]
    ReadKubeconfig {
        path: String,
        source: kube::config::KubeconfigError,
    },
    #[error("loading cluster configuration: {0}")]
    LoadConfig(String),
    #[error("building the Kubernetes client: {0}")]
    BuildClient(#[source] kube::Error),
    #[error("building the Kubernetes client: {0}")]
    BuildTransport(#[source] tower::BoxError),
    #[error(
        "k8s.config(kubeconfig=..., context=...) is not available here: this controller runs as its own ServiceAccount (only namespace= may change)"
    )]
    SwitchIdentity,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The settings that identify a session: `k8s.config(kubeconfig=, context=, namespace=)`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct SessionKey {
    pub kubeconfig: Option<String>,
    pub context: Option<String>,
    pub namespace: Option<String>,
}

/// The server ends each watch after this and kite resumes it from the last
/// resourceVersion: a cheap request (served from the watch cache, no list) that doubles
/// as the heartbeat [`READ_TIMEOUT`] relies on, since Kubernetes watches have none.
pub const WATCH_TIMEOUT_SECS: u32 = 15;

/// No read from the API server may wait longer than this. Watches end every
/// [`WATCH_TIMEOUT_SECS`] and other calls answer sooner, so a
/// connection silent this long is dead (half-open: a dropped NAT entry, a peer that
/// vanished without a FIN) and is closed, pooled ones included, instead of holding a
/// watch or a write forever.
pub const READ_TIMEOUT: Duration = Duration::from_secs(20);

/// Whether a connection has asked the API server for its version yet (see
/// [`super::support`]).
static VERSION_CHECKED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// One cluster connection, shared by every call that uses the same settings.
pub struct Session {
    pub client: kube::Client,
    /// The same identity without [`READ_TIMEOUT`], for exec and port-forward streams,
    /// which may rightly be silent for longer (a command that prints nothing for a
    /// minute, an idle forwarded connection); each such call has its own deadline.
    pub streaming: kube::Client,
    pub discovery: Discovery,
    /// The namespace used when neither the call nor the manifest names one.
    pub namespace: String,
    /// The kubeconfig context in use ("" when in-cluster).
    pub context: String,
    /// Every write is sent with `dryRun=All` (`--dry-run`).
    pub dry_run: bool,
    /// The `reportingInstance` of the Events it records (None: this machine's host
    /// name, as client-go's recorder does). A hosted script's events name the operator,
    /// never its host.
    pub instance: Option<String>,
    /// The background writer of this identity's Events ([`Session::recorder`]), shared
    /// with the sessions derived from it.
    recorder: Arc<OnceLock<super::recorder::Recorder>>,
    /// The namespace the recorder's pending Events are counted against: the one this
    /// identity was made for, kept by the sessions derived from it
    /// (`k8s.config(namespace = ...)`), so that naming made-up namespaces does not
    /// escape the per-namespace bound.
    events_charged_to: Arc<str>,
    /// Its Events are written at once, never in the background: a fake cluster's (in
    /// memory, and a test looks at them right after the reconcile).
    pub immediate_events: bool,
    /// The settings it was made from, when it connected itself ([`Session::connect`]):
    /// a handler thread makes its own client from them ([`Session::client_here`]).
    config: Option<Arc<kube::Config>>,
}

impl Session {
    /// The namespace its pending Events are counted against (see the field).
    pub fn events_charged_to(&self) -> &str {
        &self.events_charged_to
    }

    /// The background writer of this identity's Events, started on first use.
    pub fn recorder(&self, runtime: &tokio::runtime::Handle) -> &super::recorder::Recorder {
        // Started by whichever derived session records first; counted against the
        // namespace of the session they all derive from.
        self.recorder
            .get_or_init(|| super::recorder::Recorder::start(self, runtime))
    }

    /// Waits (up to `wait`) for the Events recorded through this identity to be
    /// written, if any were.
    pub async fn flush_events(&self, wait: Duration) {
        if let Some(r) = self.recorder.get() {
            r.flush(wait).await;
        }
    }

    /// The same identity for the recorder's own writer (which must not keep itself
    /// alive through the session it writes with).
    pub(super) fn without_recorder(&self) -> Self {
        Self {
            client: self.client.clone(),
            streaming: self.streaming.clone(),
            discovery: self.discovery.clone(),
            namespace: self.namespace.clone(),
            context: self.context.clone(),
            dry_run: self.dry_run,
            instance: self.instance.clone(),
            recorder: Arc::default(),
            events_charged_to: self.events_charged_to.clone(),
            immediate_events: self.immediate_events,
            config: self.config.clone(),
        }
    }

    /// The client for a request made now: inside a handler thread's own call
    /// ([`super::local`]), that thread's; else the shared one.
    pub fn client_here(&self) -> kube::Client {
        self.config
            .as_ref()
            .and_then(super::local::client)
            .unwrap_or_else(|| self.client.clone())
    }

    /// The settings it connected with, if it connected itself ([`Session::connect`]): a
    /// handler thread can then make its own client from them ([`Session::client_here`]).
    /// None for a session on a given client (a hosted script's impersonating one).
    pub fn own_config(&self) -> Option<&Arc<kube::Config>> {
        self.config.as_ref()
    }

    /// Connects with explicit settings, falling back to `defaults` (the command line).
    ///
    /// # Errors
    /// An unreadable kubeconfig, an unknown context, or a client that cannot be built.
    pub async fn connect(key: &SessionKey, defaults: &KubeOptions) -> Result<Self> {
        let (config, context) = load_config(key, defaults).await?;
        let namespace = key
            .namespace
            .clone()
            .unwrap_or_else(|| config.default_namespace.clone());
        let mut quiet = config.clone();
        quiet.read_timeout = None;
        let streaming = kube::Client::try_from(quiet).map_err(Error::BuildClient)?;
        // `kite run` keeps kube's HTTP/1.1 client: a script's few workers have little to
        // multiplex, and a round of `make bench` with HTTP/2 here cost the API server
        // more CPU per correction (docs/design/transport.md). The operator, with
        // hundreds of requests in flight, uses `super::transport` (`connect_config`).
        let client = kube::Client::try_from(config.clone()).map_err(Error::BuildClient)?;
        // Once per process, in the background: a cluster outside the supported range is
        // said at the start, not guessed from a later 404.
        if !VERSION_CHECKED.swap(true, std::sync::atomic::Ordering::Relaxed) {
            tokio::spawn(super::support::warn_if_unsupported(client.clone()));
        }
        Ok(Self {
            discovery: Discovery::new(client.clone()),
            streaming,
            client,
            events_charged_to: Arc::from(namespace.as_str()),
            namespace,
            context,
            dry_run: defaults.dry_run,
            instance: None,
            recorder: Arc::default(),
            immediate_events: false,
            config: Some(Arc::new(config)),
        })
    }

    /// The same identity in the namespace `key` names (or this one's).
    fn derive(&self, key: &SessionKey) -> Self {
        Self {
            client: self.client.clone(),
            streaming: self.streaming.clone(),
            discovery: self.discovery.clone(),
            namespace: key
                .namespace
                .clone()
                .unwrap_or_else(|| self.namespace.clone()),
            context: self.context.clone(),
            dry_run: self.dry_run,
            instance: self.instance.clone(),
            recorder: self.recorder.clone(),
            events_charged_to: self.events_charged_to.clone(),
            immediate_events: self.immediate_events,
            config: self.config.clone(),
        }
    }

    /// A session for an existing client (the operator's impersonating clients).
    ///
    /// # Caveats
    /// Its exec and port-forward streams go through the same client. On a client from
    /// [`super::transport`] (the operator's) they leave its read timeout behind with the
    /// HTTP/1.1 connection they upgrade; on another client a stream silent for
    /// [`READ_TIMEOUT`] is closed.
    pub fn from_client(client: kube::Client, namespace: String, dry_run: bool) -> Self {
        Self {
            discovery: Discovery::new(client.clone()),
            streaming: client.clone(),
            client,
            events_charged_to: Arc::from(namespace.as_str()),
            namespace,
            context: String::new(),
            dry_run,
            instance: None,
            recorder: Arc::default(),
            immediate_events: false,
            config: None,
        }
    }

    /// The same, writing its Events at once (a fake cluster's).
    #[must_use]
    pub fn with_immediate_events(mut self) -> Self {
        self.immediate_events = true;
        self
    }
}

/// A client and the settings it was built from (the operator derives impersonating
/// clients from them), for the command line's kubeconfig and context.
///
/// # Errors
/// As [`Session::connect`].
pub async fn connect_config(defaults: &KubeOptions) -> Result<(kube::Client, kube::Config)> {
    let (config, _) = load_config(&SessionKey::default(), defaults).await?;
    let client = super::transport::client(&config).map_err(Error::BuildTransport)?;
    Ok((client, config))
}

/// The settings for the command line's kubeconfig and context, with kite's timeouts,
/// for a command that builds its own client (`kite logs`).
///
/// # Errors
/// As [`Session::connect`].
pub async fn kube_config(defaults: &KubeOptions) -> Result<kube::Config> {
    Ok(load_config(&SessionKey::default(), defaults).await?.0)
}

/// The configuration for `key` (falling back to `defaults`), with kite's timeouts, and
/// the name of the context in use.
async fn load_config(key: &SessionKey, defaults: &KubeOptions) -> Result<(kube::Config, String)> {
    let kubeconfig = key.kubeconfig.clone().or_else(|| {
        defaults
            .kubeconfig
            .as_ref()
            .map(|p| p.display().to_string())
    });
    let context = key.context.clone().or_else(|| defaults.context.clone());
    let options = KubeConfigOptions {
        context: context.clone(),
        ..Default::default()
    };
    let mut config = match &kubeconfig {
        Some(path) => {
            let kc = Kubeconfig::read_from(path).map_err(|source| Error::ReadKubeconfig {
                path: path.clone(),
                source,
            })?;
            kube::Config::from_custom_kubeconfig(kc, &options)
                .await
                .map_err(|e| Error::LoadConfig(e.to_string()))?
        }
        None if context.is_some() => kube::Config::from_kubeconfig(&options)
            .await
            .map_err(|e| Error::LoadConfig(e.to_string()))?,
        None => kube::Config::infer()
            .await
            .map_err(|e| Error::LoadConfig(e.to_string()))?,
    };
    // Every API call has a deadline even when the script gives none.
    config.read_timeout = Some(crate::k8s::session::READ_TIMEOUT);
    config.connect_timeout = Some(Duration::from_secs(10));
    let context_name = context.unwrap_or_else(|| current_context(kubeconfig.as_deref()));
    Ok((config, context_name))
}

fn current_context(path: Option<&str>) -> String {
    let kc = match path {
        Some(p) => Kubeconfig::read_from(p).ok(),
        None => Kubeconfig::read().ok(),
    };
    kc.and_then(|k| k.current_context).unwrap_or_default()
}

/// A session's kubeconfig and context: who it is, whatever its namespace.
type Identity = (Option<String>, Option<String>);

/// The sessions of one run, created on first use and keyed by their settings.
#[derive(Default)]
pub struct SessionCell {
    sessions: Mutex<HashMap<SessionKey, Arc<Session>>>,
    /// The one identity a hosted script may use (the operator's impersonating client).
    pinned: Mutex<Option<Arc<Session>>>,
    /// Sessions registered with [`SessionCell::insert`], by kubeconfig and context:
    /// `config(namespace=...)` on their clients derives from them.
    inserted: Mutex<HashMap<Identity, Arc<Session>>>,
}

impl SessionCell {
    /// Makes `session` the default and the only identity: `k8s.config(namespace=...)`
    /// derives from it, and other kubeconfigs or contexts are refused. The operator pins
    /// each hosted script to its ServiceAccount this way.
    ///
    /// A poisoned lock is taken anyway: a pin must never be skipped, or a hosted
    /// script would fall back to the process's own identity.
    pub fn pin(&self, session: Arc<Session>) {
        self.sessions
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(SessionKey::default(), session.clone());
        *self.pinned.lock().unwrap_or_else(PoisonError::into_inner) = Some(session);
    }

    /// Registers a session made elsewhere (`k8s.fake(...)`'s in-memory cluster) under
    /// `key`; keys with the same kubeconfig and context but another namespace derive
    /// from it.
    pub fn insert(&self, key: SessionKey, session: Arc<Session>) {
        if let Ok(mut map) = self.inserted.lock() {
            map.insert(
                (key.kubeconfig.clone(), key.context.clone()),
                session.clone(),
            );
        }
        if let Ok(mut map) = self.sessions.lock() {
            map.insert(key, session);
        }
    }

    /// Whether `key` reaches only a session registered with [`insert`](Self::insert)
    /// (an in-memory cluster), directly or as the pinned default: no cluster is
    /// reachable through it, so it needs no permission.
    pub fn is_offline(&self, key: &SessionKey) -> bool {
        let Ok(inserted) = self.inserted.lock() else {
            return false;
        };
        if inserted.contains_key(&(key.kubeconfig.clone(), key.context.clone())) {
            return true;
        }
        if key.kubeconfig.is_some() || key.context.is_some() {
            return false;
        }
        // Read even if poisoned: a pinned cell must never fall back to connecting with
        // the process's own identity.
        let pinned = self
            .pinned
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        pinned.is_some_and(|p| inserted.values().any(|s| Arc::ptr_eq(s, &p)))
    }

    /// The session for `key`, connecting on first use (blocking on `runtime`).
    ///
    /// # Errors
    /// Connection set-up errors; they are not cached, so a later call retries.
    pub fn get(
        &self,
        key: &SessionKey,
        defaults: &KubeOptions,
        runtime: &tokio::runtime::Handle,
    ) -> Result<Arc<Session>> {
        if let Some(s) = self.sessions.lock().ok().and_then(|m| m.get(key).cloned()) {
            return Ok(s);
        }
        let inserted = self.inserted.lock().ok().and_then(|m| {
            m.get(&(key.kubeconfig.clone(), key.context.clone()))
                .cloned()
        });
        // Read even if poisoned: a pinned cell must never fall back to connecting with
        // the process's own identity.
        let pinned = self
            .pinned
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let (session, derived) = match (inserted, pinned) {
            (Some(base), _) => (Arc::new(base.derive(key)), true),
            (None, Some(_)) if key.kubeconfig.is_some() || key.context.is_some() => {
                return Err(Error::SwitchIdentity);
            }
            (None, Some(p)) => (Arc::new(p.derive(key)), true),
            (None, None) => (
                Arc::new(runtime.block_on(Session::connect(key, defaults))?),
                false,
            ),
        };
        if let Ok(mut map) = self.sessions.lock() {
            // A derived session (another namespace of the same connection) is cheap to
            // make again: past a few, they are not kept, so a script naming a new
            // namespace on every call keeps nothing.
            if derived && map.len() >= MAX_DERIVED {
                return Ok(session);
            }
            return Ok(map.entry(key.clone()).or_insert(session).clone());
        }
        Ok(session)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    /// A cell pinned to a session in `namespace` of a client that reaches nothing.
    fn pinned(namespace: &str) -> SessionCell {
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        let cell = SessionCell::default();
        cell.pin(Arc::new(Session::from_client(
            client,
            namespace.into(),
            false,
        )));
        cell
    }

    /// Issue 26: a script naming a new namespace on every call keeps no session per
    /// name (a hosted one could otherwise grow this map for as long as it runs).
    #[test]
    fn derived_sessions_kept_are_bounded() {
        let rt = runtime();
        let _enter = rt.enter();
        let cell = pinned("home");
        for i in 0..(MAX_DERIVED * 3) {
            let key = SessionKey {
                kubeconfig: None,
                context: None,
                namespace: Some(format!("ns-{i}")),
            };
            cell.get(&key, &KubeOptions::default(), rt.handle())
                .unwrap();
        }
        assert_eq!(cell.sessions.lock().unwrap().len(), MAX_DERIVED);
    }

    /// Issue 26: a session derived for a made-up namespace, which records an identity's
    /// first Event, counts it against the pinned session's namespace.
    #[test]
    fn derived_sessions_charge_their_events_to_the_pinned_namespace() {
        let rt = runtime();
        let _enter = rt.enter();
        let cell = pinned("home");
        let key = SessionKey {
            kubeconfig: None,
            context: None,
            namespace: Some("x-1".into()),
        };
        let derived = cell
            .get(&key, &KubeOptions::default(), rt.handle())
            .unwrap();
        assert_eq!(derived.namespace, "x-1");
        assert_eq!(derived.events_charged_to(), "home");
        assert_eq!(derived.without_recorder().events_charged_to(), "home");
    }
}
