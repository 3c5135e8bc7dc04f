//! Keeping a lease on its own thread, runtime and connection: a process busy with
//! thousands of tasks still gets its renewal sent on time.
//!
//! A lease renewal is a small request with a hard deadline. Spawned on the process's
//! runtime it waits behind every task ready before it, and its request waits behind
//! every other in the shared client; a missed deadline hands every controller over. On
//! a thread of its own the renewal is scheduled by the kernel beside the busy workers,
//! not after them. It cannot make a busy API server answer sooner: with three replicas
//! starting 5000 controllers on two cores, renewals still missed their deadline until
//! the replicas stopped releasing and re-claiming everything on each lapse (see
//! `operator::shard`).

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::oneshot;

/// What completes once an isolated task has returned.
pub type Done = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// Runs `task` on a new thread named `name`, with its own single-threaded runtime and
/// its own client built from `config` (so its own connections); returns what completes
/// when `task` has returned.
///
/// # Caveats
/// Never fails: without a thread or a runtime the task runs on the caller's runtime,
/// and without a client of its own it gets `shared`, each with a warning. It is then as
/// correct as before, only not isolated.
pub fn isolated<F, Fut>(name: &str, (shared, config): (kube::Client, kube::Config), task: F) -> Done
where
    F: FnOnce(kube::Client) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    // The thread takes the task from here; if it never starts, the caller does.
    let slot = Arc::new(Mutex::new(Some(task)));
    let take = |slot: &Mutex<Option<F>>| slot.lock().unwrap_or_else(PoisonError::into_inner).take();
    let (done_tx, done) = oneshot::channel::<()>();
    let started = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())
        .and_then(|runtime| {
            let (slot, shared, owned) = (Arc::clone(&slot), shared.clone(), name.to_owned());
            std::thread::Builder::new()
                .name(name.to_owned())
                .spawn(move || {
                    let Some(task) = take(&slot) else { return };
                    runtime.block_on(async move {
                        // Built inside the runtime: a client's request buffer runs on
                        // the runtime it is built in.
                        let client = kube::Client::try_from(config).unwrap_or_else(|e| {
                            tracing::warn!(thread = %owned, error = %e, "no connection of its own; sharing the process's");
                            shared
                        });
                        task(client).await;
                    });
                    let _ = done_tx.send(());
                })
                .map_err(|e| e.to_string())
        });
    match started {
        Ok(_) => Box::pin(async move {
            let _ = done.await;
        }),
        Err(e) => {
            tracing::warn!(thread = %name, error = %e, "no thread of its own; running on the process's runtime");
            let handle = take(&slot).map(|task| tokio::spawn(task(shared)));
            Box::pin(async move {
                if let Some(h) = handle {
                    let _ = h.await;
                }
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn the_task_runs_while_the_callers_runtime_is_blocked() {
        let config = kube::Config::new("https://127.0.0.1:9".parse().unwrap());
        let (tx, rx) = std::sync::mpsc::channel();
        let shared = kube::Client::try_from(config.clone()).unwrap();
        let done = isolated(
            "kite-test-iso",
            (shared, config),
            move |_client| async move {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                let _ = tx.send(std::thread::current().name().map(str::to_owned));
            },
        );
        // The caller's only thread is blocked here, yet the task goes on.
        let name = rx
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("the task ran on its own thread");
        assert_eq!(name.as_deref(), Some("kite-test-iso"));
        tokio::time::timeout(std::time::Duration::from_secs(10), done)
            .await
            .expect("done completes once the task returns");
    }
}
