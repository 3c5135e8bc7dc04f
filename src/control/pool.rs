//! A bounded pool of worker threads shared by many controllers (the operator's hosted
//! ones): each controller's `workers` is its most jobs at once in the pool, and the
//! pool turns from one controller to the next so a busy one cannot take every thread.
//! Only controllers that may have work are in line for a thread ([`schedule`]), so an
//! operator's thousands of idle ones cost nothing while a few are busy.
//! Per-key ordering stays the queue's own business: a key is never handed out twice.
//!
//! Handlers may block (a script looping until its time budget, a long `wait_for`): when
//! every thread has been busy for a while, the pool grows by one thread at a time, up to
//! a hard cap, so stuck scripts cannot starve the others; the extra threads leave once
//! idle.
//!
//! Some threads are lost to a job that never ends: a hosted script that asked for more
//! memory at once than its budget has its thread parked for good
//! (`script::memory::Overrun::Park`), and one stuck in a single builtin (a regexp, a
//! deep comparison) does not look at its deadline. The pool tells such threads apart
//! ([`parked`]), replaces them, holds the controller, and holds its whole group
//! (namespace) once it has lost [`parked::GROUP_LIMIT`] threads, so that the memory
//! and CPU they keep stay bounded per tenant.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::queue::Waker;

mod parked;
mod schedule;
pub use parked::Held;

/// Work a pool serves: one controller's queue.
pub trait Source: Send + Sync {
    /// A job for one ready key, or `None` when nothing may run now.
    fn take(&self) -> Option<Box<dyn FnOnce() + Send>>;
    /// How long until it has a job: zero when it has one now, `None` when it has
    /// nothing waiting (or may take nothing, as a standby). The pool asks a member out
    /// of line about once a second, and one whose job is not ready yet after its turn.
    fn next_due_in(&self) -> Option<Duration>;
    /// Told once, on a pool thread, when this member gets no more jobs for good (see
    /// [`Held`]); it should say so where its owner looks.
    fn held(&self, _why: Held) {}
}

/// The longest a waiting thread sleeps without news (a missed due time costs at most this).
const IDLE_WAIT: Duration = Duration::from_secs(1);

/// Every thread busy for this long means they are stuck, not just busy: add one.
const STALL: Duration = Duration::from_millis(200);

/// The longest [`Pool::shut_down`] waits for running jobs to end (their owners have
/// had their grace period and cancelled them before).
const SHUT_DOWN_WAIT: Duration = Duration::from_secs(10);

/// An extra thread idle this long leaves.
const EXTRA_IDLE: Duration = Duration::from_secs(5);

/// A place in a shared pool: the pool, and the group (tenant) a member belongs to.
#[derive(Clone)]
pub struct Share {
    pub pool: Pool,
    /// The operator's: the StarlarkController's namespace (a ClusterStarlarkController's
    /// is the operator's namespace). Threads are shared fairly between groups.
    pub group: String,
}

/// A handle on a pool; clones share it. The threads stop when [`shut_down`] is called.
///
/// [`shut_down`]: Pool::shut_down
#[derive(Clone)]
pub struct Pool {
    inner: Arc<Inner>,
}

struct Inner {
    state: Mutex<State>,
    /// A job may have become available.
    wake: Condvar,
    /// A job finished (for [`Pool::wait_idle`]).
    idle: Condvar,
    /// Each thread with its tag (`script::memory::tag_thread`).
    threads: Mutex<Vec<(u64, std::thread::JoinHandle<()>)>>,
    /// The threads kept whatever the load.
    size: usize,
    /// The most threads there may be, extra ones included.
    cap: usize,
    /// How far past its budget a job must run to be stuck ([`parked::MARGIN`]).
    margin: Duration,
    name: String,
}

#[derive(Default)]
struct State {
    members: HashMap<u64, Member>,
    /// Who is in line for a thread, and when delayed work is due.
    schedule: schedule::Schedule,
    /// Threads alive (parked ones included), and each busy one's job (by thread number).
    alive: usize,
    started: std::collections::HashMap<usize, Busy>,
    /// What parked threads did to members and groups.
    parked: parked::Parked,
    next_thread: usize,
    next_id: u64,
    shut_down: bool,
}

