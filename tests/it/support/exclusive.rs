//! Tests that run cluster-wide controllers (the seed's examples watch every namespace)
//! take the cluster for themselves; every other test holds a shared claim through its
//! [`TestNamespace`](super::TestNamespace).
//!
//! The lock prefers readers: a test may make several namespaces, and a second shared
//! claim must never wait behind a queued exclusive one (which waits for the first). An
//! exclusive test still gets its turn: libtest runs a bounded number of tests, so the
//! shared claims drain between them.

use std::cell::Cell;
use std::sync::Mutex;

use tokio::sync::Notify;

#[derive(Default)]
struct State {
    shared: usize,
    exclusive: bool,
}

static STATE: Mutex<State> = Mutex::new(State {
    shared: 0,
    exclusive: false,
});
static CHANGED: Notify = Notify::const_new();

thread_local! {
    // The test body runs on its libtest thread (`block_on` polls it there), so this
    // says whether the current test holds the exclusive claim.
    static HELD_HERE: Cell<bool> = const { Cell::new(false) };
}

fn state() -> std::sync::MutexGuard<'static, State> {
    STATE.lock().unwrap_or_else(|p| p.into_inner())
}

async fn acquire(mut take: impl FnMut(&mut State) -> bool) {
    loop {
        let changed = CHANGED.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        if take(&mut state()) {
            return;
        }
        changed.await;
    }
}

/// A claim shared with other tests; none if this test already holds the cluster.
pub struct Shared(bool);

impl Drop for Shared {
    fn drop(&mut self) {
        if self.0 {
            state().shared -= 1;
            CHANGED.notify_waiters();
        }
    }
}

/// Claims a share of the cluster, waiting while a test holds it exclusively.
pub async fn shared() -> Shared {
    if HELD_HERE.get() {
        return Shared(false);
    }
    acquire(|s| {
        if s.exclusive {
            return false;
        }
        s.shared += 1;
        true
    })
    .await;
    Shared(true)
}

/// The cluster for this test alone, until dropped.
pub struct Exclusive;

impl Drop for Exclusive {
    fn drop(&mut self) {
        state().exclusive = false;
        HELD_HERE.set(false);
        CHANGED.notify_waiters();
    }
}

/// Waits until no other test holds a claim, then holds the cluster.
pub async fn exclusive() -> Exclusive {
    acquire(|s| {
        if s.exclusive || s.shared > 0 {
            return false;
        }
        s.exclusive = true;
        true
    })
    .await;
    HELD_HERE.set(true);
    Exclusive
}
