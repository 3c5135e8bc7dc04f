//! `http.server(...)` and `http.serve(...)`: upstream Starkite's HTTP server, with routes
//! (`srv.handle`), middleware (`srv.use`), `start`, `serve`, `shutdown` and `port`; every
//! server needs `--allow-net` and listens on 127.0.0.1 unless given another `host`.
//!
//! # Caveats
//! Handlers run on the script's own thread (Starlark values cannot leave it), one
//! request at a time, while the script waits in `srv.serve()`, `http.serve()`,
//! `srv.shutdown()` or an `http` request (see [`dispatch`]); a request that arrives
//! while the script does anything else waits for it (up to 30 s in the queue). Each
//! handler call has its own time budget (`write_timeout`, 30 s by default) inside the
//! script's. A server stops when the evaluation that started it ends. Garbage a handler
//! makes stays on the script's heap until `serve()` returns (Starlark collects only
//! between top-level statements), so a long-running server is bounded by
//! `--script-memory`.

#![expect(
    unsafe_code,
    reason = "derive(ProvidesStaticType) writes starlark's unsafe impl; no unsafe code of ours"
)]

pub mod dispatch;
mod functions;
pub mod listen;
mod methods;
pub mod request;
pub mod routes;

pub use functions::server_functions;
#[cfg(test)]
mod tests;

use std::cell::RefCell;
use std::fmt;
use std::net::SocketAddr;
use std::time::Duration;

use allocative::Allocative;
use starlark::any::ProvidesStaticType;
use starlark::environment::Methods;
use starlark::values::{
    AllocValue, Freeze, FreezeResult, Freezer, Heap, NoSerialize, StarlarkValue, Trace, Value,
    ValueLike, starlark_value,
};

use self::listen::{Inbox, Limits, Listening};
use self::routes::Pattern;

/// Where a server listens unless told otherwise: this machine only.
pub const DEFAULT_HOST: &str = "127.0.0.1";
/// A request's head and body must arrive within this by default.
pub const DEFAULT_READ: Duration = Duration::from_secs(30);
/// One handler call's time by default.
pub const DEFAULT_HANDLER: Duration = Duration::from_secs(30);
/// How long connections get to finish after a shutdown by default (upstream's).
pub const DEFAULT_SHUTDOWN: Duration = Duration::from_secs(5);
/// Upstream's limits on a request's head and body.
pub const DEFAULT_MAX_HEADER: usize = 1 << 20;
pub const DEFAULT_MAX_BODY: usize = 10 << 20;

/// A server's settings: `http.server(...)`'s, which `start`/`serve` may override.
#[derive(Debug, Clone, Default)]
pub struct Config {
    port: u16,
    host: String,
    tls_cert: String,
    tls_key: String,
    read: Option<Duration>,
    handler: Option<Duration>,
    idle: Option<Duration>,
    shutdown: Option<Duration>,
    max_header_bytes: Option<usize>,
    max_body_bytes: Option<usize>,
}

/// `http.server`'s arguments, as given.
pub struct Args<'a> {
    pub port: i32,
    pub host: &'a str,
    pub tls_cert: &'a str,
    pub tls_key: &'a str,
    pub read_timeout: &'a str,
    pub write_timeout: &'a str,
    pub idle_timeout: &'a str,
    pub shutdown_timeout: &'a str,
    pub max_header_bytes: i32,
    pub max_body_bytes: i32,
}

fn port_of(port: i32) -> Result<u16, String> {
    u16::try_from(port).map_err(|_| format!("port must be 0 to 65535, got {port}"))
}

fn duration(name: &str, text: &str) -> Result<Option<Duration>, String> {
    match text {
        "" => Ok(None),
        t => match crate::duration::parse(t) {
            Ok(d) if d.is_zero() => Err(format!(
                "{name} {t:?} must be more than zero (leave it out for the default)"
            )),
            Ok(d) => Ok(Some(d)),
            Err(e) => Err(format!("{name}: {e}")),
        },
    }
}

fn size(name: &str, n: i32) -> Result<Option<usize>, String> {
    match usize::try_from(n) {
        Ok(0) => Ok(None),
        Ok(n) => Ok(Some(n)),
        Err(_) => Err(format!("{name} must not be negative, got {n}")),
    }
}

impl Config {
    /// Checks `http.server`'s arguments.
    ///
    /// # Errors
    /// The first bad argument, named.
    pub fn from_args(a: &Args) -> Result<Self, String> {
        Ok(Config {
            port: port_of(a.port)?,
            host: a.host.to_owned(),
            tls_cert: a.tls_cert.to_owned(),
            tls_key: a.tls_key.to_owned(),
            read: duration("read_timeout", a.read_timeout)?,
            handler: duration("write_timeout", a.write_timeout)?,
            idle: duration("idle_timeout", a.idle_timeout)?,
            shutdown: duration("shutdown_timeout", a.shutdown_timeout)?,
            max_header_bytes: size("max_header_bytes", a.max_header_bytes)?,
            max_body_bytes: size("max_body_bytes", a.max_body_bytes)?,
        })
    }

    fn handler_budget(&self) -> Duration {
        self.handler.unwrap_or(DEFAULT_HANDLER)
    }

