//! Secondary informers: children kite applied (auto-watched per kind), `watch_owned`
//! kinds, and `watch_related` kinds. Each maps its events back to primaries.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::sync::watch;

use super::informer::{self, Change, Source, Store};
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
}

type Callback = Arc<dyn Fn(Role, Change) + Send + Sync>;

/// The secondary informers of one controller, started on first need and stopped with it.
pub struct Watches {
    running: Mutex<HashMap<(String, Role), Arc<Watched>>>,
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    runtime: tokio::runtime::Handle,
    shutdown: watch::Receiver<bool>,
    on_change: Callback,
    on_restart: Arc<dyn Fn() + Send + Sync>,
}

impl Watches {
    pub fn new(
        runtime: tokio::runtime::Handle,
        shutdown: watch::Receiver<bool>,
        on_change: impl Fn(Role, Change) + Send + Sync + 'static,
        on_restart: impl Fn() + Send + Sync + 'static,
    ) -> Self {
        Self {
            running: Mutex::default(),
            tasks: Mutex::default(),
            runtime,
            shutdown,
            on_change: Arc::new(on_change),
            on_restart: Arc::new(on_restart),
        }
    }

    /// The informer for `resource` in `role`, started now if it is not running yet.
    /// `namespace` None watches all namespaces.
    pub fn ensure(
        &self,
        session: &Session,
        resource: &Resource,
        role: Role,
        namespace: Option<&str>,
    ) -> Arc<Watched> {
        let ar = &resource.api_resource;
        let id = format!("{}/{}", ar.group, ar.plural);
        let mut running = self
            .running
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(w) = running.get(&(id.clone(), role)) {
            return w.clone();
        }
        let api = match namespace.filter(|_| resource.namespaced) {
            Some(ns) => kube::Api::namespaced_with(session.client.clone(), ns, ar),
            None => kube::Api::all_with(session.client.clone(), ar),
        };
        let labels =
            (role == Role::Children).then(|| super::children::applyset::PART_OF_LABEL.to_owned());
        let source = Source {
            api,
            resource: ar.clone(),
            labels,
            fields: None,
        };
        let watched = Arc::new(Watched {
            store: Arc::new(Store::default()),
        });
        let cb = self.on_change.clone();
        let restarted = self.on_restart.clone();
        let task = self.runtime.spawn(informer::run(
            source,
            watched.store.clone(),
            move |c| cb(role, c),
            move || restarted(),
            self.shutdown.clone(),
        ));
        self.tasks
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(task);
        tracing::info!(kind = %id, ?role, "watching");
        running.insert((id, role), watched.clone());
        watched
    }

    /// True once every running secondary informer has synced.
    pub fn synced(&self) -> bool {
        self.running
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .all(|w| w.store.is_synced())
    }

    /// How many secondary informers run.
    pub fn count(&self) -> usize {
        self.running
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .len()
    }

    /// The informer tasks, for shutdown to await.
    pub fn take_tasks(&self) -> Vec<tokio::task::JoinHandle<()>> {
        std::mem::take(
            &mut *self
                .tasks
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }
}
