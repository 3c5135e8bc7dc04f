//! Events written in the background, as client-go's recorder does: `k8s.event` returns
//! at once and a reconcile never waits for its Event's round trip.
//!
//! One [`Recorder`] per cluster identity (a [`Session`] and the sessions derived from
//! it) keeps a bounded queue and one task that writes it, a few at a time. Identical
//! events waiting in the queue are merged into one write with their count; the events
//! of one object are written one after the other, in the order they were recorded.
//! A full queue drops the event, counts it in [`dropped`] and says so once. The queue is
//! bounded per identity, per namespace (a tenant's identities together) and per process.
//! [`flush_all`] waits for what is queued (on `kite run`'s exit and the operator's
//! SIGTERM, before its lease is released).
//!
//! # Caveats
//! A write that fails is logged and counted in [`failed`]; the script, which has moved
//! on, does not see it. A script that must know passes `wait = True`.

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use tokio::sync::{mpsc, watch};

use super::event::{self, Prepared};
use super::session::Session;

/// Events one recorder holds before it drops new ones (client-go's broadcaster: 1000).
pub const QUEUE: usize = 1000;
/// What one identity's waiting events may take (their messages and names, about): a
/// tenant flooding its events fills its own queue, not the process's.
const IDENTITY_BYTES: usize = 1 << 20;
/// What the recorders of one namespace's sessions (a tenant's controllers, each its own
/// identity) may take together: one tenant with many controllers cannot fill the
/// process's room and have every other tenant's events dropped.
const NAMESPACE_BYTES: usize = 8 << 20;
/// What every recorder's waiting events may take together.
const PROCESS_BYTES: usize = 64 << 20;
/// Writes in flight at once, per recorder: the events of distinct objects overlap.
const IN_FLIGHT: usize = 8;
/// One write, retries of a conflicting count included.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);

static DROPPED: AtomicU64 = AtomicU64::new(0);
static PROCESS_PENDING: AtomicUsize = AtomicUsize::new(0);
static FAILED: AtomicU64 = AtomicU64::new(0);
static SAID_DROPPED: AtomicBool = AtomicBool::new(false);
static RECORDERS: Mutex<Vec<Weak<Outstanding>>> = Mutex::new(Vec::new());
static NAMESPACES: Mutex<BTreeMap<String, Weak<AtomicUsize>>> = Mutex::new(BTreeMap::new());

/// The waiting bytes of `namespace`'s recorders, shared by each of them.
fn namespace_bytes(namespace: &str) -> Arc<AtomicUsize> {
    let mut all = NAMESPACES.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(shared) = all.get(namespace).and_then(Weak::upgrade) {
        return shared;
    }
    all.retain(|_, w| w.strong_count() > 0);
    let shared = Arc::new(AtomicUsize::new(0));
    all.insert(namespace.to_owned(), Arc::downgrade(&shared));
    shared
}

/// Events dropped because a recorder's queue was full, since the process started.
pub fn dropped() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

/// Events whose write failed, since the process started.
pub fn failed() -> u64 {
    FAILED.load(Ordering::Relaxed)
}

/// What a recorder has not written yet (queued and in flight).
#[derive(Debug)]
struct Outstanding {
    count: watch::Sender<usize>,
    /// What its waiting events take ([`Prepared::weight`]).
    bytes: AtomicUsize,
    /// What its namespace's recorders' waiting events take.
    namespace: Arc<AtomicUsize>,
}

impl Outstanding {
    fn add(&self, n: isize) {
        self.count.send_modify(|c| *c = c.saturating_add_signed(n));
    }

    /// Takes room for `bytes` more, within this identity's, its namespace's and the
    /// process's bounds.
    fn reserve(&self, bytes: usize) -> bool {
        let mine = self.bytes.fetch_add(bytes, Ordering::Relaxed);
        let tenant = self.namespace.fetch_add(bytes, Ordering::Relaxed);
        let all = PROCESS_PENDING.fetch_add(bytes, Ordering::Relaxed);
        if mine + bytes > IDENTITY_BYTES
            || tenant + bytes > NAMESPACE_BYTES
            || all + bytes > PROCESS_BYTES
        {
            self.release(bytes);
            return false;
        }
        true
    }

