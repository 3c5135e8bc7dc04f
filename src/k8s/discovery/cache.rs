//! The discovery cache: one run lists every served resource, and a miss runs it again
//! at most every [`MIN_REFRESH_INTERVAL`].

use std::fmt;
use std::future::Future;
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList;
use kube::Client;
use kube::discovery::ApiResource;
use tokio::time::Instant;

use super::resolve::{find_api_version_kind, find_kind, parse_api_version};
use super::{Error, Resource, Result};

/// How long one discovery request may take before it is abandoned.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The minimum time between two discovery runs, so that a script looking up a misspelt
/// kind in a loop cannot hammer the API server.
const MIN_REFRESH_INTERVAL: Duration = Duration::from_secs(2);

/// A kind resolver backed by a lazily filled discovery cache. Clones share the cache.
#[derive(Clone)]
pub struct Discovery {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    // A std lock rather than tokio's: it is never held across an await, and it lets
    // `invalidate` stay synchronous.
    state: RwLock<State>,
    // Held for a whole discovery run, so that concurrent misses queue behind one run
    // and then share its result instead of each starting their own.
    running: tokio::sync::Mutex<()>,
    /// Where runs are spawned: the runtime the cache was made on, not the caller's (a
    /// handler thread's own runtime, `crate::k8s::local`, runs only while its call does).
    runtime: Option<tokio::runtime::Handle>,
}

#[derive(Default)]
struct State {
    snapshot: Option<Arc<Snapshot>>,
    last_run: Option<Instant>,
    runs: u64,
}

struct Snapshot {
    /// Every served version of every resource, in kubectl's priority order.
    resources: Vec<Resource>,
    /// When the run that produced this snapshot began: a lookup that began earlier
    /// cannot have missed anything this snapshot would show.
    started: Instant,
    run: u64,
}

impl fmt::Debug for Discovery {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let cached = self.state().snapshot.as_ref().map(|s| s.resources.len());
        f.debug_struct("Discovery")
            .field("cached_resources", &cached)
            .finish_non_exhaustive()
    }
}

impl Discovery {
    /// A resolver for the cluster behind `client`. Discovery runs on first use.
    pub fn new(client: Client) -> Self {
        Self {
            inner: Arc::new(Inner {
                client,
                state: RwLock::new(State::default()),
                running: tokio::sync::Mutex::new(()),
                runtime: tokio::runtime::Handle::try_current().ok(),
            }),
        }
    }

    /// Resolves a kind name the way `kubectl get NAME` does: a plural (`deployments`),
    /// singular (`deployment`), kind (`Deployment`) or short name (`deploy`), optionally
    /// qualified with a group (`deployments.apps`) or a prefix of one (`deployments.app`,
    /// `hpa.autoscal`), or with a version and group (`deployments.v1.apps`). Matching
    /// ignores case; subresources never match. See [`find_kind`] for the precedence.
    ///
    /// A name the cached discovery does not know triggers one fresh discovery (at most
    /// one every two seconds, waiting if needed) before failing, so that resources of
    /// CRDs created at run time resolve.
    ///
    /// # Errors
    ///
    /// [`Error::UnknownKind`] if no resource answers to `kind`, [`Error::AmbiguousKind`]
    /// if several do at the same priority, and the discovery errors ([`Error::ListGroups`],
    /// [`Error::Timeout`], ...) if the API server cannot be asked.
    pub async fn resolve(&self, kind: &str) -> Result<Resource> {
        self.lookup(|resources| find_kind(resources, kind).cloned())
            .await
    }

    /// Resolves the `apiVersion` and `kind` of a manifest to the resource that serves
    /// them, in exactly that version. The kind is case-sensitive, as in the API.
    ///
    /// Like [`Discovery::resolve`], a miss triggers one fresh discovery before failing.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidApiVersion`] if `api_version` is malformed,
    /// [`Error::UnknownApiVersionKind`] if the cluster does not serve that kind in that
    /// version, and the discovery errors if the API server cannot be asked.
    pub async fn resolve_gvk(&self, api_version: &str, kind: &str) -> Result<Resource> {
        // A malformed apiVersion is the caller's mistake; rediscovery cannot fix it.
        parse_api_version(api_version)?;
        self.lookup(|resources| find_api_version_kind(resources, api_version, kind).cloned())
            .await
    }

