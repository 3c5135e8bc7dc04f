//! Pod-part builders: container, container_port, env_var, volume and volume_mount.

use anyhow::Result;
use serde_json::{Value as Json, json};

use super::args::{Args, Builder, Obj, Put, camelize, short, type_name};

pub(super) const CONTAINER: Builder = Builder {
    name: "container",
    keywords: &[
        "name",
        "image",
        "command",
        "args",
        "env",
        "env_from",
        "ports",
        "resources",
        "requests",
        "limits",
        "volume_mounts",
        "image_pull_policy",
        "working_dir",
        "liveness_probe",
        "readiness_probe",
        "startup_probe",
        "security_context",
        "lifecycle",
        "restart_policy",
        "claims",
        "resize_policy",
        "stdin",
        "tty",
        "termination_message_policy",
    ],
    positional: Some("name"),
    build: container,
};

pub(super) const CONTAINER_PORT: Builder = Builder {
    name: "container_port",
    keywords: &["container_port", "name", "protocol", "host_port", "host_ip"],
    positional: Some("container_port"),
    build: container_port,
};

pub(super) const ENV_VAR: Builder = Builder {
    name: "env_var",
    keywords: &[
        "name",
        "value",
        "value_from",
        "secret_name",
        "secret_key",
        "config_map_name",
        "config_map_key",
        "field_path",
        "optional",
    ],
    positional: Some("name"),
    build: env_var,
};

pub(super) const VOLUME: Builder = Builder {
    name: "volume",
    keywords: &[
        "name",
        "config_map",
        "secret",
        "empty_dir",
        "host_path",
        "host_path_type",
        "persistent_volume_claim",
        "pvc",
        "claim_name",
        "read_only",
        "projected",
        "downward_api",
        "csi",
        "nfs",
        "ephemeral",
        "items",
        "default_mode",
        "optional",
    ],
    positional: Some("name"),
    build: volume,
};

pub(super) const VOLUME_MOUNT: Builder = Builder {
    name: "volume_mount",
    keywords: &[
        "name",
        "mount_path",
        "read_only",
        "sub_path",
        "sub_path_expr",
        "mount_propagation",
        "recursive_read_only",
    ],
    positional: Some("name"),
    build: volume_mount,
};

/// An env value as Kubernetes wants it: a string, written from a scalar for convenience.
fn env_string(v: &Json) -> Option<String> {
    match v {
        Json::String(s) => Some(s.clone()),
        Json::Number(_) | Json::Bool(_) => Some(v.to_string()),
        _ => None,
    }
}

/// `env` as a list of EnvVar dicts, or a dict of name to value.
fn env(a: &Args) -> Result<Option<Json>> {
    match a.json("env") {
        None => Ok(None),
        Some(Json::Object(m)) => {
            let mut out = Vec::with_capacity(m.len());
            for (k, v) in m {
                let value = env_string(v).ok_or_else(|| {
                    a.err(
                        &format!("env[{k:?}]"),
                        &format!(
                            "must be a string, int or bool, got {} {}",
                            type_name(v),
                            short(v)
                        ),
                    )
                })?;
                out.push(json!({ "name": k, "value": value }));
            }
            Ok(Some(out.into()))
        }
        Some(Json::Array(_)) => Ok(a.objects("env")?.map(Json::from)),
        Some(v) => Err(a.err(
            "env",
            &format!(
                "must be a list of env_var() or a dict, got {} {}",
                type_name(v),
                short(v)
            ),
        )),
    }
}

fn container(a: &Args) -> Result<Json> {
    let mut c = Obj::new();
    c.insert("name".into(), a.req_str("name")?.into());
    c.insert("image".into(), a.req_str("image")?.into());
    c.put("command", a.strs("command")?);
    c.put("args", a.strs("args")?);
    c.put("env", env(a)?);
    c.put("envFrom", a.objects("env_from")?);
    let ports = a.list_of("ports", "a container_port() dict or an int", |v| match v {
        Json::Object(_) => Some(v.clone()),
        Json::Number(n) if n.is_i64() => Some(json!({ "containerPort": n })),
        _ => None,
    })?;
    c.put("ports", ports);
    let mut resources = a.object("resources")?;
    // `requests`, `limits` and `claims` are shortcuts into `resources`, and win over it.
    for key in ["requests", "limits"] {
        if let Some(v) = a.object(key)? {
            resources
                .get_or_insert_with(Obj::new)
                .insert(key.into(), v.into());
        }
    }
    let claims = a.list_of("claims", "a claim name or a dict", |v| match v {
        Json::String(s) => Some(json!({ "name": s })),
        Json::Object(_) => Some(camelize(v)),
        _ => None,
    })?;
    if let Some(claims) = claims {
        resources
            .get_or_insert_with(Obj::new)
            .insert("claims".into(), claims.into());
    }
    c.put("resources", resources);
    c.put("volumeMounts", a.objects("volume_mounts")?);
    c.put("imagePullPolicy", a.str("image_pull_policy")?);
    c.put("workingDir", a.str("working_dir")?);
    c.put("livenessProbe", a.object("liveness_probe")?);
    c.put("readinessProbe", a.object("readiness_probe")?);
    c.put("startupProbe", a.object("startup_probe")?);
    c.put("securityContext", a.object("security_context")?);
    c.put("lifecycle", a.object("lifecycle")?);
    c.put("restartPolicy", a.str("restart_policy")?);
    c.put("resizePolicy", a.api_objs("resize_policy")?);
    c.put("stdin", a.bool("stdin")?);
    c.put("tty", a.bool("tty")?);
    c.put(
        "terminationMessagePolicy",
        a.str("termination_message_policy")?,
    );
    Ok(c.into())
}

