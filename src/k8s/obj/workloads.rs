//! Workload builders: deployment, stateful_set, daemon_set, job, cron_job and pod.
//!
//! They flatten the pod template into the builder's own keywords. `labels` (default
//! `{"app": name}`) labels the object and its pods and, where there is one, is the
//! selector; `selector` replaces the selector (its labels still reach the pods), and
//! `pod_labels` and `pod_annotations` only mark the pods.

use anyhow::Result;
use serde_json::{Value as Json, json};

use super::args::{Args, Builder, Obj, Put, camelize, manifest, object_name};

/// The pod-spec keywords every workload builder accepts after its own.
macro_rules! keywords {
    ($($k:literal),* $(,)?) => {
        &[
            $($k,)*
            "containers", "init_containers", "volumes",
            "service_account_name", "automount_service_account_token", "node_selector",
            "node_name", "restart_policy", "tolerations", "affinity",
            "topology_spread_constraints", "image_pull_secrets", "security_context",
            "host_network", "dns_policy", "hostname", "subdomain", "priority_class_name",
            "termination_grace_period_seconds", "resource_claims", "host_users",
        ]
    };
}

pub(super) const DEPLOYMENT: Builder = Builder {
    name: "deployment",
    keywords: keywords!(
        "name",
        "namespace",
        "replicas",
        "labels",
        "annotations",
        "selector",
        "strategy",
        "min_ready_seconds",
        "revision_history_limit",
        "progress_deadline_seconds",
        "paused",
        "template",
        "pod_labels",
        "pod_annotations",
    ),
    positional: Some("name"),
    build: deployment,
};

pub(super) const STATEFUL_SET: Builder = Builder {
    name: "stateful_set",
    keywords: keywords!(
        "name",
        "namespace",
        "replicas",
        "labels",
        "annotations",
        "selector",
        "service_name",
        "volume_claim_templates",
        "pod_management_policy",
        "update_strategy",
        "min_ready_seconds",
        "revision_history_limit",
        "pod_labels",
        "pod_annotations",
    ),
    positional: Some("name"),
    build: stateful_set,
};

pub(super) const DAEMON_SET: Builder = Builder {
    name: "daemon_set",
    keywords: keywords!(
        "name",
        "namespace",
        "labels",
        "annotations",
        "selector",
        "update_strategy",
        "min_ready_seconds",
        "revision_history_limit",
        "pod_labels",
        "pod_annotations",
    ),
    positional: Some("name"),
    build: daemon_set,
};

pub(super) const JOB: Builder = Builder {
    name: "job",
    keywords: keywords!(
        "name",
        "namespace",
        "labels",
        "annotations",
        "backoff_limit",
        "completions",
        "parallelism",
        "active_deadline_seconds",
        "ttl_seconds_after_finished",
        "completion_mode",
        "suspend",
        "pod_labels",
        "pod_annotations",
    ),
    positional: Some("name"),
    build: job,
};

pub(super) const CRON_JOB: Builder = Builder {
    name: "cron_job",
    keywords: keywords!(
        "name",
        "namespace",
        "labels",
        "annotations",
        "schedule",
        "time_zone",
        "concurrency_policy",
        "suspend",
        "starting_deadline_seconds",
        "successful_jobs_history_limit",
        "failed_jobs_history_limit",
        // Upstream's own names for the two limits above.
        "history_limit",
        "failed_history",
        "backoff_limit",
        "completions",
        "parallelism",
        "active_deadline_seconds",
        "ttl_seconds_after_finished",
        "job_template",
        "pod_labels",
        "pod_annotations",
    ),
    positional: Some("name"),
    build: cron_job,
};

pub(super) const POD: Builder = Builder {
    name: "pod",
    keywords: keywords!("name", "namespace", "labels", "annotations"),
    positional: Some("name"),
    build: pod,
};