    fn release(&self, bytes: usize) {
        self.bytes.fetch_sub(bytes, Ordering::Relaxed);
        self.namespace.fetch_sub(bytes, Ordering::Relaxed);
        PROCESS_PENDING.fetch_sub(bytes, Ordering::Relaxed);
    }
}

/// The background writer of one identity's events.
#[derive(Debug, Clone)]
pub struct Recorder {
    queue: mpsc::Sender<Prepared>,
    outstanding: Arc<Outstanding>,
}

impl Recorder {
    /// Starts the writer of `session`'s events on `runtime`. It ends when the last
    /// handle to the recorder goes, after writing what it holds.
    pub fn start(session: &Session, runtime: &tokio::runtime::Handle) -> Self {
        let (queue, rx) = mpsc::channel(QUEUE);
        let (count, _) = watch::channel(0);
        let outstanding = Arc::new(Outstanding {
            count,
            bytes: AtomicUsize::new(0),
            namespace: namespace_bytes(session.events_charged_to()),
        });
        RECORDERS
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .retain(|r| r.strong_count() > 0);
        RECORDERS
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Arc::downgrade(&outstanding));
        let writer = Writer {
            session: session.without_recorder(),
            outstanding: outstanding.clone(),
        };
        runtime.spawn(writer.run(rx));
        Self { queue, outstanding }
    }

    /// Queues `event`; returns at once. A full queue drops it (counted, said once).
    pub fn record(&self, event: Prepared) {
        let weight = event.weight();
        if !self.outstanding.reserve(weight) {
            drop_one();
            return;
        }
        self.outstanding.add(1);
        if self.queue.try_send(event).is_err() {
            self.outstanding.add(-1);
            self.outstanding.release(weight);
            drop_one();
        }
    }

    /// Waits until everything queued so far is written, or `wait` passes.
    pub async fn flush(&self, wait: Duration) {
        flush_one(&self.outstanding, wait).await;
    }
}

/// Counts a dropped event, and says so the first time.
fn drop_one() {
    DROPPED.fetch_add(1, Ordering::Relaxed);
    if !SAID_DROPPED.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            queue = QUEUE,
            "an event was dropped: its identity's event queue is full (the API server is slow or refusing them); kite_events_dropped_total counts every one"
        );
    }
}

async fn flush_one(outstanding: &Outstanding, wait: Duration) {
    let mut rx = outstanding.count.subscribe();
    let _ = tokio::time::timeout(wait, rx.wait_for(|c| *c == 0)).await;
}

/// Waits (up to `wait` in all) until every recorder of the process has written what it
/// holds: before `kite run` exits, and before the operator releases its lease.
pub async fn flush_all(wait: Duration) {
    let all: Vec<Arc<Outstanding>> = RECORDERS
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .iter()
        .filter_map(Weak::upgrade)
        .collect();
    let deadline = tokio::time::Instant::now() + wait;
    for o in all {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        flush_one(&o, left).await;
    }
}

/// The task that writes one recorder's queue.
struct Writer {
    session: Session,
    outstanding: Arc<Outstanding>,
}

/// An event waiting to be written, and how many identical ones it stands for.
struct Waiting {
    event: Prepared,
    count: i64,
    /// The weights of every event it stands for, given back when it is written.
    weight: usize,
}

