//! Secondary informers: children kite applied (auto-watched per kind), `watch_owned`
//! kinds, and `watch_related` kinds. Each maps its events back to primaries.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::informer::{Change, Store};
use super::informers::{self, Access, Subscription};
use crate::k8s::discovery::Resource;
use crate::k8s::session::Session;

/// Why a secondary watch is running, which decides how its events map to primaries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Objects kite applied as children: only those carrying the ApplySet label.
    Children,
    /// `watch_owned`: any object owned by a primary.
    Owned,
    /// `watch_related[i]`: every object, mapped by the script's map function.
    Related(usize),
}

/// A running secondary informer.
pub struct Watched {
    pub store: Arc<Store>,
    _subscription: Subscription,
}

type Callback = Arc<dyn Fn(Role, Change) + Send + Sync>;

/// The informers of one controller: its primary subscription and the secondary ones,
/// started on first need and all dropped with [`Watches::close`].
pub struct Watches {
    running: Mutex<HashMap<(String, Role), Arc<Watched>>>,
    primary: Mutex<Option<Subscription>>,
    /// Set by [`Watches::close`]: a reconcile still running opens nothing new.
    closed: std::sync::atomic::AtomicBool,
    access: Access,
    on_change: Callback,
    on_restart: Arc<dyn Fn() + Send + Sync>,
}

impl Watches {
    pub fn new(
        access: Access,
        on_change: impl Fn(Role, Change) + Send + Sync + 'static,
        on_restart: impl Fn() + Send + Sync + 'static,
    ) -> Self {
        Self {
            running: Mutex::default(),
            primary: Mutex::default(),
            closed: false.into(),
            access,
            on_change: Arc::new(on_change),
            on_restart: Arc::new(on_restart),
        }
    }

    /// The registry these watches subscribe to.
    pub fn access(&self) -> &Access {
        &self.access
    }

    /// Keeps the primary informer's subscription until [`Watches::close`].
    pub fn hold_primary(&self, subscription: Subscription) {
        *lock(&self.primary) = Some(subscription);
    }

    /// The informer for `resource` in `role`, subscribed to now if it is not yet.
    /// `namespace` None watches all namespaces.
    ///
    /// # Errors
    /// The controller may not list and watch the kind there (see [`informers::Gate`]).
    pub async fn ensure(
        &self,
        session: &Session,
        resource: &Resource,
        role: Role,
        namespace: Option<&str>,
    ) -> informers::Result<Arc<Watched>> {
        let ar = &resource.api_resource;
        let id = format!("{}/{}", ar.group, ar.plural);
        if self.is_closed() {
            return Err(informers::Error::Closed);
        }
        if let Some(w) = lock(&self.running).get(&(id.clone(), role)) {
            return Ok(w.clone());
        }
        let labels = (role == Role::Children).then_some(super::children::applyset::PART_OF_LABEL);
        let want = informers::Want {
            resource: ar,
            namespaced: resource.namespaced,
            namespace,
            labels,
            fields: None,
        };
        let opened = self.access.open(session, &want).await?;
        let mut running = lock(&self.running);
        // Closed while this one waited for the gate: what it opened goes with it.
        if self.is_closed() {
            return Err(informers::Error::Closed);
        }
        // Another reconcile may have subscribed while this one waited for the gate.
        if let Some(w) = running.get(&(id.clone(), role)) {
            return Ok(w.clone());
        }
        let (cb, restarted) = (self.on_change.clone(), self.on_restart.clone());
        let store = opened.store();
        let subscription = opened.subscribe(move |c| cb(role, c), move || restarted());
        let watched = Arc::new(Watched {
            store,
            _subscription: subscription,
        });
        tracing::debug!(kind = %id, ?role, "subscribed");
        running.insert((id, role), watched.clone());
        Ok(watched)
    }

    /// True once every running secondary informer has synced.
    pub fn synced(&self) -> bool {
        lock(&self.running).values().all(|w| w.store.is_synced())
    }

    /// How many secondary informers this controller subscribes to.
    pub fn count(&self) -> usize {
        lock(&self.running).len()
    }

    /// Drops every subscription for good: nothing more is delivered, informers no
    /// other controller subscribes to stop, and [`Watches::ensure`] opens nothing
    /// more. A reconcile still running then reads from the API server, or fails.
    pub fn close(&self) {
        // Under the `running` lock, so that an `ensure` past its check cannot insert
        // after the clear.
        let mut running = lock(&self.running);
        self.closed
            .store(true, std::sync::atomic::Ordering::Release);
        running.clear();
        drop(running);
        lock(&self.primary).take();
    }

    fn is_closed(&self) -> bool {
        self.closed.load(std::sync::atomic::Ordering::Acquire)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
