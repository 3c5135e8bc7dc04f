//! A few turns at a time per namespace for the operator's CPU-heavy work on a script
//! (one set of turns for analyses at admission and reconcile, another for the top
//! levels that run before a controller starts), which runs on blocking threads outside
//! the shared worker pool: one author sending many slow scripts waits for their own
//! turns, and other namespaces' go on.
//!
//! A reconcile never waits for a turn: it takes one that is free
//! ([`Turns::take_or_queue`]) or ends, queued to be looked at again when one is given
//! back ([`Turns::woken`]). A reconcile that waited would hold one of the operator's
//! bounded reconcile slots for as long as the namespace's turns are held, and a tenant
//! whose top levels never end (parked over their memory) holds them for good.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, broadcast};

use super::registry::Key;

/// Keys queued per namespace, at most; past it, a reconcile relies on its own
/// requeue ([`BUSY_AGAIN`]) alone.
const MAX_QUEUED: usize = 4096;

/// Wakes not yet taken by the controllers, at most (a lagging receiver loses the
/// oldest; the requeue covers them).
const WAKES: usize = 1024;

/// How soon a reconcile that found no free turn is looked at again if no wake comes
/// first: a safety net for a wake that went to a resource that no longer needed it.
pub const BUSY_AGAIN: Duration = Duration::from_secs(10);

/// [`BUSY_AGAIN`] plus up to as much again, so that the resources a busy namespace
/// turned away do not all come back at once.
pub fn busy_again() -> Duration {
    crate::duration::jittered(BUSY_AGAIN, 1.0)
}

/// The turns, by namespace.
pub struct Turns {
    shared: Arc<Shared>,
}

struct Shared {
    by_namespace: Mutex<Namespaces>,
    /// Turns one namespace may hold at once.
    each: usize,
    woken: broadcast::Sender<Key>,
}

#[derive(Default)]
struct Namespaces {
    semaphores: HashMap<String, Arc<Semaphore>>,
    /// Who found no free turn, in order, to be woken one per turn given back.
    queued: HashMap<String, VecDeque<Key>>,
}

/// A namespace's turn: given back, and the next queued resource woken, when dropped.
#[must_use = "the turn lasts as long as this value"]
pub struct Turn {
    permit: Option<OwnedSemaphorePermit>,
    namespace: String,
    shared: Arc<Shared>,
}

impl Drop for Turn {
    fn drop(&mut self) {
        // Given back before the queue is looked at, under the lock a queuer tries and
        // queues under: either the queuer's try sees this turn free, or this drop sees
        // the queuer. No wake is lost between the two.
        drop(self.permit.take());
        let next = {
            let mut ns = self.shared.lock();
            let (next, empty) = match ns.queued.get_mut(&self.namespace) {
                Some(queue) => (queue.pop_front(), queue.is_empty()),
                None => (None, false),
            };
            if empty {
                ns.queued.remove(&self.namespace);
            }
            next
        };
        if let Some(key) = next {
            // No receiver (the controllers are gone): nothing to wake.
            let _ = self.shared.woken.send(key);
        }
    }
}

impl Turns {
    /// `each` turns at once per namespace (at least one).
    pub fn new(each: usize) -> Self {
        Turns {
            shared: Arc::new(Shared {
                by_namespace: Mutex::default(),
                each: each.max(1),
                woken: broadcast::channel(WAKES).0,
            }),
        }
    }

    /// Waits for `namespace`'s turn. Only for work that holds nothing else while it
    /// waits; a reconcile uses [`Turns::take_or_queue`].
    pub async fn turn(&self, namespace: &str) -> Turn {
        let semaphore = self.shared.lock().semaphore(namespace, self.shared.each);
        // The semaphore is never closed.
        let permit = semaphore
            .acquire_owned()
            .await
            .unwrap_or_else(|_| unreachable!("a turn's semaphore is never closed"));
        self.turn_of(namespace, permit)
    }

    /// `namespace`'s turn if one is free now, without waiting.
    pub fn try_turn(&self, namespace: &str) -> Option<Turn> {
        let semaphore = self.shared.lock().semaphore(namespace, self.shared.each);
        let permit = semaphore.try_acquire_owned().ok()?;
        Some(self.turn_of(namespace, permit))
    }

    /// `namespace`'s turn if one is free now; otherwise `key` is queued, once, and
    /// sent on [`Turns::woken`] when a turn of the namespace is given back.
    ///
    /// # Caveats
    /// A wake goes to one queued key per turn given back. A key whose reconcile then
    /// does not take the turn (its resource was deleted) passes the wake on to no one:
    /// the caller also requeues itself after [`BUSY_AGAIN`].
    pub fn take_or_queue(&self, namespace: &str, key: &Key) -> Option<Turn> {
        let permit = {
            let mut ns = self.shared.lock();
            let semaphore = ns.semaphore(namespace, self.shared.each);
            let Ok(permit) = semaphore.try_acquire_owned() else {
                ns.queue(namespace, key);
                return None;
            };
            // Had without a wake (its own requeue came first): a later wake must go to
            // someone still waiting.
            if let Some(queue) = ns.queued.get_mut(namespace) {
                queue.retain(|k| k != key);
            }
            permit
        };
        Some(self.turn_of(namespace, permit))
    }

    /// True, with `key` queued as by [`Turns::take_or_queue`], if no turn of
    /// `namespace` is free now; nothing is taken either way.
    pub fn queue_if_busy(&self, namespace: &str, key: &Key) -> bool {
        let mut ns = self.shared.lock();
        let semaphore = ns.semaphore(namespace, self.shared.each);
        if semaphore.available_permits() > 0 {
            return false;
        }
        ns.queue(namespace, key);
        true
    }

