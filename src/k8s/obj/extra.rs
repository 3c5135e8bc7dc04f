//! The ingress builders (ingress, ingress_rule, ingress_path) and lease.

use anyhow::Result;
use serde_json::{Value as Json, json};

use super::args::{Args, Builder, Put, manifest};

pub(super) const INGRESS: Builder = Builder {
    name: "ingress",
    keywords: &[
        "name",
        "namespace",
        "labels",
        "annotations",
        "ingress_class_name",
        "host",
        "path",
        "path_type",
        "service",
        "service_port",
        "rules",
        "tls",
        "default_backend",
    ],
    positional: Some("name"),
    build: ingress,
};

pub(super) const INGRESS_RULE: Builder = Builder {
    name: "ingress_rule",
    keywords: &["host", "paths"],
    positional: Some("host"),
    build: ingress_rule,
};

pub(super) const INGRESS_PATH: Builder = Builder {
    name: "ingress_path",
    keywords: &["path", "path_type", "backend"],
    positional: Some("path"),
    build: ingress_path,
};

pub(super) const LEASE: Builder = Builder {
    name: "lease",
    keywords: &[
        "name",
        "namespace",
        "labels",
        "annotations",
        "holder_identity",
        "lease_duration_seconds",
        "acquire_time",
        "renew_time",
        "lease_transitions",
        "preferred_holder",
        "strategy",
    ],
    positional: Some("name"),
    build: lease,
};

/// An Ingress. `host`, `path` (default "/"), `path_type` (default "Prefix"), `service`
/// and `service_port` build one rule, added before any given `rules`.
fn ingress(a: &Args) -> Result<Json> {
    let mut rules = Vec::new();
    match a.str("service")? {
        Some(service) => {
            let port = match a.req("service_port", a.int_or_str("service_port"))? {
                p @ Json::String(_) => json!({ "name": p }),
                p => json!({ "number": p }),
            };
            let path = json!({
                "path": a.str("path")?.unwrap_or_else(|| "/".into()),
                "pathType": a.str("path_type")?.unwrap_or_else(|| "Prefix".into()),
                "backend": { "service": { "name": service, "port": port } },
            });
            let mut rule = serde_json::Map::new();
            rule.put("host", a.str("host")?);
            rule.insert("http".into(), json!({ "paths": [path] }));
            rules.push(rule.into());
        }
        None => {
            if let Some(key) = ["host", "path", "path_type", "service_port"]
                .iter()
                .find(|k| a.has(k))
            {
                return Err(a.err(key, "applies only with service"));
            }
        }
    }
    rules.extend(a.objects("rules")?.unwrap_or_default());
    let mut spec = serde_json::Map::new();
    spec.put("ingressClassName", a.str("ingress_class_name")?);
    spec.put("defaultBackend", a.object("default_backend")?);
    spec.put("rules", Some(rules).filter(|r| !r.is_empty()));
    spec.put("tls", a.objects("tls")?);
    let mut m = manifest("networking.k8s.io/v1", "Ingress", a.metadata(None)?);
    m.insert("spec".into(), spec.into());
    Ok(m.into())
}

/// One rule for `ingress(rules = [...])`: `host` and its `paths`, a list of
/// `ingress_path`s or, as upstream writes it, the rule's `http` dict (`{"paths": [...]}`).
fn ingress_rule(a: &Args) -> Result<Json> {
    let mut rule = serde_json::Map::new();
    rule.put("host", a.str("host")?);
    let http = match a.json("paths") {
        None => None,
        Some(Json::Array(_)) => Some(json!({ "paths": a.api_objs("paths")? })),
        Some(Json::Object(_)) => a.api_obj("paths")?,
        Some(_) => return Err(a.err("paths", "must be a list of paths or a dict")),
    };
    rule.put("http", http);
    Ok(rule.into())
}

/// One path of an ingress rule: `path`, `path_type` (default "Prefix") and `backend`.
fn ingress_path(a: &Args) -> Result<Json> {
    let mut p = serde_json::Map::new();
    p.insert("path".into(), a.req_str("path")?.into());
    p.insert(
        "pathType".into(),
        a.str("path_type")?
            .unwrap_or_else(|| "Prefix".into())
            .into(),
    );
    p.insert("backend".into(), a.req("backend", a.api_obj("backend"))?);
    Ok(p.into())
}

/// A coordination.k8s.io Lease; times are RFC 3339 strings with microseconds.
fn lease(a: &Args) -> Result<Json> {
    let mut spec = serde_json::Map::new();
    spec.put("holderIdentity", a.str("holder_identity")?);
    spec.put("leaseDurationSeconds", a.int("lease_duration_seconds")?);
    spec.put("acquireTime", a.str("acquire_time")?);
    spec.put("renewTime", a.str("renew_time")?);
    spec.put("leaseTransitions", a.int("lease_transitions")?);
    spec.put("preferredHolder", a.str("preferred_holder")?);
    spec.put("strategy", a.str("strategy")?);
    let mut m = manifest("coordination.k8s.io/v1", "Lease", a.metadata(None)?);
    m.insert("spec".into(), spec.into());
    Ok(m.into())
}
