//! The kinds the fake serves: kite's built-in catalog, plus each CRD created in it.

use serde_json::Value as Json;

use crate::k8s::discovery::Resource;
use crate::rbac::Catalog;

/// The served resource types.
#[derive(Clone, Debug)]
pub struct Kinds {
    catalog: Catalog,
}

impl Kinds {
    pub fn new() -> Self {
        Self {
            catalog: Catalog::builtin(),
        }
    }

    /// Every served resource, core group first.
    pub fn resources(&self) -> &[Resource] {
        self.catalog.resources()
    }

    /// The resource a path names (`/apis/{group}/{version}/{plural}`). Any version of
    /// the group matches: the fake keeps one version per kind.
    pub fn by_plural(&self, group: &str, plural: &str) -> Option<&Resource> {
        self.resources()
            .iter()
            .find(|r| r.api_resource.group == group && r.api_resource.plural == plural)
    }

    /// The resource an object's `apiVersion` and `kind` name.
    pub fn by_kind(&self, api_version: &str, kind: &str) -> Option<&Resource> {
        let group = api_version.rsplit_once('/').map_or("", |(g, _)| g);
        self.resources()
            .iter()
            .find(|r| r.api_resource.group == group && r.api_resource.kind == kind)
    }

    /// Serves the kind a CustomResourceDefinition defines.
    ///
    /// # Errors
    /// What the definition lacks (group, names, versions).
    pub fn add_crd(&mut self, crd: &Json) -> Result<(), String> {
        self.catalog.add_crd(crd).map(drop)
    }
}

/// Whether writes to the main resource leave `.status` alone (a `status` subresource).
pub fn has_status(resource: &Resource) -> bool {
    resource.subresources.iter().any(|s| s == "status")
}
