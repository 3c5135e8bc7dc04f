//! The methods of an `http.server`: `handle`, `use`, `start`, `serve`, `shutdown`,
//! `port`, and their `try_` variants.

use std::time::Duration;

use starlark::environment::MethodsBuilder;
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::none::{NoneOr, NoneType};
use starlark::values::{Heap, Value};

use super::routes::{Pattern, Router};
use super::{DEFAULT_HOST, callable, dispatch, listen, port_of, server_of};
use crate::script::budget;
use crate::script::host::Host;
use crate::script::outcome::result;
use crate::script::permissions::Access;

pub(super) fn handle<'v>(this: Value<'v>, pattern: &str, handler: Value<'v>) -> anyhow::Result<()> {
    let name = "http.server.handle";
    let server = server_of(this, name)?;
    if server.is_running() {
        anyhow::bail!("{name}: cannot add handlers while the server is running");
    }
    if !callable(handler) {
        anyhow::bail!(
            "{name}: handler must be callable, got {}",
            handler.get_type()
        );
    }
    let parsed = Pattern::parse(pattern).map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
    let mut state = server.state.borrow_mut();
    if let Some(same) = state.patterns.iter().find(|p| p.same_as(&parsed)) {
        anyhow::bail!(
            "{name}: pattern {pattern:?} conflicts with {:?}, registered already",
            same.text
        );
    }
    state.patterns.push(parsed);
    server.handlers.borrow_mut().push(handler);
    Ok(())
}

fn add_middleware<'v>(this: Value<'v>, middleware: Value<'v>) -> anyhow::Result<()> {
    let name = "http.server.use";
    let server = server_of(this, name)?;
    if server.is_running() {
        anyhow::bail!("{name}: cannot add middleware while the server is running");
    }
    if !callable(middleware) {
        anyhow::bail!(
            "{name}: middleware must be callable, got {}",
            middleware.get_type()
        );
    }
    server.middleware.borrow_mut().push(middleware);
    Ok(())
}

/// What `start` and `serve` may override.
#[derive(Default)]
pub struct Overrides<'a> {
    pub port: Option<i32>,
    pub host: Option<&'a str>,
    pub tls_cert: Option<&'a str>,
    pub tls_key: Option<&'a str>,
}

fn tls_acceptor(
    name: &str,
    host: &Host,
    cert: &str,
    key: &str,
) -> anyhow::Result<Option<tokio_rustls::TlsAcceptor>> {
    match (cert, key) {
        ("", "") => Ok(None),
        ("", _) | (_, "") => anyhow::bail!("{name}: tls_cert and tls_key go together"),
        (cert, key) => {
            host.allow(name, Access::Fs)?;
            let read = |path: &str| {
                std::fs::read_to_string(path)
                    .map_err(|e| anyhow::anyhow!("{name}: reading {path}: {e}"))
            };
            let what = format!("{cert} and {key}");
            let acceptor = crate::tls::acceptor(&read(cert)?, &read(key)?, &what)
                .map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
            Ok(Some(acceptor))
        }
    }
}

fn start<'v>(
    name: &str,
    this: Value<'v>,
    overrides: &Overrides,
    eval: &mut Evaluator<'v, '_, '_>,
) -> anyhow::Result<()> {
    let host = Host::of(eval)?;
    host.allow(name, Access::Net)?;
    let server = server_of(this, name)?;
    if server.is_running() {
        anyhow::bail!("{name}: the server is already running; call shutdown() first");
    }
    if server.handlers.borrow().is_empty() {
        anyhow::bail!("{name}: no handlers registered; call handle() first");
    }
    let (config, router) = {
        let state = server.state.borrow();
        (state.config.clone(), Router(state.patterns.clone()))
    };
    let port = match overrides.port {
        Some(p) => port_of(p).map_err(|e| anyhow::anyhow!("{name}: {e}"))?,
        None => config.port,
    };
    let bind_host = match overrides.host.unwrap_or(&config.host) {
        "" => DEFAULT_HOST.to_owned(),
        h => h.to_owned(),
    };
    let cert = overrides.tls_cert.unwrap_or(&config.tls_cert);
    let key = overrides.tls_key.unwrap_or(&config.tls_key);
    let tls = tls_acceptor(name, host, cert, key)?;
    let shown = format!("{bind_host}:{port}");
    let listener = budget::block_on(&host.runtime, async move {
        tokio::net::TcpListener::bind((bind_host.as_str(), port)).await
    })
    .map_err(|e| anyhow::anyhow!("{name}: {e}"))?
    .map_err(|e| anyhow::anyhow!("{name}: listening on {shown}: {e}"))?;
    let listening = listen::start(&host.runtime, listener, router, config.limits(), tls)
        .map_err(|e| anyhow::anyhow!("{name}: listening on {shown}: {e}"))?;
    {
        let mut state = server.state.borrow_mut();
        state.addr = Some(listening.addr);
        state.running = Some(listening);
    }
    dispatch::register(eval, this)
}

