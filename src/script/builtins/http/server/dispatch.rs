//! Where `http.server` handlers run: on the script's own thread, whenever it waits in
//! `srv.serve()`, `http.serve()`, `srv.shutdown()` or an `http` request. Starlark values
//! cannot leave the thread whose heap holds them, so the network side queues each
//! request and the waiting builtin runs its handler, under a time budget of its own
//! inside the caller's, with the caller's memory accounting.
//!
//! The servers an evaluation started are kept in its module's extra value (beside what
//! `k8s.control` keeps there), so that any waiting builtin finds them, and so that they
//! stop when the module is frozen or its heap dropped: a server never outlives the
//! evaluation that started it.

use std::future::Future;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use hyper::StatusCode;
use hyper::header::{CONTENT_TYPE, HeaderValue};
use starlark::eval::Evaluator;
use starlark::values::dict::{AllocDict, DictRef};
use starlark::values::list::{AllocList, ListRef};
use starlark::values::{Value, ValueLike};

use super::Server;
use super::listen::{Answer, Inbox, Pending};
use super::request::{Request, answer_of, call_chain};
use crate::script::budget::{self, Interrupted};

/// The key of the module's extra dict under which its servers are kept.
const REGISTRY: &str = "http.servers";

thread_local! {
    /// How many handler calls this thread is inside.
    static HANDLING: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Whether a handler call runs on this thread now: then its own response is not sent
/// yet, and nothing may wait for the server's connections to finish.
pub fn in_handler() -> bool {
    HANDLING.with(std::cell::Cell::get) > 0
}

/// The servers this evaluation started.
pub fn registered<'v>(eval: &Evaluator<'v, '_, '_>) -> Vec<Value<'v>> {
    eval.module()
        .extra_value()
        .and_then(DictRef::from_value)
        .and_then(|d| d.get_str(REGISTRY))
        .and_then(ListRef::from_value)
        .map(|l| l.content().to_vec())
        .unwrap_or_default()
}

/// Keeps `server` with this evaluation's module.
///
/// # Errors
/// The module's extra value is not the dict builtins share (a bug).
pub fn register<'v>(eval: &Evaluator<'v, '_, '_>, server: Value<'v>) -> anyhow::Result<()> {
    let mut servers = registered(eval);
    if servers.iter().any(|s| s.ptr_eq(server)) {
        return Ok(());
    }
    servers.push(server);
    let module = eval.module();
    let heap = eval.heap();
    let mut entries: Vec<(Value<'v>, Value<'v>)> = match module.extra_value() {
        None => Vec::new(),
        Some(extra) => DictRef::from_value(extra)
            .ok_or_else(|| {
                anyhow::anyhow!("internal error: the module's extra value is not a dict")
            })?
            .iter()
            .collect(),
    };
    entries.retain(|(k, _)| k.unpack_str() != Some(REGISTRY));
    entries.push((heap.alloc(REGISTRY), heap.alloc(AllocList(servers))));
    module.set_extra_value(heap.alloc(AllocDict(entries)));
    Ok(())
}

/// The inboxes of this evaluation's running servers.
fn inboxes(eval: &Evaluator) -> Vec<Arc<Inbox>> {
    registered(eval)
        .iter()
        .filter_map(|s| s.downcast_ref::<Server>())
        .filter_map(Server::inbox)
        .collect()
}

/// Runs the handlers of every request queued for this evaluation's servers; true when
/// there was one.
///
/// # Errors
/// The caller's budget ran out (or its controller is stopping).
pub fn serve_queued(eval: &mut Evaluator) -> Result<bool, Interrupted> {
    let mut any = false;
    loop {
        let mut served = false;
        for server in registered(eval) {
            let Some(s) = server.downcast_ref::<Server>() else {
                continue;
            };
            let Some(inbox) = s.inbox() else {
                continue;
            };
            budget::check()?;
            // Past its memory: the script fails at its next instruction; leave the
            // requests to the stop that follows.
            if crate::script::memory::exhausted() {
                return Ok(any);
            }
            if let Some(pending) = inbox.pop() {
                run(eval, s, pending);
                served = true;
            }
        }
        if !served {
            return Ok(any);
        }
        any = true;
    }
}

