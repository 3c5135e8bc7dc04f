//! The state a controller's informer callbacks, timers and worker threads share, and
//! the work items they pass: keys, and each key's pending events.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value as Json;
use tokio::sync::watch;

use super::handlers::Handlers;
use super::informer::{Key, Store};
use super::leader::Validity;
use super::metrics::{Metrics, Series};
use super::queue::WorkQueue;
use super::spec::ControlSpec;
use super::watches::Watches;
use crate::k8s::ops::Target;
use crate::k8s::session::Session;
use crate::k8s::write_log::WriteLog;
use crate::script::budget::Cancel;
use crate::script::host::Host;

/// An item of work: a primary object to reconcile, or an object of a `watch_related`
/// kind whose map function must run.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum WorkKey {
    Primary(Key),
    Related(usize, Key),
}

/// A watch event waiting to be delivered to the event-form handlers, in order.
#[derive(Debug, Clone)]
pub(super) enum EventItem {
    Added(Arc<Json>),
    Modified(Arc<Json>, Arc<Json>),
    Deleted(Arc<Json>),
}

impl EventItem {
    /// What the versions it holds take.
    pub fn size(&self) -> usize {
        use super::informer::size_of;
        match self {
            EventItem::Added(o) | EventItem::Deleted(o) => size_of(o),
            EventItem::Modified(old, new) => size_of(old) + size_of(new),
        }
    }
}

/// The work waiting for one key.
#[derive(Debug, Default)]
pub(super) struct Pending {
    pub events: VecDeque<EventItem>,
    /// Set when the level-triggered reconcile should run; the first trigger is kept for
    /// the log line.
    pub reconcile: Option<&'static str>,
    /// Updates that may trigger the reconcile. Whether one is our own echo is decided by
    /// the worker, because the watch event of our write can arrive before the write's
    /// response has been recorded; the worker runs only after that key's previous
    /// processing (and so its writes) finished.
    pub updates: Vec<(Arc<Json>, Arc<Json>)>,
    /// What the object versions held here take ([`informer::size_of`]), counted in
    /// [`Shared::held`].
    ///
    /// [`informer::size_of`]: super::informer::size_of
    pub bytes: usize,
}

impl Pending {
    /// Drops the events and updates waiting, for one level-triggered reconcile of the
    /// object's current state. Returns how many events went and the bytes freed, which
    /// the caller takes off [`Shared::held`].
    pub fn collapse(&mut self) -> (usize, usize) {
        let dropped = self.events.len();
        self.events.clear();
        self.updates.clear();
        self.reconcile.get_or_insert("update");
        (dropped, std::mem::take(&mut self.bytes))
    }
}

/// Per-key event backlog limit: a key that somehow never gets processed cannot grow
/// without bound; the oldest events go first.
pub(super) const MAX_PENDING_EVENTS: usize = 1000;

/// What one controller's waiting events may hold in object versions, over all keys.
/// Past it, the key whose change arrives is collapsed to one level-triggered reconcile
/// (its queued events and updates are dropped, said in a warning): an object rewritten
/// fast while the handlers are busy cannot make the operator keep every version.
pub(super) const MAX_PENDING_BYTES: usize = 32 << 20;

/// State shared by the informer callback, the timers and the workers.
pub(super) struct Shared {
    pub name: String,
    pub spec: ControlSpec,
    pub handlers: Handlers,
    pub host: Arc<Host>,
    /// What this script's own writes returned, for self-echo suppression.
    pub writes: Arc<WriteLog>,
    pub session: Arc<Session>,
    pub target: Target,
    pub store: Arc<Store>,
    pub queue: WorkQueue<WorkKey>,
    pub pending: Mutex<HashMap<Key, Pending>>,
    /// The sum of every pending entry's `bytes`.
    pub held: std::sync::atomic::AtomicUsize,
    /// The latest state of related objects waiting for their map function.
    pub related: Mutex<HashMap<(usize, Key), Arc<Json>>>,
    /// Children, watch_owned and watch_related informers.
    pub watches: Watches,
    /// Primaries whose reconcile returned children: they get a Ready condition.
    pub with_children: Mutex<HashSet<Key>>,
    pub metrics: Arc<Metrics>,
    pub leading: watch::Receiver<bool>,
    pub leader_election: bool,
    /// Set on a hard stop: cancels handlers that are still running.
    pub stop: Arc<AtomicBool>,
    /// Set when this leadership term ends (lost lease, or a hard stop): cancels the
    /// handlers and writes started in it. A new term gets a new flag.
    pub term: Mutex<Arc<AtomicBool>>,
    /// This controller's own lease (leader_election=True).
    pub lease: Option<Arc<Validity>>,
    /// The lease of whoever hosts it (the operator's).
    pub outer_lease: Option<Arc<Validity>>,
    pub budget: Duration,
}

