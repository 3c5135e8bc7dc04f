//! The resourceVersions a script's own writes returned, so that a controller can tell
//! the watch events they cause from changes made by others (self-echo suppression).

use std::collections::{HashSet, VecDeque};
use std::hash::BuildHasher;
use std::sync::Mutex;

use serde_json::Value as Json;

/// Enough for every write in flight across a busy controller; older entries are
/// forgotten first, which at worst costs one extra (idempotent) reconcile.
const CAPACITY: usize = 8192;

/// A bounded set of (uid, resourceVersion) pairs written by this controller, each kept
/// as a 64-bit hash: a full log takes about 200 KiB (the set and the order, 8 bytes
/// each per entry), within the share the operator charges each hosted controller,
/// where the pairs themselves took ten times that. The hasher's key is random per log,
/// so no one can aim a collision; an accidental one would at worst skip one reconcile
/// of a change that is, by then, already older than the object's next one.
#[derive(Default)]
pub struct WriteLog {
    inner: Mutex<Inner>,
    hasher: std::collections::hash_map::RandomState,
    /// Shown every recorded write (`kite dev` prints them); set at most once.
    observer: std::sync::OnceLock<Observer>,
}

/// What [`WriteLog::observe`] calls with each recorded object.
pub type Observer = Box<dyn Fn(&Json) + Send + Sync>;

#[derive(Default)]
struct Inner {
    order: VecDeque<u64>,
    set: HashSet<u64>,
}

/// Writes this thread made since [`noting`] (at most this many are named).
const NOTED: usize = 20;

thread_local! {
    /// `Kind namespace/name` of each write recorded since [`noting`], and how many.
    static WRITTEN: std::cell::RefCell<Option<(Vec<String>, usize)>> =
        const { std::cell::RefCell::new(None) };
}

/// Starts naming this thread's recorded writes (a reconcile's, for its journal line).
pub fn noting() {
    WRITTEN.with(|w| *w.borrow_mut() = Some((Vec::new(), 0)));
}

/// The writes named since [`noting`] (the first [`NOTED`]) and their count; stops.
pub fn noted() -> (Vec<String>, usize) {
    WRITTEN.with(|w| w.borrow_mut().take()).unwrap_or_default()
}

fn note(obj: &Json) {
    WRITTEN.with(|w| {
        if let Some((names, count)) = w.borrow_mut().as_mut() {
            *count += 1;
            if names.len() < NOTED {
                let meta = &obj["metadata"];
                let ns = meta["namespace"]
                    .as_str()
                    .map_or(String::new(), |n| format!("{n}/"));
                names.push(format!(
                    "{} {ns}{}",
                    obj["kind"].as_str().unwrap_or("object"),
                    meta["name"].as_str().unwrap_or("?")
                ));
            }
        }
    });
}

impl WriteLog {
    /// The hash of `obj`'s (uid, resourceVersion), when it has both.
    fn identity(&self, obj: &Json) -> Option<u64> {
        let meta = &obj["metadata"];
        let pair = (meta["uid"].as_str()?, meta["resourceVersion"].as_str()?);
        Some(self.hasher.hash_one(pair))
    }

    /// Calls `f` with every object recorded from now on; a second observer is ignored.
    pub fn observe(&self, f: Observer) {
        let _ = self.observer.set(f);
    }

    /// Remembers the object a write returned.
    pub fn record(&self, obj: &Json) {
        note(obj);
        if let Some(f) = self.observer.get() {
            f(obj);
        }
        let Some(id) = self.identity(obj) else {
            return;
        };
        // A thread past its memory budget could be parked for good by its next large
        // block (`script::memory`), and must not be holding this lock then: the watch
        // events of every controller sharing it would wait. Not recording costs at
        // most one extra reconcile; the call that went over fails anyway.
        if crate::script::memory::exhausted() {
            return;
        }
        let mut inner = self
            .inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if inner.set.insert(id) {
            // The oldest goes before the newest comes, so the order never grows past
            // its first allocation.
            while inner.order.len() >= CAPACITY {
                if let Some(old) = inner.order.pop_front() {
                    inner.set.remove(&old);
                }
            }
            inner.order.push_back(id);
        }
    }

    /// True (once) if `obj` is exactly the state one of our writes produced.
    pub fn is_echo(&self, obj: &Json) -> bool {
        let Some(id) = self.identity(obj) else {
            return false;
        };
        let mut inner = self
            .inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Left in `order`; it ages out there and is skipped by the set check.
        inner.set.remove(&id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(uid: &str, rv: &str) -> Json {
        json!({"metadata": {"uid": uid, "resourceVersion": rv}})
    }

    #[test]
    fn own_writes_are_echoes_once_and_others_are_not() {
        let log = WriteLog::default();
        log.record(&obj("a", "5"));
        assert!(
            !log.is_echo(&obj("a", "6")),
            "a later change by someone else"
        );
        assert!(log.is_echo(&obj("a", "5")));
        assert!(!log.is_echo(&obj("a", "5")), "only once");
        assert!(!log.is_echo(&json!({})));
    }

    #[test]
    fn a_reconciles_writes_are_named_for_its_journal_line() {
        let log = WriteLog::default();
        log.record(&obj("u0", "1"));
        assert_eq!(noted(), (Vec::new(), 0), "nothing is named before noting");
        noting();
        for i in 0..25 {
            log.record(&json!({
                "kind": "ConfigMap",
                "metadata": {"uid": format!("u{i}"), "resourceVersion": "1", "namespace": "team", "name": format!("c{i}")},
            }));
        }
        let (names, count) = noted();
        assert_eq!(count, 25);
        assert_eq!(names.len(), NOTED);
        assert_eq!(names[0], "ConfigMap team/c0");
        assert_eq!(noted(), (Vec::new(), 0), "noting stops");
    }

    #[test]
    fn capacity_is_bounded() {
        let log = WriteLog::default();
        for i in 0..(CAPACITY + 10) {
            log.record(&obj("u", &i.to_string()));
        }
        assert!(
            !log.is_echo(&obj("u", "0")),
            "the oldest entries were forgotten"
        );
        assert!(log.is_echo(&obj("u", &(CAPACITY + 9).to_string())));
        // What a full log takes stays within the 256 KiB the operator charges a hosted
        // controller for all of kite's own state (issue 26).
        let inner = log.inner.lock().unwrap();
        let buckets = (inner.set.capacity() * 8 / 7).next_power_of_two();
        let bytes = buckets * (8 + 1) + inner.order.capacity() * 8;
        assert!(bytes < 220 << 10, "a full write log takes {bytes} bytes");
    }
}