    fn limits(&self) -> Limits {
        // hyper has one timer for a request's head, which also closes an idle
        // keep-alive connection: the shorter of the two settings.
        let read = match (self.read, self.idle) {
            (Some(r), Some(i)) => r.min(i),
            (r, i) => r.or(i).unwrap_or(DEFAULT_READ),
        };
        Limits {
            read,
            reply: listen::QUEUE_WAIT + self.handler_budget(),
            shutdown: self.shutdown.unwrap_or(DEFAULT_SHUTDOWN),
            max_header_bytes: self.max_header_bytes.unwrap_or(DEFAULT_MAX_HEADER),
            max_body_bytes: self.max_body_bytes.unwrap_or(DEFAULT_MAX_BODY),
        }
    }
}

/// What changes while a server lives.
#[derive(Default)]
struct State {
    config: Config,
    patterns: Vec<Pattern>,
    /// Set while it runs; dropping it stops the server.
    running: Option<Listening>,
    /// Where it last listened.
    addr: Option<SocketAddr>,
    /// Completes once the connections of its last run have finished, when a handler
    /// shut it down (and so could not wait for its own response to go out).
    draining: Option<std::pin::Pin<Box<dyn Future<Output = ()> + Send>>>,
}

/// An `http.server`. Its routes' handlers and middleware are values of the script's
/// heap, so it can only serve on that heap's thread.
#[derive(Trace, ProvidesStaticType, NoSerialize, Allocative)]
pub struct Server<'v> {
    #[trace(static)]
    #[allocative(skip)]
    state: RefCell<State>,
    /// One per pattern, in the same order.
    handlers: RefCell<Vec<Value<'v>>>,
    middleware: RefCell<Vec<Value<'v>>>,
}

impl fmt::Debug for Server<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

impl fmt::Display for Server<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self
            .state
            .try_borrow()
            .ok()
            .and_then(|s| s.running.as_ref().map(|l| l.addr))
        {
            Some(addr) => write!(f, "<http.server {addr}>"),
            None => write!(f, "<http.server>"),
        }
    }
}

impl<'v> Server<'v> {
    fn new(config: Config) -> Self {
        Server {
            state: RefCell::new(State {
                config,
                ..State::default()
            }),
            handlers: RefCell::new(Vec::new()),
            middleware: RefCell::new(Vec::new()),
        }
    }

    /// The queue of requests while it runs.
    pub fn inbox(&self) -> Option<std::sync::Arc<Inbox>> {
        let state = self.state.try_borrow().ok()?;
        state
            .running
            .as_ref()
            .filter(|l| !l.inbox.is_closed())
            .map(|l| l.inbox.clone())
    }

    /// The middleware, then the handler of the route at `route`.
    pub fn chain(&self, route: usize) -> Option<Vec<Value<'v>>> {
        let handler = *self.handlers.borrow().get(route)?;
        let mut chain = self.middleware.borrow().clone();
        chain.push(handler);
        Some(chain)
    }

    /// One handler call's time.
    pub fn handler_budget(&self) -> Duration {
        self.state.borrow().config.handler_budget()
    }

    fn is_running(&self) -> bool {
        self.state.borrow().running.is_some()
    }
}

impl<'v> AllocValue<'v> for Server<'v> {
    fn alloc_value(self, heap: Heap<'v>) -> Value<'v> {
        heap.alloc_complex(self)
    }
}

impl Freeze for Server<'_> {
    type Frozen = StoppedServer;

    /// A frozen module cannot run handlers: its server stops (when `self` drops here).
    fn freeze(self, _freezer: &Freezer) -> FreezeResult<StoppedServer> {
        Ok(StoppedServer)
    }
}

#[starlark_value(type = "http.server")]
impl<'v> StarlarkValue<'v> for Server<'v> {
    fn get_methods() -> Option<&'static Methods> {
        Some(SERVER_METHODS.methods())
    }
}

/// A server in a frozen module: stopped for good.
#[derive(Debug, ProvidesStaticType, NoSerialize, Allocative)]
pub struct StoppedServer;

starlark::starlark_simple_value!(StoppedServer);

impl fmt::Display for StoppedServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<http.server (stopped)>")
    }
}

#[expect(
    clippy::elidable_lifetime_names,
    reason = "the starlark_value macro names the lifetime"
)]
#[starlark_value(type = "http.server")]
impl<'v> StarlarkValue<'v> for StoppedServer {
    fn get_methods() -> Option<&'static Methods> {
        Some(SERVER_METHODS.methods())
    }
}

fn server_of<'v>(this: Value<'v>, name: &str) -> anyhow::Result<&'v Server<'v>> {
    this.downcast_ref::<Server<'v>>().ok_or_else(|| {
        anyhow::anyhow!("{name}: this server stopped when the evaluation that started it ended")
    })
}

/// Whether `v` can be called (kite cannot ask a value; these types certainly cannot).
fn callable(v: Value) -> bool {
    !matches!(
        v.get_type(),
        "string"
            | "int"
            | "float"
            | "bool"
            | "NoneType"
            | "list"
            | "dict"
            | "tuple"
            | "bytes"
            | "set"
    )
}

starlark::methods_static!(SERVER_METHODS = methods::server_methods);
