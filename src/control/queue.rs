//! A de-duplicating, delaying, rate-limited work queue for reconcile worker threads.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::fmt::Debug;
use std::hash::Hash;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

/// Retry tuning for [`WorkQueue::add_rate_limited`].
#[derive(Debug, Clone)]
pub struct QueueConfig {
    /// Backoff of a key's first retry; it doubles with each further failure.
    pub base_backoff: Duration,
    /// Upper bound of the per-key backoff.
    pub max_backoff: Duration,
    /// Sustained retries per second across all keys; zero, negative or non-finite means no limit.
    pub retry_qps: f64,
    /// Retries allowed at once before `retry_qps` applies.
    pub retry_burst: u32,
    /// What "now" is: the real clock, or one a test moves forward (`k8s.testing`).
    pub clock: Clock,
}

/// The queue's time: real time plus a skew that only [`Clock::advance`] changes, so a
/// test can bring delayed keys due without waiting.
#[derive(Debug, Clone, Default)]
pub struct Clock {
    skew_ms: Arc<std::sync::atomic::AtomicU64>,
}

impl Clock {
    /// Now, as this clock sees it.
    pub fn now(&self) -> Instant {
        let skew = Duration::from_millis(self.skew_ms.load(std::sync::atomic::Ordering::Acquire));
        let now = Instant::now();
        now.checked_add(skew).unwrap_or(now)
    }

    /// Moves this clock (and every queue built with it) forward by `by`.
    pub fn advance(&self, by: Duration) {
        let ms = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        self.skew_ms
            .fetch_add(ms, std::sync::atomic::Ordering::AcqRel);
    }

    /// How far this clock has been moved forward in total.
    #[cfg(test)]
    pub fn skew(&self) -> Duration {
        Duration::from_millis(self.skew_ms.load(std::sync::atomic::Ordering::Acquire))
    }
}

impl Default for QueueConfig {
    fn default() -> Self {
        Self {
            base_backoff: Duration::from_secs(5),
            max_backoff: Duration::from_mins(5),
            retry_qps: 10.0,
            retry_burst: 100,
            clock: Clock::default(),
        }
    }
}

/// A work queue shared by worker threads, in the style of client-go's rate-limiting workqueue.
///
/// A key is held at most once waiting and is never handed to two workers at once; clones share
/// the same queue.
#[derive(Clone)]
pub struct WorkQueue<K> {
    inner: Arc<Inner<K>>,
}

struct Inner<K> {
    config: QueueConfig,
    state: Mutex<State<K>>,
    wake: Condvar,
    /// Told (outside the queue's lock) when a key may have become ready: the worker
    /// pool that serves this queue.
    waker: std::sync::OnceLock<Waker>,
    /// `State::shut_down`, readable without the lock: event routing asks on every
    /// informer change, and must not contend with the workers for it.
    stopped: std::sync::atomic::AtomicBool,
}

/// What a queue calls when it may have work: a pool's wake-up.
pub type Waker = Arc<dyn Fn() + Send + Sync>;

struct State<K> {
    ready: VecDeque<K>,
    queued: HashSet<K>,
    processing: HashSet<K>,
    /// Keys added while processing, re-queued by `done`.
    dirty: HashSet<K>,
    /// Due times; an entry whose seq is gone from `delayed_keys` was superseded and is skipped.
    delayed: BinaryHeap<Reverse<(Instant, u64)>>,
    delayed_keys: HashMap<u64, K>,
    /// Each delayed key's live due time and seq, for "sooner wins".
    due: HashMap<K, (Instant, u64)>,
    next_seq: u64,
    failures: HashMap<K, u32>,
    bucket: Bucket,
    shut_down: bool,
}

/// A token bucket that may go into debt, so each retry reserves its own slot (like Go's
/// `rate.Limiter.Reserve`).
struct Bucket {
    tokens: f64,
    last: Instant,
}