/// Serves what is queued and returns; if nothing was, waits until a request arrives,
/// a server stops, or `until` completes (its output). The caller looks again at what
/// it waits for after each step: a handler may have changed it.
///
/// # Errors
/// The caller's budget ran out (or its controller is stopping).
pub fn step<F: Future + Unpin>(
    eval: &mut Evaluator,
    runtime: &tokio::runtime::Handle,
    until: &mut F,
) -> Result<Option<F::Output>, Interrupted> {
    if serve_queued(eval)? {
        return Ok(None);
    }
    let inboxes = inboxes(eval);
    budget::block_on(runtime, async move {
        let woken = async {
            if inboxes.is_empty() {
                std::future::pending::<()>().await;
            } else {
                let notified = inboxes.iter().map(|i| Box::pin(i.notify.notified()));
                futures::future::select_all(notified).await;
            }
        };
        tokio::select! {
            out = until => Some(out),
            () = woken => None,
        }
    })
}

/// Aborts a spawned wait when the caller gives up on it.
struct AbortOnDrop<T>(tokio::task::JoinHandle<T>);

impl<T> Drop for AbortOnDrop<T> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Waits for `fut` on `runtime` as [`budget::block_on`] does, running the handlers of
/// requests to this evaluation's servers meanwhile: a script can call its own server.
///
/// # Errors
/// The caller's budget ran out, or the wait's task failed.
pub fn wait<T: Send + 'static>(
    eval: &mut Evaluator,
    runtime: &tokio::runtime::Handle,
    fut: impl Future<Output = T> + Send + 'static,
) -> anyhow::Result<T> {
    if inboxes(eval).is_empty() {
        return Ok(budget::block_on(runtime, fut)?);
    }
    let mut task = AbortOnDrop(runtime.spawn(fut));
    loop {
        if let Some(out) = step(eval, runtime, &mut task.0)? {
            return out.map_err(|e| anyhow::anyhow!("the wait failed: {e}"));
        }
    }
}

/// Runs `f` counted as a handler call (see [`in_handler`]), uncounted again however it
/// ends.
fn handling<T>(f: impl FnOnce() -> T) -> T {
    struct Leave;
    impl Drop for Leave {
        fn drop(&mut self) {
            HANDLING.with(|h| h.set(h.get().saturating_sub(1)));
        }
    }
    HANDLING.with(|h| h.set(h.get() + 1));
    let _leave = Leave;
    f()
}

/// Runs one request's middleware and handler, and sends the answer.
fn run<'v>(eval: &mut Evaluator<'v, '_, '_>, server: &Server<'v>, pending: Pending) {
    let Pending {
        route,
        params,
        request,
        reply,
    } = pending;
    let Some(chain) = server.chain(route) else {
        let _ = reply.send(error(StatusCode::INTERNAL_SERVER_ERROR, "no such route"));
        return;
    };
    let limit = server.handler_budget();
    let started = Instant::now();
    let req = Request::alloc(eval.heap(), request, params);
    let answered = handling(|| {
        budget::within(limit, || {
            let v = call_chain(eval, &chain, req).map_err(|e| {
                if started.elapsed() >= limit {
                    format!(
                        "the handler ran longer than {} and was cancelled",
                        crate::duration::format(limit)
                    )
                } else {
                    crate::script::builtins::concur::raised(&e)
                }
            })?;
            answer_of(v)
        })
    });
    let answer = match answered {
        Ok(a) => a,
        // The caller itself is out of time or memory: the handler did not fail.
        Err(_) if budget::check().is_err() || crate::script::memory::exhausted() => error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the script ran out of its time or memory budget",
        ),
        Err(e) => error(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("handler error: {e}"),
        ),
    };
    let _ = reply.send(answer);
}

/// A plain-text error answer.
fn error(status: StatusCode, message: &str) -> Answer {
    Answer {
        status,
        headers: vec![(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        )],
        body: Bytes::from(format!("{message}\n")),
    }
}
