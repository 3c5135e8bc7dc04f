//! One watch of each kind the operator's two controllers both react to (ConfigMaps,
//! the ceiling, the generated ServiceAccounts and roles), fanned out to both.
//!
//! kube-runtime's `Controller::watches` opens a watch per controller, and the operator
//! runs one controller per kind (StarlarkController, ClusterStarlarkController): without
//! this every such watch would be open twice.

use std::fmt::Debug;
use std::sync::{Arc, Mutex};

use futures::{Stream, StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;

use super::grants::{Kind, OWNER_LABEL};
use super::seen::Seen;
use super::trigger::{self, TriggerBackoff};

/// Objects a watch delivered, waiting for a slow controller: beyond this the watch waits
/// (it is level-based input: nothing is lost, it is only read later).
const BUFFER: usize = 256;

/// The receiving ends of one watch, one per controller.
pub struct Tap<T>(Mutex<Vec<mpsc::Receiver<T>>>);

impl<T: Send + 'static> Tap<T> {
    /// One controller's stream of the watch's touched objects. Each call takes one of
    /// the outputs; a call beyond them gets a stream that never yields.
    pub fn take(&self) -> impl Stream<Item = Result<T, watcher::Error>> + Send + 'static {
        let rx = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop();
        futures::stream::unfold(rx, |rx| async move {
            let mut rx = rx?;
            let item = rx.recv().await?;
            Some((Ok(item), Some(rx)))
        })
    }
}

/// Watches `api` once (with the operator's trigger backoff after errors) and delivers
/// every touched object to `outputs` streams. The watch ends once every output is gone.
pub fn fanout<T>(api: Api<T>, config: watcher::Config, outputs: usize) -> Tap<T>
where
    T: Resource + Clone + DeserializeOwned + Debug + Send + Sync + 'static,
    T::DynamicType: Default,
{
    let kind = T::kind(&Default::default()).into_owned();
    let watch = watcher(api, config)
        .backoff(TriggerBackoff::default())
        .touched_objects();
    spread(kind, watch, outputs)
}

/// As [`fanout`], for a kind the operator generates: every event is taken in by `seen`
/// first, so that a reconcile woken by an object reads a view that has it; and when a
/// list completes, the objects seen before that it no longer has are delivered too
/// (as stand-ins), so that an owner whose object went during a gap re-applies it.
pub fn fanout_generated<T>(
    api: Api<T>,
    config: watcher::Config,
    outputs: usize,
    (seen, kind): (&Arc<Seen>, Kind),
) -> Tap<T>
where
    T: Resource<DynamicType = ()> + Clone + DeserializeOwned + Serialize + Default,
    T: Debug + Send + Sync + 'static,
{
    seen.watching(kind);
    let seen = seen.clone();
    let watch = watcher(api, config)
        .backoff(TriggerBackoff::default())
        .map_ok(move |event| futures::stream::iter(seen.observe(kind, event).into_iter().map(Ok)))
        .try_flatten();
    spread(kind.name().to_owned(), watch, outputs)
}

/// Delivers every object of `watch` to `outputs` streams, until every output is gone.
fn spread<T: Clone + Send + 'static>(
    kind: String,
    watch: impl Stream<Item = Result<T, watcher::Error>> + Send + 'static,
    outputs: usize,
) -> Tap<T> {
    let (senders, receivers): (Vec<_>, Vec<_>) =
        (0..outputs).map(|_| mpsc::channel(BUFFER)).unzip();
    tokio::spawn(async move {
        let mut watch = std::pin::pin!(watch);
        while let Some(item) = watch.next().await {
            match item {
                Ok(obj) => {
                    let mut open = 0;
                    for tx in &senders {
                        if tx.send(obj.clone()).await.is_ok() {
                            open += 1;
                        }
                    }
                    if open == 0 {
                        return;
                    }
                }
                Err(e) => tracing::warn!(%kind, error = %e, "watch error; retrying with backoff"),
            }
        }
    });
    Tap(Mutex::new(receivers))
}

/// The operator's secondary watches, each open once and read by both controllers
/// (one with `--namespace`, where no ClusterStarlarkControllers run).
pub struct Taps {
    /// Names only: which ConfigMap changed, for the StarlarkControllers whose
    /// `scriptFrom` it is.
    pub configmaps: Tap<PartialObjectMeta<ConfigMap>>,
    pub ceiling: Tap<ClusterRole>,
    pub service_accounts: Tap<ServiceAccount>,
    pub roles: Tap<Role>,
    pub role_bindings: Tap<RoleBinding>,
    /// Generated ClusterRoles and ClusterRoleBindings (none with `--namespace`).
    pub cluster: Option<(Tap<ClusterRole>, Tap<ClusterRoleBinding>)>,
}

impl Taps {
    /// The watches of an operator limited to `namespace` (None: all), whose ceiling
    /// ClusterRole is `ceiling`.
    pub fn new(
        client: &kube::Client,
        namespace: Option<&String>,
        ceiling: &str,
        seen: &Arc<Seen>,
    ) -> Self {
        let ns = namespace;
        let outputs = if ns.is_some() { 1 } else { 2 };
        let owned = trigger::watch_config().labels(OWNER_LABEL);
        let only_ceiling = trigger::watch_config().fields(&format!("metadata.name={ceiling}"));
        Taps {
            // An Api of PartialObjectMeta asks for metadata only: the watch receives
            // no data (a ConfigMap's megabyte, anyone's who may create ConfigMaps).
            configmaps: fanout(
                in_scope::<PartialObjectMeta<ConfigMap>>(client, ns),
                trigger::watch_config(),
                outputs,
            ),
            ceiling: fanout(Api::all(client.clone()), only_ceiling, outputs),
            service_accounts: fanout_generated(
                in_scope(client, ns),
                owned.clone(),
                outputs,
                (seen, Kind::ServiceAccount),
            ),
            roles: fanout_generated(
                in_scope(client, ns),
                owned.clone(),
                outputs,
                (seen, Kind::Role),
            ),
            role_bindings: fanout_generated(
                in_scope(client, ns),
                owned.clone(),
                outputs,
                (seen, Kind::RoleBinding),
            ),
            cluster: ns.is_none().then(|| {
                (
                    fanout_generated(
                        Api::all(client.clone()),
                        owned.clone(),
                        outputs,
                        (seen, Kind::ClusterRole),
                    ),
                    fanout_generated(
                        Api::all(client.clone()),
                        owned,
                        outputs,
                        (seen, Kind::ClusterRoleBinding),
                    ),
                )
            }),
        }
    }
}

fn in_scope<G>(client: &kube::Client, namespace: Option<&String>) -> Api<G>
where
    G: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    G::DynamicType: Default,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}