    /// Every resource type of the cluster, once each, in its preferred version: what
    /// `kubectl api-resources` lists. Core resources come first, then the groups in the
    /// order the API server lists them.
    ///
    /// # Errors
    ///
    /// The discovery errors ([`Error::ListGroups`], [`Error::Timeout`], ...) if the
    /// cache is empty and the API server cannot be asked.
    pub async fn all(&self) -> Result<Vec<Resource>> {
        let snapshot = self.snapshot().await?;
        Ok(preferred(&snapshot.resources))
    }

    /// Drops the cache: the next lookup runs discovery again (still at most one run
    /// every two seconds).
    pub fn invalidate(&self) {
        self.state_mut().snapshot = None;
    }

    /// [`invalidate`](Self::invalidate), unless the cache is younger than `age`: what
    /// untrusted input may ask for (an admission review naming an unknown kind), so
    /// that it cannot keep every other lookup waiting on rediscovery.
    pub fn invalidate_if_older(&self, age: std::time::Duration) {
        let mut state = self.state_mut();
        if state
            .snapshot
            .as_ref()
            .is_some_and(|s| s.started.elapsed() >= age)
        {
            state.snapshot = None;
        }
    }

    async fn lookup<F>(&self, find: F) -> Result<Resource>
    where
        F: Fn(&[Resource]) -> Result<Resource>,
    {
        let asked = Instant::now();
        let snapshot = self.snapshot().await?;
        match find(&snapshot.resources) {
            Err(e) if e.is_miss() && snapshot.started < asked => {
                tracing::debug!(error = %e, "kind not in the discovery cache; rediscovering");
            }
            found => return found,
        }
        let fresh = self.rediscover(Some(snapshot.run)).await?;
        find(&fresh.resources)
    }

    async fn snapshot(&self) -> Result<Arc<Snapshot>> {
        if let Some(snapshot) = self.state().snapshot.clone() {
            return Ok(snapshot);
        }
        self.rediscover(None).await
    }

    /// Runs discovery, unless another caller replaced the snapshot `seen_run` (or filled
    /// the empty cache) while this one waited its turn.
    ///
    /// On a task of its own: a run holds `running` for every caller, and the caller may
    /// be a script's thread, which can stop polling for good (parked by its memory
    /// budget) or drop the call at its deadline; the task ends and lets go either way.
    async fn rediscover(&self, seen_run: Option<u64>) -> Result<Arc<Snapshot>> {
        let this = self.clone();
        let run = async move { this.rediscover_here(seen_run).await };
        let task = match &self.inner.runtime {
            Some(rt) => rt.spawn(run),
            None => tokio::spawn(run),
        };
        task.await
            .unwrap_or_else(|e| Err(Error::RunDiscovery(e.to_string())))
    }

    async fn rediscover_here(&self, seen_run: Option<u64>) -> Result<Arc<Snapshot>> {
        let _running = self.inner.running.lock().await;
        let (current, last_run) = {
            let state = self.state();
            (state.snapshot.clone(), state.last_run)
        };
        if let Some(current) = current
            && Some(current.run) != seen_run
        {
            return Ok(current);
        }
        // Waiting rather than failing fast: a CRD created just after the last run must
        // still resolve, and the wait alone is what keeps a loop of misses cheap.
        if let Some(last_run) = last_run {
            tokio::time::sleep_until(last_run + MIN_REFRESH_INTERVAL).await;
        }
        let started = Instant::now();
        // Recorded before the run, so that failing runs are rate-limited too.
        self.state_mut().last_run = Some(started);
        let resources = discover(&self.inner.client).await?;
        tracing::debug!(
            resources = resources.len(),
            elapsed_ms = crate::duration::millis(started.elapsed()),
            "ran API discovery"
        );
        let mut state = self.state_mut();
        state.runs += 1;
        let snapshot = Arc::new(Snapshot {
            resources,
            started,
            run: state.runs,
        });
        state.snapshot = Some(snapshot.clone());
        Ok(snapshot)
    }

