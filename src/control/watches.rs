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

/// How long a refused watch is answered from memory.
const REFUSAL_KEPT: std::time::Duration = std::time::Duration::from_secs(30);

/// Refusals remembered at once; past it, new ones are asked about each time.
const MAX_REFUSALS: usize = 256;

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
    /// Watches refused lately, and when: asked again only after [`REFUSAL_KEPT`], so a
    /// reconcile that keeps naming a kind it may not watch does not send the gate's
    /// reviews (the operator's API calls) every time.
    refused: Mutex<HashMap<(String, Role), (std::time::Instant, informers::Error)>>,
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
            refused: Mutex::default(),
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
        if let Some((at, e)) = lock(&self.refused).get(&(id.clone(), role))
            && at.elapsed() < REFUSAL_KEPT
        {
            return Err(e.clone());
        }
        let labels = (role == Role::Children).then_some(super::children::applyset::PART_OF_LABEL);
        let want = informers::Want {
            resource: ar,
            namespaced: resource.namespaced,
            namespace,
            labels,
            fields: None,
        };
        let opened = match self.access.open(session, &want).await {
            Ok(opened) => opened,
            Err(e) => {
                let mut refused = lock(&self.refused);
                refused.retain(|_, (at, _)| at.elapsed() < REFUSAL_KEPT);
                if refused.len() < MAX_REFUSALS {
                    refused.insert((id, role), (std::time::Instant::now(), e.clone()));
                }
                return Err(e);
            }
        };
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use futures::future::BoxFuture;
    use kube::discovery::ApiResource;

    use super::*;
    use crate::control::informers::{Admission, Gate, Informers};

    /// Refuses everyone, counting the reviews it is asked.
    #[derive(Default)]
    struct Refusing(AtomicUsize);

    impl Gate for Refusing {
        fn admit<'a>(
            &'a self,
            user: &'a str,
            _: &'a ApiResource,
            _: Option<&'a str>,
        ) -> BoxFuture<'a, informers::Result<Admission>> {
            self.0.fetch_add(1, Ordering::Relaxed);
            Box::pin(async move {
                Err(informers::Error::Refuse(format!(
                    "{user} may not watch nodes"
                )))
            })
        }
    }

    /// Issue 26: a reconcile that keeps naming a kind it may not watch is answered from
    /// memory, not with the operator's reviews every time.
    #[tokio::test]
    async fn a_refused_watch_is_not_asked_about_again_at_once() {
        let gate = Arc::new(Refusing::default());
        let informers = Informers::new(tokio::runtime::Handle::current(), Some(gate.clone()));
        let watches = Watches::new(
            informers.access(Some("system:serviceaccount:t:x".into()), Some("t")),
            |_, _| {},
            || {},
        );
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        let session =
            Session::from_client(kube::Client::try_from(config).unwrap(), "t".into(), false);
        let nodes = Resource {
            api_resource: ApiResource {
                group: String::new(),
                version: "v1".into(),
                api_version: "v1".into(),
                kind: "Node".into(),
                plural: "nodes".into(),
            },
            namespaced: false,
            verbs: vec![],
            short_names: vec![],
            singular: "node".into(),
            subresources: vec![],
        };
        for _ in 0..5 {
            let e = watches
                .ensure(&session, &nodes, Role::Children, None)
                .await
                .err()
                .unwrap();
            assert_eq!(
                e.to_string(),
                "system:serviceaccount:t:x may not watch nodes"
            );
        }
        assert_eq!(gate.0.load(Ordering::Relaxed), 1, "asked once");
    }
}