fn container_port(a: &Args) -> Result<Json> {
    let mut p = Obj::new();
    p.insert(
        "containerPort".into(),
        a.req("container_port", a.int("container_port"))?.into(),
    );
    p.put("name", a.str("name")?);
    p.put("protocol", a.str("protocol")?);
    p.put("hostPort", a.int("host_port")?);
    p.put("hostIP", a.str("host_ip")?);
    Ok(p.into())
}

fn env_var(a: &Args) -> Result<Json> {
    let mut e = Obj::new();
    e.insert("name".into(), a.req_str("name")?.into());
    let optional = a.bool("optional")?;
    let mut sources = Vec::new();
    if let Some(v) = a.json("value") {
        let s = env_string(v).ok_or_else(|| {
            a.err(
                "value",
                &format!("must be a string, int or bool, got {}", type_name(v)),
            )
        })?;
        sources.push(("value", "value", Json::from(s)));
    }
    if let Some(v) = a.object("value_from")? {
        sources.push(("value_from", "valueFrom", v.into()));
    }
    for (name_key, key_key, kind) in [
        ("secret_name", "secret_key", "secretKeyRef"),
        ("config_map_name", "config_map_key", "configMapKeyRef"),
    ] {
        match (a.str(name_key)?, a.str(key_key)?) {
            (None, None) => {}
            (Some(name), Some(key)) => {
                let mut r = Obj::new();
                r.insert("name".into(), name.into());
                r.insert("key".into(), key.into());
                r.put("optional", optional);
                sources.push((name_key, "valueFrom", json!({ kind: r })));
            }
            _ => return Err(a.fail(&format!("{name_key} and {key_key} go together"))),
        }
    }
    if let Some(path) = a.str("field_path")? {
        let v = json!({ "fieldRef": { "fieldPath": path } });
        sources.push(("field_path", "valueFrom", v));
    }
    if sources.len() > 1 {
        let names: Vec<&str> = sources.iter().map(|s| s.0).collect();
        return Err(a.fail(&format!(
            "give only one value source, got {}",
            names.join(", ")
        )));
    }
    if optional.is_some() && !a.has("secret_name") && !a.has("config_map_name") {
        return Err(a.err(
            "optional",
            "applies only with secret_name or config_map_name",
        ));
    }
    if let Some((_, field, v)) = sources.pop() {
        e.insert(field.into(), v);
    }
    Ok(e.into())
}

/// A source given as its own API fields, as upstream's examples write them
/// (`config_map={"name": "cm"}`, `pvc={"claimName": "data"}`): a dict that is not an
/// object (no `metadata`), taken as-is.
fn own_fields(a: &Args, key: &str) -> Option<Json> {
    match a.json(key) {
        Some(d @ Json::Object(m)) if !m.contains_key("metadata") => Some(camelize(d)),
        _ => None,
    }
}

