//! A handler thread's own connection: the API calls it makes run on the thread itself.
//!
//! A handler runs on a pool thread. Driven by `block_on` into the shared runtime, each
//! of its API calls crossed threads several times: the request went to the client's
//! buffer task and the connection's task on tokio's workers, the answer came back by
//! waking the pool thread, and each hand-off is a futex wake-up and a context switch.
//! Measured on a 1000-deployment backlog (2026-12-07), running calls on the thread
//! halved kite's context switches and took an eighth off its CPU (README, "The hop"). A pool
//! thread that allows it ([`allow_here`]) keeps a current-thread runtime of its own and,
//! per cluster configuration, a client whose buffer and connection live on that
//! runtime, so that [`block_on`] polls the whole request itself.
//!
//! Only [`client`] asked *while* this thread's [`block_on`] runs returns the thread's
//! client: nobody polls the thread's runtime between two calls, so a request on its
//! client must never be driven from elsewhere. Everything that outlives one call
//! (watches, the Event recorder, discovery runs, port-forward servers) keeps the shared
//! client and runtime.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::rc::Rc;
use std::sync::Arc;

use crate::script::budget::{self, Interrupted};

/// Clients a thread keeps (one per kubeconfig and context a script uses; the oldest
/// goes past this).
const MAX_CLIENTS: usize = 4;

/// A thread's runtime and its clients.
struct Local {
    runtime: Rc<tokio::runtime::Runtime>,
    /// None: the client could not be made (a proxy, TLS settings): this thread's calls
    /// with that configuration take the shared path, and nothing is tried again.
    clients: Vec<(Arc<kube::Config>, Option<kube::Client>)>,
}

thread_local! {
    static LOCAL: RefCell<Option<Local>> = const { RefCell::new(None) };
    /// Whether this thread may have a runtime of its own ([`allow_here`]).
    static ALLOWED: Cell<bool> = const { Cell::new(false) };
    /// Whether this thread is inside its own [`block_on`] now.
    static IN_CALL: Cell<bool> = const { Cell::new(false) };
}

/// Lets this thread's calls run on a runtime of its own until the guard drops (a pool
/// thread, for its whole life). The runtime is made on the first call that can use it:
/// a pool serving only hosted scripts (the operator's, whose sessions share one
/// client) makes none.
#[must_use = "the thread's runtime is dropped with the guard"]
pub fn allow_here() -> Allowed {
    ALLOWED.with(|a| a.set(true));
    Allowed(std::marker::PhantomData)
}

/// Keeps [`allow_here`] in force; dropping it drops the thread's runtime and
/// connections, also when the thread unwinds (in the thread's own teardown, after its
/// locals start going, dropping a runtime is not safe).
pub struct Allowed(std::marker::PhantomData<Rc<()>>);

impl Drop for Allowed {
    fn drop(&mut self) {
        ALLOWED.with(|a| a.set(false));
        let local = LOCAL.with(|l| l.borrow_mut().take());
        drop(local);
    }
}

/// This thread's runtime, ready for a call with `config`: None when the call must take
/// the shared path instead (the thread does not allow a runtime of its own, is inside
/// its own call already, or cannot have a client for `config`).
///
/// Only configurations with static credentials (a token, a token file, a client
/// certificate) get a thread's client: an exec plugin or an auth provider would run, and
/// refresh its tokens, once per thread as well as for the shared client, and an identity
/// provider that sees one refresh token used by several clients may revoke it.
pub fn prepare(config: &Arc<kube::Config>) -> Option<Rc<tokio::runtime::Runtime>> {
    if IN_CALL.with(Cell::get) || !ALLOWED.with(Cell::get) {
        return None;
    }
    if config.auth_info.exec.is_some() || config.auth_info.auth_provider.is_some() {
        return None;
    }
    LOCAL.with(|l| {
        let mut l = l.borrow_mut();
        if l.is_none() {
            match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(rt) => {
                    *l = Some(Local {
                        runtime: Rc::new(rt),
                        clients: Vec::new(),
                    });
                }
                Err(e) => {
                    tracing::debug!(error = %e, "no runtime of the thread's own; calls use the shared one");
                    ALLOWED.with(|a| a.set(false));
                    return None;
                }
            }
        }
        let local = l.as_mut()?;
        if let Some((_, made)) = local.clients.iter().find(|(k, _)| Arc::ptr_eq(k, config)) {
            return made.as_ref().map(|_| local.runtime.clone());
        }
        // Made inside the thread's runtime: the client's buffer task lands on it.
        let made = {
            let _inside = local.runtime.enter();
            super::transport::http1(config)
                .map_err(|e| tracing::debug!(error = %e, "no client of the thread's own; its calls use the shared one"))
                .ok()
        };
        if local.clients.len() >= MAX_CLIENTS {
            local.clients.remove(0);
        }
        let ready = made.is_some();
        local.clients.push((config.clone(), made));
        ready.then(|| local.runtime.clone())
    })
}

