//! Container sub-object builders: env_from, resource_requirements, probe and
//! security_context.

use anyhow::Result;
use serde_json::{Value as Json, json};

use super::args::{Args, Builder, Obj, Put, camelize, object_name};

pub(super) const ENV_FROM: Builder = Builder {
    name: "env_from",
    keywords: &["config_map_ref", "secret_ref", "prefix", "optional"],
    positional: None,
    build: env_from,
};

pub(super) const RESOURCE_REQUIREMENTS: Builder = Builder {
    name: "resource_requirements",
    keywords: &["requests", "limits", "claims"],
    positional: None,
    build: resource_requirements,
};

pub(super) const PROBE: Builder = Builder {
    name: "probe",
    keywords: &[
        "http_get",
        "tcp_socket",
        "exec",
        "grpc",
        "initial_delay_seconds",
        "period_seconds",
        "timeout_seconds",
        "failure_threshold",
        "success_threshold",
        "termination_grace_period_seconds",
    ],
    positional: None,
    build: probe,
};

pub(super) const SECURITY_CONTEXT: Builder = Builder {
    name: "security_context",
    keywords: &[
        "run_as_user",
        "run_as_group",
        "run_as_non_root",
        "read_only_root_filesystem",
        "privileged",
        "allow_privilege_escalation",
        "capabilities",
        "se_linux_options",
        "seccomp_profile",
        "apparmor_profile",
        "fs_group",
        "fs_group_change_policy",
        "windows_options",
        "supplemental_groups",
        "sysctls",
        "proc_mount",
    ],
    positional: None,
    build: security_context,
};

/// A `{"name": ...}` reference from a name, a dict (keys in either case) or another
/// builder's result.
fn name_ref_obj(a: &Args, key: &str) -> Result<Option<Json>> {
    match a.json(key) {
        None => Ok(None),
        Some(Json::String(s)) => Ok(Some(json!({ "name": s }))),
        Some(v @ Json::Object(_)) => match object_name(v) {
            Some(name) => Ok(Some(json!({ "name": name }))),
            None => Ok(Some(camelize(v))),
        },
        Some(_) => Err(a.err(key, "must be a name, a dict or a builder result")),
    }
}

fn env_from(a: &Args) -> Result<Json> {
    let mut e = Obj::new();
    let optional = a.bool("optional")?;
    let with_optional = |r: Option<Json>| {
        r.map(|mut r| {
            if let (Json::Object(m), Some(o)) = (&mut r, optional) {
                m.insert("optional".into(), o.into());
            }
            r
        })
    };
    let cm = with_optional(name_ref_obj(a, "config_map_ref")?);
    let secret = with_optional(name_ref_obj(a, "secret_ref")?);
    match (&cm, &secret) {
        (None, None) => return Err(a.fail("give config_map_ref or secret_ref")),
        (Some(_), Some(_)) => return Err(a.fail("give config_map_ref or secret_ref, not both")),
        _ => {}
    }
    e.put("configMapRef", cm);
    e.put("secretRef", secret);
    e.put("prefix", a.str("prefix")?);
    Ok(e.into())
}

fn resource_requirements(a: &Args) -> Result<Json> {
    let mut r = Obj::new();
    r.put("requests", a.object("requests")?);
    r.put("limits", a.object("limits")?);
    let claims = a.list_of("claims", "a claim name or a dict", |v| match v {
        Json::String(s) => Some(json!({ "name": s })),
        Json::Object(_) => Some(camelize(v)),
        _ => None,
    })?;
    r.put("claims", claims);
    Ok(r.into())
}

fn probe(a: &Args) -> Result<Json> {
    let mut p = Obj::new();
    let exec = match a.json("exec") {
        None => None,
        Some(Json::Array(_)) => a.strs("exec")?.map(|c| json!({ "command": c })),
        Some(Json::Object(_)) => a.api_obj("exec")?,
        Some(_) => return Err(a.err("exec", "must be a command list or a dict")),
    };
    let handlers = [
        ("http_get", "httpGet", a.api_obj("http_get")?),
        ("tcp_socket", "tcpSocket", a.api_obj("tcp_socket")?),
        ("exec", "exec", exec),
        ("grpc", "grpc", a.api_obj("grpc")?),
    ];
    let given: Vec<&str> = handlers
        .iter()
        .filter(|h| h.2.is_some())
        .map(|h| h.0)
        .collect();
    if given.len() > 1 {
        return Err(a.fail(&format!(
            "give only one of http_get, tcp_socket, exec, grpc; got {}",
            given.join(", ")
        )));
    }
    for (_, field, v) in handlers {
        p.put(field, v);
    }
    for (key, field) in [
        ("initial_delay_seconds", "initialDelaySeconds"),
        ("period_seconds", "periodSeconds"),
        ("timeout_seconds", "timeoutSeconds"),
        ("failure_threshold", "failureThreshold"),
        ("success_threshold", "successThreshold"),
        (
            "termination_grace_period_seconds",
            "terminationGracePeriodSeconds",
        ),
    ] {
        p.put(field, a.int(key)?);
    }
    Ok(p.into())
}

/// A security context for a pod or a container; the API decides which fields apply
/// where, so all are accepted here.
fn security_context(a: &Args) -> Result<Json> {
    let mut s = Obj::new();
    for (key, field) in [
        ("run_as_user", "runAsUser"),
        ("run_as_group", "runAsGroup"),
        ("fs_group", "fsGroup"),
    ] {
        s.put(field, a.int(key)?);
    }
    for (key, field) in [
        ("run_as_non_root", "runAsNonRoot"),
        ("read_only_root_filesystem", "readOnlyRootFilesystem"),
        ("privileged", "privileged"),
        ("allow_privilege_escalation", "allowPrivilegeEscalation"),
    ] {
        s.put(field, a.bool(key)?);
    }
    for (key, field) in [
        ("capabilities", "capabilities"),
        ("se_linux_options", "seLinuxOptions"),
        ("seccomp_profile", "seccompProfile"),
        ("apparmor_profile", "appArmorProfile"),
        ("windows_options", "windowsOptions"),
    ] {
        s.put(field, a.api_obj(key)?);
    }
    s.put("fsGroupChangePolicy", a.str("fs_group_change_policy")?);
    let groups = a.list_of("supplemental_groups", "an int", |v| {
        v.is_i64().then(|| v.clone())
    })?;
    s.put("supplementalGroups", groups);
    s.put("sysctls", a.api_objs("sysctls")?);
    s.put("procMount", a.str("proc_mount")?);
    Ok(s.into())
}
