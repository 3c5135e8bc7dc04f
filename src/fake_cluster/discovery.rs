//! The discovery documents (`/api`, `/api/v1`, `/apis`, `/apis/{group}/{version}`,
//! `/version`) in the legacy JSON shapes, built from the served kinds.

use serde_json::{Value as Json, json};

use super::kinds::Kinds;

/// `GET /api`.
pub fn core_versions() -> Json {
    json!({"kind": "APIVersions", "apiVersion": "v1", "versions": ["v1"],
           "serverAddressByClientCIDRs": []})
}

/// `GET /apis`: each group with its versions, first seen first (the preferred one).
pub fn groups(kinds: &Kinds) -> Json {
    let mut groups: Vec<(String, Vec<String>)> = Vec::new();
    for r in kinds.resources() {
        let ar = &r.api_resource;
        if ar.group.is_empty() {
            continue;
        }
        match groups.iter_mut().find(|(g, _)| *g == ar.group) {
            Some((_, versions)) if !versions.contains(&ar.version) => {
                versions.push(ar.version.clone());
            }
            Some(_) => {}
            None => groups.push((ar.group.clone(), vec![ar.version.clone()])),
        }
    }
    let groups: Vec<Json> = groups
        .into_iter()
        .map(|(name, versions)| {
            let gv = |v: &String| json!({"groupVersion": format!("{name}/{v}"), "version": v});
            json!({
                "name": name,
                "versions": versions.iter().map(gv).collect::<Vec<_>>(),
                "preferredVersion": gv(&versions[0]),
            })
        })
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `GET /api/v1` or `/apis/{group}/{version}`; None when nothing is served there.
pub fn resources(kinds: &Kinds, group: &str, version: &str) -> Option<Json> {
    let mut list = Vec::new();
    for r in kinds.resources() {
        let ar = &r.api_resource;
        if ar.group != group || ar.version != version {
            continue;
        }
        list.push(json!({
            "name": ar.plural, "singularName": r.singular, "namespaced": r.namespaced,
            "kind": ar.kind, "verbs": r.verbs, "shortNames": r.short_names,
        }));
        for sub in &r.subresources {
            list.push(json!({
                "name": format!("{}/{sub}", ar.plural), "singularName": "",
                "namespaced": r.namespaced, "kind": ar.kind,
                "verbs": ["get", "patch", "update"],
            }));
        }
    }
    if list.is_empty() {
        return None;
    }
    let group_version = if group.is_empty() {
        version.to_owned()
    } else {
        format!("{group}/{version}")
    };
    Some(json!({"kind": "APIResourceList", "apiVersion": "v1",
                "groupVersion": group_version, "resources": list}))
}

/// `GET /version`.
pub fn version() -> Json {
    json!({"major": "1", "minor": "37", "gitVersion": "v1.37.0-kite-fake", "gitCommit": "",
           "gitTreeState": "clean", "buildDate": "", "goVersion": "", "compiler": "fake",
           "platform": "linux/amd64"})
}
