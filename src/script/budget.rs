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
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How often a blocked builtin looks at the stop condition.
const STOP_POLL: Duration = Duration::from_millis(100);

/// What ends a script call early besides its deadline: its controller stopping, or
/// losing the lease it runs under. Checked between Starlark instructions and, while a
/// builtin blocks, every `STOP_POLL`.
#[derive(Clone)]
pub struct Cancel(Arc<dyn Fn() -> bool + Send + Sync>);

impl Cancel {
    /// Cancelled once `f` says so.
    pub fn new(f: impl Fn() -> bool + Send + Sync + 'static) -> Self {
        Cancel(Arc::new(f))
    }

    /// Cancelled once `flag` is set.
    #[cfg(test)]
    pub fn flag(flag: Arc<std::sync::atomic::AtomicBool>) -> Self {
        Cancel::new(move || flag.load(std::sync::atomic::Ordering::Relaxed))
    }

    pub fn is_set(&self) -> bool {
        (self.0)()
    }
}

impl std::fmt::Debug for Cancel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Cancel(set: {})", self.is_set())
    }
}

/// The budget of one script call.
#[derive(Clone, Debug)]
pub struct Budget {
    pub deadline: Instant,
    /// Set when the call's controller stops or loses its lease.
    pub stop: Option<Cancel>,
}

thread_local! {
    static CURRENT: RefCell<Option<Budget>> = const { RefCell::new(None) };
    /// Where this thread publishes the deadline of the call it runs, if anyone looks.
    static WATCHED: RefCell<Option<Watch>> = const { RefCell::new(None) };
}

/// The deadline of the call a thread runs now, readable from other threads: the worker
/// pool tells a thread stuck in a builtin that never looks at its deadline by it.
#[derive(Clone, Default)]
pub struct Watch(Arc<AtomicU64>);

/// The origin of [`Watch`]'s clock.
fn epoch() -> Instant {
    static EPOCH: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

impl Watch {
    /// Publishes this thread's calls' deadlines into `self` from now on.
    pub fn this_thread(&self) {
        WATCHED.with(|w| *w.borrow_mut() = Some(self.clone()));
    }

    /// How long the call running now has been past its deadline (None: it is not, or
    /// no call runs).
    pub fn overdue(&self) -> Option<Duration> {
        let ms = self.0.load(Ordering::Relaxed);
        if ms == 0 {
            return None;
        }
        let deadline = epoch() + Duration::from_millis(ms - 1);
        Instant::now().checked_duration_since(deadline)
    }

    /// Publishes `deadline` as the running call's; returns the raw value before (0: no
    /// call), which the caller restores when its call ends.
    fn publish(&self, deadline: Instant) -> u64 {
        let ms = u64::try_from(deadline.saturating_duration_since(epoch()).as_millis())
            .unwrap_or(u64::MAX - 1)
            + 1;
        self.0.swap(ms, Ordering::Relaxed)
    }
}

/// Why a blocking builtin gave up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Interrupted {
    #[error("the handler ran out of its time budget")]
    OverBudget,
    #[error("the controller is stopping, or lost its leader-election lease")]
    Stopped,
}

/// Runs `f` with `budget` as this thread's current budget (restoring the outer one),
/// and publishes its deadline to this thread's [`Watch`], if it has one.
pub fn scope<T>(budget: Budget, f: impl FnOnce() -> T) -> T {
    struct Restore(Option<Budget>, Option<(Watch, u64)>);
    impl Drop for Restore {
        fn drop(&mut self) {
            let outer = self.0.take();
            CURRENT.with(|c| *c.borrow_mut() = outer);
            if let Some((watch, before)) = self.1.take() {
                watch.0.store(before, Ordering::Relaxed);
            }
        }
    }
    let watch = WATCHED.with(|w| w.borrow().clone());
    let published = watch.map(|w| {
        let before = w.publish(budget.deadline);
        (w, before)
    });
    let _restore = Restore(CURRENT.with(|c| c.borrow_mut().replace(budget)), published);
    f()
}