impl Bucket {
    fn reserve(&mut self, qps: f64, burst: u32, now: Instant) -> Duration {
        if !(qps > 0.0 && qps.is_finite()) {
            return Duration::ZERO;
        }
        let elapsed = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = self.last.max(now);
        self.tokens = (self.tokens + elapsed * qps).min(f64::from(burst)) - 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::try_from_secs_f64(-self.tokens / qps).unwrap_or(Duration::MAX)
        }
    }
}

fn backoff(config: &QueueConfig, failures: u32) -> Duration {
    2u32.checked_pow(failures)
        .and_then(|factor| config.base_backoff.checked_mul(factor))
        .map_or(config.max_backoff, |d| d.min(config.max_backoff))
}

impl<K: Clone + Eq + Hash> State<K> {
    /// Returns whether the key became ready (and a worker should be woken).
    fn enqueue(&mut self, key: K) -> bool {
        if self.shut_down {
            return false;
        }
        if self.processing.contains(&key) {
            self.dirty.insert(key);
            return false;
        }
        if !self.queued.insert(key.clone()) {
            return false;
        }
        self.ready.push_back(key);
        true
    }

    /// Returns whether the key is now the earliest delayed one (and waiters must re-time).
    fn schedule(&mut self, key: K, at: Instant) -> bool {
        if self.shut_down {
            return false;
        }
        if let Some(&(current, seq)) = self.due.get(&key) {
            if current <= at {
                return false;
            }
            self.delayed_keys.remove(&seq);
        }
        let head = self.next_due().is_none_or(|next| at < next);
        let seq = self.next_seq;
        self.next_seq += 1;
        self.due.insert(key.clone(), (at, seq));
        self.delayed_keys.insert(seq, key);
        self.delayed.push(Reverse((at, seq)));
        // Superseded entries stay in the heap; prune them so memory stays bounded by keys.
        if self.delayed.len() > 2 * self.delayed_keys.len() + 64 {
            let live = &self.delayed_keys;
            self.delayed
                .retain(|Reverse((_, seq))| live.contains_key(seq));
        }
        head
    }

    /// The earliest live due time, discarding superseded heap heads on the way.
    fn next_due(&mut self) -> Option<Instant> {
        while let Some(&Reverse((at, seq))) = self.delayed.peek() {
            if self.delayed_keys.contains_key(&seq) {
                return Some(at);
            }
            self.delayed.pop();
        }
        None
    }

    fn promote_due(&mut self, now: Instant) {
        while self.next_due().is_some_and(|at| at <= now) {
            if let Some(Reverse((_, seq))) = self.delayed.pop()
                && let Some(key) = self.delayed_keys.remove(&seq)
            {
                self.due.remove(&key);
                self.enqueue(key);
            }
        }
    }

    fn take_ready(&mut self) -> Option<K> {
        let key = self.ready.pop_front()?;
        self.queued.remove(&key);
        self.processing.insert(key.clone());
        Some(key)
    }
}

