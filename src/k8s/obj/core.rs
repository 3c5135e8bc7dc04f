//! Core (v1) object builders: service, service_port, config_map, secret, namespace and
//! service_account.

use anyhow::Result;
use base64::Engine;
use serde_json::{Value as Json, json};

use super::args::{Args, Builder, Obj, Put, manifest};

pub(super) const SERVICE: Builder = Builder {
    name: "service",
    keywords: &[
        "name",
        "namespace",
        "ports",
        "selector",
        "type",
        "labels",
        "annotations",
        "cluster_ip",
        "external_name",
        "external_ips",
        "external_traffic_policy",
        "internal_traffic_policy",
        "session_affinity",
        "load_balancer_class",
        "load_balancer_source_ranges",
        "publish_not_ready_addresses",
        "ip_family_policy",
        "traffic_distribution",
    ],
    positional: Some("name"),
    build: service,
};

pub(super) const SERVICE_PORT: Builder = Builder {
    name: "service_port",
    keywords: &[
        "port",
        "target_port",
        "name",
        "protocol",
        "node_port",
        "app_protocol",
    ],
    positional: Some("port"),
    build: service_port,
};

pub(super) const CONFIG_MAP: Builder = Builder {
    name: "config_map",
    keywords: &[
        "name",
        "namespace",
        "labels",
        "annotations",
        "data",
        "binary_data",
        "immutable",
    ],
    positional: Some("name"),
    build: config_map,
};

pub(super) const SECRET: Builder = Builder {
    name: "secret",
    keywords: &[
        "name",
        "namespace",
        "labels",
        "annotations",
        "type",
        "data",
        "string_data",
        "immutable",
    ],
    positional: Some("name"),
    build: secret,
};

pub(super) const NAMESPACE: Builder = Builder {
    name: "namespace",
    keywords: &["name", "labels", "annotations"],
    positional: Some("name"),
    build: namespace,
};

pub(super) const SERVICE_ACCOUNT: Builder = Builder {
    name: "service_account",
    keywords: &[
        "name",
        "namespace",
        "labels",
        "annotations",
        "image_pull_secrets",
        "secrets",
        "automount_service_account_token",
    ],
    positional: Some("name"),
    build: service_account,
};

fn service(a: &Args) -> Result<Json> {
    let name = a.req_str("name")?;
    let kind = a.str("type")?;
    let mut s = Obj::new();
    let ports = a.list_of("ports", "a service_port() dict or an int", |v| match v {
        Json::Object(_) => Some(v.clone()),
        Json::Number(n) if n.is_i64() => Some(json!({ "port": n })),
        _ => None,
    })?;
    s.put("ports", ports);
    // The default matches the workload builders' default labels; an ExternalName
    // Service selects nothing, and `selector = {}` opts out.
    let selector = match a.str_map("selector")? {
        Some(sel) => Some(sel).filter(|s| !s.is_empty()),
        None if kind.as_deref() == Some("ExternalName") => None,
        None => Some(Obj::from_iter([("app".to_owned(), Json::from(name))])),
    };
    s.put("selector", selector);
    s.put("type", kind);
    s.put("clusterIP", a.str("cluster_ip")?);
    s.put("externalName", a.str("external_name")?);
    s.put("externalIPs", a.strs("external_ips")?);
    s.put("externalTrafficPolicy", a.str("external_traffic_policy")?);
    s.put("internalTrafficPolicy", a.str("internal_traffic_policy")?);
    s.put("sessionAffinity", a.str("session_affinity")?);
    s.put("loadBalancerClass", a.str("load_balancer_class")?);
    s.put(
        "loadBalancerSourceRanges",
        a.strs("load_balancer_source_ranges")?,
    );
    s.put(
        "publishNotReadyAddresses",
        a.bool("publish_not_ready_addresses")?,
    );
    s.put("ipFamilyPolicy", a.str("ip_family_policy")?);
    s.put("trafficDistribution", a.str("traffic_distribution")?);
    let mut m = manifest("v1", "Service", a.metadata(None)?);
    m.insert("spec".into(), s.into());
    Ok(m.into())
}

fn service_port(a: &Args) -> Result<Json> {
    let mut p = Obj::new();
    p.insert("port".into(), a.req("port", a.int("port"))?.into());
    p.put("targetPort", a.int_or_str("target_port")?);
    p.put("name", a.str("name")?);
    p.put("protocol", a.str("protocol")?);
    p.put("nodePort", a.int("node_port")?);
    p.put("appProtocol", a.str("app_protocol")?);
    Ok(p.into())
}

fn config_map(a: &Args) -> Result<Json> {
    let mut m = manifest("v1", "ConfigMap", a.metadata(None)?);
    m.put("data", a.str_map("data")?);
    m.put("binaryData", a.str_map("binary_data")?);
    m.put("immutable", a.bool("immutable")?);
    Ok(m.into())
}

fn secret(a: &Args) -> Result<Json> {
    let mut m = manifest("v1", "Secret", a.metadata(None)?);
    m.put("type", a.str("type")?);
    // As in the API, `data` is base64 (so a Secret read back round-trips) and
    // `string_data` is plain text.
    let data = a.str_map("data")?;
    for (k, v) in data.iter().flatten() {
        let text = v.as_str().unwrap_or_default();
        if base64::engine::general_purpose::STANDARD
            .decode(text)
            .is_err()
        {
            let msg = "must be base64; pass plain text as string_data";
            return Err(a.err(&format!("data[{k:?}]"), msg));
        }
    }
    m.put("data", data);
    m.put("stringData", a.str_map("string_data")?);
    m.put("immutable", a.bool("immutable")?);
    Ok(m.into())
}

fn namespace(a: &Args) -> Result<Json> {
    Ok(manifest("v1", "Namespace", a.metadata(None)?).into())
}

fn service_account(a: &Args) -> Result<Json> {
    let mut m = manifest("v1", "ServiceAccount", a.metadata(None)?);
    m.put("imagePullSecrets", a.name_refs("image_pull_secrets")?);
    m.put("secrets", a.name_refs("secrets")?);
    m.put(
        "automountServiceAccountToken",
        a.bool("automount_service_account_token")?,
    );
    Ok(m.into())
}
