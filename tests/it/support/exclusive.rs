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
use std::time::Duration;

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

/// Waits until no other test holds a claim and the namespaces of finished tests are
/// gone (their objects would otherwise meet this test's cluster-wide controller), then
/// holds the cluster.
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
    let held = Exclusive;
    super::wait_until(
        "the namespaces of finished tests to be deleted",
        Duration::from_secs(120),
        || async {
            let terminating = terminating_namespaces().await;
            for ns in &terminating {
                release_leftovers(ns).await;
            }
            terminating.is_empty()
        },
    )
    .await;
    held
}

/// Test namespaces still being deleted.
async fn terminating_namespaces() -> Vec<String> {
    let out = super::kubectl(&[
        "get",
        "namespaces",
        "-l",
        "kite.test/owned=true",
        "-o",
        "jsonpath={.items[?(@.status.phase==\"Terminating\")].metadata.name}",
    ])
    .await;
    String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// Drops the finalizers of what keeps a finished test's namespace from going: the
/// controller that would have removed them was that test's, and it is gone.
async fn release_leftovers(ns: &str) {
    let out = super::kubectl(&[
        "get",
        "namespace",
        ns,
        "-o",
        "jsonpath={.status.conditions[?(@.type==\"NamespaceContentRemaining\")].message}",
    ])
    .await;
    // "Some resources are remaining: staticsites.tutorial.starkite.io has 1 resource
    // instances, configmaps has 2 resource instances"
    let message = String::from_utf8_lossy(&out.stdout).into_owned();
    let Some((_, list)) = message.split_once("remaining: ") else {
        return;
    };
    for entry in list.split(", ") {
        let Some((resource, _)) = entry.split_once(" has ") else {
            continue;
        };
        let names = super::kubectl(&["get", resource, "-n", ns, "-o", "name"]).await;
        for name in String::from_utf8_lossy(&names.stdout).lines() {
            let _ = super::kubectl(&[
                "patch",
                name,
                "-n",
                ns,
                "--type=merge",
                "-p",
                r#"{"metadata":{"finalizers":null}}"#,
            ])
            .await;
        }
    }
}
