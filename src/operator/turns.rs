//! A few turns at a time per namespace for the operator's CPU-heavy work on a script
//! (one set of turns for analyses at admission and reconcile, another for the top
//! levels that run before a controller starts), which runs on blocking threads outside
//! the shared worker pool: one author sending many slow scripts waits for their own
//! turns, and other namespaces' go on.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The turns, by namespace.
pub struct Turns {
    by_namespace: Mutex<HashMap<String, Arc<Semaphore>>>,
    /// Turns one namespace may hold at once.
    each: usize,
}

impl Turns {
    /// `each` turns at once per namespace (at least one).
    pub fn new(each: usize) -> Self {
        Turns {
            by_namespace: Mutex::default(),
            each: each.max(1),
        }
    }

    /// Waits for `namespace`'s turn; it lasts as long as the permit.
    pub async fn turn(&self, namespace: &str) -> OwnedSemaphorePermit {
        // The semaphore is never closed.
        self.semaphore(namespace)
            .acquire_owned()
            .await
            .unwrap_or_else(|_| unreachable!("a turn's semaphore is never closed"))
    }

    /// `namespace`'s turn if one is free now, without waiting.
    pub fn try_turn(&self, namespace: &str) -> Option<OwnedSemaphorePermit> {
        self.semaphore(namespace).try_acquire_owned().ok()
    }

    fn semaphore(&self, namespace: &str) -> Arc<Semaphore> {
        let mut map = self
            .by_namespace
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        // Namespaces nobody waits in are forgotten, so the map stays as small as the set
        // of namespaces with work.
        map.retain(|_, s| Arc::strong_count(s) > 1);
        map.entry(namespace.to_owned())
            .or_insert_with(|| Arc::new(Semaphore::new(self.each)))
            .clone()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::Turns;

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
}