/// Runs `f` under a budget that ends `limit` from now, or with the outer one if that
/// ends first, stopped when the outer one is: a part of a call with a shorter time of
/// its own (one `concur` batch, one request to a script's HTTP server).
pub fn within<T>(limit: Duration, f: impl FnOnce() -> T) -> T {
    let outer = current();
    let now = Instant::now();
    // A limit past the clock's range is no limit: the outer budget (or a century).
    let mut deadline = now
        .checked_add(limit)
        .or_else(|| now.checked_add(Duration::from_hours(100 * 365 * 24)))
        .unwrap_or(now);
    if let Some(o) = &outer {
        deadline = deadline.min(o.deadline);
    }
    scope(
        Budget {
            deadline,
            stop: outer.and_then(|o| o.stop),
        },
        f,
    )
}

/// The budget of the call running on this thread, if any.
pub fn current() -> Option<Budget> {
    CURRENT.with(|c| c.borrow().clone())
}

/// Whether the call running on this thread has run out of its budget or been stopped:
/// for builtins that loop in Rust, where the evaluator's own check does not run.
///
/// # Errors
/// [`Interrupted`] once the call must end.
pub fn check() -> Result<(), Interrupted> {
    CURRENT.with(|c| match &*c.borrow() {
        Some(b) if b.stop.as_ref().is_some_and(Cancel::is_set) => Err(Interrupted::Stopped),
        Some(b) if Instant::now() >= b.deadline => Err(Interrupted::OverBudget),
        _ => Ok(()),
    })
}

/// Work (a node is 64 units, a byte copied one) a builtin does between two looks at
/// the call's memory and time: 1024 nodes, or 64 KiB copied.
const WALK_CHECK: usize = 64 * 1024;

thread_local! {
    /// Work done on this thread since the last look, whatever the walk: a builtin that
    /// converts many small values (each argument, each document) is counted as one.
    static WALKED: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Counts one more step of work a builtin does in Rust with script data (a node of a
/// value converted to JSON or template data, an argument formatted, a match copied),
/// copying `bytes`; every [`WALK_CHECK`] of work, says why it must stop, if it must:
/// the call's memory or time ran out. The evaluator's own checks do not run inside a
/// builtin, and a value that repeats a shared one many times over can be far larger
/// than its heap (`d = [[["x"] * 800] * 800] * 800`).
pub fn walk_step(bytes: usize) -> Option<String> {
    let walked = WALKED.with(|w| {
        let walked = w.get().saturating_add(64).saturating_add(bytes);
        w.set(if walked >= WALK_CHECK { 0 } else { walked });
        walked
    });
    if walked < WALK_CHECK {
        return None;
    }
    if crate::script::memory::exhausted() {
        return Some("it passed the script's memory limit".into());
    }
    check().err().map(|e| e.to_string())
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
    runtime.block_on(bounded(fut)?)
}

/// `fut` raced against this thread's budget (as it is now), for whichever runtime
/// waits for it; outside a [`scope`], `fut` alone.
///
/// # Errors
/// [`Interrupted::Stopped`] at once when the call is already stopped: nothing starts
/// then (a write must not go out after the lease is lost).
pub fn bounded<F: Future>(
    fut: F,
) -> Result<impl Future<Output = Result<F::Output, Interrupted>>, Interrupted> {
    let budget = current();
    if budget
        .as_ref()
        .and_then(|b| b.stop.as_ref())
        .is_some_and(Cancel::is_set)
    {
        return Err(Interrupted::Stopped);
    }
    Ok(async move {
        let Some(budget) = budget else {
            return Ok(fut.await);
        };
        let deadline = tokio::time::Instant::from_std(budget.deadline);
        let stopped = async {
            match &budget.stop {
                Some(stop) => loop {
                    if stop.is_set() {
                        return;
                    }
                    tokio::time::sleep(STOP_POLL).await;
                },
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            out = fut => Ok(out),
            () = tokio::time::sleep_until(deadline) => Err(Interrupted::OverBudget),
            () = stopped => Err(Interrupted::Stopped),
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

        let stop = Arc::new(std::sync::atomic::AtomicBool::new(true));
        let budget = Budget {
            deadline: Instant::now() + Duration::from_hours(1),
            stop: Some(Cancel::flag(stop)),
        };
        let r = scope(budget, || block_on(rt.handle(), forever()));
        assert_eq!(r, Err(Interrupted::Stopped));
        assert!(current().is_none(), "the scope ends with the call");
        assert_eq!(block_on(rt.handle(), async { 7 }), Ok(7));
    }
}