impl Writer {
    async fn run(self, mut rx: mpsc::Receiver<Prepared>) {
        let mut waiting: VecDeque<Waiting> = VecDeque::new();
        // Objects with a write in flight: their next event waits for it.
        let mut busy: HashSet<String> = HashSet::new();
        let mut writes = FuturesUnordered::new();
        let mut open = true;
        loop {
            // Start what may start: the first waiting event of each idle object.
            let mut i = 0;
            while i < waiting.len() && writes.len() < IN_FLIGHT {
                let object = waiting[i].event.object.clone();
                if busy.contains(&object) {
                    i += 1;
                    continue;
                }
                let Some(w) = waiting.remove(i) else { break };
                busy.insert(object.clone());
                let session = &self.session;
                writes.push(async move {
                    let n = w.count;
                    let out =
                        tokio::time::timeout(WRITE_TIMEOUT, event::write(session, &w.event, n))
                            .await;
                    (object, w.event, n, w.weight, out)
                });
            }
            if !open && waiting.is_empty() && writes.is_empty() {
                return;
            }
            tokio::select! {
                // The channel and the waiting list are bounded alike (QUEUE each).
                got = rx.recv(), if open && waiting.len() < QUEUE => match got {
                    Some(event) => queue(&mut waiting, event),
                    None => open = false,
                },
                Some((object, event, n, weight, out)) = writes.next(), if !writes.is_empty() => {
                    busy.remove(&object);
                    self.outstanding.release(weight);
                    let n_usize = usize::try_from(n).unwrap_or(usize::MAX);
                    self.outstanding.add(-isize::try_from(n_usize).unwrap_or(isize::MAX));
                    let error = match out {
                        Ok(Ok(_)) => None,
                        Ok(Err(e)) => Some(e.to_string()),
                        Err(_) => Some(format!("no answer within {}s", WRITE_TIMEOUT.as_secs())),
                    };
                    if let Some(error) = error {
                        FAILED.fetch_add(u64::try_from(n).unwrap_or(1), Ordering::Relaxed);
                        tracing::warn!(object = %object, reason = %event.reason(), error = %error, "recording an event failed");
                    }
                }
            }
        }
    }
}

/// Adds `event` to the queue: merged into an identical one still waiting (same name:
/// same object, reason, message and type), else at the end.
///
/// Each recorded event is one outstanding unit until the write that carries it ends,
/// merged or not, so a flush waits for every one.
fn queue(waiting: &mut VecDeque<Waiting>, event: Prepared) {
    let weight = event.weight();
    if let Some(same) = waiting.iter_mut().find(|w| w.event.name == event.name) {
        same.count += 1;
        same.weight += weight;
        same.event.touch(&event);
        return;
    }
    waiting.push_back(Waiting {
        event,
        count: 1,
        weight,
    });
}

