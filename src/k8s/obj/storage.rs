//! Storage builders: persistent_volume, persistent_volume_claim and storage_class.

use anyhow::Result;
use serde_json::{Value as Json, json};

use super::args::{Args, Builder, Obj, Put, manifest};

pub(super) const PERSISTENT_VOLUME: Builder = Builder {
    name: "persistent_volume",
    keywords: &[
        "name",
        "capacity",
        "storage",
        "access_modes",
        "storage_class_name",
        "reclaim_policy",
        "volume_mode",
        "mount_options",
        "claim_ref",
        "node_affinity",
        "host_path",
        "nfs",
        "csi",
        "local",
        "labels",
        "annotations",
    ],
    positional: Some("name"),
    build: persistent_volume,
};

pub(super) const PERSISTENT_VOLUME_CLAIM: Builder = Builder {
    name: "persistent_volume_claim",
    keywords: &[
        "name",
        "namespace",
        "access_modes",
        "storage",
        "storage_class_name",
        "volume_name",
        "volume_mode",
        "selector",
        "data_source",
        "data_source_ref",
        "labels",
        "annotations",
    ],
    positional: Some("name"),
    build: persistent_volume_claim,
};

pub(super) const STORAGE_CLASS: Builder = Builder {
    name: "storage_class",
    keywords: &[
        "name",
        "provisioner",
        "volume_binding_mode",
        "reclaim_policy",
        "allow_volume_expansion",
        "parameters",
        "mount_options",
        "allowed_topologies",
        "labels",
        "annotations",
    ],
    positional: Some("name"),
    build: storage_class,
};

/// Access modes; a claim or volume the API accepts needs at least one, so an unset
/// list means ReadWriteOnce, the mode every provisioner supports.
fn access_modes(a: &Args) -> Result<Json> {
    Ok(match a.strs("access_modes")? {
        Some(m) if !m.is_empty() => m.into(),
        _ => json!(["ReadWriteOnce"]),
    })
}

/// A PersistentVolume; `storage` is a shortcut for `capacity = {"storage": ...}`.
fn persistent_volume(a: &Args) -> Result<Json> {
    let mut s = Obj::new();
    let mut capacity = a.str_map("capacity")?.unwrap_or_default();
    if let Some(size) = a.str("storage")? {
        capacity.insert("storage".into(), size.into());
    }
    if capacity.is_empty() {
        return Err(a.fail("missing required argument \"storage\" (or \"capacity\")"));
    }
    s.insert("capacity".into(), capacity.into());
    s.insert("accessModes".into(), access_modes(a)?);
    s.put("storageClassName", a.str("storage_class_name")?);
    s.put("persistentVolumeReclaimPolicy", a.str("reclaim_policy")?);
    s.put("volumeMode", a.str("volume_mode")?);
    s.put("mountOptions", a.strs("mount_options")?);
    s.put("claimRef", a.api_obj("claim_ref")?);
    s.put("nodeAffinity", a.api_obj("node_affinity")?);
    let host_path = match a.json("host_path") {
        Some(Json::String(p)) => Some(json!({ "path": p })),
        _ => a.api_obj("host_path")?,
    };
    let sources = [
        ("host_path", "hostPath", host_path),
        ("nfs", "nfs", a.api_obj("nfs")?),
        ("csi", "csi", a.api_obj("csi")?),
        ("local", "local", a.api_obj("local")?),
    ];
    let given: Vec<&str> = sources
        .iter()
        .filter(|s| s.2.is_some())
        .map(|s| s.0)
        .collect();
    if given.len() > 1 {
        return Err(a.fail(&format!(
            "give only one volume source, got {}",
            given.join(", ")
        )));
    }
    for (_, field, v) in sources {
        s.put(field, v);
    }
    let mut m = manifest("v1", "PersistentVolume", a.metadata(None)?);
    m.insert("spec".into(), s.into());
    Ok(m.into())
}

fn persistent_volume_claim(a: &Args) -> Result<Json> {
    let mut s = Obj::new();
    s.insert("accessModes".into(), access_modes(a)?);
    let storage = a.req_str("storage")?;
    s.insert(
        "resources".into(),
        json!({ "requests": { "storage": storage } }),
    );
    s.put("storageClassName", a.str("storage_class_name")?);
    s.put("volumeName", a.str("volume_name")?);
    s.put("volumeMode", a.str("volume_mode")?);
    s.put("selector", a.selector("selector")?);
    s.put("dataSource", a.api_obj("data_source")?);
    s.put("dataSourceRef", a.api_obj("data_source_ref")?);
    let mut m = manifest("v1", "PersistentVolumeClaim", a.metadata(None)?);
    m.insert("spec".into(), s.into());
    Ok(m.into())
}

/// A StorageClass: its fields sit at the top level, as the API has no spec for it.
fn storage_class(a: &Args) -> Result<Json> {
    let mut m = manifest("storage.k8s.io/v1", "StorageClass", a.metadata(None)?);
    m.insert("provisioner".into(), a.req_str("provisioner")?.into());
    m.put("volumeBindingMode", a.str("volume_binding_mode")?);
    m.put("reclaimPolicy", a.str("reclaim_policy")?);
    m.put("allowVolumeExpansion", a.bool("allow_volume_expansion")?);
    m.put("parameters", a.str_map("parameters")?);
    m.put("mountOptions", a.strs("mount_options")?);
    m.put("allowedTopologies", a.api_objs("allowed_topologies")?);
    Ok(m.into())
}
