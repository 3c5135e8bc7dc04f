//! Namespace governance builders: limit_range (with limit_range_item) and
//! resource_quota.

use anyhow::Result;
use serde_json::Value as Json;

use super::args::{Args, Builder, Obj, Put, manifest};

pub(super) const LIMIT_RANGE: Builder = Builder {
    name: "limit_range",
    keywords: &["name", "namespace", "labels", "annotations", "limits"],
    positional: Some("name"),
    build: limit_range,
};

pub(super) const LIMIT_RANGE_ITEM: Builder = Builder {
    name: "limit_range_item",
    keywords: &[
        "type",
        "default",
        "default_request",
        "max",
        "min",
        "max_limit_request_ratio",
    ],
    positional: Some("type"),
    build: limit_range_item,
};

pub(super) const RESOURCE_QUOTA: Builder = Builder {
    name: "resource_quota",
    keywords: &[
        "name",
        "namespace",
        "labels",
        "annotations",
        "hard",
        "scopes",
        "scope_selector",
    ],
    positional: Some("name"),
    build: resource_quota,
};

/// A v1 LimitRange; `limits` are `limit_range_item`s (or their dicts).
fn limit_range(a: &Args) -> Result<Json> {
    let mut spec = Obj::new();
    spec.insert(
        "limits".into(),
        a.api_objs("limits")?.unwrap_or_default().into(),
    );
    let mut m = manifest("v1", "LimitRange", a.metadata(None)?);
    m.insert("spec".into(), spec.into());
    Ok(m.into())
}

/// One entry of a LimitRange: the bounds and defaults for one `type` of object
/// ("Container", "Pod", "PersistentVolumeClaim"), each a dict of resource quantities.
fn limit_range_item(a: &Args) -> Result<Json> {
    let mut item = Obj::new();
    item.insert("type".into(), a.req_str("type")?.into());
    for (key, field) in [
        ("default", "default"),
        ("default_request", "defaultRequest"),
        ("max", "max"),
        ("min", "min"),
        ("max_limit_request_ratio", "maxLimitRequestRatio"),
    ] {
        item.put(field, quantities(a, key)?);
    }
    Ok(item.into())
}

/// A v1 ResourceQuota: `hard` limits per resource name, optionally only for `scopes`
/// (or the fuller `scope_selector`).
fn resource_quota(a: &Args) -> Result<Json> {
    let mut spec = Obj::new();
    spec.put("hard", quantities(a, "hard")?);
    spec.put("scopes", a.strs("scopes")?);
    spec.put("scopeSelector", a.api_obj("scope_selector")?);
    let mut m = manifest("v1", "ResourceQuota", a.metadata(None)?);
    m.insert("spec".into(), spec.into());
    Ok(m.into())
}

/// A dict of resource name to quantity; numbers are written as the API's strings.
fn quantities(a: &Args, key: &str) -> Result<Option<Obj>> {
    let Some(m) = a.object(key)? else {
        return Ok(None);
    };
    m.into_iter()
        .map(|(k, v)| match v {
            Json::String(_) => Ok((k, v)),
            Json::Number(n) => Ok((k, n.to_string().into())),
            v => Err(a.err(
                &format!("{key}[{k:?}]"),
                &format!("must be a quantity (a string or a number), got {v}"),
            )),
        })
        .collect::<Result<Obj>>()
        .map(Some)
}
