//! `k8s.rollout(kind, name, action=...)`: status, restart, pause, resume, undo and
//! history of a Deployment (restart and status also of StatefulSets and DaemonSets).

use k8s_openapi::jiff::Timestamp;
use kube::api::Patch;
use serde_json::{Value as Json, json};

use super::ops::{self, Error, Result, Target};
use super::revisions;
use super::session::Session;

/// What `rollout` was asked to do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Status,
    Restart,
    Pause,
    Resume,
    Undo,
    History,
}

impl Action {
    /// # Errors
    /// `Invalid` listing the actions for anything else.
    pub fn parse(s: &str) -> Result<Self> {
        Ok(match s {
            "" | "status" => Action::Status,
            "restart" => Action::Restart,
            "pause" => Action::Pause,
            "resume" => Action::Resume,
            "undo" => Action::Undo,
            "history" => Action::History,
            other => {
                return Err(Error::Invalid(format!(
                    "unknown action {other:?} (use status, restart, pause, resume, undo or history)"
                )));
            }
        })
    }

    /// Whether the action changes the object (and so needs patch permission).
    pub fn writes(self) -> bool {
        matches!(
            self,
            Action::Restart | Action::Pause | Action::Resume | Action::Undo
        )
    }
}

fn count(obj: &Json, field: &str) -> i64 {
    obj["status"][field].as_i64().unwrap_or(0)
}

/// Upstream's status shape: replicas, ready, updated, available, complete — plus
/// whether the controller has seen the latest spec (`observed`).
pub fn status_of(obj: &Json) -> Json {
    let (replicas, ready, updated, available) = (
        count(obj, "replicas"),
        count(obj, "readyReplicas"),
        count(obj, "updatedReplicas"),
        count(obj, "availableReplicas"),
    );
    let observed =
        obj["status"]["observedGeneration"].as_i64() >= obj["metadata"]["generation"].as_i64();
    json!({
        "replicas": replicas,
        "ready": ready,
        "updated": updated,
        "available": available,
        "complete": replicas == ready && replicas == updated && replicas == available,
        "observed": observed,
    })
}

fn only_deployments(target: &Target, action: &str) -> Result<()> {
    if target.resource.api_resource.kind == "Deployment" {
        Ok(())
    } else {
        Err(Error::Invalid(format!(
            "rollout {action} is only supported for deployments, not {}",
            target.display_name()
        )))
    }
}

/// Runs `action` on `kind/name`; `revision` is undo's target (0: the previous one).
///
/// # Errors
/// The object is missing, the kind does not support the action, or the API refuses.
pub async fn rollout(
    session: &Session,
    kind: &str,
    name: &str,
    namespace: Option<&str>,
    action: Action,
    revision: u64,
) -> Result<Json> {
    let target = Target::resolve(session, kind, namespace).await?;
    match action {
        Action::Status => Ok(status_of(&ops::get_of(session, &target, name).await?)),
        Action::Restart => {
            // The same annotation `kubectl rollout restart` sets: a template change rolls
            // every pod.
            let now = Timestamp::now().to_string();
            let body = Patch::Strategic(json!({"spec": {"template": {"metadata": {
                "annotations": {"kubectl.kubernetes.io/restartedAt": now}}}}}));
            ops::patch(session, &target, name, &body, false).await
        }
        Action::Pause | Action::Resume => {
            only_deployments(
                &target,
                if action == Action::Pause {
                    "pause"
                } else {
                    "resume"
                },
            )?;
            let body = Patch::Merge(json!({"spec": {"paused": action == Action::Pause}}));
            ops::patch(session, &target, name, &body, false).await
        }
        Action::Undo => {
            only_deployments(&target, "undo")?;
            let (deploy, owned) = deployment_and_replicasets(session, &target, name).await?;
            let current = revisions::revision_of(&deploy);
            let rs = revisions::select_undo(&owned, current, revision)?;
            let template = revisions::rollback_template(rs);
            if template == deploy["spec"]["template"] {
                return Ok(deploy);
            }
            let ops: json_patch::Patch = serde_json::from_value(json!([
                {"op": "test", "path": "/metadata/resourceVersion",
                 "value": deploy["metadata"]["resourceVersion"]},
                {"op": "replace", "path": "/spec/template", "value": template},
            ]))?;
            ops::patch(session, &target, name, &Patch::Json(ops), false).await
        }
        Action::History => {
            only_deployments(&target, "history")?;
            let (deploy, owned) = deployment_and_replicasets(session, &target, name).await?;
            Ok(json!({
                "name": name,
                "current": revisions::revision_of(&deploy),
                "revisions": revisions::history(&owned),
            }))
        }
    }
}

async fn deployment_and_replicasets(
    session: &Session,
    target: &Target,
    name: &str,
) -> Result<(Json, Vec<Json>)> {
    let deploy = ops::get_of(session, target, name).await?;
    let uid = deploy["metadata"]["uid"].as_str().unwrap_or("").to_owned();
    let selector = super::workload::match_labels_selector(&deploy);
    let all = ops::list(
        session,
        "replicasets.apps",
        target.namespace.as_deref(),
        selector.as_deref(),
        None,
    )
    .await?;
    let owned = all
        .into_iter()
        .filter(|rs| revisions::owned_by(rs, &uid))
        .collect();
    Ok((deploy, owned))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn actions() {
        assert_eq!(Action::parse("").unwrap(), Action::Status);
        assert_eq!(Action::parse("undo").unwrap(), Action::Undo);
        assert!(Action::Undo.writes() && !Action::History.writes());
        let e = Action::parse("rewind").unwrap_err().to_string();
        assert!(e.contains("\"rewind\"") && e.contains("history"), "{e}");
    }

    #[test]
    fn status_shape() {
        let s = status_of(&json!({"metadata": {"generation": 2},
            "status": {"observedGeneration": 2, "replicas": 3, "readyReplicas": 3,
                       "updatedReplicas": 3, "availableReplicas": 3}}));
        assert_eq!(s["complete"], true);
        assert_eq!(s["observed"], true);
        let s = status_of(&json!({"status": {"replicas": 2, "readyReplicas": 1}}));
        assert_eq!(
            (
                s["ready"].clone(),
                s["updated"].clone(),
                s["complete"].clone()
            ),
            (json!(1), json!(0), json!(false))
        );
    }
}
