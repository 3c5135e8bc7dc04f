//! When a child counts as ready, kind by kind, from its observed status.

use serde_json::Value as Json;

fn int(v: &Json) -> i64 {
    v.as_i64().unwrap_or(0)
}

/// The status has caught up with the latest spec.
fn observed(obj: &Json) -> bool {
    let generation = obj["metadata"]["generation"].as_i64();
    let observed = obj["status"]["observedGeneration"].as_i64();
    match (generation, observed) {
        (Some(g), Some(o)) => o >= g,
        (Some(_), None) => false,
        (None, _) => true,
    }
}

fn condition_true(obj: &Json, kind: &str) -> bool {
    obj["status"]["conditions"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|c| c["type"] == kind && c["status"] == "True")
}

/// Why `obj` is not ready yet, or None when it is. Kinds without a notion of readiness
/// (Services, ConfigMaps, Secrets, RBAC objects, ...) are ready once they exist.
pub fn not_ready(obj: &Json) -> Option<String> {
    let kind = obj["kind"].as_str().unwrap_or_default();
    let status = &obj["status"];
    let desired = obj["spec"]["replicas"].as_i64().unwrap_or(1);
    match kind {
        "Deployment" => {
            let available = int(&status["availableReplicas"]);
            let updated = int(&status["updatedReplicas"]);
            if !observed(obj) {
                Some("rollout not yet observed".into())
            } else if updated < desired || available < desired {
                Some(format!("{available}/{desired} replicas available"))
            } else {
                None
            }
        }
        "StatefulSet" => {
            let ready = int(&status["readyReplicas"]);
            let updated = int(&status["updatedReplicas"]);
            if !observed(obj) {
                Some("rollout not yet observed".into())
            } else if ready < desired || updated < desired {
                Some(format!("{ready}/{desired} replicas ready"))
            } else {
                None
            }
        }
        "DaemonSet" => {
            let want = int(&status["desiredNumberScheduled"]);
            let ready = int(&status["numberReady"]);
            let updated = int(&status["updatedNumberScheduled"]);
            if !observed(obj) {
                Some("rollout not yet observed".into())
            } else if ready < want || updated < want {
                Some(format!("{ready}/{want} pods ready"))
            } else {
                None
            }
        }
        "Job" => (!condition_true(obj, "Complete")).then(|| "not complete".into()),
        "Pod" => (!condition_true(obj, "Ready")).then(|| "not ready".into()),
        "PersistentVolumeClaim" => (status["phase"] != "Bound").then(|| "not bound".into()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn deploy(generation: i64, observed: i64, replicas: i64, available: i64) -> Json {
        json!({"kind": "Deployment", "metadata": {"generation": generation}, "spec": {"replicas": replicas},
               "status": {"observedGeneration": observed, "availableReplicas": available, "updatedReplicas": available}})
    }

    #[test]
    fn deployments_need_available_replicas_and_a_current_observed_generation() {
        assert_eq!(not_ready(&deploy(2, 2, 3, 3)), None);
        assert_eq!(
            not_ready(&deploy(2, 2, 3, 1)).as_deref(),
            Some("1/3 replicas available")
        );
        assert!(not_ready(&deploy(3, 2, 3, 3)).is_some(), "stale status");
        assert!(not_ready(&json!({"kind": "Deployment", "metadata": {"generation": 1}})).is_some());
    }

    #[test]
    fn other_workloads_and_plain_objects() {
        let sts = json!({"kind": "StatefulSet", "metadata": {"generation": 1}, "spec": {"replicas": 2},
                         "status": {"observedGeneration": 1, "readyReplicas": 2, "updatedReplicas": 2}});
        assert_eq!(not_ready(&sts), None);
        let ds = json!({"kind": "DaemonSet", "metadata": {"generation": 1},
                        "status": {"observedGeneration": 1, "desiredNumberScheduled": 2, "numberReady": 1, "updatedNumberScheduled": 2}});
        assert!(not_ready(&ds).is_some());
        let job = json!({"kind": "Job", "status": {"conditions": [{"type": "Complete", "status": "True"}]}});
        assert_eq!(not_ready(&job), None);
        assert_eq!(not_ready(&json!({"kind": "Service"})), None);
        assert_eq!(not_ready(&json!({"kind": "ConfigMap"})), None);
    }
}