impl Shared {
    /// Takes `pending`, taken out of the map, off what the controller holds.
    pub(super) fn release(&self, pending: Pending) -> Pending {
        self.held
            .fetch_sub(pending.bytes, std::sync::atomic::Ordering::Relaxed);
        pending
    }

    /// Collapses every key's waiting events ([`Pending::collapse`]); returns how many
    /// events went. Nothing is lost to a level-based reconcile, which reads the
    /// current state; the event-form handlers miss the steps in between.
    pub(super) fn collapse_waiting(&self) -> usize {
        let mut pending = self
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let (mut events, mut bytes) = (0, 0);
        for p in pending
            .values_mut()
            .filter(|p| !p.events.is_empty() || !p.updates.is_empty())
        {
            let (e, b) = p.collapse();
            events += e;
            bytes += b;
        }
        self.held
            .fetch_sub(bytes, std::sync::atomic::Ordering::Relaxed);
        events
    }

    /// Drops every key's waiting work: for a controller whose queue is shut down,
    /// which no worker takes anything from again.
    pub(super) fn drop_waiting(&self) {
        let all = std::mem::take(
            &mut *self
                .pending
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        );
        let bytes: usize = all.values().map(|p| p.bytes).sum();
        self.held
            .fetch_sub(bytes, std::sync::atomic::Ordering::Relaxed);
    }

    /// This controller's metrics for a scrape, the queue depth read now.
    pub(super) fn series(&self, extra: Vec<(&'static str, String)>) -> Series {
        self.metrics.set_queue_depth(self.queue.len());
        Series {
            controller: self.name.clone(),
            extra,
            metrics: self.metrics.clone(),
        }
    }

    /// Handlers that see each watch event (the pod logger's form).
    pub fn wants_events(&self) -> bool {
        self.spec.reconcile_arity == Some(2)
            || self.handlers.on_create.is_some()
            || self.handlers.on_update.is_some()
            || self.handlers.on_delete.is_some()
    }

    /// Handlers that run on the object's current state (level-triggered).
    pub fn wants_level(&self) -> bool {
        self.handlers.reconcile.is_some() || self.handlers.finalize.is_some()
    }

    /// Whether this replica may reconcile now: it leads (if it elects a leader), its
    /// lease has not run out, and neither has its host's.
    pub(super) fn is_leading(&self) -> bool {
        let own = !self.leader_election
            || (*self.leading.borrow() && self.lease.as_ref().is_none_or(|l| l.valid()));
        own && self.outer_lease.as_ref().is_none_or(|l| l.valid())
    }

    /// What cancels work started now: the end of this term, or a lease running out.
    pub(super) fn cancel(&self) -> Cancel {
        let term = self
            .term
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let leases: Vec<Arc<Validity>> = self
            .lease
            .iter()
            .chain(self.outer_lease.iter())
            .cloned()
            .collect();
        Cancel::new(move || term.load(Ordering::Relaxed) || leases.iter().any(|l| !l.valid()))
    }

    /// Ends the current term: what runs in it is cancelled.
    pub(super) fn end_term(&self) {
        self.term
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .store(true, Ordering::Relaxed);
    }

    /// Starts a new term (after becoming the leader again).
    pub(super) fn new_term(&self) {
        *self
            .term
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(AtomicBool::new(false));
    }
}