/// A `{"type": ...}` strategy from a bare string, or the dict as given.
fn strategy(a: &Args, key: &str) -> Result<Option<Json>> {
    match a.json(key) {
        None => Ok(None),
        Some(Json::String(s)) => Ok(Some(json!({ "type": s }))),
        Some(v @ Json::Object(_)) => Ok(Some(v.clone())),
        Some(_) => Err(a.err(key, "must be a strategy type string or a dict")),
    }
}

/// The pod spec from the shared pod keywords; `containers` is required unless a
/// template supplies them.
fn pod_spec(a: &Args, default_restart: Option<&str>, need_containers: bool) -> Result<Obj> {
    let mut s = Obj::new();
    match a.objects("containers")? {
        Some(c) if c.is_empty() => return Err(a.err("containers", "must not be empty")),
        Some(c) => s.put("containers", Some(c)),
        None if need_containers => {
            return Err(a.fail("missing required argument \"containers\""));
        }
        None => {}
    }
    s.put("initContainers", a.objects("init_containers")?);
    s.put("volumes", a.objects("volumes")?);
    s.put("serviceAccountName", a.str("service_account_name")?);
    s.put(
        "automountServiceAccountToken",
        a.bool("automount_service_account_token")?,
    );
    s.put("nodeSelector", a.str_map("node_selector")?);
    s.put("nodeName", a.str("node_name")?);
    s.put(
        "restartPolicy",
        a.str("restart_policy")?
            .or(default_restart.map(str::to_owned)),
    );
    s.put("tolerations", a.objects("tolerations")?);
    s.put("affinity", a.object("affinity")?);
    s.put(
        "topologySpreadConstraints",
        a.objects("topology_spread_constraints")?,
    );
    s.put("imagePullSecrets", a.name_refs("image_pull_secrets")?);
    s.put("securityContext", a.object("security_context")?);
    s.put("hostNetwork", a.bool("host_network")?);
    s.put("dnsPolicy", a.str("dns_policy")?);
    s.put("hostname", a.str("hostname")?);
    s.put("subdomain", a.str("subdomain")?);
    s.put("priorityClassName", a.str("priority_class_name")?);
    s.put(
        "terminationGracePeriodSeconds",
        a.int("termination_grace_period_seconds")?,
    );
    s.put("resourceClaims", resource_claims(a)?);
    s.put("hostUsers", a.bool("host_users")?);
    Ok(s)
}

/// `resource_claims`: names, `{"name", "claim_name" | "template_name"}` dicts, or
/// resource_claim()/resource_claim_template() results, as pod-level claim entries.
fn resource_claims(a: &Args) -> Result<Option<Vec<Json>>> {
    a.list_of(
        "resource_claims",
        "a claim name, a dict or a resource_claim() result",
        |v| match v {
            Json::String(s) => Some(json!({ "name": s, "resourceClaimName": s })),
            Json::Object(m) => {
                let field = match m.get("kind").and_then(Json::as_str) {
                    Some("ResourceClaim") => "resourceClaimName",
                    Some("ResourceClaimTemplate") => "resourceClaimTemplateName",
                    Some(_) => return None,
                    None => return Some(claim_entry(v)),
                };
                let name = object_name(v)?;
                Some(json!({ "name": name, field: name }))
            }
            _ => None,
        },
    )
}

/// A claim entry dict, with upstream's short `claim_name`/`template_name` spelled out.
fn claim_entry(v: &Json) -> Json {
    let mut m = match camelize(v) {
        Json::Object(m) => m,
        other => return other,
    };
    for (short, full) in [
        ("claimName", "resourceClaimName"),
        ("templateName", "resourceClaimTemplateName"),
        ("claimTemplateName", "resourceClaimTemplateName"),
    ] {
        if let Some(x) = m.remove(short) {
            m.insert(full.into(), x);
        }
    }
    m.into()
}

/// The object's labels, its pods' labels and its selector.
struct Labels {
    object: Obj,
    pods: Obj,
    selector: Obj,
}

