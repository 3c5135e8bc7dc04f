//! Watches: a streaming body of newline-delimited watch events, first the history after
//! the requested resourceVersion (or the current objects), then live events until the
//! timeout, then a bookmark.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures::{SinkExt, StreamExt};
use http_body_util::StreamBody;
use hyper::body::Frame;
use serde_json::{Value as Json, json};
use tokio::sync::broadcast::error::RecvError;

use super::Shared;
use super::selector::Selector;
use super::store::{Event, EventType};
use super::verbs::Target;

/// One item for the body: a line to send (None when the event was filtered out) and
/// the resourceVersion the reader has seen once it takes the item.
type Item = (Option<Bytes>, u64);

/// The body of a watch response.
pub type WatchBody =
    StreamBody<futures::stream::BoxStream<'static, Result<Frame<Bytes>, std::convert::Infallible>>>;

/// What a watch asks for.
pub struct Watch {
    pub target: Target,
    pub selector: Selector,
    pub resource_version: Option<String>,
    pub timeout: Duration,
    pub bookmarks: bool,
}

/// Starts a watch and returns its body. Must run inside the tokio runtime.
pub fn start(shared: &Arc<Shared>, watch: Watch) -> WatchBody {
    let (mut tx, rx) = futures::channel::mpsc::channel::<Item>(256);
    let seen = Arc::new(AtomicU64::new(0));
    shared.register_watch(&seen);
    let (initial, mut live, start_rv) = {
        let store = shared.lock();
        let live = shared.events.subscribe();
        let from = watch
            .resource_version
            .as_deref()
            .filter(|rv| !rv.is_empty() && *rv != "0");
        let initial: Result<Vec<Item>, String> = match from {
            None => {
                let ns = watch.target.namespace.as_deref();
                let mut items: Vec<Item> = store
                    .of_resource(&watch.target.resource, ns)
                    .filter(|(_, e)| watch.selector.matches(&e.object))
                    .map(|(_, e)| (Some(line("ADDED", &e.object)), 0))
                    .collect();
                items.push((None, store.rv));
                Ok(items)
            }
            Some(rv) => match rv
                .parse::<u64>()
                .ok()
                .and_then(|n| store.history_after(n).map(|h| (n, h)))
            {
                Some((n, history)) => {
                    let mut items = vec![(None, n)];
                    items.extend(history.iter().map(|e| (render(&watch, e), e.rv)));
                    Ok(items)
                }
                None => Err(format!("too old resource version: {rv} ({})", store.rv)),
            },
        };
        (initial, live, store.rv)
    };
    let target = watch.target.clone();
    tokio::spawn(async move {
        let mut last = start_rv;
        match initial {
            Ok(items) => {
                for item in items {
                    if tx.send(item).await.is_err() {
                        return;
                    }
                }
            }
            Err(message) => {
                let status = super::Error::Expired(message).status();
                let _ = tx.send((Some(line("ERROR", &status)), start_rv)).await;
                return;
            }
        }
        let deadline = tokio::time::sleep(watch.timeout);
        tokio::pin!(deadline);
        loop {
            tokio::select! {
                () = &mut deadline => break,
                got = live.recv() => match got {
                    Ok(event) => {
                        if event.rv <= start_rv { continue; }
                        last = event.rv;
                        if tx.send((render(&watch, &event), event.rv)).await.is_err() {
                            return;
                        }
                    }
                    Err(RecvError::Lagged(_)) => {
                        let status = super::Error::Expired("the watch fell behind".into()).status();
                        let _ = tx.send((Some(line("ERROR", &status)), last)).await;
                        return;
                    }
                    Err(RecvError::Closed) => break,
                },
            }
        }
        if watch.bookmarks {
            let ar = &target.resource.api_resource;
            let mark = json!({"apiVersion": ar.api_version, "kind": ar.kind,
                              "metadata": {"resourceVersion": last.to_string()}});
            let _ = tx.send((Some(line("BOOKMARK", &mark)), last)).await;
        }
    });
    body(rx, seen)
}

/// The response body: the lines the watch's task sends, counted as seen as the reader
/// takes them.
fn body(mut rx: futures::channel::mpsc::Receiver<Item>, seen: Arc<AtomicU64>) -> WatchBody {
    // A line counts as seen only when the reader asks for the next one: kube decodes
    // one line per frame and hands it to its consumer before polling the body again, so
    // by then the consumer (an informer) has acted on it.
    let mut handed = 0u64;
    let stream = futures::stream::poll_fn(move |cx| {
        seen.fetch_max(handed, Ordering::SeqCst);
        loop {
            match rx.poll_next_unpin(cx) {
                std::task::Poll::Ready(Some((Some(bytes), rv))) => {
                    handed = rv;
                    return std::task::Poll::Ready(Some(Ok(Frame::data(bytes))));
                }
                // Filtered out for this watch: nothing to act on.
                std::task::Poll::Ready(Some((None, rv))) => {
                    handed = handed.max(rv);
                    seen.fetch_max(rv, Ordering::SeqCst);
                }
                std::task::Poll::Ready(None) => return std::task::Poll::Ready(None),
                std::task::Poll::Pending => return std::task::Poll::Pending,
            }
        }
    })
    .boxed();
    StreamBody::new(stream)
}

fn line(kind: &str, object: &Json) -> Bytes {
    let mut text = json!({"type": kind, "object": object}).to_string();
    text.push('\n');
    Bytes::from(text)
}

/// The line an event becomes for this watch, if any: an object that leaves the
/// selector is DELETED for it, one that enters is ADDED.
fn render(watch: &Watch, event: &Event) -> Option<Bytes> {
    let ar = &watch.target.resource.api_resource;
    if event.group != ar.group || event.plural != ar.plural {
        return None;
    }
    if let Some(ns) = &watch.target.namespace
        && *ns != event.namespace
    {
        return None;
    }
    let now = watch.selector.matches(&event.object);
    let before = event
        .previous
        .as_ref()
        .is_some_and(|p| watch.selector.matches(p));
    let kind = match (event.kind, before, now) {
        (EventType::Added, _, true) | (EventType::Modified, false, true) => "ADDED",
        (EventType::Modified, true, true) => "MODIFIED",
        (EventType::Modified, true, false)
        | (EventType::Deleted, true, _)
        | (EventType::Deleted, _, true) => "DELETED",
        _ => return None,
    };
    Some(line(kind, &event.object))
}