impl<K> WorkQueue<K>
where
    K: Clone + Eq + Hash + Send + Sync + Debug + 'static,
{
    /// Creates an empty queue.
    pub fn new(config: QueueConfig) -> Self {
        let bucket = Bucket {
            tokens: f64::from(config.retry_burst),
            last: config.clock.now(),
        };
        let state = State {
            ready: VecDeque::new(),
            queued: HashSet::new(),
            processing: HashSet::new(),
            dirty: HashSet::new(),
            delayed: BinaryHeap::new(),
            delayed_keys: HashMap::new(),
            due: HashMap::new(),
            next_seq: 0,
            failures: HashMap::new(),
            bucket,
            shut_down: false,
        };
        Self {
            inner: Arc::new(Inner {
                config,
                state: Mutex::new(state),
                wake: Condvar::new(),
                waker: std::sync::OnceLock::new(),
                stopped: std::sync::atomic::AtomicBool::new(false),
            }),
        }
    }

    /// Recovers from poisoning: every update is a few steps on plain collections, and a panic
    /// (say in a key's `Hash`) must not take every worker down with it.
    fn lock(&self) -> MutexGuard<'_, State<K>> {
        Mutex::lock(&self.inner.state).unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds a key now. De-duplicates: a key already waiting is not added twice; a key being
    /// processed is marked dirty and re-queued when [`done`](Self::done) is called (so the same
    /// key never runs on two workers at once). Ignored after [`shut_down`](Self::shut_down).
    pub fn add(&self, key: K) {
        let ready = self.lock().enqueue(key);
        if ready {
            self.inner.wake.notify_one();
            self.poke();
        }
    }

    /// Has `waker` called whenever a key may have become ready or a due time moved
    /// earlier (a worker pool serving several queues); the first call wins.
    pub fn set_waker(&self, waker: Waker) {
        let _ = self.inner.waker.set(waker);
    }

    fn poke(&self) {
        if let Some(w) = self.inner.waker.get() {
            w();
        }
    }

    /// Adds after a delay (a requeue-after). If the key is already waiting for a sooner time,
    /// the sooner one is kept; a later call with an earlier time wins. When due, the key is added
    /// as by [`add`](Self::add); a zero delay adds it now.
    pub fn add_after(&self, key: K, delay: Duration) {
        let changed = {
            let mut state = self.lock();
            self.add_after_locked(&mut state, key, delay)
        };
        if changed {
            self.poke();
        }
    }

    /// Returns whether a key became ready or the earliest due time moved.
    fn add_after_locked(&self, state: &mut State<K>, key: K, delay: Duration) -> bool {
        if delay.is_zero() {
            if state.enqueue(key) {
                self.inner.wake.notify_one();
                return true;
            }
            return false;
        }
        // A due time beyond what Instant can represent is never reached: drop the key.
        let Some(at) = self.inner.config.clock.now().checked_add(delay) else {
            return false;
        };
        // Every waiter sleeps until the old head or its own deadline, so all must re-time.
        if state.schedule(key, at) {
            self.inner.wake.notify_all();
            return true;
        }
        false
    }

    /// Requeues after a failure: per-key exponential backoff `base_backoff * 2^failures` capped
    /// at `max_backoff`, combined (max) with a global token bucket (`retry_qps`, `retry_burst`)
    /// that applies to retries only. Increments the key's failure count and returns the delay.
    pub fn add_rate_limited(&self, key: K) -> Duration {
        let config = &self.inner.config;
        let mut state = self.lock();
        let failures = state.failures.entry(key.clone()).or_insert(0);
        let per_key = backoff(config, *failures);
        *failures = failures.saturating_add(1);
        let global = state
            .bucket
            .reserve(config.retry_qps, config.retry_burst, config.clock.now());
        let delay = per_key.max(global);
        let changed = self.add_after_locked(&mut state, key, delay);
        drop(state);
        if changed {
            self.poke();
        }
        delay
    }

    /// Number of failures recorded for the key since the last [`forget`](Self::forget).
    pub fn failures(&self, key: &K) -> u32 {
        self.lock().failures.get(key).copied().unwrap_or(0)
    }

    /// Resets the key's backoff (on success).
    pub fn forget(&self, key: &K) {
        self.lock().failures.remove(key);
    }

    /// Blocks until a key is ready and returns it marked as processing; returns `None` once the
    /// queue is shut down, even if keys remain.
    #[cfg(test)]
    pub fn get(&self) -> Option<K> {
        self.get_until(None)
    }

    /// Like [`get`](Self::get), but returns `None` after `timeout` if nothing is ready.
    #[cfg(test)]
    pub fn get_timeout(&self, timeout: Duration) -> Option<K> {
        // An unrepresentable deadline is as good as none.
        self.get_until(self.inner.config.clock.now().checked_add(timeout))
    }

    #[cfg(test)]
    fn get_until(&self, deadline: Option<Instant>) -> Option<K> {
        let mut state = self.lock();
        loop {
            if state.shut_down {
                return None;
            }
            let now = self.inner.config.clock.now();
            state.promote_due(now);
            // Ready keys are checked before the deadline so that a wake-up is never wasted.
            if let Some(key) = state.take_ready() {
                if !state.ready.is_empty() {
                    self.inner.wake.notify_one();
                }
                return Some(key);
            }
            if deadline.is_some_and(|d| now >= d) {
                return None;
            }
            let until = match (state.next_due(), deadline) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let wake = &self.inner.wake;
            state = match until {
                None => wake.wait(state).unwrap_or_else(PoisonError::into_inner),
                Some(t) => {
                    let woken = wake.wait_timeout(state, t.saturating_duration_since(now));
                    woken.unwrap_or_else(PoisonError::into_inner).0
                }
            };
        }
    }

    /// A ready key (a delayed one that is due by the clock counts), marked as
    /// processing, without waiting; `None` when nothing is ready or after shutdown.
    pub fn try_get(&self) -> Option<K> {
        let mut state = self.lock();
        if state.shut_down {
            return None;
        }
        state.promote_due(self.inner.config.clock.now());
        state.take_ready()
    }

    /// Takes `key` now, marked as processing, if it is waiting (ready or delayed); false
    /// when it is not waiting or is being processed.
    pub fn try_take(&self, key: &K) -> bool {
        let mut state = self.lock();
        if state.shut_down || state.processing.contains(key) {
            return false;
        }
        let delayed = match state.due.remove(key) {
            Some((_, seq)) => state.delayed_keys.remove(&seq).is_some(),
            None => false,
        };
        let ready = state.queued.remove(key);
        if ready {
            state.ready.retain(|k| k != key);
        }
        if !delayed && !ready {
            return false;
        }
        state.processing.insert(key.clone());
        true
    }

    /// How long until the earliest delayed key is due, by the clock.
    pub fn next_due_in(&self) -> Option<Duration> {
        let mut state = self.lock();
        // Nothing is handed out after shutdown, so nothing is ever due.
        if state.shut_down {
            return None;
        }
        let now = self.inner.config.clock.now();
        state.next_due().map(|at| at.saturating_duration_since(now))
    }

    /// How long until a key may be taken: zero when one is ready now (a delayed one
    /// that is due counts), `None` when none waits or after shutdown.
    pub fn next_work_in(&self) -> Option<Duration> {
        let mut state = self.lock();
        if state.shut_down {
            return None;
        }
        if !state.ready.is_empty() {
            return Some(Duration::ZERO);
        }
        let now = self.inner.config.clock.now();
        state.next_due().map(|at| at.saturating_duration_since(now))
    }

    /// Marks processing finished; if the key was added while processing, it is queued again now.
    pub fn done(&self, key: &K) {
        let ready = {
            let mut state = self.lock();
            state.processing.remove(key);
            state.dirty.remove(key) && state.enqueue(key.clone())
        };
        if ready {
            self.inner.wake.notify_one();
            self.poke();
        }
    }

    /// Ready keys waiting (the queue depth), not counting delayed ones.
    pub fn len(&self) -> usize {
        self.lock().ready.len()
    }

    /// Whether no key is ready (delayed keys are not counted).
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keys waiting for a delay.
    #[cfg(test)]
    pub fn delayed_len(&self) -> usize {
        self.lock().due.len()
    }

    /// Stops handing out work: blocked and later [`get`](Self::get) calls return `None`, and
    /// further adds are ignored.
    pub fn shut_down(&self) {
        self.lock().shut_down = true;
        self.inner
            .stopped
            .store(true, std::sync::atomic::Ordering::Release);
        self.inner.wake.notify_all();
        self.poke();
    }

    /// Whether [`shut_down`](Self::shut_down) was called.
    pub fn is_shut_down(&self) -> bool {
        self.inner
            .stopped
            .load(std::sync::atomic::Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
    use std::thread;

    const MS: Duration = Duration::from_millis(1);

    fn limited<K>(base: Duration, max: Duration, retry_qps: f64, retry_burst: u32) -> WorkQueue<K>
    where
        K: Clone + Eq + Hash + Send + Sync + Debug + 'static,
    {
        let mut config = QueueConfig {
            retry_qps,
            retry_burst,
            ..QueueConfig::default()
        };
        (config.base_backoff, config.max_backoff) = (base, max);
        WorkQueue::new(config)
    }

    #[test]
    fn a_virtual_clock_brings_delayed_keys_due_without_waiting() {
        let clock = Clock::default();
        let q = WorkQueue::new(QueueConfig {
            clock: clock.clone(),
            ..QueueConfig::default()
        });
        q.add_after("a", Duration::from_secs(30));
        q.add("b");
        assert!(q.try_take(&"a"), "a delayed key can be taken early");
        q.done(&"a");
        q.add_after("a", Duration::from_secs(30));
        assert_eq!(q.try_get(), Some("b"));
        q.done(&"b");
        assert_eq!(q.try_get(), None);
        let due = q.next_due_in().unwrap_or_default();
        assert!(
            due > Duration::from_secs(29) && due <= Duration::from_secs(30),
            "{due:?}"
        );
        clock.advance(Duration::from_secs(31));
        assert_eq!(q.next_due_in(), Some(Duration::ZERO));
        assert_eq!(q.try_get(), Some("a"));
        assert!(
            !q.try_take(&"a"),
            "a key being processed is not taken twice"
        );
        q.done(&"a");
        assert_eq!(clock.skew(), Duration::from_secs(31));
    }

    fn queue<K: Clone + Eq + Hash + Send + Sync + Debug + 'static>() -> WorkQueue<K> {
        limited(10 * MS, 50 * MS, 0.0, 0)
    }

    #[test]
    fn add_deduplicates() {
        let q = queue();
        q.add("a");
        q.add("b");
        q.add("a");
        assert_eq!(q.len(), 2);
        assert_eq!(q.get(), Some("a"));
        assert_eq!(q.get(), Some("b"));
        assert!(q.is_empty());
        assert_eq!(q.get_timeout(10 * MS), None);
    }

    #[test]
    fn a_key_never_runs_on_two_workers() {
        const KEYS: usize = 3;
        let q = queue::<usize>();
        let busy: Arc<Vec<AtomicBool>> =
            Arc::new((0..KEYS).map(|_| AtomicBool::new(false)).collect());
        let runs = Arc::new(AtomicUsize::new(0));
        let workers: Vec<_> = (0..4)
            .map(|w| {
                let (q, busy, runs) = (q.clone(), busy.clone(), runs.clone());
                thread::spawn(move || {
                    for i in 0..500 {
                        q.add((w + i) % KEYS);
                        if let Some(k) = q.get_timeout(5 * MS) {
                            assert!(!busy[k].swap(true, SeqCst), "key {k} ran twice at once");
                            q.add(k); // Marks it dirty while it is processing.
                            thread::yield_now();
                            busy[k].store(false, SeqCst);
                            runs.fetch_add(1, SeqCst);
                            q.done(&k);
                        }
                    }
                })
            })
            .collect();
        for worker in workers {
            worker.join().unwrap();
        }
        assert!(runs.load(SeqCst) > 0);
    }

    #[test]
    fn done_requeues_a_key_added_while_processing() {
        let q = queue();
        q.add("a");
        assert_eq!(q.get(), Some("a"));
        q.add("a");
        assert_eq!(q.len(), 0, "a processing key is not queued twice");
        assert_eq!(q.get_timeout(10 * MS), None);
        q.done(&"a");
        assert_eq!(q.len(), 1);
        assert_eq!(q.get(), Some("a"));
        q.done(&"a");
        assert!(q.is_empty());
    }

    #[test]
    fn add_after_orders_by_due_time_and_sooner_wins() {
        let q = queue();
        let start = Instant::now();
        // Added first but due last; the margin absorbs a slow loop below on a loaded machine.
        q.add_after("late", 200 * MS);
        q.add_after("early", 20 * MS);
        q.add_after("early", 10_000 * MS); // Later: ignored.
        for ms in (30..330).rev() {
            q.add_after("moved", ms * MS); // Earlier: wins.
        }
        assert_eq!((q.len(), q.delayed_len()), (0, 3));
        assert!(
            q.lock().delayed.len() < 200,
            "superseded entries are pruned"
        );
        assert_eq!(q.get_timeout(2000 * MS), Some("early"));
        assert!(start.elapsed() >= 20 * MS);
        assert_eq!(q.get_timeout(2000 * MS), Some("moved"));
        assert_eq!(q.get_timeout(2000 * MS), Some("late"));
        assert!(start.elapsed() < 2000 * MS, "a superseded delay was used");
        assert_eq!(q.delayed_len(), 0);
    }

    #[test]
    fn delayed_key_that_is_processing_becomes_dirty() {
        let q = queue();
        q.add("a");
        assert_eq!(q.get(), Some("a"));
        q.add_after("a", 10 * MS);
        assert_eq!(q.get_timeout(40 * MS), None);
        assert_eq!(q.delayed_len(), 0);
        q.done(&"a");
        assert_eq!(q.get_timeout(10 * MS), Some("a"));
    }

    #[test]
    fn backoff_grows_exponentially_and_forget_resets_it() {
        let q = limited(10 * MS, 1000 * MS, 0.0, 0);
        let delays: Vec<_> = (0..4).map(|_| q.add_rate_limited("a")).collect();
        assert_eq!(delays, [10 * MS, 20 * MS, 40 * MS, 80 * MS]);
        assert_eq!(q.failures(&"a"), 4);
        assert_eq!(q.add_rate_limited("b"), 10 * MS, "backoff is per key");
        q.forget(&"a");
        assert_eq!(q.failures(&"a"), 0);
        assert_eq!(q.add_rate_limited("a"), 10 * MS);
    }

    #[test]
    fn backoff_is_capped() {
        let q = queue();
        let delays: Vec<_> = (0..5).map(|_| q.add_rate_limited("a")).collect();
        assert_eq!(delays, [10 * MS, 20 * MS, 40 * MS, 50 * MS, 50 * MS]);
        for _ in 0..100 {
            assert_eq!(q.add_rate_limited("a"), 50 * MS, "no overflow past 2^32");
        }
    }

    #[test]
    fn token_bucket_limits_a_burst_of_retries() {
        let q = limited(MS, MS, 10.0, 2);
        assert_eq!(q.add_rate_limited(1), MS);
        assert_eq!(q.add_rate_limited(2), MS);
        let third = q.add_rate_limited(3);
        assert!(
            (90 * MS..=100 * MS).contains(&third),
            "third retry waited {third:?}"
        );
        assert_eq!(q.delayed_len(), 3);
    }

    #[test]
    fn shut_down_wakes_a_blocked_get() {
        let q = queue::<u8>();
        let waiter = {
            let q = q.clone();
            thread::spawn(move || q.get())
        };
        thread::sleep(20 * MS);
        q.shut_down();
        assert_eq!(waiter.join().unwrap(), None);
        assert!(q.is_shut_down());
        q.add(1);
        assert_eq!(q.get(), None, "shut down means no new work");
    }

    #[test]
    fn get_timeout_returns_none_when_empty() {
        let q = queue::<u8>();
        let start = Instant::now();
        assert_eq!(q.get_timeout(20 * MS), None);
        assert!(start.elapsed() >= 20 * MS);
    }
}
