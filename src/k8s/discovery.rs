//! Resolves kind names to API resources as kubectl does, from a cached discovery of the cluster.

use std::fmt;
use std::future::Future;
use std::sync::{Arc, PoisonError, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::APIResourceList;
use kube::Client;
use kube::discovery::ApiResource;
use tokio::time::Instant;

/// How long one discovery request may take before it is abandoned.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The minimum time between two discovery runs, so that a script looking up a misspelt
/// kind in a loop cannot hammer the API server.
const MIN_REFRESH_INTERVAL: Duration = Duration::from_secs(2);

/// How many close names an unknown-kind error offers.
const MAX_SUGGESTIONS: usize = 5;

/// Inputs longer than this cannot be a resource name (a DNS subdomain plus a resource
/// name); skipping suggestions for them keeps the edit distance cheap.
const MAX_SUGGESTION_INPUT: usize = 320;

/// Errors from discovery and kind resolution.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Listing the versions of the core API group (`GET /api`) failed.
    #[error("failed to list the core API versions: {0}")]
    ListCoreVersions(#[source] kube::Error),

    /// Listing the API groups (`GET /apis`) failed.
    #[error("failed to list the API groups: {0}")]
    ListGroups(#[source] kube::Error),

    /// Listing the resources of a group version failed.
    #[error("failed to list the resources of {group_version}: {source}")]
    ListResources {
        group_version: String,
        #[source]
        source: kube::Error,
    },

    /// A discovery request did not answer in time.
    #[error("timed out after {}s waiting for the API server to {request}", .timeout.as_secs())]
    Timeout { request: String, timeout: Duration },

    /// No resource of the cluster has this name, even after a fresh discovery.
    #[error("no resource type {kind:?} in the cluster{}", known_kinds(.suggestions))]
    UnknownKind {
        kind: String,
        /// Close names that do resolve, best first.
        suggestions: Vec<String>,
    },

    /// Several resources of the same group version answer to this name.
    #[error(
        "resource type {kind:?} is ambiguous: it matches {}; qualify it with a group",
        .candidates.join(", ")
    )]
    AmbiguousKind {
        kind: String,
        candidates: Vec<String>,
    },

    /// An `apiVersion` is neither `VERSION` nor `GROUP/VERSION`.
    #[error("invalid apiVersion {api_version:?}: expected \"VERSION\" or \"GROUP/VERSION\"")]
    InvalidApiVersion { api_version: String },

    /// No resource of the cluster has this kind in this `apiVersion`, even after a fresh
    /// discovery.
    #[error(
        "no resource type for kind {kind:?} in apiVersion {api_version:?} in the cluster{}",
        known_kinds(.suggestions)
    )]
    UnknownApiVersionKind {
        api_version: String,
        kind: String,
        /// Close `apiVersion Kind` pairs that do resolve, best first.
        suggestions: Vec<String>,
    },
}

fn known_kinds(suggestions: &[String]) -> String {
    if suggestions.is_empty() {
        String::new()
    } else {
        format!(" (known kinds include: {})", suggestions.join(", "))
    }
}

