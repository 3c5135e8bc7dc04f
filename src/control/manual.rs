//! A controller a test drives by hand (`k8s.testing.controller`): the informers,
//! routing, queue, handlers, children and finalizers of a running controller, but no
//! worker threads, timers or leader election. The test takes each key from the queue
//! on its own thread and moves a virtual clock instead of waiting.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value as Json;
use tokio::sync::watch;

use super::controller::{self, Config, launch};
use super::informer::Key;
use super::queue::Clock;
use super::shared::{Shared, WorkKey};
use super::worker::{self, Processed};

/// What one step did: the key taken from the queue and how its processing ended.
#[derive(Debug, Clone)]
pub struct Step {
    /// `namespace/name` (or `name`) of the primary, or of the related object.
    pub key: String,
    /// True for a `watch_related` object whose map function ran.
    pub related: bool,
    /// False when nothing ran: the key's only updates were the controller's own
    /// writes coming back (echoes), which the runtime skips.
    pub ran: bool,
    /// Why it ran: `test`, `create`, `update`, `requeue`, `poll`, `event`, ...
    pub trigger: String,
    pub requeue_after: Option<Duration>,
    /// The handler's or a write's error, rendered with its traceback.
    pub error: Option<String>,
    /// When a failed key is retried; `None` after an error means it was given up.
    pub retry_in: Option<Duration>,
    /// How long the handlers and writes took (real time).
    pub elapsed: Duration,
}

/// A started controller whose queue only a test drains.
pub struct Manual {
    shared: Arc<Shared>,
    shutdown_tx: watch::Sender<bool>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    /// The informers are this controller's own, stopped with it.
    own_informers: bool,
    clock: Clock,
    runtime: tokio::runtime::Handle,
    /// How far the clock had moved at the last `advance`, to count poll and resync ticks.
    moved: Mutex<Duration>,
}

impl Manual {
    /// Resolves the kinds and starts the informers; nothing reconciles until [`step`].
    ///
    /// # Errors
    /// An unknown kind, or discovery failing.
    ///
    /// [`step`]: Self::step
    pub async fn start(config: Config) -> controller::Result<Self> {
        let clock = Clock::default();
        let own_informers = config.informers.is_none();
        let (shared, shutdown_tx, tasks) = launch(config, Some(clock.clone())).await?;
        Ok(Self {
            shared,
            shutdown_tx,
            tasks,
            own_informers,
            clock,
            runtime: tokio::runtime::Handle::current(),
            moved: Mutex::new(Duration::ZERO),
        })
    }

    /// Whether every informer has listed its kind.
    pub fn synced(&self) -> bool {
        self.shared.store.is_synced() && self.shared.watches.synced()
    }

    /// The informers running: the primary one and the secondary watches.
    pub fn informers(&self) -> usize {
        1 + self.shared.watches.count()
    }

    /// Whether the watched kind is namespaced.
    pub fn namespaced(&self) -> bool {
        self.shared.target.resource.namespaced
    }

    /// The watched kind, as logs show it.
    pub fn kind(&self) -> String {
        self.shared.target.display_name()
    }

    /// The namespace `control(namespace=)` confines it to.
    pub fn namespace(&self) -> Option<&str> {
        self.shared.spec.namespace.as_deref()
    }

    /// The informer's copy of a primary.
    pub fn cached(&self, namespace: &str, name: &str) -> Option<Arc<Json>> {
        self.shared.store.get(&key(namespace, name))
    }

    /// Asks for the level reconcile of a primary, as a watch event would.
    pub fn kick(&self, namespace: &str, name: &str, trigger: &'static str) {
        let key = key(namespace, name);
        self.shared
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(key.clone())
            .or_default()
            .reconcile
            .get_or_insert(trigger);
        self.shared.queue.add(WorkKey::Primary(key));
    }

    /// Takes one ready key (by the virtual clock) and processes it on this thread, as a
    /// worker would; `None` when no key is ready. Must not run on a runtime thread.
    pub fn step(&self) -> Option<Step> {
        let item = self.shared.queue.try_get()?;
        let step = match &item {
            WorkKey::Primary(key) => {
                let processed = worker::process(&self.shared, &self.runtime, &item, key);
                Some(step_of(key, false, processed))
            }
            WorkKey::Related(i, key) => {
                worker::map_related(&self.shared, *i, key);
                Some(step_of(key, true, None))
            }
        };
        self.shared.queue.done(&item);
        step
    }

    /// Processes `namespace/name` now if it is waiting in the queue (ahead of any other
    /// key); `None` when it is not waiting.
    pub fn step_key(&self, namespace: &str, name: &str) -> Option<Step> {
        let key = key(namespace, name);
        let item = WorkKey::Primary(key.clone());
        if !self.shared.queue.try_take(&item) {
            return None;
        }
        let processed = worker::process(&self.shared, &self.runtime, &item, &key);
        self.shared.queue.done(&item);
        Some(step_of(&key, false, processed))
    }

    /// Deletes a primary through the controller's own client (foreground of nothing:
    /// finalizers, ours included, hold it until they are removed).
    ///
    /// # Errors
    /// The API server's answer, e.g. not found.
    pub async fn delete(&self, namespace: &str, name: &str) -> Result<(), kube::Error> {
        let api = self.shared.target.api(&self.shared.session);
        let api = if self.namespaced() {
            kube::Api::namespaced_with(
                self.shared.session.client.clone(),
                namespace,
                &self.shared.target.resource.api_resource,
            )
        } else {
            api
        };
        api.delete(name, &kube::api::DeleteParams::default())
            .await
            .map(drop)
    }

    /// Moves the clock forward: requeues and retries that come due become ready, and
    /// each poll or resync period crossed requeues every primary once.
    pub fn advance(&self, by: Duration) {
        let mut moved = self
            .moved
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let before = *moved;
        let after = before.saturating_add(by);
        *moved = after;
        self.clock.advance(by);
        let crossed = |period: Option<Duration>| {
            period.is_some_and(|p| {
                !p.is_zero()
                    && after.as_millis() / p.as_millis() > before.as_millis() / p.as_millis()
            })
        };
        if crossed(self.shared.spec.poll) {
            self.shared.requeue_all("poll", false);
        }
        if crossed(self.shared.spec.resync) {
            self.shared.requeue_all("resync", true);
        }
    }

    /// How long until the next delayed key (a requeue, a retry) is due.
    pub fn next_due_in(&self) -> Option<Duration> {
        self.shared.queue.next_due_in()
    }
}

impl Drop for Manual {
    fn drop(&mut self) {
        self.shared.queue.shut_down();
        let _ = self.shutdown_tx.send(true);
        self.shared.watches.close();
        for t in &self.tasks {
            t.abort();
        }
        if self.own_informers {
            self.shared.watches.access().informers().abort();
        }
    }
}

fn key(namespace: &str, name: &str) -> Key {
    Key {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    }
}

fn step_of(key: &Key, related: bool, processed: Option<Processed>) -> Step {
    let Some(p) = processed else {
        return Step {
            key: key.to_string(),
            related,
            ran: related,
            trigger: if related { "related" } else { "echo" }.to_owned(),
            requeue_after: None,
            error: None,
            retry_in: None,
            elapsed: Duration::ZERO,
        };
    };
    let (error, retry_in) = match p.error {
        Some((e, retry)) => (Some(e), retry),
        None => (None, None),
    };
    Step {
        key: key.to_string(),
        related,
        ran: true,
        trigger: p.trigger.to_owned(),
        requeue_after: p.requeue_after,
        error,
        retry_in,
        elapsed: p.elapsed,
    }
}
