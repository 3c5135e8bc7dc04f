//! `k8s.testing.ready(cluster, kind, name)`: what the cluster's own controllers would
//! write once a workload is up, for a fake cluster where no controllers run.

use serde_json::{Value as Json, json};

use crate::fake_cluster::FakeCluster;
use crate::k8s::ops::Target;
use crate::k8s::session::Session;

/// Why a workload could not be marked ready.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Resolve(String),
    #[error("{kind} {name:?}: {message}")]
    Read {
        kind: String,
        name: String,
        message: String,
    },
    #[error("{kind} {name:?}: writing its status: {message}")]
    WriteStatus {
        kind: String,
        name: String,
        message: String,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The status a settled workload of `obj`'s kind reports: every replica up to date and
/// available, the current generation observed.
pub fn settled_status(obj: &Json) -> Json {
    let replicas = obj["spec"]["replicas"].as_i64().unwrap_or(1);
    let generation = obj["metadata"]["generation"].as_i64().unwrap_or(1);
    match obj["kind"].as_str().unwrap_or_default() {
        "Deployment" => json!({
            "observedGeneration": generation,
            "replicas": replicas,
            "updatedReplicas": replicas,
            "readyReplicas": replicas,
            "availableReplicas": replicas,
            "conditions": [
                {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
                {"type": "Progressing", "status": "True", "reason": "NewReplicaSetAvailable"},
            ],
        }),
        "StatefulSet" | "ReplicaSet" => json!({
            "observedGeneration": generation,
            "replicas": replicas,
            "updatedReplicas": replicas,
            "readyReplicas": replicas,
            "availableReplicas": replicas,
            "currentReplicas": replicas,
        }),
        "DaemonSet" => json!({
            "observedGeneration": generation,
            "desiredNumberScheduled": 1,
            "currentNumberScheduled": 1,
            "updatedNumberScheduled": 1,
            "numberReady": 1,
            "numberAvailable": 1,
        }),
        "Job" => json!({
            "succeeded": obj["spec"]["completions"].as_i64().unwrap_or(1),
            "conditions": [{"type": "Complete", "status": "True"}],
        }),
        "Pod" => json!({
            "phase": "Running",
            "conditions": [{"type": "Ready", "status": "True"}],
        }),
        _ => json!({
            "observedGeneration": generation,
            "conditions": [{"type": "Ready", "status": "True", "reason": "Ready"}],
        }),
    }
}

/// Writes the settled status of `kind` `name` in `fake`, through its status subresource.
///
/// # Errors
/// An unknown kind, a missing object, a refused write.
pub async fn ready(fake: &FakeCluster, kind: &str, name: &str, namespace: &str) -> Result<Json> {
    let session = Session::from_client(fake.client(namespace), namespace.to_owned(), false);
    let target = Target::resolve(&session, kind, Some(namespace))
        .await
        .map_err(|e| Error::Resolve(e.to_string()))?;
    let api = target.api(&session);
    let read = |message: String| Error::Read {
        kind: kind.to_owned(),
        name: name.to_owned(),
        message,
    };
    let current = api.get(name).await.map_err(|e| read(e.to_string()))?;
    let mut obj = serde_json::to_value(current).map_err(|e| read(e.to_string()))?;
    if obj["kind"].is_null() {
        obj["kind"] = Json::from(target.resource.api_resource.kind.clone());
    }
    let patch = json!({"status": settled_status(&obj)});
    let written = api
        .patch_status(
            name,
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(patch),
        )
        .await
        .map_err(|e| Error::WriteStatus {
            kind: kind.to_owned(),
            name: name.to_owned(),
            message: e.to_string(),
        })?;
    serde_json::to_value(written).map_err(|e| read(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_settled_deployment_satisfies_kites_readiness() {
        let dep =
            json!({"kind": "Deployment", "metadata": {"generation": 3}, "spec": {"replicas": 2}});
        let mut settled = dep.clone();
        settled["status"] = settled_status(&dep);
        assert_eq!(
            crate::control::children::readiness::not_ready(&settled),
            None
        );
        assert!(crate::control::children::readiness::not_ready(&dep).is_some());
    }
}