impl Error {
    /// Whether a fresh discovery could turn this error into a success.
    fn is_miss(&self) -> bool {
        matches!(
            self,
            Error::UnknownKind { .. } | Error::UnknownApiVersionKind { .. }
        )
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A resource type served by the cluster, in one version.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resource {
    /// Group, version, kind and plural, ready for kube's dynamic `Api`.
    pub api_resource: ApiResource,
    pub namespaced: bool,
    /// The verbs the resource supports (`get`, `list`, `watch`, ...).
    pub verbs: Vec<String>,
    pub short_names: Vec<String>,
    /// The singular name; guessed as the lowercase kind when discovery has none.
    pub singular: String,
    /// Subresource names, such as `status` and `scale`.
    pub subresources: Vec<String>,
}

impl Resource {
    /// The name kubectl accepts for this resource in any cluster: `plural.group`, or
    /// the plural alone in the core group.
    fn qualified_name(&self) -> String {
        let ar = &self.api_resource;
        if ar.group.is_empty() {
            ar.plural.clone()
        } else {
            format!("{}.{}", ar.plural, ar.group)
        }
    }

    fn in_group_version(&self, other: &Resource) -> bool {
        self.api_resource.group == other.api_resource.group
            && self.api_resource.version == other.api_resource.version
    }
}

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
    async fn rediscover(&self, seen_run: Option<u64>) -> Result<Arc<Snapshot>> {
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
            elapsed_ms = started.elapsed().as_millis() as u64,
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

fn api_version_of(group: &str, version: &str) -> String {
    if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    }
}

/// The resources of one group version, with their subresources (listed by discovery as
/// `deployments/status`) folded into them.
fn parse_resource_list(group: &str, version: &str, list: &APIResourceList) -> Vec<Resource> {
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
fn preferred(resources: &[Resource]) -> Vec<Resource> {
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

/// Finds the resource a kind name denotes, the way `kubectl get NAME` does.
///
/// `resources` holds every served version of every resource in priority order, as
/// discovery lists them. The name is read, in this order, as:
///
/// 1. `resource.version.group`, if it has two dots or more;
/// 2. `resource.group` or a bare `resource`, where a resource name is first a plural or
///    singular, then a short name, and the group matches exactly, or else as a prefix
///    (`deployments.app`, `hpa.autoscal`);
/// 3. `Kind.version.group`, `Kind.group` or a bare `Kind`.
///
/// The first reading that matches anything wins. If it matches several resources, the
/// one in the core group wins, then the one in the group version listed first (so
/// built-in groups beat CRDs, and a group's preferred version beats the others); two
/// different resources in that same group version are ambiguous. This is kubectl's
/// `PriorityRESTMapper` rule, which is why `events` and `ev` mean the core v1 Events
/// rather than `events.k8s.io`. All comparisons ignore case.
///
/// # Errors
///
/// [`Error::UnknownKind`] (with close names as suggestions) or [`Error::AmbiguousKind`].
pub fn find_kind<'a>(resources: &'a [Resource], kind: &str) -> Result<&'a Resource> {
    let unknown = || Error::UnknownKind {
        kind: kind.to_owned(),
        suggestions: suggest_kinds(resources, kind),
    };
    // Subresources are not kinds, and `group/version/resource` is not a kind name.
    if kind.is_empty() || kind.contains('/') {
        return Err(unknown());
    }

    let mut dotted = kind.splitn(3, '.');
    let versioned = match (dotted.next(), dotted.next(), dotted.next()) {
        (Some(name), Some(version), Some(group)) if !version.is_empty() && !group.is_empty() => {
            Some(Query {
                name,
                version: Some(version),
                group: Some(group),
            })
        }
        _ => None,
    };
    let unversioned = match kind.split_once('.') {
        Some((name, group)) => Query {
            name,
            version: None,
            // kubectl reads `pods.` as unqualified.
            group: Some(group).filter(|g| !g.is_empty()),
        },
        None => Query {
            name: kind,
            version: None,
            group: None,
        },
    };

    use GroupMatch::{Exact, Prefix};
    use NameForm::{Kind, Name, ShortName};
    // kubectl's order: resource names before kinds, the most specific reading first,
    // full names before short names, an exact group before a group prefix.
    let mut tiers: Vec<(Query<'_>, GroupMatch, NameForm)> = Vec::new();
    if let Some(q) = versioned {
        tiers.extend([(q, Exact, Name), (q, Exact, ShortName)]);
    }
    tiers.extend([(unversioned, Exact, Name), (unversioned, Exact, ShortName)]);
    if unversioned.group.is_some() {
        tiers.extend([
            (unversioned, Prefix, ShortName),
            (unversioned, Prefix, Name),
        ]);
    }
    if let Some(q) = versioned {
        tiers.push((q, Exact, Kind));
    }
    tiers.push((unversioned, Exact, Kind));

    for (query, group_match, form) in tiers {
        let hits: Vec<&Resource> = resources
            .iter()
            .filter(|r| query.admits(r, group_match) && form.matches(r, query.name))
            .collect();
        if !hits.is_empty() {
            return pick(resources, kind, &hits);
        }
    }
    Err(unknown())
}

/// One way of reading a kind name.
#[derive(Clone, Copy)]
struct Query<'a> {
    name: &'a str,
    version: Option<&'a str>,
    group: Option<&'a str>,
}

#[derive(Clone, Copy)]
enum GroupMatch {
    Exact,
    Prefix,
}

/// Which names of a resource a reading is compared with.
#[derive(Clone, Copy)]
enum NameForm {
    /// The plural or the singular.
    Name,
    ShortName,
    Kind,
}

impl NameForm {
    fn matches(self, r: &Resource, name: &str) -> bool {
        match self {
            NameForm::Name => {
                r.api_resource.plural.eq_ignore_ascii_case(name)
                    || r.singular.eq_ignore_ascii_case(name)
            }
            NameForm::ShortName => r.short_names.iter().any(|s| s.eq_ignore_ascii_case(name)),
            NameForm::Kind => r.api_resource.kind.eq_ignore_ascii_case(name),
        }
    }
}

impl Query<'_> {
    fn admits(&self, r: &Resource, group_match: GroupMatch) -> bool {
        let ar = &r.api_resource;
        let version_ok = self
            .version
            .is_none_or(|v| ar.version.eq_ignore_ascii_case(v));
        let group_ok = match (self.group, group_match) {
            (None, _) => true,
            (Some(g), GroupMatch::Exact) => ar.group.eq_ignore_ascii_case(g),
            (Some(g), GroupMatch::Prefix) => ar
                .group
                .as_bytes()
                .get(..g.len())
                .is_some_and(|p| p.eq_ignore_ascii_case(g.as_bytes())),
        };
        version_ok && group_ok
    }
}

/// Picks the highest-priority hit: core group first, then the group version that
/// `resources` lists first.
fn pick<'a>(resources: &'a [Resource], kind: &str, hits: &[&'a Resource]) -> Result<&'a Resource> {
    let rank = |r: &Resource| {
        let position = resources
            .iter()
            .position(|o| o.in_group_version(r))
            .unwrap_or(usize::MAX);
        (!r.api_resource.group.is_empty(), position)
    };
    let Some(best) = hits.iter().copied().min_by_key(|r| rank(r)) else {
        return Err(Error::UnknownKind {
            kind: kind.to_owned(),
            suggestions: Vec::new(),
        });
    };
    // A group version lists each resource once, so every tie is a different resource.
    let tied: Vec<&Resource> = hits
        .iter()
        .copied()
        .filter(|r| r.in_group_version(best))
        .collect();
    if tied.len() == 1 {
        return Ok(best);
    }
    Err(Error::AmbiguousKind {
        kind: kind.to_owned(),
        candidates: tied.iter().map(|r| r.qualified_name()).collect(),
    })
}

/// Finds the resource that serves `kind` in `api_version` (`v1`, `apps/v1`), for
/// manifests. The kind is compared exactly, as the API server does.
///
/// # Errors
///
/// [`Error::InvalidApiVersion`] or [`Error::UnknownApiVersionKind`].
pub fn find_api_version_kind<'a>(
    resources: &'a [Resource],
    api_version: &str,
    kind: &str,
) -> Result<&'a Resource> {
    let (group, version) = parse_api_version(api_version)?;
    resources
        .iter()
        .find(|r| {
            let ar = &r.api_resource;
            ar.group == group && ar.version == version && ar.kind == kind
        })
        .ok_or_else(|| Error::UnknownApiVersionKind {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
            suggestions: suggest_api_version_kinds(resources, group, kind),
        })
}

