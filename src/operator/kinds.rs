//! The operator's controller of each of its kinds (StarlarkController,
//! ClusterStarlarkController): what makes a resource be reconciled again, and when the
//! resources have been listed.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
use kube::ResourceExt;
use kube::api::ListParams;
use kube::runtime::controller::Controller;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;

use super::fanout::Taps;
use super::grants::OWNER_LABEL;
use super::manager::Options;
use super::reconciler::{self, Context};
use super::registry::{Key, Registry};
use super::resource::StarlarkController;
use super::shard::{self, Shards};
use super::tenant::{Tenant, is_cluster_key};
use super::trigger;

/// Runs the controller of one kind until `end`, at most `opts.concurrent_reconciles`
/// reconciles at once.
///
/// Unbounded, a restart of thousands ran them all at once: each held its own HTTP/1.1
/// connection to the API server (a TLS handshake and its buffers), and a heap profile
/// at 1000 controllers found most of the peak in those connections and in the
/// reconciles' waiting state. The API server cannot answer thousands at once anyway,
/// and the script work is bounded by the hosted pool's threads.
///
/// A reconcile never waits for its namespace's turns ([`super::turns`]): a tenant
/// whose top levels never end would otherwise hold every slot.
pub(super) async fn controller<K: Tenant>(
    client: &kube::Client,
    opts: &Options,
    tenants: &watcher::Config,
    (registry, audited): (&Arc<Registry>, &tokio::sync::broadcast::Sender<Key>),
    ctx: &Arc<Context>,
    taps: &Taps,
    end: impl Future<Output = ()> + Send + Sync + 'static,
) {
    let crs = K::api_all(client, opts.namespace.as_deref());
    let (mapper_registry, ceiling_registry) = (registry.clone(), registry.clone());
    let ceilings = ctx.ceilings.clone();
    let of_kind = |keys: Vec<Key>| {
        keys.into_iter()
            .filter_map(object_ref::<K>)
            .collect::<Vec<_>>()
    };
    let mut controller = Controller::new(crs, tenants.clone())
        .with_config(
            kube::runtime::controller::Config::default().concurrency(opts.concurrent_reconciles),
        )
        .watches_stream(
            taps.configmaps.take(),
            move |cm: kube::core::PartialObjectMeta<ConfigMap>| {
                let ns = cm.namespace().unwrap_or_default();
                of_kind(mapper_registry.referencing(&ns, &cm.name_any()))
            },
        )
        // A change to the ceiling (or to a role aggregated into it) re-checks everything.
        .watches_stream(taps.ceiling.take(), move |_: ClusterRole| {
            // Before the re-checks are queued, so that each reads the new rules.
            ceilings.changed();
            of_kind(ceiling_registry.keys())
        })
        // Someone deleting or editing a generated role, binding or account: restore it.
        .watches_stream(
            taps.service_accounts.take(),
            generated::<K, ServiceAccount>(registry.clone()),
        )
        .watches_stream(taps.roles.take(), generated::<K, Role>(registry.clone()))
        .watches_stream(
            taps.role_bindings.take(),
            generated::<K, RoleBinding>(registry.clone()),
        );
    if let Some(cluster) = &taps.cluster {
        controller = controller
            .watches_stream(
                cluster.0.take(),
                generated::<K, ClusterRole>(registry.clone()),
            )
            .watches_stream(
                cluster.1.take(),
                generated::<K, ClusterRoleBinding>(registry.clone()),
            );
    }
    // A controller the cache audit stopped: report it, and retry it later. A resource
    // turned away by its namespace's busy turns or reconcile share: its turn may have
    // come.
    let woken = futures::stream::select_all([
        keys(audited.subscribe()),
        keys(ctx.turns.woken()),
        keys(ctx.analyses.woken()),
        keys(ctx.shares.woken()),
    ])
    .filter_map(|key| std::future::ready(object_ref::<K>(key)));
    controller = controller.reconcile_on(woken);
    if let Some(shards) = &ctx.shards {
        let store = controller.store();
        controller = controller.reconcile_on(moved(store, shards));
    }
    controller
        .trigger_backoff(trigger::TriggerBackoff::default())
        .graceful_shutdown_on(end)
        .run(
            reconciler::reconcile::<K>,
            reconciler::error_policy::<K>,
            ctx.clone(),
        )
        .for_each(|result| {
            // Never awaits: this stream is every namespace's reconciles.
            if let Err(kube::runtime::controller::Error::ObjectNotFound(gone)) = result {
                let key = (
                    gone.namespace.clone().unwrap_or_default(),
                    gone.name.clone(),
                );
                reconciler::forget(ctx, &key, gone.extra.uid.as_deref());
            }
            std::future::ready(())
        })
        .await;
}

