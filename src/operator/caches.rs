//! The audit of what hosted controllers' watch caches hold, charged to their
//! namespaces' `--namespace-memory` like everything else they keep.
//!
//! The shared informers keep one cache per distinct (kind, namespace, selectors). A
//! tenant whose controllers watch its own large objects through many distinct selectors
//! makes the operator keep a copy per selector, which no start-time charge can see: the
//! caches fill after the start, and grow and shrink with the objects. So every
//! [`PERIOD`] each running controller is charged its share of the caches it subscribes
//! to ([`Informers::shares`]); one that no longer fits is stopped and reconciled again,
//! which reports `MemoryQuota` and retries, charged what its caches held (see
//! [`registry::RESERVE_FOR`]).
//!
//! # Caveats
//! Between two audits a cache can grow past the limit: by what one namespace's objects
//! of the kinds it watches take, times its distinct selectors (at most
//! `--namespace-watches`). The audit bounds how long that lasts, not how far it goes.
//! Waiting events are charged here too ([`Hosted::recharge`]), and collapsed rather
//! than the controller stopped when they do not fit.
//!
//! [`Hosted::recharge`]: super::hosted::Hosted::recharge
//!
//! [`Informers::shares`]: crate::control::informers::Informers::shares

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::broadcast;

use super::decision::stop;
use super::registry::{self, Key, Registry};
use crate::control::informers::Informers;

/// How often the caches are charged.
pub const PERIOD: Duration = Duration::from_secs(5);

/// Charges the caches every [`PERIOD`] until `end`; sends the key of each controller it
/// stopped on `stopped`, for its reconciler to decide again.
pub async fn caches(
    registry: Arc<Registry>,
    informers: Arc<Informers>,
    stopped: broadcast::Sender<Key>,
    end: impl Future<Output = ()>,
) {
    let mut end = std::pin::pin!(end);
    let mut stopping = tokio::task::JoinSet::new();
    let mut tick = tokio::time::interval(PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = &mut end => {
                // Shutdown waits for the stops under way: each flushes its events.
                while stopping.join_next().await.is_some() {}
                return;
            }
            _ = tick.tick() => {}
        }
        let shares = informers.shares();
        for (key, hosted, message) in registry.audit_caches(&shares) {
            tracing::warn!(controller = %format!("{}/{}", key.0, key.1), reason = %message, "stopping a controller whose watches' caches passed its namespace's memory limit; its namespace is charged that much for every start for {} min", registry::RESERVE_FOR.as_secs() / 60);
            // Each stop may wait out a running handler's grace: they run side by side,
            // and the audit goes on meanwhile, so that one tenant's sleeping handlers
            // cannot stretch the period for everyone.
            // Its watches and waiting events go now, not after its handlers' grace: a
            // tenant's caches could go on growing meanwhile, no longer audited.
            hosted.controller.close_watches();
            let stopped = stopped.clone();
            while stopping.try_join_next().is_some() {}
            stopping.spawn(async move {
                stop(hosted).await;
                let _ = stopped.send(key);
            });
        }
    }
}
