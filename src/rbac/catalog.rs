//! The kinds inference can name without a cluster: core kinds, CRDs, and discovery.

use std::path::Path;

use kube::discovery::ApiResource;
use serde_json::Value as Json;

use super::{Error, Result};
use crate::k8s::discovery::{self, Resource};

/// `(group, version, Kind, plural, short names, namespaced, has a status subresource)`.
type Row = (
    &'static str,
    &'static str,
    &'static str,
    &'static str,
    &'static [&'static str],
    bool,
    bool,
);

/// The built-in kinds of Kubernetes 1.37 that scripts touch, core group first so that
/// `events` means core/v1 Events as it does for kubectl.
const BUILTIN: &[Row] = &[
    ("", "v1", "Pod", "pods", &["po"], true, true),
    ("", "v1", "Service", "services", &["svc"], true, true),
    ("", "v1", "ConfigMap", "configmaps", &["cm"], true, false),
    ("", "v1", "Secret", "secrets", &[], true, false),
    ("", "v1", "Namespace", "namespaces", &["ns"], false, true),
    ("", "v1", "Node", "nodes", &["no"], false, true),
    (
        "",
        "v1",
        "PersistentVolumeClaim",
        "persistentvolumeclaims",
        &["pvc"],
        true,
        true,
    ),
    (
        "",
        "v1",
        "PersistentVolume",
        "persistentvolumes",
        &["pv"],
        false,
        true,
    ),
    (
        "",
        "v1",
        "ServiceAccount",
        "serviceaccounts",
        &["sa"],
        true,
        false,
    ),
    ("", "v1", "Endpoints", "endpoints", &["ep"], true, false),
    ("", "v1", "Event", "events", &["ev"], true, false),
    (
        "",
        "v1",
        "LimitRange",
        "limitranges",
        &["limits"],
        true,
        false,
    ),
    (
        "",
        "v1",
        "ResourceQuota",
        "resourcequotas",
        &["quota"],
        true,
        true,
    ),
    (
        "",
        "v1",
        "ReplicationController",
        "replicationcontrollers",
        &["rc"],
        true,
        true,
    ),
    ("", "v1", "PodTemplate", "podtemplates", &[], true, false),
    (
        "apps",
        "v1",
        "Deployment",
        "deployments",
        &["deploy"],
        true,
        true,
    ),
    (
        "apps",
        "v1",
        "StatefulSet",
        "statefulsets",
        &["sts"],
        true,
        true,
    ),
    ("apps", "v1", "DaemonSet", "daemonsets", &["ds"], true, true),
    (
        "apps",
        "v1",
        "ReplicaSet",
        "replicasets",
        &["rs"],
        true,
        true,
    ),
    (
        "apps",
        "v1",
        "ControllerRevision",
        "controllerrevisions",
        &[],
        true,
        false,
    ),
    ("batch", "v1", "Job", "jobs", &[], true, true),
    ("batch", "v1", "CronJob", "cronjobs", &["cj"], true, true),
    (
        "autoscaling",
        "v2",
        "HorizontalPodAutoscaler",
        "horizontalpodautoscalers",
        &["hpa"],
        true,
        true,
    ),
    (
        "networking.k8s.io",
        "v1",
        "Ingress",
        "ingresses",
        &["ing"],
        true,
        true,
    ),
    (
        "networking.k8s.io",
        "v1",
        "NetworkPolicy",
        "networkpolicies",
        &["netpol"],
        true,
        false,
    ),
    (
        "networking.k8s.io",
        "v1",
        "IngressClass",
        "ingressclasses",
        &[],
        false,
        false,
    ),
    (
        "policy",
        "v1",
        "PodDisruptionBudget",
        "poddisruptionbudgets",
        &["pdb"],
        true,
        true,
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "Role",
        "roles",
        &[],
        true,
        false,
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "RoleBinding",
        "rolebindings",
        &[],
        true,
        false,
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRole",
        "clusterroles",
        &[],
        false,
        false,
    ),
    (
        "rbac.authorization.k8s.io",
        "v1",
        "ClusterRoleBinding",
        "clusterrolebindings",
        &[],
        false,
        false,
    ),
    (
        "coordination.k8s.io",
        "v1",
        "Lease",
        "leases",
        &[],
        true,
        false,
    ),
    (
        "discovery.k8s.io",
        "v1",
        "EndpointSlice",
        "endpointslices",
        &[],
        true,
        false,
    ),
    (
        "events.k8s.io",
        "v1",
        "Event",
        "events",
        &["ev"],
        true,
        false,
    ),
    (
        "storage.k8s.io",
        "v1",
        "StorageClass",
        "storageclasses",
        &["sc"],
        false,
        false,
    ),
    (
        "scheduling.k8s.io",
        "v1",
        "PriorityClass",
        "priorityclasses",
        &["pc"],
        false,
        false,
    ),
    (
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        &["crd", "crds"],
        false,
        true,
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingWebhookConfiguration",
        "validatingwebhookconfigurations",
        &[],
        false,
        false,
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        "MutatingWebhookConfiguration",
        "mutatingwebhookconfigurations",
        &[],
        false,
        false,
    ),
    // Kinds the k8s.obj builders make (Gateway API ones come from its standard CRDs).
    (
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingAdmissionPolicy",
        "validatingadmissionpolicies",
        &[],
        false,
        true,
    ),
    (
        "admissionregistration.k8s.io",
        "v1",
        "ValidatingAdmissionPolicyBinding",
        "validatingadmissionpolicybindings",
        &[],
        false,
        false,
    ),
    (
        "admissionregistration.k8s.io",
        "v1alpha1",
        "MutatingAdmissionPolicy",
        "mutatingadmissionpolicies",
        &[],
        false,
        false,
    ),
    (
        "admissionregistration.k8s.io",
        "v1alpha1",
        "MutatingAdmissionPolicyBinding",
        "mutatingadmissionpolicybindings",
        &[],
        false,
        false,
    ),
    (
        "resource.k8s.io",
        "v1",
        "DeviceClass",
        "deviceclasses",
        &[],
        false,
        false,
    ),
    (
        "resource.k8s.io",
        "v1",
        "ResourceClaim",
        "resourceclaims",
        &[],
        true,
        true,
    ),
    (
        "resource.k8s.io",
        "v1",
        "ResourceClaimTemplate",
        "resourceclaimtemplates",
        &[],
        true,
        false,
    ),
    (
        "resource.k8s.io",
        "v1",
        "ResourceSlice",
        "resourceslices",
        &[],
        false,
        false,
    ),
    (
        "gateway.networking.k8s.io",
        "v1",
        "GatewayClass",
        "gatewayclasses",
        &[],
        false,
        true,
    ),
    (
        "gateway.networking.k8s.io",
        "v1",
        "Gateway",
        "gateways",
        &[],
        true,
        true,
    ),
    (
        "gateway.networking.k8s.io",
        "v1",
        "HTTPRoute",
        "httproutes",
        &[],
        true,
        true,
    ),
    (
        "gateway.networking.k8s.io",
        "v1",
        "GRPCRoute",
        "grpcroutes",
        &[],
        true,
        true,
    ),
    (
        "gateway.networking.k8s.io",
        "v1",
        "ReferenceGrant",
        "referencegrants",
        &[],
        true,
        false,
    ),
];

