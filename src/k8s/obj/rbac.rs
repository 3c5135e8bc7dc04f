//! RBAC builders: role, cluster_role, policy_rule, role_binding and cluster_role_binding.

use anyhow::Result;
use serde_json::{Value as Json, json};

use super::args::{Args, Builder, Obj, Put, manifest};

const RBAC: &str = "rbac.authorization.k8s.io/v1";

pub(super) const ROLE: Builder = Builder {
    name: "role",
    keywords: &["name", "namespace", "labels", "annotations", "rules"],
    positional: Some("name"),
    build: role,
};

pub(super) const CLUSTER_ROLE: Builder = Builder {
    name: "cluster_role",
    keywords: &["name", "labels", "annotations", "rules", "aggregation_rule"],
    positional: Some("name"),
    build: cluster_role,
};

pub(super) const POLICY_RULE: Builder = Builder {
    name: "policy_rule",
    keywords: &[
        "api_groups",
        "resources",
        "verbs",
        "resource_names",
        "non_resource_urls",
    ],
    positional: None,
    build: policy_rule,
};

pub(super) const ROLE_BINDING: Builder = Builder {
    name: "role_binding",
    keywords: &[
        "name",
        "namespace",
        "labels",
        "annotations",
        "role",
        "role_kind",
        "subjects",
    ],
    positional: Some("name"),
    build: role_binding,
};

pub(super) const CLUSTER_ROLE_BINDING: Builder = Builder {
    name: "cluster_role_binding",
    keywords: &["name", "labels", "annotations", "role", "subjects"],
    positional: Some("name"),
    build: cluster_role_binding,
};

fn role(a: &Args) -> Result<Json> {
    let mut m = manifest(RBAC, "Role", a.metadata(None)?);
    m.insert(
        "rules".into(),
        a.objects("rules")?.unwrap_or_default().into(),
    );
    Ok(m.into())
}

fn cluster_role(a: &Args) -> Result<Json> {
    let mut m = manifest(RBAC, "ClusterRole", a.metadata(None)?);
    let aggregation = a.object("aggregation_rule")?;
    // An aggregated role's rules are the controller's to fill in.
    if aggregation.is_none() || a.has("rules") {
        m.insert(
            "rules".into(),
            a.objects("rules")?.unwrap_or_default().into(),
        );
    }
    m.put("aggregationRule", aggregation);
    Ok(m.into())
}

fn policy_rule(a: &Args) -> Result<Json> {
    let mut r = Obj::new();
    let resources = a.strs("resources")?;
    // Resource rules need an API group; the core group is the common case.
    let groups = a.strs("api_groups")?;
    let groups = groups.or_else(|| resources.as_ref().map(|_| vec![Json::from("")]));
    r.put("apiGroups", groups);
    r.put("resources", resources);
    r.insert("verbs".into(), a.req("verbs", a.strs("verbs"))?.into());
    r.put("resourceNames", a.strs("resource_names")?);
    r.put("nonResourceURLs", a.strs("non_resource_urls")?);
    Ok(r.into())
}

/// The subjects, with a ServiceAccount subject's namespace defaulting to `namespace`.
fn subjects(a: &Args, namespace: Option<&str>) -> Result<Option<Vec<Json>>> {
    let Some(mut subjects) = a.objects("subjects")? else {
        return Ok(None);
    };
    for s in &mut subjects {
        let Json::Object(s) = s else { continue };
        if s.get("kind").and_then(Json::as_str) == Some("ServiceAccount")
            && !s.contains_key("namespace")
        {
            s.put("namespace", namespace);
        }
    }
    Ok(Some(subjects))
}

fn binding(a: &Args, kind: &str, role_kind: &str, namespace: Option<&str>) -> Result<Json> {
    let role = a.req_str("role")?;
    let mut m = manifest(RBAC, kind, a.metadata(None)?);
    m.put("subjects", subjects(a, namespace)?);
    let role_ref =
        json!({ "apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role });
    m.insert("roleRef".into(), role_ref);
    Ok(m.into())
}

fn role_binding(a: &Args) -> Result<Json> {
    let role_kind = a.str("role_kind")?.unwrap_or_else(|| "Role".into());
    if role_kind != "Role" && role_kind != "ClusterRole" {
        return Err(a.err("role_kind", "must be \"Role\" or \"ClusterRole\""));
    }
    binding(a, "RoleBinding", &role_kind, a.str("namespace")?.as_deref())
}

fn cluster_role_binding(a: &Args) -> Result<Json> {
    binding(a, "ClusterRoleBinding", "ClusterRole", None)
}
