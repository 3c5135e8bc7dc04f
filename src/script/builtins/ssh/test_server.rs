//! `ssh.test_server(user=, password=)` and `ssh.test_key()`, which `kite test` adds to
//! the `ssh` module as upstream's test mode does: an in-process SSH server on an
//! ephemeral 127.0.0.1 port, and a key that its logins accept. Everything a run starts
//! (servers, their connections, key files) ends with the run ([`Registry`]'s drop).

#![expect(
    unsafe_code,
    reason = "derive(ProvidesStaticType) writes starlark's unsafe impl; no unsafe code of ours"
)]

use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use allocative::Allocative;
use russh::keys::ssh_key::LineEnding;
use russh::keys::ssh_key::private::Ed25519Keypair;
use russh::keys::{PrivateKey, PublicKey};
use starlark::any::ProvidesStaticType;
use starlark::environment::{GlobalsBuilder, Methods, MethodsBuilder, Module};
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::dict::{AllocDict, DictRef};
use starlark::values::none::NoneType;
use starlark::values::structs::AllocStruct;
use starlark::values::{NoSerialize, StarlarkValue, Value, ValueLike, starlark_value};
use tokio::sync::{mpsc, watch};

use super::server::{self, Call, ScpFile, Shared, lock};
use crate::script::host::Host;
use crate::script::permissions::Access;

/// The test servers and keys of one run, and the queue their commands wait in for
/// the script's handlers. A [`Host`] extension: dropped with the run, which stops
/// every server and removes every key file.
pub struct Registry {
    calls_tx: mpsc::Sender<Call>,
    /// Taken by the `ssh` call that waits (and answers), put back after.
    calls_rx: Mutex<Option<mpsc::Receiver<Call>>>,
    stops: Mutex<Vec<Arc<watch::Sender<bool>>>>,
    keys: Arc<Mutex<Vec<PublicKey>>>,
    key_dirs: Mutex<Vec<PathBuf>>,
    next_id: AtomicU64,
}

impl Default for Registry {
    fn default() -> Self {
        let (calls_tx, calls_rx) = mpsc::channel(64);
        Registry {
            calls_tx,
            calls_rx: Mutex::new(Some(calls_rx)),
            stops: Mutex::default(),
            keys: Arc::default(),
            key_dirs: Mutex::default(),
            next_id: AtomicU64::new(1),
        }
    }
}

impl Drop for Registry {
    fn drop(&mut self) {
        for stop in lock(&self.stops).iter() {
            stop.send_replace(true);
        }
        for dir in lock(&self.key_dirs).iter() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

impl Registry {
    /// The queue of handler calls, for the one waiting call that answers them (None
    /// while another, outer call holds it).
    pub fn take_calls(&self) -> Option<mpsc::Receiver<Call>> {
        lock(&self.calls_rx).take()
    }

    pub fn put_calls(&self, rx: mpsc::Receiver<Call>) {
        *lock(&self.calls_rx) = Some(rx);
    }
}

/// Where `handle_exec` keeps a server's handler: in the module's extra value (a dict,
/// shared with the layers above), so that it lives as long as the script's values.
fn handler_key(server: u64) -> String {
    format!("ssh.test_server#{server}")
}

fn stash_handler<'v>(eval: &Evaluator<'v, '_, '_>, server: u64, f: Value<'v>) {
    let module: &Module<'v> = eval.module();
    let heap = eval.heap();
    let key = handler_key(server);
    let mut all: Vec<(Value<'v>, Value<'v>)> = module
        .extra_value()
        .and_then(DictRef::from_value)
        .map(|d| d.iter().collect())
        .unwrap_or_default();
    all.retain(|(k, _)| k.unpack_str() != Some(key.as_str()));
    all.push((heap.alloc(key), f));
    module.set_extra_value(heap.alloc(AllocDict(all)));
}

/// The handler `handle_exec` registered for `server`, if any.
pub fn handler<'v>(eval: &Evaluator<'v, '_, '_>, server: u64) -> Option<Value<'v>> {
    let key = handler_key(server);
    let extra = eval.module().extra_value()?;
    let dict = DictRef::from_value(extra)?;
    dict.iter()
        .find(|(k, _)| k.unpack_str() == Some(key.as_str()))
        .map(|(_, v)| v)
}