/// Names of a kind, for [`resource`].
struct Names<'a> {
    kind: &'a str,
    plural: &'a str,
    singular: Option<&'a str>,
    short: Vec<String>,
}

fn resource(group: &str, version: &str, names: Names, namespaced: bool, status: bool) -> Resource {
    let Names {
        kind,
        plural,
        singular,
        short,
    } = names;
    let api_version = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    Resource {
        api_resource: ApiResource {
            group: group.to_owned(),
            version: version.to_owned(),
            api_version,
            kind: kind.to_owned(),
            plural: plural.to_owned(),
        },
        namespaced,
        verbs: [
            "get", "list", "watch", "create", "update", "patch", "delete",
        ]
        .map(String::from)
        .to_vec(),
        short_names: short,
        singular: singular.map_or_else(|| kind.to_lowercase(), str::to_owned),
        subresources: if status {
            vec!["status".into()]
        } else {
            vec![]
        },
    }
}

/// The kinds a script may name, resolved with kubectl's rules.
#[derive(Clone, Debug)]
pub struct Catalog {
    known: Vec<Resource>,
    /// The cluster's own resources, consulted when `known` has no match.
    discovered: Vec<Resource>,
}

impl Default for Catalog {
    fn default() -> Self {
        Self::builtin()
    }
}