/// A running job: when it started, its member, and its thread's tag, kernel id and
/// the deadline of the script call it runs now.
struct Busy {
    since: Instant,
    member: u64,
    thread: Arc<Thread>,
}

/// What the pool knows of one of its threads.
struct Thread {
    tag: u64,
    tid: Option<i32>,
    watch: crate::script::budget::Watch,
}

struct Member {
    source: Arc<dyn Source>,
    /// The tenant it belongs to (the operator: a namespace); None for a pool of one
    /// owner (`kite run`), where groups do not matter.
    group: Option<Arc<str>>,
    limit: usize,
    in_flight: usize,
    /// Removed: takes no new jobs, and goes once its last one ends.
    leaving: bool,
    /// Its jobs whose threads are lost (parked for good, or stuck past its budget).
    lost: usize,
    /// Gets no more jobs for good, and whether it was told (see [`Held`]).
    held: Option<Held>,
    told: bool,
    /// In line for a thread (see [`schedule`]).
    queued: bool,
    /// When its delayed work is due, if it waits for it.
    timer: Option<Instant>,
}

impl Pool {
    /// Starts `size` threads (at least one), named `<name>-<i>`, which may grow to `cap`
    /// while every thread is stuck in a job.
    ///
    /// # Errors
    /// A thread that could not be spawned (those already started are stopped).
    pub fn new(size: usize, cap: usize, name: &str) -> std::io::Result<Self> {
        Self::with_margin(size, cap, name, parked::MARGIN)
    }

    /// [`new`](Pool::new), where a job is stuck `margin` past its budget.
    ///
    /// # Errors
    /// As [`new`](Pool::new).
    fn with_margin(size: usize, cap: usize, name: &str, margin: Duration) -> std::io::Result<Self> {
        let size = size.max(1);
        let pool = Pool {
            inner: Arc::new(Inner {
                state: Mutex::new(State {
                    schedule: schedule::Schedule::new(cap.max(size)),
                    ..State::default()
                }),
                wake: Condvar::new(),
                idle: Condvar::new(),
                threads: Mutex::default(),
                size,
                cap: cap.max(size),
                margin,
                name: name.to_owned(),
            }),
        };
        for _ in 0..size {
            if let Err(e) = spawn(&pool.inner) {
                pool.shut_down();
                return Err(e);
            }
        }
        if pool.inner.cap > size {
            let inner = Arc::downgrade(&pool.inner);
            let watcher = std::thread::Builder::new()
                .name(format!("{name}-watch"))
                .spawn(move || watch_stalls(&inner));
            match watcher {
                Ok(t) => pool.inner.threads().push((0, t)),
                Err(e) => {
                    pool.shut_down();
                    return Err(e);
                }
            }
        }
        Ok(pool)
    }

    /// The number of threads, whatever the number of members.
    pub fn size(&self) -> usize {
        self.inner.size
    }

    /// Serves `source` with at most `limit` of its jobs at once; returns its id.
    #[cfg(test)]
    pub fn join(&self, source: Arc<dyn Source>, limit: usize) -> u64 {
        self.join_group(source, limit, None)
    }

    /// [`join`](Pool::join) for a member of `group` (a tenant): while several groups
    /// have work, each holds at most its share of the pool's threads
    /// ([`group_limit`]), so one tenant's slow handlers cannot keep the others waiting.
    pub fn join_group(&self, source: Arc<dyn Source>, limit: usize, group: Option<&str>) -> u64 {
        let mut state = self.inner.lock();
        let id = state.next_id;
        state.next_id += 1;
        let group: Option<Arc<str>> = group.map(Arc::from);
        let held = group.as_ref().and_then(|g| state.parked.group_held(g));
        state.parked.untold |= held.is_some();
        state.members.insert(
            id,
            Member {
                source,
                group,
                limit: limit.max(1),
                in_flight: 0,
                leaving: false,
                lost: 0,
                held,
                told: false,
                queued: false,
                timer: None,
            },
        );
        state.enqueue(id);
        drop(state);
        self.inner.wake.notify_one();
        id
    }