/// Runs the handler for `call` on the script's thread: (stdout, stderr, exit code).
/// A handler that fails or returns something else answers with exit code 1 and says
/// why on stderr, as upstream.
pub fn answer(eval: &mut Evaluator<'_, '_, '_>, call: &Call) -> (String, String, u32) {
    let Some(f) = handler(eval, call.server) else {
        return (String::new(), String::new(), 0);
    };
    let arg = eval.heap().alloc(call.cmd.as_str());
    let out = match eval.eval_function(f, &[arg], &[]) {
        Ok(v) => v,
        Err(e) => return (String::new(), format!("handler error: {}", e.kind()), 1),
    };
    let bad = || {
        (
            String::new(),
            format!(
                "handler must return (stdout, stderr, exit_code), got {}",
                out.to_repr()
            ),
            1,
        )
    };
    let items: Vec<Value> = match out.iterate(eval.heap()) {
        Ok(it) => it.collect(),
        Err(_) => return bad(),
    };
    match items.as_slice() {
        [o, e, c] => match (o.unpack_str(), e.unpack_str(), c.unpack_i32()) {
            (Some(o), Some(e), Some(c)) => (o.to_owned(), e.to_owned(), c.cast_unsigned()),
            _ => bad(),
        },
        _ => bad(),
    }
}

/// What `ssh.test_server(...)` returns.
#[derive(ProvidesStaticType, NoSerialize, Allocative)]
pub struct TestServer {
    #[allocative(skip)]
    shared: Arc<Shared>,
    #[allocative(skip)]
    host_key: PrivateKey,
    /// The port and stop switch while it runs.
    #[allocative(skip)]
    running: Mutex<Option<(u16, Arc<watch::Sender<bool>>)>>,
    /// The port it last listened on, still reported after shutdown.
    #[allocative(skip)]
    port: Mutex<u16>,
    #[allocative(skip)]
    started: AtomicBool,
}

starlark::starlark_simple_value!(TestServer);

impl fmt::Debug for TestServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TestServer({})", self.shared.id)
    }
}

impl fmt::Display for TestServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<ssh.test_server>")
    }
}

fn this(v: Value<'_>) -> anyhow::Result<&TestServer> {
    v.downcast_ref::<TestServer>()
        .ok_or_else(|| anyhow::anyhow!("not an ssh.test_server"))
}

/// An Ed25519 key from the system's random source.
pub(super) fn random_key() -> anyhow::Result<PrivateKey> {
    let mut seed = [0u8; 32];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut seed)
        .map_err(|_| anyhow::anyhow!("the system's random source failed"))?;
    Ok(PrivateKey::from(Ed25519Keypair::from_seed(&seed)))
}

#[starlark_module]
fn server_methods(builder: &mut MethodsBuilder) {
    /// Starts listening on an ephemeral 127.0.0.1 port (needs `--allow-net`).
    fn start<'v>(
        #[starlark(this)] this: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        let s = self::this(this)?;
        let host = Host::of(eval)?;
        host.allow("ssh.test_server.start", Access::Net)?;
        if s.started.swap(true, Ordering::SeqCst) {
            anyhow::bail!("ssh.test_server.start: the server was started already");
        }
        let fail = |e: std::io::Error| anyhow::anyhow!("ssh.test_server.start: {e}");
        let std_listener = std::net::TcpListener::bind(("127.0.0.1", 0)).map_err(fail)?;
        std_listener.set_nonblocking(true).map_err(fail)?;
        let port = std_listener.local_addr().map_err(fail)?.port();
        let listener = {
            let _entered = host.runtime.enter();
            tokio::net::TcpListener::from_std(std_listener).map_err(fail)?
        };
        let (stop, stopped) = watch::channel(false);
        let stop = Arc::new(stop);
        lock(&host.ext::<Registry>().stops).push(stop.clone());
        host.runtime.spawn(server::serve(
            listener,
            s.host_key.clone(),
            s.shared.clone(),
            stopped,
        ));
        *lock(&s.running) = Some((port, stop));
        *lock(&s.port) = port;
        Ok(NoneType)
    }

    /// Stops the server and closes its connections; again, or before start, does nothing.
    fn shutdown(#[starlark(this)] this: Value) -> anyhow::Result<NoneType> {
        if let Some((_, stop)) = lock(&self::this(this)?.running).take() {
            stop.send_replace(true);
        }
        Ok(NoneType)
    }

    /// The port it listens on (0 before `start()`).
    fn port(#[starlark(this)] this: Value) -> anyhow::Result<i32> {
        Ok(i32::from(*lock(&self::this(this)?.port)))
    }

    /// `127.0.0.1:<port>` ("" before `start()`).
    fn addr(#[starlark(this)] this: Value) -> anyhow::Result<String> {
        let port = *lock(&self::this(this)?.port);
        Ok(if port == 0 {
            String::new()
        } else {
            format!("127.0.0.1:{port}")
        })
    }

    /// Adds a file that clients can download from `path`.
    fn add_file(
        #[starlark(this)] this: Value,
        #[starlark(require = pos)] path: &str,
        #[starlark(require = pos)] content: &str,
        #[starlark(default = "0644")] mode: &str,
    ) -> anyhow::Result<NoneType> {
        let s = self::this(this)?;
        if path.is_empty() {
            anyhow::bail!("ssh.test_server.add_file: path is required");
        }
        let mode = super::command::scp_mode(mode).map_err(|e| anyhow::anyhow!("add_file: {e}"))?;
        let name = path.rsplit('/').next().unwrap_or(path).to_owned();
        lock(&s.shared.files).insert(
            path.to_owned(),
            ScpFile {
                name,
                mode,
                content: content.as_bytes().to_vec(),
            },
        );
        Ok(NoneType)
    }

    /// The file uploaded to `path` (`.path`, `.name`, `.mode`, `.content`), or None.
    fn uploaded<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = pos)] path: &str,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let s = self::this(this)?;
        let Some(f) = lock(&s.shared.uploads).get(path).cloned() else {
            return Ok(Value::new_none());
        };
        let heap = eval.heap();
        Ok(heap.alloc(AllocStruct([
            ("path", heap.alloc(path)),
            ("name", heap.alloc(f.name)),
            ("mode", heap.alloc(f.mode)),
            (
                "content",
                heap.alloc(String::from_utf8_lossy(&f.content).into_owned()),
            ),
        ])))
    }

    /// Sets what answers commands: `fn(cmd)` returning `(stdout, stderr, exit_code)`.
    /// It runs while an `ssh` call of this script waits for the server.
    fn handle_exec<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = pos)] handler: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        let s = self::this(this)?;
        stash_handler(eval, s.shared.id, handler);
        s.shared.has_handler.store(true, Ordering::Relaxed);
        Ok(NoneType)
    }
}