/// A count of pending events across recorders, for tests.
#[cfg(test)]
fn outstanding_of(r: &Recorder) -> usize {
    *r.outstanding.count.borrow()
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    use serde_json::Value as Json;
    use std::convert::Infallible;
    use std::sync::atomic::AtomicUsize;

    /// A server that takes `delay` per request and records each POST's count, with
    /// the order they came in.
    fn slow_server(delay: Duration, seen: Arc<Mutex<Vec<(String, i64)>>>) -> kube::Client {
        let service = tower::service_fn(move |req: hyper::Request<kube::client::Body>| {
            let seen = seen.clone();
            async move {
                tokio::time::sleep(delay).await;
                let body = req
                    .into_body()
                    .collect()
                    .await
                    .map(http_body_util::Collected::to_bytes)
                    .unwrap_or_default();
                let event: Json = serde_json::from_slice(&body).unwrap_or_default();
                seen.lock().unwrap().push((
                    event["message"].as_str().unwrap_or_default().to_owned(),
                    event["count"].as_i64().unwrap_or(0),
                ));
                let body =
                    Full::new(Bytes::from(body.to_vec())).map_err(|e: Infallible| match e {});
                Ok::<_, Infallible>(hyper::Response::new(body.boxed_unsync()))
            }
        });
        kube::Client::new(service, "t")
    }

    fn obj(name: &str) -> Json {
        serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "t", "uid": format!("uid-{name}")}})
    }

    fn prepared(session: &Session, name: &str, message: &str) -> Prepared {
        let spec = event::EventSpec {
            reason: "R",
            message,
            type_: "Normal",
            namespace: None,
        };
        event::prepare(session, &obj(name), &spec).unwrap()
    }

    #[tokio::test]
    async fn recording_returns_at_once_and_a_flush_waits_for_every_write() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let session = Session::from_client(
            slow_server(Duration::from_millis(200), seen.clone()),
            "t".into(),
            false,
        );
        let recorder = Recorder::start(&session, &tokio::runtime::Handle::current());
        let started = std::time::Instant::now();
        for i in 0..5 {
            recorder.record(prepared(&session, "a", &format!("m{i}")));
        }
        assert!(
            started.elapsed() < Duration::from_millis(100),
            "recording does not wait"
        );
        assert!(outstanding_of(&recorder) > 0);
        recorder.flush(Duration::from_secs(10)).await;
        assert_eq!(outstanding_of(&recorder), 0);
        let seen = seen.lock().unwrap().clone();
        let messages: Vec<&str> = seen.iter().map(|(m, _)| m.as_str()).collect();
        assert_eq!(
            messages,
            ["m0", "m1", "m2", "m3", "m4"],
            "one object's events in order"
        );
    }

    #[tokio::test]
    async fn identical_waiting_events_are_written_once_with_their_count() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let session = Session::from_client(
            slow_server(Duration::from_millis(100), seen.clone()),
            "t".into(),
            false,
        );
        let recorder = Recorder::start(&session, &tokio::runtime::Handle::current());
        for _ in 0..10 {
            recorder.record(prepared(&session, "a", "same"));
        }
        recorder.flush(Duration::from_secs(10)).await;
        let seen = seen.lock().unwrap().clone();
        let total: i64 = seen.iter().map(|(_, c)| c).sum();
        assert_eq!(total, 10, "{seen:?}");
        assert!(seen.len() < 10, "merged while waiting: {seen:?}");
    }

    #[tokio::test]
    async fn a_full_queue_drops_and_counts() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let session = Session::from_client(
            slow_server(Duration::from_secs(30), seen),
            "t".into(),
            false,
        );
        let recorder = Recorder::start(&session, &tokio::runtime::Handle::current());
        let before = dropped();
        let sent = AtomicUsize::new(0);
        for i in 0..(2 * QUEUE + IN_FLIGHT + 50) {
            recorder.record(prepared(&session, &format!("o{i}"), "m"));
            sent.fetch_add(1, Ordering::Relaxed);
        }
        assert!(dropped() - before >= 50, "{}", dropped() - before);
    }

    /// One identity flooding its events fills its own queue, not another's.
    #[tokio::test]
    async fn a_flooding_identity_leaves_room_for_others() {
        let stuck = Session::from_client(
            slow_server(Duration::from_secs(30), Arc::default()),
            "t".into(),
            false,
        );
        let flooder = Recorder::start(&stuck, &tokio::runtime::Handle::current());
        for i in 0..(2 * QUEUE) {
            flooder.record(prepared(&stuck, &format!("o{i}"), &"m".repeat(2000)));
        }
        assert!(flooder.outstanding.bytes.load(Ordering::Relaxed) <= IDENTITY_BYTES);
        let seen = Arc::new(Mutex::new(Vec::new()));
        let other =
            Session::from_client(slow_server(Duration::ZERO, seen.clone()), "t".into(), false);
        let recorder = Recorder::start(&other, &tokio::runtime::Handle::current());
        recorder.record(prepared(&other, "b", "mine"));
        recorder.flush(Duration::from_secs(10)).await;
        assert_eq!(seen.lock().unwrap().len(), 1);
    }
    /// A tenant's many identities together fill their namespace's room, not the
    /// process's: another namespace's events are still written.
    #[tokio::test]
    async fn a_flooding_namespace_leaves_room_for_others() {
        let mut flooders = Vec::new();
        for _ in 0..(NAMESPACE_BYTES / IDENTITY_BYTES + 4) {
            let stuck = Session::from_client(
                slow_server(Duration::from_secs(30), Arc::default()),
                "flooding-tenant".into(),
                false,
            );
            let flooder = Recorder::start(&stuck, &tokio::runtime::Handle::current());
            for i in 0..QUEUE {
                flooder.record(prepared(&stuck, &format!("o{i}"), &"m".repeat(4000)));
            }
            flooders.push(flooder);
        }
        let tenant = flooders[0].outstanding.namespace.load(Ordering::Relaxed);
        assert!(tenant <= NAMESPACE_BYTES, "{tenant}");
        assert!(
            tenant > NAMESPACE_BYTES / 2,
            "the flood did fill it: {tenant}"
        );
        let seen = Arc::new(Mutex::new(Vec::new()));
        let other = Session::from_client(
            slow_server(Duration::ZERO, seen.clone()),
            "quiet-tenant".into(),
            false,
        );
        let recorder = Recorder::start(&other, &tokio::runtime::Handle::current());
        recorder.record(prepared(&other, "b", "mine"));
        recorder.flush(Duration::from_secs(10)).await;
        assert_eq!(seen.lock().unwrap().len(), 1);
    }
}
