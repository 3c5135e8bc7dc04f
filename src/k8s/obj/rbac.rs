//! RBAC builders: role, cluster_role, policy_rule, role_binding, cluster_role_binding
//! and subject.

use anyhow::Result;
use serde_json::{Value as Json, json};

use super::args::{Args, Builder, Obj, Put, camelize, manifest, object_name};

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
        "role_ref",
        "subjects",
    ],
    positional: Some("name"),
    build: role_binding,
};

pub(super) const CLUSTER_ROLE_BINDING: Builder = Builder {
    name: "cluster_role_binding",
    keywords: &[
        "name",
        "labels",
        "annotations",
        "role",
        "role_ref",
        "subjects",
    ],
    positional: Some("name"),
    build: cluster_role_binding,
};

pub(super) const SUBJECT: Builder = Builder {
    name: "subject",
    keywords: &["name", "kind", "namespace", "api_group"],
    positional: Some("name"),
    build: subject,
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

/// A binding subject; `kind` defaults to "ServiceAccount", and User and Group subjects
/// get the RBAC API group.
fn subject(a: &Args) -> Result<Json> {
    let kind = a.str("kind")?.unwrap_or_else(|| "ServiceAccount".into());
    if !matches!(kind.as_str(), "ServiceAccount" | "User" | "Group") {
        return Err(a.err("kind", "must be \"ServiceAccount\", \"User\" or \"Group\""));
    }
    let mut s = Obj::new();
    s.insert("kind".into(), kind.as_str().into());
    s.insert("name".into(), a.req_str("name")?.into());
    let group = a.str("api_group")?;
    let group = group.or_else(|| (kind != "ServiceAccount").then(|| RBAC_GROUP.to_owned()));
    s.put("apiGroup", group);
    if kind == "ServiceAccount" {
        s.put("namespace", a.str("namespace")?);
    } else if a.has("namespace") {
        return Err(a.err("namespace", "applies only to a ServiceAccount subject"));
    }
    Ok(s.into())
}

/// A subject from a subject dict (keys in either case) or a service_account() result.
fn to_subject(v: &Json) -> Option<Json> {
    if v.get("kind").and_then(Json::as_str) == Some("ServiceAccount") && v.get("metadata").is_some()
    {
        let mut s = Obj::new();
        s.insert("kind".into(), "ServiceAccount".into());
        s.insert("name".into(), object_name(v)?.into());
        let ns = v["metadata"].get("namespace").cloned();
        s.put("namespace", ns);
        return Some(s.into());
    }
    v.is_object().then(|| camelize(v))
}

/// The subjects, with a ServiceAccount subject's namespace defaulting to `namespace`.
fn subjects(a: &Args, namespace: Option<&str>) -> Result<Option<Vec<Json>>> {
    let subjects = a.list_of(
        "subjects",
        "a subject() dict or a service_account() result",
        to_subject,
    )?;
    let Some(mut subjects) = subjects else {
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

const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// The roleRef from `role` (a name, with `role_kind`) or `role_ref`: a role name, a
/// `{"kind", "name", "api_group"}` dict, or a role()/cluster_role() result.
fn role_ref(a: &Args, role_kind: &str) -> Result<Json> {
    let named =
        |name: &str, kind: &str| json!({ "apiGroup": RBAC_GROUP, "kind": kind, "name": name });
    match (a.str("role")?, a.json("role_ref")) {
        (Some(_), Some(_)) => Err(a.fail("give role or role_ref, not both")),
        (Some(role), None) => Ok(named(&role, role_kind)),
        (None, None) => Err(a.fail("missing required argument \"role\" (or \"role_ref\")")),
        (None, Some(Json::String(role))) => Ok(named(role, role_kind)),
        (None, Some(v @ Json::Object(m))) => {
            let kind = m.get("kind").and_then(Json::as_str);
            if let (Some(kind @ ("Role" | "ClusterRole")), Some(name)) = (kind, object_name(v)) {
                return Ok(named(name, kind));
            }
            let mut r = match camelize(v) {
                Json::Object(r) => r,
                _ => Obj::new(),
            };
            if !r.get("name").is_some_and(Json::is_string) {
                return Err(a.err("role_ref", "needs a string \"name\""));
            }
            r.entry("kind").or_insert_with(|| role_kind.into());
            r.entry("apiGroup").or_insert_with(|| RBAC_GROUP.into());
            Ok(r.into())
        }
        (None, Some(_)) => Err(a.err(
            "role_ref",
            "must be a role name, a dict or a role()/cluster_role() result",
        )),
    }
}

fn binding(a: &Args, kind: &str, role_kind: &str, namespace: Option<&str>) -> Result<Json> {
    let role_ref = role_ref(a, role_kind)?;
    let mut m = manifest(RBAC, kind, a.metadata(None)?);
    m.put("subjects", subjects(a, namespace)?);
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
