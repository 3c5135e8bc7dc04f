//! A bounded pool of worker threads shared by many controllers (the operator's hosted
//! ones): each controller's `workers` is its most jobs at once in the pool, and the
//! pool turns from one controller to the next so a busy one cannot take every thread.
//! Per-key ordering stays the queue's own business: a key is never handed out twice.
//!
//! Handlers may block (a script looping until its time budget, a long `wait_for`): when
//! every thread has been busy for a while, the pool grows by one thread at a time, up to
//! a hard cap, so stuck scripts cannot starve the others; the extra threads leave once
//! idle.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use super::queue::Waker;

/// Work a pool serves: one controller's queue.
pub trait Source: Send + Sync {
    /// A job for one ready key, or `None` when nothing may run now.
    fn take(&self) -> Option<Box<dyn FnOnce() + Send>>;
    /// How long until a delayed key is due.
    fn next_due_in(&self) -> Option<Duration>;
}

/// The longest a waiting thread sleeps without news (a missed due time costs at most this).
const IDLE_WAIT: Duration = Duration::from_secs(1);

/// Every thread busy for this long means they are stuck, not just busy: add one.
const STALL: Duration = Duration::from_millis(200);

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
    threads: Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// The threads kept whatever the load.
    size: usize,
    /// The most threads there may be, extra ones included.
    cap: usize,
    name: String,
}

#[derive(Default)]
struct State {
    members: Vec<Member>,
    /// Threads alive, and when each busy one started its job (by thread number).
    alive: usize,
    started: std::collections::HashMap<usize, Instant>,
    next_thread: usize,
    /// Where the next search starts: the member after the last one served.
    cursor: usize,
    next_id: u64,
    shut_down: bool,
}

struct Member {
    id: u64,
    source: Arc<dyn Source>,
    /// The tenant it belongs to (the operator: a namespace); None for a pool of one
    /// owner (`kite run`), where groups do not matter.
    group: Option<Arc<str>>,
    limit: usize,
    in_flight: usize,
    /// Removed: takes no new jobs, and goes once its last one ends.
    leaving: bool,
}