impl Catalog {
    /// The built-in core kinds.
    pub fn builtin() -> Self {
        let known = BUILTIN
            .iter()
            .map(|&(g, v, k, p, short, ns, status)| {
                let short = short.iter().map(|s| (*s).to_owned()).collect();
                resource(
                    g,
                    v,
                    Names {
                        kind: k,
                        plural: p,
                        singular: None,
                        short,
                    },
                    ns,
                    status,
                )
            })
            .collect();
        Catalog {
            known,
            discovered: Vec::new(),
        }
    }

    /// Adds the kind a CustomResourceDefinition manifest defines.
    ///
    /// # Errors
    /// A description of what the manifest lacks.
    pub fn add_crd(&mut self, crd: &Json) -> Result<String, String> {
        if crd["kind"] != "CustomResourceDefinition" {
            return Err(format!(
                "kind is {}, not CustomResourceDefinition",
                crd["kind"]
            ));
        }
        let spec = &crd["spec"];
        let text = |v: &Json, what: &str| {
            v.as_str()
                .filter(|s| !s.is_empty())
                .map(str::to_owned)
                .ok_or_else(|| format!("spec.{what} is missing"))
        };
        let group = text(&spec["group"], "group")?;
        let names = &spec["names"];
        let kind = text(&names["kind"], "names.kind")?;
        let plural = text(&names["plural"], "names.plural")?;
        let versions = spec["versions"].as_array().cloned().unwrap_or_default();
        let chosen = versions
            .iter()
            .find(|v| v["storage"] == true)
            .or_else(|| versions.first())
            .ok_or("spec.versions is empty")?;
        let version = text(&chosen["name"], "versions[].name")?;
        let short = names["shortNames"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default();
        let namespaced = spec["scope"].as_str().unwrap_or("Namespaced") == "Namespaced";
        let status = chosen["subresources"]["status"].is_object();
        let singular = names["singular"].as_str().filter(|s| !s.is_empty());
        self.known
            .retain(|r| !(r.api_resource.group == group && r.api_resource.plural == plural));
        let names = Names {
            kind: &kind,
            plural: &plural,
            singular,
            short,
        };
        self.known
            .push(resource(&group, &version, names, namespaced, status));
        Ok(format!("{plural}.{group}"))
    }

    /// The built-in kinds and CRDs known so far (not the discovered ones).
    pub fn resources(&self) -> &[Resource] {
        &self.known
    }

    /// Adds every CustomResourceDefinition in a YAML file (other documents are ignored).
    ///
    /// # Errors
    /// [`Error::Read`], or [`Error::Crd`] for a file without a valid CRD.
    pub fn add_crd_file(&mut self, path: &Path) -> Result<()> {
        let text = std::fs::read_to_string(path).map_err(|source| Error::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let crd_err = |message: String| Error::Crd {
            path: path.to_path_buf(),
            message,
        };
        let docs = crate::script::yaml::parse_yaml(&text).map_err(|e| crd_err(e.to_string()))?;
        let mut added = 0;
        for doc in docs
            .iter()
            .filter(|d| d["kind"] == "CustomResourceDefinition")
        {
            self.add_crd(doc).map_err(crd_err)?;
            added += 1;
        }
        if added == 0 {
            return Err(crd_err("no CustomResourceDefinition in it".into()));
        }
        Ok(())
    }

    /// Adds the cluster's discovered resources, used for names nothing else knows.
    pub fn add_discovered(&mut self, resources: Vec<Resource>) {
        self.discovered = resources;
    }

    /// The resource a kind name (plural, singular, Kind, short name, `plural.group`) means.
    ///
    /// # Errors
    /// The resolver's message, with suggestions, when nothing matches.
    pub fn resolve(&self, kind: &str) -> Result<&Resource, String> {
        match discovery::find_kind(&self.known, kind) {
            Ok(r) => Ok(r),
            Err(first) => {
                discovery::find_kind(&self.discovered, kind).map_err(|_| first.to_string())
            }
        }
    }

    /// The resource an `apiVersion` and `kind` mean.
    ///
    /// # Errors
    /// The resolver's message when nothing matches.
    pub fn resolve_gvk(&self, api_version: &str, kind: &str) -> Result<&Resource, String> {
        match discovery::find_api_version_kind(&self.known, api_version, kind) {
            Ok(r) => Ok(r),
            Err(first) => discovery::find_api_version_kind(&self.discovered, api_version, kind)
                .map_err(|_| first.to_string()),
        }
    }
}

/// The cluster's resources, when a cluster is configured and answers within a few
/// seconds; otherwise none (inference then knows only the built-in kinds and CRDs).
pub fn discover(kube: &crate::k8s::session::KubeOptions) -> Vec<Resource> {
    let Ok(rt) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return Vec::new();
    };
    rt.block_on(async {
        let attempt = async {
            let key = crate::k8s::session::SessionKey::default();
            let session = crate::k8s::session::Session::connect(&key, kube)
                .await
                .ok()?;
            session.discovery.all().await.ok()
        };
        tokio::time::timeout(std::time::Duration::from_secs(5), attempt)
            .await
            .ok()
            .flatten()
            .unwrap_or_default()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn resolves_like_kubectl() {
        let c = Catalog::builtin();
        for name in [
            "deployments",
            "deployment",
            "Deployment",
            "deploy",
            "deployments.apps",
        ] {
            assert_eq!(
                c.resolve(name).unwrap().api_resource.plural,
                "deployments",
                "{name}"
            );
        }
        assert_eq!(c.resolve("events").unwrap().api_resource.group, "");
        assert_eq!(c.resolve("ev").unwrap().api_resource.group, "");
        assert_eq!(
            c.resolve("events.events.k8s.io")
                .unwrap()
                .api_resource
                .group,
            "events.k8s.io"
        );
        assert!(!c.resolve("ns").unwrap().namespaced);
        assert!(c.resolve("widgets").unwrap_err().contains("widgets"));
        assert_eq!(
            c.resolve_gvk("apps/v1", "Deployment")
                .unwrap()
                .api_resource
                .plural,
            "deployments"
        );
    }

    #[test]
    fn crds_add_kinds() {
        let mut c = Catalog::builtin();
        let crd = json!({"kind": "CustomResourceDefinition", "spec": {
            "group": "tutorial.starkite.io", "scope": "Namespaced",
            "names": {"kind": "StaticSite", "plural": "staticsites", "shortNames": ["ss"]},
            "versions": [{"name": "v1", "storage": true, "subresources": {"status": {}}}]}});
        assert_eq!(c.add_crd(&crd).unwrap(), "staticsites.tutorial.starkite.io");
        let r = c.resolve("ss").unwrap();
        assert_eq!(r.api_resource.kind, "StaticSite");
        assert!(r.subresources.contains(&"status".to_owned()));
        assert!(c.resolve("staticsite").is_ok());
        let bad = json!({"kind": "CustomResourceDefinition", "spec": {"group": "x"}});
        assert_eq!(c.add_crd(&bad).unwrap_err(), "spec.names.kind is missing");
    }
}