/// Starts the server and runs its handlers until it is shut down (by a handler) or the
/// script's budget ends.
pub(super) fn serve<'v>(
    name: &str,
    this: Value<'v>,
    overrides: &Overrides,
    eval: &mut Evaluator<'v, '_, '_>,
) -> anyhow::Result<()> {
    start(name, this, overrides, eval)?;
    let runtime = Host::of(eval)?.runtime.clone();
    let server = server_of(this, name)?;
    let mut never = std::future::pending::<()>();
    while server.inbox().is_some() {
        if crate::script::memory::exhausted() {
            anyhow::bail!("{name}: the script passed its memory limit");
        }
        dispatch::step(eval, &runtime, &mut never).map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
    }
    // A handler shut the server down: its answer goes out before serve() returns (the
    // script, and the process, may end right after).
    let draining = server.state.borrow_mut().draining.take();
    if let Some(draining) = draining {
        let _ = budget::block_on(&runtime, draining);
    }
    Ok(())
}

/// Answers the requests already received, stops the server, and waits for its socket
/// to close and its connections to finish sending (for `shutdown_timeout` at most).
/// Called from a handler, it waits for the socket only: the handler's own answer is
/// still to be sent (`serve()` waits for the rest).
fn shutdown<'v>(this: Value<'v>, eval: &mut Evaluator<'v, '_, '_>) -> anyhow::Result<()> {
    let name = "http.server.shutdown";
    let server = server_of(this, name)?;
    if !server.is_running() {
        return Ok(());
    }
    let served = dispatch::serve_queued(eval);
    let Some(listening) = server.state.borrow_mut().running.take() else {
        return Ok(());
    };
    listening.stop();
    let (closed, drained) = (listening.closed(), listening.drained());
    drop(listening);
    let runtime = Host::of(eval)?.runtime.clone();
    // Not cut short by the budget: the socket closes at once after the stop.
    runtime.block_on(async move {
        let _ = tokio::time::timeout(Duration::from_secs(5), closed).await;
    });
    if dispatch::in_handler() {
        server.state.borrow_mut().draining = Some(Box::pin(drained));
    } else {
        let _ = budget::block_on(&runtime, drained);
    }
    served.map(drop).map_err(|e| anyhow::anyhow!("{name}: {e}"))
}

fn port(this: Value) -> anyhow::Result<i32> {
    let name = "http.server.port";
    let server = server_of(this, name)?;
    let addr = server.state.borrow().addr;
    addr.map(|a| i32::from(a.port()))
        .ok_or_else(|| anyhow::anyhow!("{name}: the server is not started; no port yet"))
}

pub(super) fn none(out: anyhow::Result<()>) -> anyhow::Result<NoneType> {
    out.map(|()| NoneType)
}

fn tried<'v>(heap: Heap<'v>, out: anyhow::Result<Value<'v>>) -> Value<'v> {
    result(heap, out.map_err(|e| e.to_string()))
}

