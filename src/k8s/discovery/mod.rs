//! Resolves kind names to API resources as kubectl does, from a cached discovery of the
//! cluster: the [`Discovery`] cache (`cache`), kubectl's resolution rules
//! (`resolve`), and close names for a miss (`suggest`).

mod cache;
mod resolve;
mod suggest;
#[cfg(test)]
mod tests;

use std::time::Duration;

use kube::discovery::ApiResource;

pub use cache::Discovery;
pub use resolve::{find_api_version_kind, find_kind};

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

    /// The discovery run's task ended without an answer (the runtime shutting down).
    #[error("API discovery stopped: {0}")]
    RunDiscovery(String),

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
