//! `k8s.watch`: list then watch a kind, delivering (event, object) pairs to the script
//! through a bounded channel.

use futures::{StreamExt, TryStreamExt};
use kube::api::{ListParams, WatchEvent, WatchParams};
use serde_json::Value as Json;
use tokio::sync::mpsc;

use super::ops::{Error, Result, Target};
use super::session::Session;

/// One watch event as scripts see it: "ADDED", "MODIFIED" or "DELETED", and the object.
pub type Event = (String, Json);

/// A running watch. Dropping it stops the background task.
pub struct Watch {
    pub events: mpsc::Receiver<Result<Event>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Starts watching on `runtime`: existing objects arrive as ADDED, then changes.
/// The server ends each watch every few seconds (the heartbeat that detects a dead
/// connection) and the watch resumes from the last resourceVersion; a 410 Gone re-lists.
pub fn start(
    runtime: &tokio::runtime::Handle,
    session: std::sync::Arc<Session>,
    target: Target,
    labels: Option<String>,
) -> Watch {
    // Small: the script consumes events one at a time, and back-pressure is fine.
    let (tx, events) = mpsc::channel(64);
    let task = runtime.spawn(async move {
        if let Err(e) = run(&session, &target, labels.as_deref(), &tx).await {
            let _ = tx.send(Err(e)).await;
        }
    });
    Watch { events, task }
}

async fn run(
    session: &Session,
    target: &Target,
    labels: Option<&str>,
    tx: &mpsc::Sender<Result<Event>>,
) -> Result<()> {
    let api = target.api(session);
    let mut list_params = ListParams::default();
    let mut watch_params = WatchParams::default().timeout(super::session::WATCH_TIMEOUT_SECS);
    if let Some(l) = labels {
        list_params = list_params.labels(l);
        watch_params = watch_params.labels(l);
    }
    let send = |kind: &str, obj: Json| tx.send(Ok((kind.to_owned(), target.complete(obj))));
    let mut relist = true;
    let mut rv = String::new();
    loop {
        if relist {
            let list = api.list(&list_params).await?;
            rv = list.metadata.resource_version.clone().unwrap_or_default();
            for item in list.items {
                let obj = serde_json::to_value(item).map_err(Error::Encode)?;
                if send("ADDED", obj).await.is_err() {
                    return Ok(());
                }
            }
            relist = false;
        }
        let mut stream = api.watch(&watch_params, &rv).await?.boxed();
        while let Some(ev) = stream.try_next().await? {
            let (kind, obj) = match ev {
                WatchEvent::Added(o) => ("ADDED", o),
                WatchEvent::Modified(o) => ("MODIFIED", o),
                WatchEvent::Deleted(o) => ("DELETED", o),
                WatchEvent::Bookmark(b) => {
                    rv = b.metadata.resource_version;
                    continue;
                }
                WatchEvent::Error(status) if status.code == 410 => {
                    relist = true;
                    break;
                }
                WatchEvent::Error(status) => {
                    return Err(Error::Api(status));
                }
            };
            if let Some(v) = obj.metadata.resource_version.clone() {
                rv = v;
            }
            let obj = serde_json::to_value(obj).map_err(Error::Encode)?;
            if send(kind, obj).await.is_err() {
                return Ok(());
            }
        }
    }
}