    /// What member `id`'s queue calls when it may have work: puts the member in line.
    pub fn waker(&self, id: u64) -> Waker {
        let inner = Arc::downgrade(&self.inner);
        Arc::new(move || {
            if let Some(inner) = inner.upgrade() {
                // Under the lock, so a thread between its search and its wait cannot miss it.
                if inner.lock().enqueue(id) {
                    inner.wake.notify_one();
                }
            }
        })
    }

    /// Stops handing `id` new jobs and waits up to `timeout` for its running ones to end;
    /// true when none is left (it is then gone from the pool). Jobs on lost threads
    /// (parked, or stuck past the budget) are not waited for.
    pub fn leave(&self, id: u64, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut state = self.inner.lock();
        loop {
            let Some(member) = state.members.get_mut(&id) else {
                return true;
            };
            member.leaving = true;
            if member.in_flight == member.lost {
                if let Some(m) = state.members.remove(&id) {
                    state.removed(m.group.as_ref(), m.queued);
                }
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            state = self
                .inner
                .idle
                .wait_timeout(state, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
    }

    /// Jobs of `id` running now.
    #[cfg(test)]
    pub fn in_flight(&self, id: u64) -> usize {
        self.inner
            .lock()
            .members
            .get(&id)
            .map_or(0, |m| m.in_flight)
    }

    /// Stops the threads once their current jobs end, and waits for them: not for
    /// parked ones, which never end, and for the others at most [`SHUT_DOWN_WAIT`]
    /// (a job stuck in a builtin that ignores its deadline is left behind). Must not
    /// be called from a pool thread.
    pub fn shut_down(&self) {
        let lost: HashSet<u64> = {
            let mut state = self.inner.lock();
            state.shut_down = true;
            let state = &*state;
            state
                .started
                .iter()
                .filter(|(n, _)| state.parked.is_lost(**n))
                .map(|(_, b)| b.thread.tag)
                .collect()
        };
        self.inner.wake.notify_all();
        let threads = std::mem::take(&mut *self.inner.threads());
        let deadline = Instant::now() + SHUT_DOWN_WAIT;
        for (tag, t) in threads {
            // A thread parked while we waited for another is still seen here: it was
            // recorded before it stopped for good.
            while !t.is_finished() && !lost.contains(&tag) && !crate::script::memory::is_parked(tag)
            {
                if Instant::now() >= deadline {
                    tracing::warn!(pool = %self.inner.name, "a worker thread is still in a job; leaving it behind");
                    break;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
            if t.is_finished() {
                let _ = t.join();
            }
        }
    }

    /// Threads alive now (extra ones included, the stall watcher not).
    #[cfg(test)]
    pub fn alive(&self) -> usize {
        self.inner.lock().alive
    }
}

/// Starts one more pool thread.
fn spawn(inner: &Arc<Inner>) -> std::io::Result<()> {
    let number = {
        let mut state = inner.lock();
        state.alive += 1;
        state.next_thread += 1;
        state.next_thread - 1
    };
    let tag = crate::script::memory::new_tag();
    let me = inner.clone();
    let spawned = std::thread::Builder::new()
        .name(format!("{}-{number}", inner.name))
        .spawn(move || {
            crate::script::memory::tag_thread(tag);
            let thread = Arc::new(Thread {
                tag,
                tid: crate::script::priority::thread_id(),
                watch: crate::script::budget::Watch::default(),
            });
            thread.watch.this_thread();
            // Handlers' API calls run on this thread's own runtime and connection.
            let _own_runtime = crate::k8s::local::allow_here();
            run(&me, number, &thread);
        });
    match spawned {
        Ok(t) => {
            let mut threads = inner.threads();
            // Extra threads come and go: forget the ones that ended.
            threads.retain(|(_, t)| !t.is_finished());
            threads.push((tag, t));
            Ok(())
        }
        Err(e) => {
            inner.lock().alive -= 1;
            Err(e)
        }
    }
}

/// Adds a thread whenever every thread has been in a job for [`STALL`], up to the cap.
fn watch_stalls(inner: &std::sync::Weak<Inner>) {
    loop {
        std::thread::sleep(STALL / 2);
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let (stalled, tell) = {
            let mut state = inner.lock();
            if state.shut_down {
                return;
            }
            let lost_before = state.parked.threads();
            let tell = parked::look(&mut state, Some(inner.margin));
            if state.parked.threads() > lost_before {
                // A member leaving waits for its jobs, but not for lost ones.
                inner.idle.notify_all();
            }
            // Lost threads do not serve: the pool replaces them, up to as many again as
            // its cap (past that, the memory and CPU they keep are the limit).
            let parked = state.parked.threads();
            let serving = state.alive - parked;
            let stalled = state.started.len() >= state.alive
                && serving < inner.cap
                && parked <= inner.cap
                && state.started.values().all(|b| b.since.elapsed() >= STALL);
            (stalled, tell)
        };
        parked::tell(tell);
        if stalled {
            let _ = spawn(&inner);
        }
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn threads(&self) -> MutexGuard<'_, Vec<(u64, std::thread::JoinHandle<()>)>> {
        self.threads.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// The most running jobs one group may hold while `active` groups have work: a share
/// of the pool's `cap` that leaves room for one more group to arrive (`cap / (active +
/// 1)`, at least one). A group alone can so take only part of the pool, and a newcomer
/// finds a thread (the pool grows into the room while the others' jobs are stuck).
pub fn group_limit(cap: usize, active: usize) -> usize {
    cap.div_ceil(active + 1).max(1)
}

fn run(inner: &Inner, number: usize, thread: &Arc<Thread>) {
    let mut state = inner.lock();
    let mut idle_since = Instant::now();
    loop {
        if state.shut_down {
            state.alive -= 1;
            return;
        }
        let tell = parked::look(&mut state, None);
        if !tell.is_empty() {
            drop(state);
            parked::tell(tell);
            state = inner.lock();
            continue;
        }
        if let Some((id, job)) = state.pick(Instant::now()) {
            if state.schedule.has_ready() {
                // More in line: another thread may take it while this one works.
                inner.wake.notify_one();
            }
            let busy = Busy {
                since: Instant::now(),
                member: id,
                thread: thread.clone(),
            };
            state.started.insert(number, busy);
            drop(state);
            // Jobs catch their own panics; this keeps the pool's count right regardless.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
            state = inner.lock();
            state.started.remove(&number);
            let lost = state.parked.found(number);
            if let Some(m) = state.members.get_mut(&id) {
                m.in_flight -= 1;
                m.lost -= usize::from(lost);
                let group = m.group.clone();
                // A lost job's thread was counted off its group when it was lost.
                if !lost {
                    state.ran(group.as_ref(), -1);
                }
                // It may have more, and may take them now that it runs one fewer.
                state.enqueue(id);
            }
            inner.idle.notify_all();
            if lost {
                // A stuck job that ended after all: its thread runs at the lowest
                // priority now, which it cannot undo, so it goes.
                state.alive -= 1;
                return;
            }
            idle_since = Instant::now();
            continue;
        }
        // Threads parked for good by a script's memory overrun (script::memory) never
        // serve again: they do not count toward the threads kept.
        let serving = state.alive.saturating_sub(state.parked.threads());
        if serving > inner.size && idle_since.elapsed() >= EXTRA_IDLE {
            // An extra thread that is no longer needed.
            state.alive -= 1;
            return;
        }
        let wait = state.schedule.wait_for(Instant::now());
        state = inner
            .wake
            .wait_timeout(state, wait)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
    }
}

#[cfg(test)]
mod tests;
