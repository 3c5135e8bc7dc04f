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
//! of the kinds it watches take, times its distinct selectors. The audit bounds how long
//! that lasts, not how far it goes.
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
    let mut tick = tokio::time::interval(PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            () = &mut end => return,
            _ = tick.tick() => {}
        }
        let shares = informers.shares();
        for (key, hosted, message) in registry.audit_caches(&shares) {
            tracing::warn!(controller = %format!("{}/{}", key.0, key.1), reason = %message, "stopping a controller whose watches' caches passed its namespace's memory limit; refused for {} min", registry::RESERVE_FOR.as_secs() / 60);
            stop(hosted).await;
            let _ = stopped.send(key);
        }
    }
}
