//! One watch of each kind the operator's two controllers both react to (ConfigMaps,
//! the ceiling, the generated ServiceAccounts and roles), fanned out to both.
//!
//! kube-runtime's `Controller::watches` opens a watch per controller, and the operator
//! runs one controller per kind (StarlarkController, ClusterStarlarkController): without
//! this every such watch would be open twice.

use std::fmt::Debug;
use std::sync::Mutex;

use futures::{Stream, StreamExt};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;

use super::trigger::TriggerBackoff;

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
    let (senders, receivers): (Vec<_>, Vec<_>) =
        (0..outputs).map(|_| mpsc::channel(BUFFER)).unzip();
    let kind = T::kind(&Default::default()).into_owned();
    let watch = watcher(api, config)
        .backoff(TriggerBackoff::default())
        .touched_objects();
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