fn parse_api_version(api_version: &str) -> Result<(&str, &str)> {
    let (group, version) = api_version.split_once('/').unwrap_or(("", api_version));
    let valid = !version.is_empty()
        && !version.contains('/')
        && (group.is_empty() != api_version.contains('/'));
    if valid {
        Ok((group, version))
    } else {
        Err(Error::InvalidApiVersion {
            api_version: api_version.to_owned(),
        })
    }
}

/// Names close to `input` that resolve, as `plural.group`, best first.
fn suggest_kinds(resources: &[Resource], input: &str) -> Vec<String> {
    if input.len() > MAX_SUGGESTION_INPUT {
        return Vec::new();
    }
    let input = input.to_lowercase();
    let limit = suggestion_distance(&input);
    let mut scored: Vec<(usize, usize, String)> = preferred(resources)
        .iter()
        .enumerate()
        .filter_map(|(position, r)| {
            let ar = &r.api_resource;
            let kind = ar.kind.to_lowercase();
            let mut forms: Vec<String> = [ar.plural.as_str(), r.singular.as_str(), kind.as_str()]
                .into_iter()
                .chain(r.short_names.iter().map(String::as_str))
                .map(str::to_lowercase)
                .collect();
            if !ar.group.is_empty() {
                let qualified: Vec<String> =
                    forms.iter().map(|f| format!("{f}.{}", ar.group)).collect();
                forms.extend(qualified);
            }
            let score = forms
                .iter()
                .map(|f| {
                    if input.len() >= 3 && f.starts_with(&input) {
                        0
                    } else {
                        edit_distance(&input, f)
                    }
                })
                .min()?;
            (score <= limit).then(|| (score, position, r.qualified_name()))
        })
        .collect();
    scored.sort();
    scored
        .into_iter()
        .take(MAX_SUGGESTIONS)
        .map(|(_, _, name)| name)
        .collect()
}