/// The keys sent on `rx`, as a stream; those a lagging receiver missed are gone (each
/// sender has its own later retry).
fn keys(rx: tokio::sync::broadcast::Receiver<Key>) -> futures::stream::BoxStream<'static, Key> {
    futures::stream::unfold(rx, |mut rx| async move {
        loop {
            match rx.recv().await {
                Ok(key) => return Some((key, rx)),
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => {}
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return None,
            }
        }
    })
    .boxed()
}

/// The resources to look at again when the live replicas change: those whose owner
/// moved to or from this replica, or whose claim disagrees with it ([`shard::moves`]).
fn moved<K: Tenant>(
    store: Store<K>,
    shards: &Shards,
) -> impl futures::Stream<Item = ObjectRef<K>> + Send + 'static {
    let mut rx = shards.changes();
    let before = rx.borrow_and_update().clone();
    let me = shards.identity().to_owned();
    futures::stream::unfold((rx, before), move |(mut rx, before)| {
        let (store, me) = (store.clone(), me.clone());
        async move {
            rx.changed().await.ok()?;
            let now = rx.borrow_and_update().clone();
            let refs: Vec<ObjectRef<K>> = store
                .state()
                .iter()
                .filter(|cr| {
                    let uid = cr.uid().unwrap_or_default();
                    shard::moves(&uid, cr.replica(), (&before, &now), &me)
                })
                .map(|cr| ObjectRef::from_obj(cr.as_ref()))
                .collect();
            tracing::debug!(
                kind = K::KIND,
                looked_at = refs.len(),
                "shard members changed"
            );
            Some((futures::stream::iter(refs), (rx, now)))
        }
    })
    .flatten()
}

/// Maps a change to a generated object (labelled with its owner's uid) to the
/// controller resource of kind `K` that owns it, and marks its grants for re-applying.
fn generated<K: Tenant, G: kube::Resource>(
    registry: Arc<Registry>,
) -> impl Fn(G) -> Vec<ObjectRef<K>> + Send + Sync + 'static {
    move |obj: G| {
        let Some(uid) = obj.labels().get(OWNER_LABEL) else {
            return Vec::new();
        };
        registry
            .grants_changed(uid)
            .and_then(object_ref::<K>)
            .into_iter()
            .collect()
    }
}

/// The object a registry key names, if it is of kind `K`.
fn object_ref<K: Tenant>(key: Key) -> Option<ObjectRef<K>> {
    if is_cluster_key(&key) == K::CONFINED {
        return None;
    }
    let (ns, name) = key;
    let r = ObjectRef::<K>::new(&name);
    Some(if K::CONFINED { r.within(&ns) } else { r })
}

/// Completes once the StarlarkControllers have been listed (readiness).
pub(super) fn namespaced_synced(
    client: &kube::Client,
    opts: &Options,
    tenants: &watcher::Config,
) -> impl Future<Output = ()> + Send + 'static {
    let api = StarlarkController::api_all(client, opts.namespace.as_deref());
    let params = ListParams {
        label_selector: tenants.label_selector.clone(),
        limit: Some(1),
        ..Default::default()
    };
    async move {
        let mut delay = Duration::from_millis(200);
        loop {
            if let Ok(Ok(_)) =
                tokio::time::timeout(Duration::from_secs(10), api.list(&params)).await
            {
                return;
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(Duration::from_secs(10));
        }
    }
}
