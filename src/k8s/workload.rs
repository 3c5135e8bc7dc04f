//! The high-level workload calls: `deploy`, `run`, `expose`, `scale` and `autoscale`,
//! which build the objects kubectl's generators would and send them.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, LogParams, Patch, PatchParams};
use serde_json::{Map, Value as Json, json};
use tokio::time::Instant;

use super::ops::{self, Error, Result, Target};
use super::session::Session;

/// The field manager of the objects `deploy` applies, as upstream names it.
const FIELD_MANAGER: &str = "starkite";

/// `matchLabels` of an object's selector as a label selector string, if it has one.
pub fn match_labels_selector(obj: &Json) -> Option<String> {
    let labels = obj["spec"]["selector"]["matchLabels"].as_object()?;
    let parts: Vec<String> = labels
        .iter()
        .filter_map(|(k, v)| Some(format!("{k}={}", v.as_str()?)))
        .collect();
    (!parts.is_empty()).then(|| parts.join(","))
}

/// What `k8s.deploy` creates.
pub struct DeploySpec<'a> {
    pub name: &'a str,
    pub image: &'a str,
    pub replicas: i64,
    pub port: i64,
    pub namespace: String,
    pub labels: Map<String, Json>,
    pub env: Vec<Json>,
}

/// The Deployment (and, with a port, the Service) `deploy` applies.
pub fn deploy_manifests(spec: &DeploySpec) -> (Json, Option<Json>) {
    let mut labels = Map::new();
    labels.insert("app".into(), json!(spec.name));
    labels.extend(spec.labels.clone());
    let mut container = json!({"name": spec.name, "image": spec.image});
    if spec.port > 0 {
        container["ports"] = json!([{"containerPort": spec.port}]);
    }
    if !spec.env.is_empty() {
        container["env"] = json!(spec.env);
    }
    let meta = json!({"name": spec.name, "namespace": spec.namespace, "labels": labels});
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta,
        "spec": {
            "replicas": spec.replicas,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": {"containers": [container]}},
        },
    });
    let service = (spec.port > 0).then(|| {
        json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": spec.name, "namespace": spec.namespace},
            "spec": {"selector": labels, "ports": [
                {"port": spec.port, "targetPort": spec.port, "protocol": "TCP"}]},
        })
    });
    (deployment, service)
}

/// Applies what `deploy` builds; returns `{"deployment": name, "service": name?}`.
pub async fn deploy(session: &Session, spec: &DeploySpec<'_>) -> Result<Json> {
    let (deployment, service) = deploy_manifests(spec);
    ops::apply(session, &deployment, None, FIELD_MANAGER, true, false).await?;
    let mut out = json!({"deployment": spec.name});
    if let Some(svc) = service {
        ops::apply(session, &svc, None, FIELD_MANAGER, true, false).await?;
        out["service"] = json!(spec.name);
    }
    Ok(out)
}

/// What `k8s.run` starts.
pub struct RunSpec<'a> {
    pub name: &'a str,
    pub image: &'a str,
    pub command: Option<Vec<String>>,
    pub restart: &'a str,
    pub rm: bool,
}

/// The Pod `run` creates.
pub fn run_manifest(spec: &RunSpec, namespace: &str) -> Json {
    let mut container = json!({"name": spec.name, "image": spec.image});
    if let Some(cmd) = &spec.command {
        container["command"] = json!(cmd);
    }
    json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": spec.name, "namespace": namespace, "labels": {"run": spec.name}},
        "spec": {"containers": [container], "restartPolicy": spec.restart},
    })
}

/// Creates the pod; with restart "Never" waits until it finishes or `wait` runs out.
/// Returns name, phase and (when the kubelet serves them) logs; deletes the pod with
/// `rm`.
pub async fn run(
    session: &Session,
    spec: &RunSpec<'_>,
    namespace: Option<&str>,
    wait: Duration,
) -> Result<Json> {
    let deadline = Instant::now() + wait;
    let ns = namespace
        .filter(|n| !n.is_empty())
        .unwrap_or(&session.namespace)
        .to_owned();
    let created = ops::create(session, &run_manifest(spec, &ns), None, false).await?;
    let mut phase = created["status"]["phase"]
        .as_str()
        .unwrap_or("Pending")
        .to_owned();
    let pods: Api<Pod> = Api::namespaced(session.client_here(), &ns);
    if spec.restart == "Never" && !session.dry_run {
        let mut pause = Duration::from_millis(200);
        while !matches!(phase.as_str(), "Succeeded" | "Failed") && Instant::now() + pause < deadline
        {
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(2));
            if let Ok(p) = pods.get(spec.name).await {
                phase = p.status.and_then(|s| s.phase).unwrap_or_default();
            }
        }
    }
    let mut out = json!({"name": spec.name, "namespace": ns, "phase": phase});
    if !session.dry_run {
        let left = deadline
            .saturating_duration_since(Instant::now())
            .max(Duration::from_secs(2));
        if let Ok(Ok(logs)) =
            tokio::time::timeout(left, pods.logs(spec.name, &LogParams::default())).await
        {
            out["logs"] = json!(logs);
        }
        if spec.rm {
            pods.delete(spec.name, &DeleteParams::default()).await?;
        }
    }
    Ok(out)
}