fn volume(a: &Args) -> Result<Json> {
    let mut v = Obj::new();
    v.insert("name".into(), a.req_str("name")?.into());
    let mut sources: Vec<(&str, &str, Json)> = Vec::new();
    // Items, mode and optional refine a ConfigMap or Secret source.
    let projection = |name_field: &str, name: String| -> Result<Json> {
        let mut s = Obj::new();
        s.insert(name_field.into(), name.into());
        s.put("items", a.objects("items")?);
        s.put("defaultMode", a.int("default_mode")?);
        s.put("optional", a.bool("optional")?);
        Ok(s.into())
    };
    if let Some(src) = own_fields(a, "config_map") {
        sources.push(("config_map", "configMap", src));
    } else if let Some(name) = a.name_ref("config_map")? {
        sources.push(("config_map", "configMap", projection("name", name)?));
    }
    if let Some(src) = own_fields(a, "secret") {
        sources.push(("secret", "secret", src));
    } else if let Some(name) = a.name_ref("secret")? {
        sources.push(("secret", "secret", projection("secretName", name)?));
    }
    match a.json("empty_dir") {
        None | Some(Json::Bool(false)) => {}
        Some(Json::Bool(true)) => sources.push(("empty_dir", "emptyDir", json!({}))),
        Some(d @ Json::Object(_)) => sources.push(("empty_dir", "emptyDir", camelize(d))),
        Some(_) => return Err(a.err("empty_dir", "must be True or a dict")),
    }
    match a.json("host_path") {
        None => {}
        Some(Json::String(path)) => {
            let mut h = Obj::new();
            h.insert("path".into(), path.as_str().into());
            h.put("type", a.str("host_path_type")?);
            sources.push(("host_path", "hostPath", h.into()));
        }
        Some(Json::Object(_)) => {
            let mut h = a.api_obj("host_path")?.unwrap_or_default();
            if let (Json::Object(h), Some(t)) = (&mut h, a.str("host_path_type")?) {
                h.insert("type".into(), t.into());
            }
            sources.push(("host_path", "hostPath", h));
        }
        Some(_) => return Err(a.err("host_path", "must be a path string or a dict")),
    }
    // `pvc` and `claim_name` are upstream's spellings of `persistent_volume_claim`.
    for key in ["persistent_volume_claim", "pvc", "claim_name"] {
        if let Some(src) = own_fields(a, key) {
            sources.push((key, "persistentVolumeClaim", src));
        } else if let Some(claim) = a.name_ref(key)? {
            let mut c = Obj::new();
            c.insert("claimName".into(), claim.into());
            c.put("readOnly", a.bool("read_only")?);
            sources.push((key, "persistentVolumeClaim", c.into()));
        }
    }
    if let Some(e) = ephemeral(a)? {
        sources.push(("ephemeral", "ephemeral", e));
    }
    for (key, field) in [
        ("projected", "projected"),
        ("downward_api", "downwardAPI"),
        ("csi", "csi"),
        ("nfs", "nfs"),
    ] {
        if let Some(d) = a.api_obj(key)? {
            sources.push((key, field, d));
        }
    }
    let refines = |key: &str, owners: &[&str]| a.has(key) && !owners.iter().any(|o| a.has(o));
    for key in ["items", "default_mode", "optional"] {
        if refines(key, &["config_map", "secret"]) {
            return Err(a.err(key, "applies only with config_map or secret"));
        }
    }
    if refines(
        "read_only",
        &["persistent_volume_claim", "pvc", "claim_name"],
    ) {
        return Err(a.err(
            "read_only",
            "applies only with pvc or persistent_volume_claim",
        ));
    }
    if refines("host_path_type", &["host_path"]) {
        return Err(a.err("host_path_type", "applies only with host_path"));
    }
    if sources.len() > 1 {
        let names: Vec<&str> = sources.iter().map(|s| s.0).collect();
        return Err(a.fail(&format!(
            "give only one volume source, got {}",
            names.join(", ")
        )));
    }
    // Kubernetes treats a volume without a source as an emptyDir; say so explicitly.
    let (_, field, source) = sources.pop().unwrap_or(("", "emptyDir", json!({})));
    v.insert(field.into(), source);
    Ok(v.into())
}

/// An ephemeral volume source from a persistent_volume_claim() result (its spec becomes
/// the claim template), a `{"volume_claim_template": ...}` dict, or a bare claim spec.
fn ephemeral(a: &Args) -> Result<Option<Json>> {
    let Some(v) = a.object("ephemeral")? else {
        return Ok(None);
    };
    if v.get("kind").and_then(Json::as_str) == Some("PersistentVolumeClaim") {
        let spec = v.get("spec").cloned().unwrap_or_else(|| json!({}));
        let mut t = Obj::new();
        if let Some(labels) = v.get("metadata").and_then(|m| m.get("labels")) {
            t.insert("metadata".into(), json!({ "labels": labels }));
        }
        t.insert("spec".into(), spec);
        return Ok(Some(json!({ "volumeClaimTemplate": t })));
    }
    let v = camelize(&Json::Object(v));
    if v.get("volumeClaimTemplate").is_some() {
        Ok(Some(v))
    } else {
        Ok(Some(json!({ "volumeClaimTemplate": { "spec": v } })))
    }
}

fn volume_mount(a: &Args) -> Result<Json> {
    let mut m = Obj::new();
    m.insert("name".into(), a.req_str("name")?.into());
    m.insert("mountPath".into(), a.req_str("mount_path")?.into());
    m.put("readOnly", a.bool("read_only")?);
    m.put("subPath", a.str("sub_path")?);
    m.put("subPathExpr", a.str("sub_path_expr")?);
    m.put("mountPropagation", a.str("mount_propagation")?);
    m.put("recursiveReadOnly", a.str("recursive_read_only")?);
    Ok(m.into())
}