    // The state stays consistent even if a holder panicked (every write is a single
    // assignment), so a poisoned lock is safe to use.
    fn state(&self) -> RwLockReadGuard<'_, State> {
        self.inner
            .state
            .read()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn state_mut(&self) -> RwLockWriteGuard<'_, State> {
        self.inner
            .state
            .write()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// Lists every served version of every group, in kubectl's priority order: the core
/// group, then the groups in the order `/apis` lists them (the aggregator sorts them by
/// priority, so built-in groups come before CRD and aggregated ones), each group's
/// preferred version first.
async fn discover(client: &Client) -> Result<Vec<Resource>> {
    let (core, groups) = futures::try_join!(
        request(
            || "list the core API versions".into(),
            client.list_core_api_versions(),
            Error::ListCoreVersions,
        ),
        request(
            || "list the API groups".into(),
            client.list_api_groups(),
            Error::ListGroups,
        ),
    )?;

    let mut group_versions: Vec<(String, String)> = core
        .versions
        .into_iter()
        .map(|version| (String::new(), version))
        .collect();
    for group in groups.groups {
        let preferred = group.preferred_version.map(|p| p.version);
        if let Some(preferred) = &preferred {
            group_versions.push((group.name.clone(), preferred.clone()));
        }
        for v in group.versions {
            if Some(&v.version) != preferred.as_ref() {
                group_versions.push((group.name.clone(), v.version));
            }
        }
    }

    let lists =
        futures::future::join_all(group_versions.iter().map(|(group, version)| async move {
            let gv = api_version_of(group, version);
            let describe = || format!("list the resources of {gv}");
            let wrap = |source| Error::ListResources {
                group_version: gv.clone(),
                source,
            };
            let list = if group.is_empty() {
                request(describe, client.list_core_api_resources(version), wrap).await
            } else {
                request(describe, client.list_api_group_resources(&gv), wrap).await
            };
            (group, version, list)
        }))
        .await;

    let mut resources = Vec::new();
    for (group, version, list) in lists {
        match list {
            Ok(list) => resources.extend(parse_resource_list(group, version, &list)),
            // Without the core group nothing works; report it rather than limp on.
            Err(e) if group.is_empty() => return Err(e),
            // One aggregated API being down must not stop every other kind resolving,
            // as kubectl also carries on.
            Err(e) => tracing::warn!(
                group_version = %api_version_of(group, version),
                error = %e,
                "skipping a group version whose resources cannot be listed"
            ),
        }
    }
    Ok(resources)
}

/// Awaits one discovery request with a deadline.
async fn request<T>(
    describe: impl FnOnce() -> String,
    call: impl Future<Output = kube::Result<T>>,
    wrap: impl FnOnce(kube::Error) -> Error,
) -> Result<T> {
    match tokio::time::timeout(REQUEST_TIMEOUT, call).await {
        Ok(result) => result.map_err(wrap),
        Err(_elapsed) => Err(Error::Timeout {
            request: describe(),
            timeout: REQUEST_TIMEOUT,
        }),
    }
}

pub(super) fn api_version_of(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    }
}

/// The resources of one group version, with their subresources (listed by discovery as
/// `deployments/status`) folded into them.
pub(super) fn parse_resource_list(
    group: &str,
    version: &str,
    list: &APIResourceList,
) -> Vec<Resource> {
    let api_version = api_version_of(group, version);
    let mut resources: Vec<Resource> = list
        .resources
        .iter()
        .filter(|r| !r.name.contains('/') && !r.name.is_empty())
        .map(|r| Resource {
            api_resource: ApiResource {
                group: group.to_owned(),
                version: version.to_owned(),
                api_version: api_version.clone(),
                kind: r.kind.clone(),
                plural: r.name.clone(),
            },
            namespaced: r.namespaced,
            verbs: r.verbs.clone(),
            short_names: r.short_names.clone().unwrap_or_default(),
            // What kubectl guesses for servers that omit the singular name.
            singular: if r.singular_name.is_empty() {
                r.kind.to_lowercase()
            } else {
                r.singular_name.clone()
            },
            subresources: Vec::new(),
        })
        .collect();
    for r in &list.resources {
        let Some((parent, sub)) = r.name.split_once('/') else {
            continue;
        };
        if let Some(owner) = resources
            .iter_mut()
            .find(|o| o.api_resource.plural == parent)
            && !owner.subresources.iter().any(|s| s == sub)
        {
            owner.subresources.push(sub.to_owned());
        }
    }
    resources
}

/// One resource per group and plural, in its preferred version, core group first.
pub(super) fn preferred(resources: &[Resource]) -> Vec<Resource> {
    let mut seen = std::collections::HashSet::new();
    let (core, rest): (Vec<&Resource>, Vec<&Resource>) = resources
        .iter()
        .partition(|r| r.api_resource.group.is_empty());
    core.into_iter()
        .chain(rest)
        .filter(|r| {
            seen.insert((
                r.api_resource.group.as_str(),
                r.api_resource.plural.as_str(),
            ))
        })
        .cloned()
        .collect()
}
