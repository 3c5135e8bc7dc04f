//! The two resources the operator runs, seen one way: a `StarlarkController`, confined
//! to its namespace, and a `ClusterStarlarkController`, whose identity lives in the
//! operator's namespace and may reach further.

use std::fmt::Debug;

use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::registry::Key;
use super::resource::{ClusterStarlarkController, StarlarkController, StarlarkControllerSpec};

/// A controller resource the operator hosts.
pub trait Tenant:
    Resource<DynamicType = ()> + Clone + Debug + DeserializeOwned + Serialize + Send + Sync + 'static
{
    /// The kind, for messages and owner references.
    const KIND: &'static str;
    /// Confined to its own namespace (a StarlarkController).
    const CONFINED: bool;

    /// The spec, which both kinds share.
    fn common_spec(&self) -> StarlarkControllerSpec;

    /// The replica that claimed it (`status.replica`, with `--shards`).
    fn replica(&self) -> Option<&str>;

    /// The API this object lives in.
    fn api_of(&self, client: &kube::Client) -> Api<Self>;

    /// The API of every object of this kind, or of those in `namespace`.
    fn api_all(client: &kube::Client, namespace: Option<&str>) -> Api<Self>;

    /// The registry key: `(namespace, name)`, with an empty namespace for the
    /// cluster-scoped kind (a namespaced object always has one).
    fn key(&self) -> Key {
        (self.namespace().unwrap_or_default(), self.name_any())
    }

    /// Where its ServiceAccount, its scriptFrom ConfigMap and its default namespace
    /// are: its own namespace, or the operator's (`operator_namespace`).
    fn home(&self, operator_namespace: &str) -> String {
        match self.namespace() {
            Some(ns) if Self::CONFINED => ns,
            _ => operator_namespace.to_owned(),
        }
    }

    /// `namespace/name`, or the name alone for the cluster-scoped kind.
    fn display(&self) -> String {
        match self.namespace() {
            Some(ns) => format!("{ns}/{}", self.name_any()),
            None => self.name_any(),
        }
    }
}

impl Tenant for StarlarkController {
    const KIND: &'static str = "StarlarkController";
    const CONFINED: bool = true;

    fn common_spec(&self) -> StarlarkControllerSpec {
        self.spec.clone()
    }

    fn replica(&self) -> Option<&str> {
        self.status.as_ref().and_then(|s| s.replica.as_deref())
    }

    fn api_of(&self, client: &kube::Client) -> Api<Self> {
        Api::namespaced(client.clone(), &self.namespace().unwrap_or_default())
    }

    fn api_all(client: &kube::Client, namespace: Option<&str>) -> Api<Self> {
        match namespace {
            Some(ns) => Api::namespaced(client.clone(), ns),
            None => Api::all(client.clone()),
        }
    }
}

impl Tenant for ClusterStarlarkController {
    const KIND: &'static str = "ClusterStarlarkController";
    const CONFINED: bool = false;

    fn common_spec(&self) -> StarlarkControllerSpec {
        self.spec.clone().into()
    }

    fn replica(&self) -> Option<&str> {
        self.status.as_ref().and_then(|s| s.replica.as_deref())
    }

    fn api_of(&self, client: &kube::Client) -> Api<Self> {
        Api::all(client.clone())
    }

    fn api_all(client: &kube::Client, _namespace: Option<&str>) -> Api<Self> {
        Api::all(client.clone())
    }
}

/// Whether a registry key belongs to a ClusterStarlarkController.
pub fn is_cluster_key(key: &Key) -> bool {
    key.0.is_empty()
}
