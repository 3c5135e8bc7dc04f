//! Dynamic Resource Allocation builders (resource.k8s.io/v1): device_class,
//! resource_claim, resource_claim_template and resource_slice.
//!
//! Nested dicts (selectors, tolerations, devices, pools) may be written with snake_case
//! keys; they are turned to the API's camelCase.

use anyhow::Result;
use serde_json::{Value as Json, json};

use super::args::{Args, Builder, Obj, Put, camelize, manifest};

const DRA: &str = "resource.k8s.io/v1";

/// The request name resource_claim() gives its one request; containers may name it in
/// `claims = [{"name": ..., "request": "device"}]`.
const REQUEST: &str = "device";

pub(super) const DEVICE_CLASS: Builder = Builder {
    name: "device_class",
    keywords: &[
        "name",
        "selectors",
        "config",
        "suitable_nodes",
        "extended_resource_name",
        "labels",
        "annotations",
    ],
    positional: Some("name"),
    build: device_class,
};

pub(super) const RESOURCE_CLAIM: Builder = Builder {
    name: "resource_claim",
    keywords: &[
        "name",
        "namespace",
        "device_class",
        "count",
        "allocation_mode",
        "device_tolerations",
        "selectors",
        "devices",
        "labels",
        "annotations",
    ],
    positional: Some("name"),
    build: resource_claim,
};

pub(super) const RESOURCE_CLAIM_TEMPLATE: Builder = Builder {
    name: "resource_claim_template",
    keywords: &[
        "name",
        "namespace",
        "spec",
        "claim_metadata",
        "labels",
        "annotations",
    ],
    positional: Some("name"),
    build: resource_claim_template,
};

pub(super) const RESOURCE_SLICE: Builder = Builder {
    name: "resource_slice",
    keywords: &[
        "name",
        "node_name",
        "all_nodes",
        "driver",
        "pool",
        "devices",
        "labels",
        "annotations",
    ],
    positional: Some("name"),
    build: resource_slice,
};

/// A DeviceClass (cluster-scoped).
fn device_class(a: &Args) -> Result<Json> {
    let mut s = Obj::new();
    s.put("selectors", a.api_objs("selectors")?);
    s.put("config", a.api_objs("config")?);
    s.put("suitableNodes", a.api_obj("suitable_nodes")?);
    s.put("extendedResourceName", a.str("extended_resource_name")?);
    let mut m = manifest(DRA, "DeviceClass", a.metadata(None)?);
    m.insert("spec".into(), s.into());
    Ok(m.into())
}

/// The claim spec: `devices` as given, plus one exact request built from
/// `device_class`, `count` (default 1), `allocation_mode`, `selectors` and
/// `device_tolerations`.
fn claim_spec(a: &Args) -> Result<Obj> {
    let mut devices = match a.api_obj("devices")? {
        Some(Json::Object(d)) => d,
        _ => Obj::new(),
    };
    if let Some(class) = a.name_ref("device_class")? {
        let mut exact = Obj::new();
        exact.insert("deviceClassName".into(), class.into());
        let mode = a.str("allocation_mode")?;
        if let Some(m) = &mode
            && m != "ExactCount"
            && m != "All"
        {
            return Err(a.err("allocation_mode", "must be \"ExactCount\" or \"All\""));
        }
        // A count only means something for ExactCount, the default mode.
        if mode.as_deref() != Some("All") {
            let count = a.int("count")?.unwrap_or(1);
            if count < 1 {
                return Err(a.err("count", "must be at least 1"));
            }
            exact.insert("count".into(), count.into());
        } else if a.has("count") {
            return Err(a.err("count", "does not apply with allocation_mode \"All\""));
        }
        exact.put("allocationMode", mode);
        exact.put("selectors", a.api_objs("selectors")?);
        exact.put("tolerations", a.api_objs("device_tolerations")?);
        let request = json!({ "name": REQUEST, "exactly": exact });
        match devices.get_mut("requests") {
            Some(Json::Array(r)) => r.push(request),
            _ => {
                devices.insert("requests".into(), json!([request]));
            }
        }
    } else if let Some(key) = [
        "count",
        "allocation_mode",
        "selectors",
        "device_tolerations",
    ]
    .into_iter()
    .find(|k| a.has(k))
    {
        return Err(a.err(key, "applies only with device_class"));
    }
    if devices.is_empty() {
        return Err(a.fail("give device_class or devices"));
    }
    Ok(Obj::from_iter([("devices".to_owned(), devices.into())]))
}

fn resource_claim(a: &Args) -> Result<Json> {
    let spec = claim_spec(a)?;
    let mut m = manifest(DRA, "ResourceClaim", a.metadata(None)?);
    m.insert("spec".into(), spec.into());
    Ok(m.into())
}

/// A ResourceClaimTemplate; `spec` is a claim spec dict or a resource_claim() result.
fn resource_claim_template(a: &Args) -> Result<Json> {
    let spec = match a.object("spec")? {
        None => return Err(a.fail("missing required argument \"spec\"")),
        Some(c) if c.get("kind").and_then(Json::as_str) == Some("ResourceClaim") => c
            .get("spec")
            .cloned()
            .ok_or_else(|| a.err("spec", "the ResourceClaim has no spec"))?,
        Some(c) => camelize(&Json::Object(c)),
    };
    let mut t = Obj::new();
    t.put("metadata", a.object("claim_metadata")?);
    t.insert("spec".into(), spec);
    let mut m = manifest(DRA, "ResourceClaimTemplate", a.metadata(None)?);
    m.insert("spec".into(), t.into());
    Ok(m.into())
}

/// A ResourceSlice (cluster-scoped). `pool` defaults to one single-slice pool named
/// after the node (or the slice); `devices` is a list, or one device dict.
fn resource_slice(a: &Args) -> Result<Json> {
    let name = a.req_str("name")?;
    let node = a.str("node_name")?;
    let mut s = Obj::new();
    s.insert("driver".into(), a.req_str("driver")?.into());
    let pool = a.api_obj("pool")?.unwrap_or_else(|| {
        json!({
            "name": node.clone().unwrap_or_else(|| name.clone()),
            "generation": 1,
            "resourceSliceCount": 1,
        })
    });
    s.insert("pool".into(), pool);
    match (node, a.bool("all_nodes")?) {
        (Some(_), Some(true)) => return Err(a.fail("give node_name or all_nodes, not both")),
        (Some(n), _) => s.put("nodeName", Some(n)),
        (None, all) => s.put("allNodes", all),
    }
    let devices = match a.api("devices")? {
        None => None,
        Some(d @ Json::Object(_)) => Some(json!([d])),
        Some(d) => Some(d),
    };
    s.put("devices", devices);
    let mut m = manifest(DRA, "ResourceSlice", a.metadata(None)?);
    m.insert("spec".into(), s.into());
    Ok(m.into())
}