/// Waits for `fut` on this thread's `runtime` (from [`prepare`]), within the thread's
/// budget, as [`budget::block_on`] does on the shared one.
///
/// # Errors
/// [`Interrupted`] when the wait was cut short.
pub fn block_on<F: Future>(
    runtime: &tokio::runtime::Runtime,
    fut: F,
) -> Result<F::Output, Interrupted> {
    struct Leave;
    impl Drop for Leave {
        fn drop(&mut self) {
            IN_CALL.with(|c| c.set(false));
        }
    }
    let bounded = budget::bounded(fut)?;
    IN_CALL.with(|c| c.set(true));
    let _leave = Leave;
    runtime.block_on(bounded)
}

/// The thread's own client for `config` ([`prepare`]d before the call), when asked
/// inside this thread's [`block_on`]; None elsewhere (use the shared client).
pub fn client(config: &Arc<kube::Config>) -> Option<kube::Client> {
    if !IN_CALL.with(Cell::get) {
        return None;
    }
    LOCAL.with(|l| {
        let l = l.borrow();
        let (_, made) = l
            .as_ref()?
            .clients
            .iter()
            .find(|(k, _)| Arc::ptr_eq(k, config))?;
        made.clone()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> Arc<kube::Config> {
        Arc::new(kube::Config::new("http://127.0.0.1:9".parse().unwrap()))
    }

    #[test]
    fn the_threads_client_is_given_only_inside_its_own_calls() {
        std::thread::spawn(|| {
            let config = config();
            // A thread that did not allow it has no runtime and no client.
            assert!(prepare(&config).is_none());
            assert!(client(&config).is_none());
            let allowed = allow_here();
            let rt = prepare(&config).expect("a runtime of its own");
            assert!(
                client(&config).is_none(),
                "outside a call: the shared client"
            );
            let other = self::config();
            let (inside, unprepared, nested) = block_on(&rt, async {
                (
                    client(&config).is_some(),
                    client(&other).is_some(),
                    prepare(&config).is_some(),
                )
            })
            .unwrap();
            assert!(inside);
            assert!(!unprepared, "only a prepared configuration has a client");
            assert!(!nested, "no call inside a call");
            assert!(
                prepare(&config).is_some(),
                "the call ended: the runtime is free again"
            );
            assert!(client(&config).is_none());
            drop(allowed);
            assert!(prepare(&config).is_none());
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_configuration_it_cannot_serve_takes_the_shared_path() {
        std::thread::spawn(|| {
            let _allowed = allow_here();
            // A proxy: kube's shared client handles it, the thread's would not.
            let mut proxied = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
            proxied.proxy_url = Some("http://127.0.0.1:3128".parse().unwrap());
            assert!(prepare(&Arc::new(proxied)).is_none());
            // An exec plugin would run once per thread besides the shared client's run.
            let mut exec = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
            exec.auth_info.exec = Some(
                serde_json::from_value(serde_json::json!({
                    "apiVersion": "client.authentication.k8s.io/v1",
                    "command": "true",
                }))
                .unwrap(),
            );
            assert!(prepare(&Arc::new(exec)).is_none());
            // Static credentials are served.
            assert!(prepare(&config()).is_some());
        })
        .join()
        .unwrap();
    }

    /// A plain HTTP server that answers each request `{}` and then closes the
    /// connection, telling `closed` once it has.
    fn closing_server(closed: std::sync::mpsc::Sender<()>) -> u16 {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                let mut seen = Vec::new();
                let mut buf = [0u8; 1024];
                while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf) {
                        Ok(0) | Err(_) => break,
                        Ok(n) => seen.extend_from_slice(&buf[..n]),
                    }
                }
                let _ = stream.write_all(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}",
                );
                drop(stream);
                if closed.send(()).is_err() {
                    return;
                }
            }
        });
        port
    }

    #[test]
    fn a_connection_the_server_closed_between_calls_is_not_a_failed_call() {
        // Nobody polls the thread's runtime between two calls, so its pooled
        // connection learns of the server's close only when the next call uses it.
        let (tx, closed) = std::sync::mpsc::channel();
        let port = closing_server(tx);
        std::thread::spawn(move || {
            let config = Arc::new(kube::Config::new(
                format!("http://127.0.0.1:{port}").parse().unwrap(),
            ));
            let _allowed = allow_here();
            let rt = prepare(&config).unwrap();
            let get = || {
                block_on(&rt, async {
                    let c = client(&config).expect("the thread's own client");
                    c.request_text(
                        hyper::http::Request::get("/version")
                            .body(Vec::new())
                            .unwrap(),
                    )
                    .await
                })
                .unwrap()
            };
            assert_eq!(get().unwrap(), "{}");
            closed
                .recv_timeout(std::time::Duration::from_secs(10))
                .unwrap();
            assert_eq!(get().expect("the call after the close"), "{}");
        })
        .join()
        .unwrap();
    }

    #[test]
    fn a_call_inside_the_threads_runtime_ends_at_the_budget() {
        std::thread::spawn(|| {
            let _allowed = allow_here();
            let rt = prepare(&config()).unwrap();
            let b = budget::Budget {
                deadline: std::time::Instant::now() + std::time::Duration::from_millis(50),
                stop: None,
            };
            let r = budget::scope(b, || block_on(&rt, std::future::pending::<()>()));
            assert_eq!(r, Err(Interrupted::OverBudget));
        })
        .join()
        .unwrap();
    }
}