starlark::methods_static!(SERVER_METHODS = server_methods);

#[expect(
    clippy::elidable_lifetime_names,
    reason = "the starlark_value macro names the lifetime"
)]
#[starlark_value(type = "ssh.test_server")]
impl<'v> StarlarkValue<'v> for TestServer {
    fn get_methods() -> Option<&'static Methods> {
        Some(SERVER_METHODS.methods())
    }
}

/// Writes a new key pair's private half to a fresh directory (0700, the file 0600).
fn write_key(key: &PrivateKey) -> anyhow::Result<(PathBuf, PathBuf)> {
    use std::io::Write;
    use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
    let mut tag = [0u8; 8];
    ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut tag)
        .map_err(|_| anyhow::anyhow!("the system's random source failed"))?;
    let tag: String = tag.iter().map(|b| format!("{b:02x}")).collect();
    let dir = std::env::temp_dir().join(format!("kite-ssh-testkey-{tag}"));
    std::fs::DirBuilder::new().mode(0o700).create(&dir)?;
    let path = dir.join("id_ed25519");
    let text = key.to_openssh(LineEnding::LF)?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&path)?;
    file.write_all(text.as_bytes())?;
    Ok((dir, path))
}

/// `ssh.test_server` and `ssh.test_key`, for `kite test`'s `ssh` module.
#[starlark_module]
pub fn test_helpers(builder: &mut GlobalsBuilder) {
    /// An in-process SSH server for tests: `user` logs in with `password`, or with a key
    /// from `ssh.test_key()`. Call `start()` (needs `--allow-net`) before connecting.
    fn test_server<'v>(
        #[starlark(require = named, default = "testuser")] user: &str,
        #[starlark(require = named, default = "")] password: &str,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<TestServer> {
        let host = Host::of(eval)?;
        host.allow("ssh.test_server", Access::Net)?;
        let registry = host.ext::<Registry>();
        let shared = Shared {
            id: registry.next_id.fetch_add(1, Ordering::Relaxed),
            user: user.to_owned(),
            password: (!password.is_empty()).then(|| password.to_owned()),
            files: Mutex::default(),
            uploads: Mutex::default(),
            has_handler: AtomicBool::new(false),
            keys: registry.keys.clone(),
            calls: registry.calls_tx.clone(),
        };
        Ok(TestServer {
            shared: Arc::new(shared),
            host_key: random_key()?,
            running: Mutex::new(None),
            port: Mutex::new(0),
            started: AtomicBool::new(false),
        })
    }

    /// A new Ed25519 key pair that this run's test servers accept; `.path` is the
    /// private key's file (needs `--allow-fs`; removed when the run ends), `.public_key`
    /// its public half in authorized_keys form.
    fn test_key<'v>(eval: &mut Evaluator<'v, '_, '_>) -> anyhow::Result<Value<'v>> {
        let host = Host::of(eval)?;
        host.allow("ssh.test_key", Access::Fs)?;
        let key = random_key()?;
        let (dir, path) = write_key(&key).map_err(|e| anyhow::anyhow!("ssh.test_key: {e}"))?;
        let registry = host.ext::<Registry>();
        lock(&registry.key_dirs).push(dir);
        let public = key.public_key().clone();
        let line = public.to_openssh().unwrap_or_default();
        lock(&registry.keys).push(public);
        let heap = eval.heap();
        Ok(heap.alloc(AllocStruct([
            ("path", heap.alloc(path.display().to_string())),
            ("public_key", heap.alloc(line)),
            // Upstream returns a placeholder port too.
            ("port", heap.alloc(0)),
        ])))
    }
}