#[starlark_module]
pub(super) fn server_methods(builder: &mut MethodsBuilder) {
    /// Routes requests matching `pattern` (`"GET /users/{id}"`) to `handler(req)`.
    fn handle<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = pos)] pattern: &str,
        #[starlark(require = pos)] handler: Value<'v>,
    ) -> anyhow::Result<NoneType> {
        none(handle(this, pattern, handler))
    }

    /// `handle` returning a result (`.ok`, `.value`, `.error`) instead of failing.
    fn try_handle<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = pos)] pattern: &str,
        #[starlark(require = pos)] handler: Value<'v>,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        Ok(tried(
            heap,
            handle(this, pattern, handler).map(|()| Value::new_none()),
        ))
    }

    /// Adds `middleware(req, next)`, which answers itself or returns `next(req)`.
    fn r#use<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = pos)] middleware: Value<'v>,
    ) -> anyhow::Result<NoneType> {
        none(add_middleware(this, middleware))
    }

    /// `use` returning a result (`.ok`, `.value`, `.error`) instead of failing.
    fn try_use<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = pos)] middleware: Value<'v>,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        Ok(tried(
            heap,
            add_middleware(this, middleware).map(|()| Value::new_none()),
        ))
    }

    /// Starts listening (port 0: any free port) and returns; handlers run while the
    /// script waits (see the README).
    fn start<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = named, default = NoneOr::None)] port: NoneOr<i32>,
        #[starlark(require = named, default = NoneOr::None)] host: NoneOr<&str>,
        #[starlark(require = named, default = NoneOr::None)] tls_cert: NoneOr<&str>,
        #[starlark(require = named, default = NoneOr::None)] tls_key: NoneOr<&str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        let o = Overrides {
            port: port.into_option(),
            host: host.into_option(),
            tls_cert: tls_cert.into_option(),
            tls_key: tls_key.into_option(),
        };
        none(start("http.server.start", this, &o, eval))
    }

    /// `start` returning a result (`.ok`, `.value`, `.error`) instead of failing.
    fn try_start<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = named, default = NoneOr::None)] port: NoneOr<i32>,
        #[starlark(require = named, default = NoneOr::None)] host: NoneOr<&str>,
        #[starlark(require = named, default = NoneOr::None)] tls_cert: NoneOr<&str>,
        #[starlark(require = named, default = NoneOr::None)] tls_key: NoneOr<&str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let o = Overrides {
            port: port.into_option(),
            host: host.into_option(),
            tls_cert: tls_cert.into_option(),
            tls_key: tls_key.into_option(),
        };
        let out = start("http.server.try_start", this, &o, eval).map(|()| Value::new_none());
        Ok(tried(eval.heap(), out))
    }

    /// Starts listening and runs handlers until a handler shuts the server down.
    fn serve<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = named, default = NoneOr::None)] port: NoneOr<i32>,
        #[starlark(require = named, default = NoneOr::None)] host: NoneOr<&str>,
        #[starlark(require = named, default = NoneOr::None)] tls_cert: NoneOr<&str>,
        #[starlark(require = named, default = NoneOr::None)] tls_key: NoneOr<&str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        let o = Overrides {
            port: port.into_option(),
            host: host.into_option(),
            tls_cert: tls_cert.into_option(),
            tls_key: tls_key.into_option(),
        };
        none(serve("http.server.serve", this, &o, eval))
    }

    /// `serve` returning a result (`.ok`, `.value`, `.error`) instead of failing.
    fn try_serve<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = named, default = NoneOr::None)] port: NoneOr<i32>,
        #[starlark(require = named, default = NoneOr::None)] host: NoneOr<&str>,
        #[starlark(require = named, default = NoneOr::None)] tls_cert: NoneOr<&str>,
        #[starlark(require = named, default = NoneOr::None)] tls_key: NoneOr<&str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let o = Overrides {
            port: port.into_option(),
            host: host.into_option(),
            tls_cert: tls_cert.into_option(),
            tls_key: tls_key.into_option(),
        };
        let out = serve("http.server.try_serve", this, &o, eval).map(|()| Value::new_none());
        Ok(tried(eval.heap(), out))
    }

    /// Answers the requests already received, then stops listening.
    fn shutdown<'v>(
        #[starlark(this)] this: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        none(shutdown(this, eval))
    }

    /// `shutdown` returning a result (`.ok`, `.value`, `.error`) instead of failing.
    fn try_shutdown<'v>(
        #[starlark(this)] this: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let out = shutdown(this, eval).map(|()| Value::new_none());
        Ok(tried(eval.heap(), out))
    }

    /// The port the server listens (or last listened) on.
    fn port(#[starlark(this)] this: Value) -> anyhow::Result<i32> {
        port(this)
    }

    /// `port` returning a result (`.ok`, `.value`, `.error`) instead of failing.
    fn try_port<'v>(
        #[starlark(this)] this: Value<'v>,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        Ok(tried(heap, port(this).map(|p| heap.alloc(p))))
    }
}