fn labels(a: &Args) -> Result<Labels> {
    let name = a.req_str("name")?;
    let object = a.labels_or_app(&name)?;
    let selector = a.str_map("selector")?.unwrap_or_else(|| object.clone());
    let mut pods = object.clone();
    // The selector must match the pods, so its labels always reach the template.
    pods.extend(selector.clone());
    pods.extend(a.str_map("pod_labels")?.unwrap_or_default());
    Ok(Labels {
        object,
        pods,
        selector,
    })
}

/// A pod template from the pod keywords and the pods' labels, over `template` (a pod
/// template dict or a pod() result) when given; the keywords win over the template.
fn template(a: &Args, pod_labels: Obj, default_restart: Option<&str>) -> Result<Json> {
    let base = a.object("template")?;
    let field = |m: &Option<Obj>, path: [&str; 2]| -> Result<Obj> {
        match m.as_ref().and_then(|m| m.get(path[0])?.get(path[1])) {
            None => Ok(Obj::new()),
            Some(Json::Object(o)) => Ok(o.clone()),
            Some(_) => Err(a.err(
                "template",
                &format!("{}.{} must be a dict", path[0], path[1]),
            )),
        }
    };
    let mut meta = Obj::new();
    let mut labels = field(&base, ["metadata", "labels"])?;
    labels.extend(pod_labels);
    meta.insert("labels".into(), labels.into());
    let mut annotations = field(&base, ["metadata", "annotations"])?;
    annotations.extend(a.str_map("pod_annotations")?.unwrap_or_default());
    meta.put("annotations", Some(annotations).filter(|m| !m.is_empty()));
    let mut spec = match base.as_ref().map(|m| m.get("spec")) {
        None => Obj::new(),
        Some(Some(Json::Object(s))) => s.clone(),
        Some(_) => return Err(a.err("template", "must have a spec dict")),
    };
    let need_containers = !spec.contains_key("containers");
    spec.extend(pod_spec(a, default_restart, need_containers)?);
    Ok(json!({ "metadata": meta, "spec": spec }))
}

/// A workload manifest whose spec has a selector and a pod template; `spec` holds the
/// kind's own fields.
fn selected(a: &Args, api: &str, kind: &str, mut spec: Obj) -> Result<Json> {
    let l = labels(a)?;
    spec.insert("selector".into(), json!({ "matchLabels": l.selector }));
    spec.insert("template".into(), template(a, l.pods, None)?);
    let mut m = manifest(api, kind, a.metadata(Some(l.object))?);
    m.insert("spec".into(), spec.into());
    Ok(m.into())
}

fn deployment(a: &Args) -> Result<Json> {
    let mut s = Obj::new();
    s.put("replicas", a.int("replicas")?);
    s.put("strategy", strategy(a, "strategy")?);
    s.put("minReadySeconds", a.int("min_ready_seconds")?);
    s.put("revisionHistoryLimit", a.int("revision_history_limit")?);
    s.put(
        "progressDeadlineSeconds",
        a.int("progress_deadline_seconds")?,
    );
    s.put("paused", a.bool("paused")?);
    selected(a, "apps/v1", "Deployment", s)
}

fn stateful_set(a: &Args) -> Result<Json> {
    let mut s = Obj::new();
    s.put("replicas", a.int("replicas")?);
    // A headless Service named after the set is the common layout, hence the default.
    s.put(
        "serviceName",
        Some(a.str("service_name")?.unwrap_or(a.req_str("name")?)),
    );
    s.put("volumeClaimTemplates", a.objects("volume_claim_templates")?);
    s.put("podManagementPolicy", a.str("pod_management_policy")?);
    s.put("updateStrategy", strategy(a, "update_strategy")?);
    s.put("minReadySeconds", a.int("min_ready_seconds")?);
    s.put("revisionHistoryLimit", a.int("revision_history_limit")?);
    selected(a, "apps/v1", "StatefulSet", s)
}

fn daemon_set(a: &Args) -> Result<Json> {
    let mut s = Obj::new();
    s.put("updateStrategy", strategy(a, "update_strategy")?);
    s.put("minReadySeconds", a.int("min_ready_seconds")?);
    s.put("revisionHistoryLimit", a.int("revision_history_limit")?);
    selected(a, "apps/v1", "DaemonSet", s)
}

