//! The operator's Events about its resources (Started, Stopped, RBACDenied...), written
//! in the background, as client-go's recorder writes them: a start never waits for its
//! Event's round trip, which on a busy API server (every start of a restart at once,
//! one flow in priority and fairness) took seconds and held back the Ready status.
//!
//! Events go to one of a few lanes by their object, each written in order, so one
//! object's Events keep their order. A namespace may have at most [`NAMESPACE_SHARE`]
//! waiting, so that one tenant's flood (resources refused again and again) cannot fill
//! the lanes and have every other namespace's Events dropped. An Event beyond its
//! namespace's share or a full lane is dropped, counted and logged (at most once a
//! minute). [`Events::flush`] waits for what is queued (on shutdown, before the lease
//! is released).

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::runtime::events::{Event, Recorder};
use tokio::sync::{mpsc, oneshot};

/// Lanes written at once.
const LANES: usize = 4;
/// Events one lane holds before it drops new ones (all lanes: client-go's 1000).
const LANE: usize = 250;
/// One Event's write.
const WRITE_TIMEOUT: Duration = Duration::from_secs(10);
/// Events one namespace may have waiting (cluster-scoped resources count as one).
const NAMESPACE_SHARE: usize = 50;
/// How often dropping is logged.
const SAY_EVERY: Duration = Duration::from_mins(1);

/// Waiting Events per namespace.
type Pending = Arc<Mutex<HashMap<String, usize>>>;

enum Message {
    Publish(Box<(Event, ObjectReference)>),
    /// Answered once everything queued before it is written.
    Flush(oneshot::Sender<()>),
}

/// The operator's Event writer: cheap to clone, its lanes shared.
#[derive(Clone)]
pub struct Events {
    lanes: Vec<mpsc::Sender<Message>>,
    pending: Pending,
}

static DROPPED: AtomicU64 = AtomicU64::new(0);
static SAID_DROPPED: Mutex<Option<Instant>> = Mutex::new(None);

/// Events dropped because a lane was full, since the process started.
pub fn dropped() -> u64 {
    DROPPED.load(Ordering::Relaxed)
}

impl Events {
    /// Starts the lanes' writers on the current runtime; they end when every clone is
    /// dropped.
    pub fn start(recorder: &Recorder) -> Self {
        let pending = Pending::default();
        let lanes = (0..LANES)
            .map(|_| {
                let (tx, rx) = mpsc::channel(LANE);
                tokio::spawn(write(recorder.clone(), rx, pending.clone()));
                tx
            })
            .collect();
        Events { lanes, pending }
    }

    /// Queues `event` about `object`, without waiting.
    pub fn publish(&self, event: Event, object: ObjectReference) {
        let mut h = DefaultHasher::new();
        (&object.namespace, &object.name, &object.uid).hash(&mut h);
        let lane = &self.lanes[usize::try_from(h.finish() % LANES as u64).unwrap_or_default()];
        let namespace = object.namespace.clone().unwrap_or_default();
        let reason = event.reason.clone();
        let mut pending = lock(&self.pending);
        let waiting = pending.get(&namespace).copied().unwrap_or_default();
        let queued = waiting < NAMESPACE_SHARE
            && lane
                .try_send(Message::Publish(Box::new((event, object))))
                .is_ok();
        if queued {
            *pending.entry(namespace).or_default() += 1;
            return;
        }
        drop(pending);
        let dropped = DROPPED.fetch_add(1, Ordering::Relaxed) + 1;
        let mut said = lock(&SAID_DROPPED);
        if said.is_none_or(|at| at.elapsed() >= SAY_EVERY) {
            *said = Some(Instant::now());
            tracing::warn!(
                %namespace,
                %reason,
                dropped,
                "the operator's Events queue is full for this namespace: dropping Events (counted in kite_operator_events_dropped_total)"
            );
        }
    }

    /// Waits up to `wait` for the Events queued so far to be written.
    pub async fn flush(&self, wait: Duration) {
        let flushed = async {
            let mut done = Vec::new();
            for lane in &self.lanes {
                let (tx, rx) = oneshot::channel();
                if lane.send(Message::Flush(tx)).await.is_ok() {
                    done.push(rx);
                }
            }
            futures::future::join_all(done).await;
        };
        if tokio::time::timeout(wait, flushed).await.is_err() {
            tracing::warn!(
                ?wait,
                "the operator's Events were not all written before shutdown"
            );
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Writes one lane's Events in order; a failure is only logged.
async fn write(recorder: Recorder, mut rx: mpsc::Receiver<Message>, pending: Pending) {
    while let Some(message) = rx.recv().await {
        match message {
            Message::Publish(boxed) => {
                let (event, object) = *boxed;
                let namespace = object.namespace.clone().unwrap_or_default();
                match tokio::time::timeout(WRITE_TIMEOUT, recorder.publish(&event, &object)).await {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => {
                        tracing::warn!(reason = %event.reason, error = %e, "recording an event");
                    }
                    Err(_) => {
                        tracing::warn!(reason = %event.reason, "recording an event timed out");
                    }
                }
                let mut pending = lock(&pending);
                if let Some(n) = pending.get_mut(&namespace) {
                    *n = n.saturating_sub(1);
                    if *n == 0 {
                        pending.remove(&namespace);
                    }
                }
            }
            Message::Flush(done) => {
                let _ = done.send(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::events::{EventType, Reporter};

    fn event(reason: &str) -> Event {
        Event {
            type_: EventType::Normal,
            reason: reason.into(),
            note: None,
            action: "Reconcile".into(),
            secondary: None,
        }
    }

    /// A client whose API server is not there: every write fails.
    fn unreachable_recorder() -> Recorder {
        let config = kube::Config::new("http://127.0.0.1:9".parse().unwrap());
        let client = kube::Client::try_from(config).unwrap();
        Recorder::new(client, Reporter::from("kite-operator-test"))
    }

    #[tokio::test]
    async fn publishing_never_waits_and_a_flooding_namespace_drops_only_its_own() {
        let events = Events::start(&unreachable_recorder());
        let object = ObjectReference {
            name: Some("c".into()),
            namespace: Some("team".into()),
            ..Default::default()
        };
        let before = dropped();
        let started = std::time::Instant::now();
        for i in 0..(NAMESPACE_SHARE + 10) {
            events.publish(event(&format!("R{i}")), object.clone());
        }
        assert!(started.elapsed() < Duration::from_secs(1), "publish waited");
        // The writers have not run yet (one thread): the namespace's share is queued,
        // the rest dropped.
        assert!(dropped() - before >= 10, "{}", dropped() - before);
        assert_eq!(lock(&events.pending)["team"], NAMESPACE_SHARE);
        // Another namespace still has its share.
        let other = ObjectReference {
            namespace: Some("other".into()),
            ..object.clone()
        };
        events.publish(event("Started"), other);
        assert_eq!(lock(&events.pending)["other"], 1);
        // The flush returns within its wait, whatever the writes do.
        let flushing = std::time::Instant::now();
        events.flush(Duration::from_millis(200)).await;
        assert!(flushing.elapsed() < Duration::from_secs(2));
    }
}