/// `apiVersion Kind` pairs close to a missing one: the same kind in other versions or
/// groups, else close kinds of the same group.
fn suggest_api_version_kinds(resources: &[Resource], group: &str, kind: &str) -> Vec<String> {
    let show = |r: &Resource| format!("{} {}", r.api_resource.api_version, r.api_resource.kind);
    let same_kind: Vec<String> = resources
        .iter()
        .filter(|r| r.api_resource.kind.eq_ignore_ascii_case(kind))
        .map(show)
        .take(MAX_SUGGESTIONS)
        .collect();
    if !same_kind.is_empty() || kind.len() > MAX_SUGGESTION_INPUT {
        return same_kind;
    }
    let kind = kind.to_lowercase();
    let limit = suggestion_distance(&kind);
    let mut scored: Vec<(usize, usize, String)> = resources
        .iter()
        .enumerate()
        .filter(|(_, r)| r.api_resource.group == group)
        .filter_map(|(position, r)| {
            let score = edit_distance(&kind, &r.api_resource.kind.to_lowercase());
            (score <= limit).then(|| (score, position, show(r)))
        })
        .collect();
    scored.sort();
    scored
        .into_iter()
        .take(MAX_SUGGESTIONS)
        .map(|(_, _, s)| s)
        .collect()
}

/// How many edits still make a name "close": a third of its length, at least one.
fn suggestion_distance(input: &str) -> usize {
    (input.chars().count() / 3).max(1)
}