/// A Job spec. Jobs generate their own selector, so none is set.
fn job_spec(a: &Args, pod_labels: Obj) -> Result<Obj> {
    let mut s = Obj::new();
    s.put("backoffLimit", a.int("backoff_limit")?);
    s.put("completions", a.int("completions")?);
    s.put("parallelism", a.int("parallelism")?);
    s.put("activeDeadlineSeconds", a.int("active_deadline_seconds")?);
    s.put(
        "ttlSecondsAfterFinished",
        a.int("ttl_seconds_after_finished")?,
    );
    s.put("template", Some(template(a, pod_labels, Some("Never"))?));
    Ok(s)
}

fn job(a: &Args) -> Result<Json> {
    let l = labels(a)?;
    let mut s = job_spec(a, l.pods)?;
    s.put("completionMode", a.str("completion_mode")?);
    s.put("suspend", a.bool("suspend")?);
    let mut m = manifest("batch/v1", "Job", a.metadata(Some(l.object))?);
    m.insert("spec".into(), s.into());
    Ok(m.into())
}

/// An int given under either of two names for the same field (not both).
fn either(a: &Args, long: &str, short: &str) -> Result<Option<i64>> {
    if a.has(long) && a.has(short) {
        return Err(a.fail(&format!("give {long} or {short}, not both")));
    }
    Ok(a.int(long)?.or(a.int(short)?))
}

fn cron_job(a: &Args) -> Result<Json> {
    let l = labels(a)?;
    let mut s = Obj::new();
    s.insert("schedule".into(), a.req_str("schedule")?.into());
    s.put("timeZone", a.str("time_zone")?);
    s.put("concurrencyPolicy", a.str("concurrency_policy")?);
    s.put("suspend", a.bool("suspend")?);
    s.put(
        "startingDeadlineSeconds",
        a.int("starting_deadline_seconds")?,
    );
    s.put(
        "successfulJobsHistoryLimit",
        either(a, "successful_jobs_history_limit", "history_limit")?,
    );
    s.put(
        "failedJobsHistoryLimit",
        either(a, "failed_jobs_history_limit", "failed_history")?,
    );
    let job = match a.object("job_template")? {
        Some(t) => {
            if a.has("containers") {
                return Err(a.fail("give containers or job_template, not both"));
            }
            job_template(a, t)?
        }
        None => json!({ "metadata": { "labels": l.object }, "spec": job_spec(a, l.pods)? }),
    };
    s.insert("jobTemplate".into(), job);
    let mut m = manifest("batch/v1", "CronJob", a.metadata(Some(l.object))?);
    m.insert("spec".into(), s.into());
    Ok(m.into())
}

/// `job_template` as a CronJob's jobTemplate: a job() result keeps its metadata and
/// spec; a dict with `spec` is taken as is, and any other dict is the job spec.
fn job_template(a: &Args, t: Obj) -> Result<Json> {
    if t.get("kind").and_then(Json::as_str) == Some("Job") {
        let mut out = Obj::new();
        if let Some(Json::Object(meta)) = t.get("metadata") {
            let mut m = Obj::new();
            m.put("labels", meta.get("labels").cloned());
            m.put("annotations", meta.get("annotations").cloned());
            out.insert("metadata".into(), m.into());
        }
        let spec = t
            .get("spec")
            .cloned()
            .ok_or_else(|| a.err("job_template", "the Job has no spec"))?;
        out.insert("spec".into(), spec);
        return Ok(out.into());
    }
    if t.contains_key("spec") {
        Ok(t.into())
    } else {
        Ok(json!({ "spec": t }))
    }
}

fn pod(a: &Args) -> Result<Json> {
    let labels = a.labels_or_app(&a.req_str("name")?)?;
    let mut m = manifest("v1", "Pod", a.metadata(Some(labels))?);
    m.insert("spec".into(), pod_spec(a, None, true)?.into());
    Ok(m.into())
}