/// The pod labels a workload selects: its selector's matchLabels, a Service's
/// selector, or a Pod's own labels.
fn selector_of(obj: &Json) -> Option<Json> {
    let kind = obj["kind"].as_str().unwrap_or("");
    let labels = match kind {
        "Pod" => &obj["metadata"]["labels"],
        "Service" | "ReplicationController" => &obj["spec"]["selector"],
        _ => &obj["spec"]["selector"]["matchLabels"],
    };
    labels
        .as_object()
        .filter(|m| !m.is_empty())
        .map(|m| json!(m))
}

/// Creates a Service for `kind/name` selecting the same pods; returns the Service.
///
/// # Errors
/// The object is missing, or it selects no pods by labels.
pub async fn expose(
    session: &Session,
    kind: &str,
    name: &str,
    namespace: Option<&str>,
    port: i64,
    target_port: i64,
    service_type: &str,
) -> Result<Json> {
    let target = Target::resolve(session, kind, namespace).await?;
    let obj = ops::get_of(session, &target, name).await?;
    let selector = selector_of(&obj).ok_or_else(|| {
        Error::Invalid(format!(
            "{} {name:?} has no label selector to expose",
            target.display_name()
        ))
    })?;
    let target_port = if target_port > 0 { target_port } else { port };
    let svc = json!({
        "apiVersion": "v1", "kind": "Service",
        "metadata": {"name": name, "namespace": target.namespace},
        "spec": {"type": service_type, "selector": selector, "ports": [
            {"port": port, "targetPort": target_port, "protocol": "TCP"}]},
    });
    ops::create(session, &svc, None, false).await
}

/// Sets the replica count through the `/scale` subresource; returns the object.
pub async fn scale(
    session: &Session,
    kind: &str,
    name: &str,
    namespace: Option<&str>,
    replicas: i64,
) -> Result<Json> {
    let target = Target::resolve(session, kind, namespace).await?;
    let params = PatchParams {
        dry_run: session.dry_run,
        ..Default::default()
    };
    let body = Patch::Merge(json!({"spec": {"replicas": replicas}}));
    target
        .api(session)
        .patch_scale(name, &params, &body)
        .await?;
    let mut obj = ops::get_of(session, &target, name).await?;
    if session.dry_run {
        // Nothing changed on the server: show what the scale would have set.
        obj["spec"]["replicas"] = json!(replicas);
    }
    Ok(obj)
}

/// Creates a HorizontalPodAutoscaler `<name>-hpa` (upstream's name) on CPU use.
pub async fn autoscale(
    session: &Session,
    kind: &str,
    name: &str,
    namespace: Option<&str>,
    min: i64,
    max: i64,
    cpu_percent: i64,
) -> Result<Json> {
    if min < 1 || max < min {
        return Err(Error::Invalid(format!(
            "need 1 <= min <= max, got min={min} max={max}"
        )));
    }
    let target = Target::resolve(session, kind, namespace).await?;
    let ar = &target.resource.api_resource;
    let hpa = json!({
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": format!("{name}-hpa"), "namespace": target.namespace},
        "spec": {
            "scaleTargetRef": {"apiVersion": ar.api_version, "kind": ar.kind, "name": name},
            "minReplicas": min, "maxReplicas": max,
            "metrics": [{"type": "Resource", "resource": {"name": "cpu",
                "target": {"type": "Utilization", "averageUtilization": cpu_percent}}}],
        },
    });
    ops::create(session, &hpa, None, false).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deploy_builds_matching_labels_and_an_optional_service() {
        let mut labels = Map::new();
        labels.insert("tier".into(), json!("web"));
        let spec = DeploySpec {
            name: "web",
            image: "nginx",
            replicas: 2,
            port: 80,
            namespace: "ns".into(),
            labels,
            env: vec![json!({"name": "A", "value": "1"})],
        };
        let (d, s) = deploy_manifests(&spec);
        assert_eq!(
            d["spec"]["selector"]["matchLabels"],
            json!({"app": "web", "tier": "web"})
        );
        assert_eq!(
            d["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"],
            80
        );
        assert_eq!(s.unwrap()["spec"]["selector"]["app"], "web");
        let (_, s) = deploy_manifests(&DeploySpec { port: 0, ..spec });
        assert!(s.is_none());
    }

    #[test]
    fn selectors_by_kind() {
        assert_eq!(
            selector_of(&json!({"kind": "Deployment",
            "spec": {"selector": {"matchLabels": {"a": "b"}}}})),
            Some(json!({"a": "b"}))
        );
        assert_eq!(
            selector_of(&json!({"kind": "Pod", "metadata": {"labels": {"run": "x"}}})),
            Some(json!({"run": "x"}))
        );
        assert_eq!(selector_of(&json!({"kind": "ConfigMap"})), None);
        assert_eq!(
            match_labels_selector(
                &json!({"spec": {"selector": {"matchLabels": {"a": "b", "c": "d"}}}})
            )
            .as_deref(),
            Some("a=b,c=d")
        );
    }
}
