//! `k8s.watch`: list then watch a kind, delivering (event, object) pairs to the script
//! one at a time, read on the script's own thread.

use std::collections::VecDeque;

use futures::{StreamExt, TryStreamExt};
use kube::Api;
use kube::api::{DynamicObject, ListParams, WatchEvent, WatchParams};
use serde_json::Value as Json;

use super::ops::{Error, Result, Target};
use super::session::Session;

/// One watch event as scripts see it: "ADDED", "MODIFIED" or "DELETED", and the object.
pub type Event = (String, Json);

/// Objects one list page holds at most: a namespace of large objects is read a page
/// at a time, each within the script's memory budget, never all at once.
const PAGE: u32 = 100;

/// How long one list page may take.
const PAGE_TIMEOUT: std::time::Duration = std::time::Duration::from_mins(1);

/// Whether a list is under way.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Listing {
    /// The next page to read: the first (None), or the one a continue token names.
    Page(Option<String>),
    /// Listed; watching from the list's resourceVersion.
    Done,
}

type Events = futures::stream::BoxStream<'static, kube::Result<WatchEvent<DynamicObject>>>;

/// A watch, pulled by the script's own thread ([`Watch::next`] inside
/// `budget::block_on`): the lists and the events are read and decoded there, counted
/// against the script's memory and time budgets and its share of the worker pool,
/// never on the runtime's threads, which every other controller shares.
pub struct Watch {
    api: Api<DynamicObject>,
    target: Target,
    list_params: ListParams,
    watch_params: WatchParams,
    rv: String,
    listing: Listing,
    pending: VecDeque<Event>,
    events: Option<Events>,
}

impl Watch {
    /// A watch of `target`: existing objects arrive as ADDED, then changes. The server
    /// ends each watch every few seconds (the heartbeat that detects a dead connection)
    /// and the watch resumes from the last resourceVersion; a 410 Gone re-lists.
    pub fn new(session: &Session, target: Target, labels: Option<String>) -> Self {
        let mut list_params = ListParams::default().limit(PAGE);
        let mut watch_params = WatchParams::default().timeout(super::session::WATCH_TIMEOUT_SECS);
        if let Some(l) = &labels {
            list_params = list_params.labels(l);
            watch_params = watch_params.labels(l);
        }
        Watch {
            api: target.api(session),
            target,
            list_params,
            watch_params,
            rv: String::new(),
            listing: Listing::Page(None),
            pending: VecDeque::new(),
            events: None,
        }
    }

    /// The next event (None: never; a watch goes on until its caller stops).
    ///
    /// # Errors
    /// The API server's refusal, or an object that cannot be encoded.
    pub async fn next(&mut self) -> Result<Event> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Ok(event);
            }
            if let Listing::Page(token) = std::mem::replace(&mut self.listing, Listing::Done) {
                self.list_page(token).await?;
                continue;
            }
            let events = match &mut self.events {
                Some(e) => e,
                None => self
                    .events
                    .insert(self.api.watch(&self.watch_params, &self.rv).await?.boxed()),
            };
            let Some(ev) = events.try_next().await? else {
                // The server ended this watch: resume from where it was.
                self.events = None;
                continue;
            };
            let (kind, obj) = match ev {
                WatchEvent::Added(o) => ("ADDED", o),
                WatchEvent::Modified(o) => ("MODIFIED", o),
                WatchEvent::Deleted(o) => ("DELETED", o),
                WatchEvent::Bookmark(b) => {
                    self.rv = b.metadata.resource_version;
                    continue;
                }
                WatchEvent::Error(status) if status.code == 410 => {
                    self.events = None;
                    self.listing = Listing::Page(None);
                    continue;
                }
                WatchEvent::Error(status) => return Err(Error::Api(status)),
            };
            if let Some(v) = obj.metadata.resource_version.clone() {
                self.rv = v;
            }
            let obj = serde_json::to_value(obj).map_err(Error::Encode)?;
            return Ok((kind.to_owned(), self.target.complete(obj)));
        }
    }

    /// Reads one page of the list (from `token`), queueing its objects as ADDED.
    async fn list_page(&mut self, token: Option<String>) -> Result<()> {
        let mut params = self.list_params.clone();
        params.continue_token = token;
        let list = tokio::time::timeout(PAGE_TIMEOUT, self.api.list(&params))
            .await
            .map_err(|_| Error::Timeout(PAGE_TIMEOUT))??;
        let next = list.metadata.continue_.clone().filter(|c| !c.is_empty());
        if next.is_none() {
            self.rv = list.metadata.resource_version.clone().unwrap_or_default();
        }
        for item in list.items {
            let obj = serde_json::to_value(item).map_err(Error::Encode)?;
            self.pending
                .push_back(("ADDED".to_owned(), self.target.complete(obj)));
        }
        self.listing = next.map_or(Listing::Done, |t| Listing::Page(Some(t)));
        Ok(())
    }
}
