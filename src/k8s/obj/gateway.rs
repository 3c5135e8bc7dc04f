//! Gateway API builders (gateway.networking.k8s.io/v1): gateway_class, gateway,
//! http_route, grpc_route and reference_grant.
//!
//! Listeners, rules and references may be written with snake_case keys; they are turned
//! to the API's camelCase. Where a reference is expected, another builder's result
//! stands for its name.

use anyhow::Result;
use serde_json::{Value as Json, json};

use super::args::{Args, Builder, Obj, Put, camelize, manifest, object_name};

const GATEWAY: &str = "gateway.networking.k8s.io/v1";

pub(super) const GATEWAY_CLASS: Builder = Builder {
    name: "gateway_class",
    keywords: &[
        "name",
        "controller_name",
        "description",
        "parameters_ref",
        "labels",
        "annotations",
    ],
    positional: Some("name"),
    build: gateway_class,
};

pub(super) const GATEWAY_BUILDER: Builder = Builder {
    name: "gateway",
    keywords: &[
        "name",
        "namespace",
        "gateway_class",
        "listeners",
        "addresses",
        "infrastructure",
        "labels",
        "annotations",
    ],
    positional: Some("name"),
    build: gateway,
};

/// The keywords of both route kinds.
const ROUTE_KEYWORDS: &[&str] = &[
    "name",
    "namespace",
    "parent_refs",
    "hostnames",
    "rules",
    "labels",
    "annotations",
];

pub(super) const HTTP_ROUTE: Builder = Builder {
    name: "http_route",
    keywords: ROUTE_KEYWORDS,
    positional: Some("name"),
    build: http_route,
};

pub(super) const GRPC_ROUTE: Builder = Builder {
    name: "grpc_route",
    keywords: ROUTE_KEYWORDS,
    positional: Some("name"),
    build: grpc_route,
};

pub(super) const REFERENCE_GRANT: Builder = Builder {
    name: "reference_grant",
    keywords: &[
        "name",
        "namespace",
        "from_refs",
        "to_refs",
        "labels",
        "annotations",
    ],
    positional: Some("name"),
    build: reference_grant,
};

/// A GatewayClass (cluster-scoped).
fn gateway_class(a: &Args) -> Result<Json> {
    let mut s = Obj::new();
    s.insert(
        "controllerName".into(),
        a.req_str("controller_name")?.into(),
    );
    s.put("description", a.str("description")?);
    s.put("parametersRef", a.api_obj("parameters_ref")?);
    let mut m = manifest(GATEWAY, "GatewayClass", a.metadata(None)?);
    m.insert("spec".into(), s.into());
    Ok(m.into())
}

/// A Gateway; `gateway_class` is a class name or a gateway_class() result.
fn gateway(a: &Args) -> Result<Json> {
    let mut s = Obj::new();
    let class = a.req("gateway_class", a.name_ref("gateway_class"))?;
    s.insert("gatewayClassName".into(), class.into());
    let listeners = a.api_objs("listeners")?.unwrap_or_default();
    if listeners.is_empty() {
        return Err(a.err("listeners", "a Gateway needs at least one listener"));
    }
    s.insert("listeners".into(), listeners.into());
    s.put("addresses", a.api_objs("addresses")?);
    s.put("infrastructure", a.api_obj("infrastructure")?);
    let mut m = manifest(GATEWAY, "Gateway", a.metadata(None)?);
    m.insert("spec".into(), s.into());
    Ok(m.into())
}

/// A reference from a name, a dict (keys in either case), or a builder result, which
/// becomes its name (and namespace, when it has one).
fn reference(v: &Json) -> Option<Json> {
    match v {
        Json::String(s) => Some(json!({ "name": s })),
        Json::Object(m) if m.contains_key("metadata") => {
            let mut r = Obj::new();
            r.insert("name".into(), object_name(v)?.into());
            let ns = v["metadata"].get("namespace").filter(|n| n.is_string());
            r.put("namespace", ns.cloned());
            Some(r.into())
        }
        Json::Object(_) => Some(camelize(v)),
        _ => None,
    }
}

fn route(a: &Args, kind: &str) -> Result<Json> {
    let mut s = Obj::new();
    let parents = a.list_of(
        "parent_refs",
        "a name, a dict or a gateway() result",
        reference,
    )?;
    s.put("parentRefs", parents);
    s.put("hostnames", a.strs("hostnames")?);
    s.put("rules", a.api_objs("rules")?);
    let mut m = manifest(GATEWAY, kind, a.metadata(None)?);
    m.insert("spec".into(), s.into());
    Ok(m.into())
}

fn http_route(a: &Args) -> Result<Json> {
    route(a, "HTTPRoute")
}

fn grpc_route(a: &Args) -> Result<Json> {
    route(a, "GRPCRoute")
}

/// A ReferenceGrant: which objects (`from_refs`) may refer to which (`to_refs`).
fn reference_grant(a: &Args) -> Result<Json> {
    let mut s = Obj::new();
    for (key, field) in [("from_refs", "from"), ("to_refs", "to")] {
        let refs = a.api_objs(key)?.unwrap_or_default();
        if refs.is_empty() {
            return Err(a.err(key, "needs at least one reference"));
        }
        s.insert(field.into(), refs.into());
    }
    let mut m = manifest(GATEWAY, "ReferenceGrant", a.metadata(None)?);
    m.insert("spec".into(), s.into());
    Ok(m.into())
}