impl Pool {
    /// Starts `size` threads (at least one), named `<name>-<i>`, which may grow to `cap`
    /// while every thread is stuck in a job.
    ///
    /// # Errors
    /// A thread that could not be spawned (those already started are stopped).
    pub fn new(size: usize, cap: usize, name: &str) -> std::io::Result<Self> {
        let size = size.max(1);
        let pool = Pool {
            inner: Arc::new(Inner {
                state: Mutex::default(),
                wake: Condvar::new(),
                idle: Condvar::new(),
                threads: Mutex::default(),
                size,
                cap: cap.max(size),
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
                Ok(t) => pool.threads().push(t),
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
        state.members.push(Member {
            id,
            source,
            group: group.map(Arc::from),
            limit: limit.max(1),
            in_flight: 0,
            leaving: false,
        });
        drop(state);
        self.inner.wake.notify_all();
        id
    }

    /// What a member's queue calls when it may have work.
    pub fn waker(&self) -> Waker {
        let inner = Arc::downgrade(&self.inner);
        Arc::new(move || {
            if let Some(inner) = inner.upgrade() {
                // Under the lock, so a thread between its search and its wait cannot miss it.
                let _state = inner.lock();
                inner.wake.notify_one();
            }
        })
    }

    /// Stops handing `id` new jobs and waits up to `timeout` for its running ones to end;
    /// true when none is left (it is then gone from the pool).
    pub fn leave(&self, id: u64, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut state = self.inner.lock();
        loop {
            let Some(pos) = state.members.iter().position(|m| m.id == id) else {
                return true;
            };
            state.members[pos].leaving = true;
            if state.members[pos].in_flight == 0 {
                state.members.remove(pos);
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
            .iter()
            .find(|m| m.id == id)
            .map_or(0, |m| m.in_flight)
    }

    /// Stops the threads once their current jobs end, and waits for them. Must not be
    /// called from a pool thread.
    pub fn shut_down(&self) {
        self.inner.lock().shut_down = true;
        self.inner.wake.notify_all();
        let threads = std::mem::take(&mut *self.threads());
        for t in threads {
            let _ = t.join();
        }
    }

    fn threads(&self) -> MutexGuard<'_, Vec<std::thread::JoinHandle<()>>> {
        self.inner.threads()
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
    let me = inner.clone();
    let spawned = std::thread::Builder::new()
        .name(format!("{}-{number}", inner.name))
        .spawn(move || run(&me, number));
    match spawned {
        Ok(t) => {
            let mut threads = inner.threads();
            // Extra threads come and go: forget the ones that ended.
            threads.retain(|t| !t.is_finished());
            threads.push(t);
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
        let stalled = {
            let state = inner.lock();
            if state.shut_down {
                return;
            }
            state.started.len() >= state.alive
                && state.alive < inner.cap
                && state.started.values().all(|t| t.elapsed() >= STALL)
        };
        if stalled {
            let _ = spawn(&inner);
        }
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn threads(&self) -> MutexGuard<'_, Vec<std::thread::JoinHandle<()>>> {
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

/// Groups at their limit now: their members take no new job.
fn full_groups(state: &State, cap: usize) -> HashSet<Arc<str>> {
    if !state.members.iter().any(|m| m.group.is_some()) {
        return HashSet::new();
    }
    let mut running: HashMap<Arc<str>, usize> = HashMap::new();
    let mut active: HashSet<Arc<str>> = HashSet::new();
    for m in &state.members {
        let Some(g) = &m.group else { continue };
        *running.entry(g.clone()).or_default() += m.in_flight;
        let ready = !m.leaving
            && m.in_flight < m.limit
            && m.source.next_due_in().is_some_and(|d| d.is_zero());
        if m.in_flight > 0 || ready {
            active.insert(g.clone());
        }
    }
    let limit = group_limit(cap, active.len());
    running
        .into_iter()
        .filter(|(_, n)| *n >= limit)
        .map(|(g, _)| g)
        .collect()
}

/// The next job, searching the members round-robin from the cursor.
fn pick(state: &mut State, cap: usize) -> Option<(u64, Box<dyn FnOnce() + Send>)> {
    let full = full_groups(state, cap);
    let n = state.members.len();
    for i in 0..n {
        let at = (state.cursor + i) % n;
        let m = &mut state.members[at];
        if m.leaving || m.in_flight >= m.limit || m.group.as_ref().is_some_and(|g| full.contains(g))
        {
            continue;
        }
        if let Some(job) = m.source.take() {
            m.in_flight += 1;
            let id = m.id;
            state.cursor = at + 1;
            return Some((id, job));
        }
    }
    None
}

/// How long to sleep: until the earliest due key of a member that may take it.
fn wait_for(state: &State, cap: usize) -> Duration {
    let full = full_groups(state, cap);
    state
        .members
        .iter()
        .filter(|m| !m.leaving && m.in_flight < m.limit)
        .filter(|m| !m.group.as_ref().is_some_and(|g| full.contains(g)))
        .filter_map(|m| m.source.next_due_in())
        .min()
        .map_or(IDLE_WAIT, |d| d.clamp(Duration::from_millis(1), IDLE_WAIT))
}

fn run(inner: &Inner, number: usize) {
    let mut state = inner.lock();
    let mut idle_since = Instant::now();
    loop {
        if state.shut_down {
            state.alive -= 1;
            return;
        }
        if let Some((id, job)) = pick(&mut state, inner.cap) {
            state.started.insert(number, Instant::now());
            drop(state);
            // Jobs catch their own panics; this keeps the pool's count right regardless.
            let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
            state = inner.lock();
            state.started.remove(&number);
            if let Some(m) = state.members.iter_mut().find(|m| m.id == id) {
                m.in_flight -= 1;
            }
            inner.idle.notify_all();
            idle_since = Instant::now();
            continue;
        }
        // Threads parked for good by a script's memory overrun (script::memory) never
        // serve again: they do not count toward the threads kept.
        let serving = state.alive.saturating_sub(crate::script::memory::parked());
        if serving > inner.size && idle_since.elapsed() >= EXTRA_IDLE {
            // An extra thread that is no longer needed.
            state.alive -= 1;
            return;
        }
        let wait = wait_for(&state, inner.cap);
        state = inner
            .wake
            .wait_timeout(state, wait)
            .unwrap_or_else(PoisonError::into_inner)
            .0;
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// A source of `jobs` sleeping `each`, counting how many run at once.
    struct Busy {
        left: AtomicUsize,
        running: Arc<AtomicUsize>,
        most: Arc<AtomicUsize>,
        done: Arc<AtomicUsize>,
        each: Duration,
        /// Says when it has a job ready, as a work queue does.
        tells: bool,
    }

    impl Busy {
        fn new(jobs: usize, each: Duration) -> Arc<Self> {
            Arc::new(Busy {
                left: AtomicUsize::new(jobs),
                running: Arc::default(),
                most: Arc::default(),
                done: Arc::default(),
                each,
                tells: false,
            })
        }

        fn telling(jobs: usize, each: Duration) -> Arc<Self> {
            let mut b = Arc::into_inner(Busy::new(jobs, each)).unwrap();
            b.tells = true;
            Arc::new(b)
        }

        /// [`telling`](Busy::telling), counting into `running` and `most` shared with
        /// other sources (one namespace's controllers).
        fn telling_with(
            jobs: usize,
            each: Duration,
            running: &Arc<AtomicUsize>,
            most: &Arc<AtomicUsize>,
        ) -> Arc<Self> {
            let mut b = Arc::into_inner(Busy::telling(jobs, each)).unwrap();
            b.running = running.clone();
            b.most = most.clone();
            Arc::new(b)
        }
    }

    impl Source for Busy {
        fn take(&self) -> Option<Box<dyn FnOnce() + Send>> {
            self.left
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |l| l.checked_sub(1))
                .ok()?;
            let (running, most, done, each) = (
                self.running.clone(),
                self.most.clone(),
                self.done.clone(),
                self.each,
            );
            Some(Box::new(move || {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                std::thread::sleep(each);
                running.fetch_sub(1, Ordering::SeqCst);
                done.fetch_add(1, Ordering::SeqCst);
            }))
        }

        fn next_due_in(&self) -> Option<Duration> {
            (self.tells && self.left.load(Ordering::SeqCst) > 0).then_some(Duration::ZERO)
        }
    }

    fn wait_until(what: &str, f: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !f() {
            assert!(Instant::now() < deadline, "timed out waiting for {what}");
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    #[test]
    fn each_member_stays_within_its_limit_and_all_work_is_done() {
        let pool = Pool::new(4, 4, "t").unwrap();
        let a = Busy::new(20, Duration::from_millis(5));
        let b = Busy::new(20, Duration::from_millis(5));
        pool.join(a.clone(), 1);
        pool.join(b.clone(), 3);
        wait_until("every job", || {
            a.done.load(Ordering::SeqCst) == 20 && b.done.load(Ordering::SeqCst) == 20
        });
        assert_eq!(a.most.load(Ordering::SeqCst), 1);
        assert!(b.most.load(Ordering::SeqCst) <= 3);
        pool.shut_down();
    }

    #[test]
    fn a_busy_member_does_not_starve_the_others() {
        // Two threads; the hog may use both, yet the quiet member's one job runs while
        // the hog still has many left.
        let pool = Pool::new(2, 2, "t").unwrap();
        let hog = Busy::new(200, Duration::from_millis(5));
        pool.join(hog.clone(), 2);
        wait_until("the hog running", || hog.running.load(Ordering::SeqCst) > 0);
        let quiet = Busy::new(1, Duration::ZERO);
        let id = pool.join(quiet.clone(), 1);
        wait_until("the quiet job", || quiet.done.load(Ordering::SeqCst) == 1);
        assert!(
            hog.left.load(Ordering::SeqCst) > 100,
            "the quiet job waited for the hog"
        );
        assert!(pool.leave(id, Duration::from_secs(1)));
        pool.shut_down();
    }

    /// Issue 26: one tenant's slow handlers hold no more than their share of the pool,
    /// and a neighbour's job starts while the tenant still has many waiting.
    #[test]
    fn a_tenant_holds_no_more_than_its_share() {
        let pool = Pool::new(2, 6, "t").unwrap();
        // Several controllers of one namespace, each allowed every thread.
        let (running, most) = (Arc::default(), Arc::default());
        let hogs: Vec<Arc<Busy>> = (0..3)
            .map(|_| Busy::telling_with(40, Duration::from_secs(1), &running, &most))
            .collect();
        for h in &hogs {
            pool.join_group(h.clone(), 6, Some("greedy"));
        }
        // Alone, the namespace grows into half the pool's cap, no further: the pool
        // grows a spare thread (every thread was busy), which the tenant may not take.
        wait_until("the tenant at its share", || {
            running.load(Ordering::SeqCst) == group_limit(6, 1)
        });
        wait_until("a spare thread", || pool.alive() > group_limit(6, 1));
        let neighbour = Busy::telling(1, Duration::ZERO);
        let started = Instant::now();
        pool.join_group(neighbour.clone(), 1, Some("neighbour"));
        wait_until("the neighbour's job", || {
            neighbour.done.load(Ordering::SeqCst) == 1
        });
        let waited = started.elapsed();
        assert!(
            waited < Duration::from_secs(1),
            "the neighbour waited {waited:?}"
        );
        let held = most.load(Ordering::SeqCst);
        assert!(held <= group_limit(6, 1), "the tenant held {held} threads");
        let left: usize = hogs.iter().map(|h| h.left.load(Ordering::SeqCst)).sum();
        assert!(
            left > 60,
            "the neighbour waited for the tenant ({left} left)"
        );
        pool.shut_down();
    }

    #[test]
    fn leaving_waits_for_running_jobs_and_takes_no_new_ones() {
        let pool = Pool::new(2, 2, "t").unwrap();
        let slow = Busy::new(10, Duration::from_millis(100));
        let id = pool.join(slow.clone(), 2);
        wait_until("a job running", || slow.running.load(Ordering::SeqCst) > 0);
        assert!(
            !pool.leave(id, Duration::from_millis(1)),
            "a job is still running"
        );
        assert!(pool.leave(id, Duration::from_secs(5)));
        assert_eq!(pool.in_flight(id), 0);
        let left = slow.left.load(Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(150));
        assert_eq!(
            slow.left.load(Ordering::SeqCst),
            left,
            "no job started after leaving"
        );
        pool.shut_down();
    }

    #[test]
    fn stuck_jobs_grow_the_pool_up_to_its_cap_and_the_extra_threads_leave() {
        let pool = Pool::new(1, 3, "t").unwrap();
        let stuck = Busy::new(5, Duration::from_secs(1));
        pool.join(stuck.clone(), 5);
        let quick = Busy::new(1, Duration::ZERO);
        pool.join(quick.clone(), 1);
        // The one thread is stuck; another comes and serves the quick member.
        wait_until("the quick job", || quick.done.load(Ordering::SeqCst) == 1);
        wait_until("the cap", || pool.alive() == 3);
        std::thread::sleep(STALL * 2);
        assert_eq!(pool.alive(), 3, "never beyond the cap");
        wait_until("the stuck jobs", || stuck.done.load(Ordering::SeqCst) == 5);
        let deadline = Instant::now() + EXTRA_IDLE * 3;
        while pool.alive() > 1 {
            assert!(
                Instant::now() < deadline,
                "extra threads stayed: {}",
                pool.alive()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        pool.shut_down();
    }

    #[test]
    fn a_waker_rouses_an_idle_pool() {
        struct Gate(Mutex<bool>, Arc<AtomicUsize>);
        impl Source for Gate {
            fn take(&self) -> Option<Box<dyn FnOnce() + Send>> {
                let mut open = self.0.lock().unwrap();
                if !*open {
                    return None;
                }
                *open = false;
                let ran = self.1.clone();
                Some(Box::new(move || {
                    ran.fetch_add(1, Ordering::SeqCst);
                }))
            }
            fn next_due_in(&self) -> Option<Duration> {
                None
            }
        }
        let pool = Pool::new(1, 1, "t").unwrap();
        let gate = Arc::new(Gate(Mutex::new(false), Arc::default()));
        pool.join(gate.clone(), 1);
        std::thread::sleep(Duration::from_millis(20));
        *gate.0.lock().unwrap() = true;
        let start = Instant::now();
        (pool.waker())();
        wait_until("the job", || gate.1.load(Ordering::SeqCst) == 1);
        // Well before the idle wait would have found it.
        assert!(start.elapsed() < IDLE_WAIT / 2, "{:?}", start.elapsed());
        pool.shut_down();
    }
}