/// The Levenshtein distance between two strings, by characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut diagonal = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let substitution = diagonal + usize::from(ca != *cb);
            diagonal = row[j + 1];
            row[j + 1] = substitution.min(row[j] + 1).min(diagonal + 1);
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn list(group: &str, version: &str, resources: serde_json::Value) -> Vec<Resource> {
        let list: APIResourceList = serde_json::from_value(json!({
            "groupVersion": api_version_of(group, version),
            "resources": resources,
        }))
        .expect("valid APIResourceList");
        parse_resource_list(group, version, &list)
    }

    fn res(name: &str, singular: &str, kind: &str, short: &[&str]) -> serde_json::Value {
        json!({"name": name, "singularName": singular, "kind": kind, "namespaced": true,
               "verbs": ["get", "list", "watch"], "shortNames": short})
    }

    fn sub(name: &str, kind: &str) -> serde_json::Value {
        json!({"name": name, "singularName": "", "kind": kind, "namespaced": true, "verbs": ["get"]})
    }

    /// A cluster in the order discovery lists it: core, then built-in groups, then CRDs.
    fn cluster() -> Vec<Resource> {
        [
            list(
                "",
                "v1",
                json!([
                    res("pods", "pod", "Pod", &["po"]),
                    sub("pods/status", "Pod"),
                    sub("pods/log", "Pod"),
                    res("services", "service", "Service", &["svc"]),
                    res("configmaps", "configmap", "ConfigMap", &["cm"]),
                    res("events", "event", "Event", &["ev"]),
                    // An old server without singular names.
                    res("namespaces", "", "Namespace", &["ns"]),
                ]),
            ),
            list(
                "apps",
                "v1",
                json!([
                    res("deployments", "deployment", "Deployment", &["deploy"]),
                    sub("deployments/status", "Deployment"),
                    sub("deployments/scale", "Scale"),
                    res("statefulsets", "statefulset", "StatefulSet", &["sts"]),
                ]),
            ),
            list(
                "events.k8s.io",
                "v1",
                json!([res("events", "event", "Event", &["ev"])]),
            ),
            list(
                "autoscaling",
                "v2",
                json!([res(
                    "horizontalpodautoscalers",
                    "horizontalpodautoscaler",
                    "HorizontalPodAutoscaler",
                    &["hpa"]
                )]),
            ),
            list(
                "autoscaling",
                "v1",
                json!([res(
                    "horizontalpodautoscalers",
                    "horizontalpodautoscaler",
                    "HorizontalPodAutoscaler",
                    &["hpa"]
                )]),
            ),
            list(
                "example.com",
                "v1",
                json!([
                    res("people", "person", "Human", &["hu"]),
                    res("widgets", "widget", "Widget", &["wd"])
                ]),
            ),
            list(
                "other.example.com",
                "v1",
                json!([res("widgets", "widget", "Widget", &[])]),
            ),
            list(
                "clash.test",
                "v1",
                json!([
                    res("foos", "foo", "Foo", &["dup"]),
                    res("bars", "bar", "Bar", &["dup"])
                ]),
            ),
        ]
        .concat()
    }

    #[track_caller]
    fn resolves(kind: &str, api_version: &str, plural: &str) {
        let resources = cluster();
        let found = find_kind(&resources, kind).unwrap_or_else(|e| panic!("{kind}: {e}"));
        assert_eq!(
            (
                found.api_resource.api_version.as_str(),
                found.api_resource.plural.as_str()
            ),
            (api_version, plural),
            "{kind}"
        );
    }

    #[track_caller]
    fn unknown(kind: &str) -> Vec<String> {
        match find_kind(&cluster(), kind) {
            Err(Error::UnknownKind {
                kind: k,
                suggestions,
            }) => {
                assert_eq!(k, kind);
                suggestions
            }
            other => panic!("{kind}: expected UnknownKind, got {other:?}"),
        }
    }

    #[test]
    fn plural_singular_and_kind() {
        resolves("deployments", "apps/v1", "deployments");
        resolves("deployment", "apps/v1", "deployments");
        resolves("Deployment", "apps/v1", "deployments");
        resolves("pods", "v1", "pods");
        resolves("pod", "v1", "pods");
        resolves("ConfigMap", "v1", "configmaps");
        // A kind that is neither the plural nor the singular.
        resolves("Human", "example.com/v1", "people");
        resolves("person", "example.com/v1", "people");
    }

    #[test]
    fn singular_is_guessed_when_discovery_omits_it() {
        resolves("namespace", "v1", "namespaces");
        let resources = cluster();
        let ns = find_kind(&resources, "ns").unwrap();
        assert_eq!(ns.singular, "namespace");
    }

    #[test]
    fn short_names() {
        resolves("deploy", "apps/v1", "deployments");
        resolves("po", "v1", "pods");
        resolves("svc", "v1", "services");
        resolves("cm", "v1", "configmaps");
        resolves("hu", "example.com/v1", "people");
    }

    #[test]
    fn qualified_with_a_group() {
        resolves("deployments.apps", "apps/v1", "deployments");
        resolves("deployment.apps", "apps/v1", "deployments");
        resolves("Deployment.apps", "apps/v1", "deployments");
        resolves("deploy.apps", "apps/v1", "deployments");
        resolves("widgets.example.com", "example.com/v1", "widgets");
        resolves("Widget.example.com", "example.com/v1", "widgets");
        resolves(
            "widgets.other.example.com",
            "other.example.com/v1",
            "widgets",
        );
        resolves("Human.example.com", "example.com/v1", "people");
        resolves("events.events.k8s.io", "events.k8s.io/v1", "events");
        resolves("Event.events.k8s.io", "events.k8s.io/v1", "events");
        // A trailing dot qualifies nothing, as in kubectl.
        resolves("pods.", "v1", "pods");
    }

    #[test]
    fn qualified_with_a_group_prefix() {
        resolves("deployments.app", "apps/v1", "deployments");
        resolves("deploy.app", "apps/v1", "deployments");
        resolves("hpa.autoscal", "autoscaling/v2", "horizontalpodautoscalers");
        resolves("events.events", "events.k8s.io/v1", "events");
        resolves("Widget.example", "example.com/v1", "widgets");
        // An exact group beats a prefix of a longer one.
        resolves("widgets.example.com", "example.com/v1", "widgets");
    }

    #[test]
    fn qualified_with_a_version_and_group() {
        resolves("deployments.v1.apps", "apps/v1", "deployments");
        resolves("Deployment.v1.apps", "apps/v1", "deployments");
        resolves(
            "hpa.v1.autoscaling",
            "autoscaling/v1",
            "horizontalpodautoscalers",
        );
        // Unversioned, the preferred version wins.
        resolves("hpa", "autoscaling/v2", "horizontalpodautoscalers");
        resolves(
            "horizontalpodautoscalers.autoscaling",
            "autoscaling/v2",
            "horizontalpodautoscalers",
        );
    }

    #[test]
    fn case_is_ignored() {
        resolves("DEPLOYMENTS", "apps/v1", "deployments");
        resolves("dEpLoY", "apps/v1", "deployments");
        resolves("deployment", "apps/v1", "deployments");
        resolves("configmap", "v1", "configmaps");
        resolves("Deployments.APPS", "apps/v1", "deployments");
        resolves("PO", "v1", "pods");
        resolves("human", "example.com/v1", "people");
    }

    #[test]
    fn core_group_wins_over_others() {
        resolves("events", "v1", "events");
        resolves("event", "v1", "events");
        resolves("Event", "v1", "events");
        resolves("ev", "v1", "events");
        // Even if the slice lists the core group last.
        let mut reversed = cluster();
        reversed.reverse();
        let found = find_kind(&reversed, "events").unwrap();
        assert_eq!(found.api_resource.group, "");
    }

    #[test]
    fn earlier_group_wins_over_later_one() {
        resolves("widgets", "example.com/v1", "widgets");
        resolves("Widget", "example.com/v1", "widgets");
    }

    #[test]
    fn same_name_in_one_group_version_is_ambiguous() {
        match find_kind(&cluster(), "dup") {
            Err(e @ Error::AmbiguousKind { .. }) => {
                let msg = e.to_string();
                assert!(msg.contains("foos.clash.test"), "{msg}");
                assert!(msg.contains("bars.clash.test"), "{msg}");
            }
            other => panic!("expected AmbiguousKind, got {other:?}"),
        }
    }

    #[test]
    fn unknown_kind_suggests_close_names() {
        let suggestions = unknown("deploymnt");
        assert_eq!(
            suggestions.first().map(String::as_str),
            Some("deployments.apps")
        );
        let err = find_kind(&cluster(), "deploymnt").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("no resource type \"deploymnt\" in the cluster (known kinds include: deployments.apps"),
            "{err}"
        );
        assert_eq!(unknown("deployments.appz"), ["deployments.apps"]);
        assert!(unknown("widgit").contains(&"widgets.example.com".to_owned()));
    }

    #[test]
    fn unknown_kind_without_close_names_lists_none() {
        assert!(unknown("zzzzzzzzzzzz").is_empty());
        let err = find_kind(&cluster(), "zzzzzzzzzzzz").unwrap_err();
        assert_eq!(
            err.to_string(),
            "no resource type \"zzzzzzzzzzzz\" in the cluster"
        );
    }

    #[test]
    fn subresources_are_never_kinds() {
        unknown("deployments/status");
        unknown("pods/log");
        unknown("status");
        unknown("scale");
        unknown("Scale");
        let resources = cluster();
        let deployments = find_kind(&resources, "deploy").unwrap();
        assert_eq!(deployments.subresources, ["status", "scale"]);
        assert!(
            resources
                .iter()
                .all(|r| !r.api_resource.plural.contains('/'))
        );
    }

    #[test]
    fn wrong_group_or_version_does_not_match() {
        unknown("deployments.batch");
        unknown("deployments.v2.apps");
        // kubectl matches group prefixes for resource names only, not for kinds.
        unknown("Human.example");
    }

    #[test]
    fn odd_input_does_not_panic() {
        for input in [
            "",
            ".",
            "..",
            "...",
            ".apps",
            "a.b.c.d",
            "/",
            "ä.ö",
            "Ⅻ",
            "\0",
            " pods",
            "pods ",
            "deployments..apps",
            "é",
        ] {
            let _ = find_kind(&cluster(), input);
        }
        let long = "x".repeat(100_000);
        assert!(unknown(&long).is_empty());
    }

    #[test]
    fn api_version_and_kind() {
        let resources = cluster();
        let find = |v, k| find_api_version_kind(&resources, v, k).map(|r| r.api_resource.clone());
        let d = find("apps/v1", "Deployment").unwrap();
        assert_eq!(
            (d.plural.as_str(), d.version.as_str()),
            ("deployments", "v1")
        );
        assert_eq!(find("v1", "ConfigMap").unwrap().plural, "configmaps");
        assert_eq!(find("v1", "Event").unwrap().group, "");
        assert_eq!(
            find("events.k8s.io/v1", "Event").unwrap().group,
            "events.k8s.io"
        );
        // A non-preferred version resolves to exactly that version.
        assert_eq!(
            find("autoscaling/v1", "HorizontalPodAutoscaler")
                .unwrap()
                .version,
            "v1"
        );
        assert_eq!(
            find("autoscaling/v2", "HorizontalPodAutoscaler")
                .unwrap()
                .version,
            "v2"
        );
    }

    #[test]
    fn unknown_api_version_and_kind_suggest_served_ones() {
        let resources = cluster();
        let err = find_api_version_kind(&resources, "apps/v2", "Deployment").unwrap_err();
        assert_eq!(
            err.to_string(),
            "no resource type for kind \"Deployment\" in apiVersion \"apps/v2\" in the cluster \
             (known kinds include: apps/v1 Deployment)"
        );
        let err = find_api_version_kind(&resources, "apps/v1", "deployment").unwrap_err();
        assert!(err.to_string().contains("apps/v1 Deployment"), "{err}");
        let err = find_api_version_kind(&resources, "apps/v1", "StatefulSett").unwrap_err();
        assert!(err.to_string().contains("apps/v1 StatefulSet"), "{err}");
        assert!(err.is_miss());
    }

    #[test]
    fn malformed_api_versions_are_rejected() {
        let resources = cluster();
        for bad in ["", "/", "/v1", "apps/", "a/b/c"] {
            match find_api_version_kind(&resources, bad, "Deployment") {
                Err(Error::InvalidApiVersion { api_version }) => assert_eq!(api_version, bad),
                other => panic!("{bad:?}: expected InvalidApiVersion, got {other:?}"),
            }
        }
    }

    #[test]
    fn preferred_lists_each_resource_once_in_its_preferred_version() {
        let all = preferred(&cluster());
        let hpas: Vec<_> = all
            .iter()
            .filter(|r| r.api_resource.plural == "horizontalpodautoscalers")
            .collect();
        assert_eq!(hpas.len(), 1);
        assert_eq!(hpas[0].api_resource.version, "v2");
        assert_eq!(all[0].api_resource.group, "");
        assert_eq!(
            all.iter()
                .filter(|r| r.api_resource.plural == "events")
                .count(),
            2
        );
    }

    #[test]
    fn discovery_fields_are_kept() {
        let resources = cluster();
        let pods = find_kind(&resources, "pods").unwrap();
        assert!(pods.namespaced);
        assert_eq!(pods.verbs, ["get", "list", "watch"]);
        assert_eq!(pods.short_names, ["po"]);
        assert_eq!(pods.singular, "pod");
        assert_eq!(pods.subresources, ["status", "log"]);
        assert_eq!(pods.api_resource.kind, "Pod");
    }

    #[test]
    fn edit_distances() {
        assert_eq!(edit_distance("", ""), 0);
        assert_eq!(edit_distance("abc", ""), 3);
        assert_eq!(edit_distance("deploymnt", "deployment"), 1);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
    }

    #[test]
    fn discovery_is_send_and_sync() {
        fn assert_send_sync<T: Send + Sync>() {}
        fn assert_send<T: Send>(_: &T) {}
        assert_send_sync::<Discovery>();
        // Type-checks that the futures can be spawned; never runs.
        let _ = |d: Discovery| {
            assert_send(&d.resolve("pods"));
            assert_send(&d.resolve_gvk("v1", "Pod"));
            assert_send(&d.all());
        };
    }
}