    /// The keys woken by a turn given back, as they come.
    pub fn woken(&self) -> broadcast::Receiver<Key> {
        self.shared.woken.subscribe()
    }

    fn turn_of(&self, namespace: &str, permit: OwnedSemaphorePermit) -> Turn {
        Turn {
            permit: Some(permit),
            namespace: namespace.to_owned(),
            shared: self.shared.clone(),
        }
    }
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Namespaces> {
        self.by_namespace
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl Namespaces {
    /// Queues `key` to be woken by `namespace`'s next turn given back, once.
    fn queue(&mut self, namespace: &str, key: &Key) {
        let queue = self.queued.entry(namespace.to_owned()).or_default();
        if queue.len() < MAX_QUEUED && !queue.contains(key) {
            queue.push_back(key.clone());
        }
    }

    fn semaphore(&mut self, namespace: &str, each: usize) -> Arc<Semaphore> {
        // Namespaces nobody holds a turn in are forgotten, so the map stays as small as
        // the set of namespaces with work.
        self.semaphores.retain(|_, s| Arc::strong_count(s) > 1);
        self.semaphores
            .entry(namespace.to_owned())
            .or_insert_with(|| Arc::new(Semaphore::new(each)))
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{BUSY_AGAIN, Turns, busy_again};

    #[test]
    fn the_busy_requeue_is_spread_over_one_to_two_periods() {
        for _ in 0..100 {
            let d = busy_again();
            assert!(d >= BUSY_AGAIN && d <= BUSY_AGAIN * 2, "{d:?}");
        }
    }

    fn key(name: &str) -> (String, String) {
        ("busy".to_owned(), name.to_owned())
    }

    #[tokio::test]
    async fn a_namespace_waits_for_its_own_turn_and_not_for_others() {
        let turns = Turns::new(1);
        let held = turns.turn("greedy").await;
        let other = tokio::time::timeout(Duration::from_secs(1), turns.turn("neighbour")).await;
        assert!(other.is_ok(), "another namespace does not wait");
        let same = tokio::time::timeout(Duration::from_millis(100), turns.turn("greedy")).await;
        assert!(same.is_err(), "the same namespace waits");
        drop(held);
        let again = tokio::time::timeout(Duration::from_secs(1), turns.turn("greedy")).await;
        assert!(again.is_ok(), "its turn comes once the first ends");
    }

    #[tokio::test]
    async fn a_turn_tried_without_waiting_is_had_only_while_one_is_free() {
        let turns = Turns::new(2);
        let first = turns.try_turn("busy");
        let second = turns.try_turn("busy");
        assert!(first.is_some() && second.is_some());
        assert!(turns.try_turn("busy").is_none(), "both turns are held");
        assert!(
            turns.try_turn("other").is_some(),
            "another namespace has its own"
        );
        drop(first);
        assert!(turns.try_turn("busy").is_some(), "one was given back");
    }

    #[test]
    fn those_who_found_no_turn_are_woken_one_per_turn_given_back_in_order() {
        let turns = Turns::new(1);
        let mut woken = turns.woken();
        let held = turns.take_or_queue("busy", &key("a")).expect("free");
        assert!(turns.take_or_queue("busy", &key("b")).is_none());
        assert!(turns.take_or_queue("busy", &key("c")).is_none());
        assert!(
            turns.take_or_queue("busy", &key("b")).is_none(),
            "queued once however often it tries"
        );
        assert!(
            turns
                .take_or_queue("other", &("other".into(), "x".into()))
                .is_some(),
            "another namespace's turn is free"
        );
        assert!(woken.try_recv().is_err(), "nothing given back yet");
        drop(held);
        assert_eq!(woken.try_recv().ok(), Some(key("b")), "the first queued");
        assert!(woken.try_recv().is_err(), "one wake per turn given back");
        let b = turns.take_or_queue("busy", &key("b")).expect("given back");
        drop(b);
        assert_eq!(woken.try_recv().ok(), Some(key("c")));
        assert!(woken.try_recv().is_err(), "b was not queued twice");
    }

    #[test]
    fn a_look_at_a_busy_namespace_queues_without_taking() {
        let turns = Turns::new(1);
        let mut woken = turns.woken();
        assert!(
            !turns.queue_if_busy("busy", &key("a")),
            "free: nothing queued"
        );
        let held = turns.try_turn("busy").expect("still free");
        assert!(turns.queue_if_busy("busy", &key("a")));
        drop(held);
        assert_eq!(woken.try_recv().ok(), Some(key("a")));
    }

    #[test]
    fn a_key_that_takes_a_turn_on_its_own_is_no_longer_woken() {
        let turns = Turns::new(1);
        let mut woken = turns.woken();
        let held = turns.try_turn("busy").expect("free");
        assert!(turns.take_or_queue("busy", &key("a")).is_none());
        assert!(turns.take_or_queue("busy", &key("b")).is_none());
        // The first wake goes to a; b, requeued by its own timer, takes the turn
        // before a does.
        drop(held);
        assert_eq!(woken.try_recv().ok(), Some(key("a")));
        let b = turns.take_or_queue("busy", &key("b")).expect("free");
        assert!(
            turns.take_or_queue("busy", &key("a")).is_none(),
            "b holds it"
        );
        drop(b);
        assert_eq!(woken.try_recv().ok(), Some(key("a")), "b left the queue");
        assert!(woken.try_recv().is_err());
    }
}
