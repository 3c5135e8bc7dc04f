//! The time budget of the script call running on this thread, so that builtins that
//! block (`k8s.wait_for`, `k8s.watch`, every cluster call) wake up when the handler runs
//! out of time or its controller is stopped, instead of holding the thread.
//!
//! The evaluator's own cancel hook only runs between Starlark instructions; a builtin
//! waiting on the network would not see it. [`scope`] records the call's deadline and
//! stop flag for the thread, and [`block_on`] races a wait against both.

use std::cell::RefCell;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// How often a blocked builtin looks at the stop flag.
const STOP_POLL: Duration = Duration::from_millis(100);

/// The budget of one script call.
#[derive(Clone, Debug)]
pub struct Budget {
    pub deadline: Instant,
    /// Set when the call's controller stops.
    pub stop: Option<Arc<AtomicBool>>,
}

thread_local! {
    static CURRENT: RefCell<Option<Budget>> = const { RefCell::new(None) };
}

/// Why a blocking builtin gave up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Interrupted {
    #[error("the handler ran out of its time budget")]
    OverBudget,
    #[error("the controller is stopping")]
    Stopped,
}

/// Runs `f` with `budget` as this thread's current budget (restoring the outer one).
pub fn scope<T>(budget: Budget, f: impl FnOnce() -> T) -> T {
    struct Restore(Option<Budget>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let outer = self.0.take();
            CURRENT.with(|c| *c.borrow_mut() = outer);
        }
    }
    let _restore = Restore(CURRENT.with(|c| c.borrow_mut().replace(budget)));
    f()
}

/// The budget of the call running on this thread, if any.
pub fn current() -> Option<Budget> {
    CURRENT.with(|c| c.borrow().clone())
}

/// Waits for `fut` on `runtime`, giving up when this thread's budget runs out or its
/// controller stops. Outside a [`scope`] it simply waits.
///
/// # Errors
/// [`Interrupted`] when the wait was cut short.
pub fn block_on<T>(
    runtime: &tokio::runtime::Handle,
    fut: impl Future<Output = T>,
) -> Result<T, Interrupted> {
    let Some(budget) = current() else {
        return Ok(runtime.block_on(fut));
    };
    runtime.block_on(async move {
        let deadline = tokio::time::Instant::from_std(budget.deadline);
        let stopped = async {
            match &budget.stop {
                Some(stop) => loop {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    tokio::time::sleep(STOP_POLL).await;
                },
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            out = fut => Ok(out),
            _ = tokio::time::sleep_until(deadline) => Err(Interrupted::OverBudget),
            _ = stopped => Err(Interrupted::Stopped),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn runtime() -> tokio::runtime::Runtime {
        // A handle drives timers only on a multi-threaded runtime, as kite runs.
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_time()
            .build()
            .unwrap()
    }

    #[test]
    fn a_wait_ends_at_the_deadline_or_the_stop() {
        let rt = runtime();
        let forever = || std::future::pending::<()>();
        let budget = Budget {
            deadline: Instant::now() + Duration::from_millis(50),
            stop: None,
        };
        let started = Instant::now();
        let r = scope(budget, || block_on(rt.handle(), forever()));
        assert_eq!(r, Err(Interrupted::OverBudget));
        assert!(started.elapsed() < Duration::from_secs(5));

        let stop = Arc::new(AtomicBool::new(true));
        let budget = Budget {
            deadline: Instant::now() + Duration::from_secs(3600),
            stop: Some(stop),
        };
        let r = scope(budget, || block_on(rt.handle(), forever()));
        assert_eq!(r, Err(Interrupted::Stopped));
        assert!(current().is_none(), "the scope ends with the call");
        assert_eq!(block_on(rt.handle(), async { 7 }), Ok(7));
    }
}
