//! The `scale` subresource of the workloads that have one (`kubectl scale`,
//! `k8s.scale`): a `Scale` view of `spec.replicas`, written through to the object.

use std::sync::Arc;

use hyper::{Method, StatusCode};
use serde_json::{Value as Json, json};
use tokio::sync::broadcast::Sender;

use super::patch::PatchType;
use super::store::{Event, Store};
use super::verbs::{self, Options, Target};
use super::{Error, Result};

/// Whether `plural` in `group` has a scale subresource in the fake.
pub fn has_scale(group: &str, plural: &str) -> bool {
    matches!(
        (group, plural),
        ("apps", "deployments" | "statefulsets" | "replicasets") | ("", "replicationcontrollers")
    )
}

/// The `Scale` object of a workload.
fn scale_of(obj: &Json) -> Json {
    let meta = &obj["metadata"];
    let labels = &obj["spec"]["selector"]["matchLabels"];
    let selector = labels
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect::<Vec<_>>()
                .join(",")
        })
        .unwrap_or_default();
    json!({
        "apiVersion": "autoscaling/v1",
        "kind": "Scale",
        "metadata": {
            "name": meta["name"],
            "namespace": meta["namespace"],
            "uid": meta["uid"],
            "resourceVersion": meta["resourceVersion"],
            "creationTimestamp": meta["creationTimestamp"],
        },
        "spec": {"replicas": obj["spec"]["replicas"].as_i64().unwrap_or(1)},
        "status": {
            "replicas": obj["status"]["replicas"].as_i64().unwrap_or(0),
            "selector": selector,
        },
    })
}

/// Serves GET, PUT and PATCH of `t`'s scale subresource.
///
/// # Errors
/// Not found, a bad body, an unsupported patch type or method.
pub fn serve(
    store: &mut Store,
    events: &Sender<Arc<Event>>,
    t: &Target,
    method: &Method,
    body: &Json,
    patch_type: Option<PatchType>,
    opts: &Options,
) -> Result<(StatusCode, Json)> {
    let current = verbs::get(store, t)?;
    let replicas = match *method {
        Method::GET => return Ok((StatusCode::OK, scale_of(&current))),
        Method::PUT => body["spec"]["replicas"].as_i64(),
        Method::PATCH => {
            let kind = patch_type
                .filter(|k| *k != PatchType::Apply)
                .ok_or_else(|| {
                    Error::BadRequest(
                        "the scale subresource takes merge, strategic or JSON patches".into(),
                    )
                })?;
            super::patch::patched(&scale_of(&current), body, kind)?["spec"]["replicas"].as_i64()
        }
        _ => {
            return Err(Error::MethodNotAllowed(format!(
                "the server does not allow this method on the requested resource ({method})"
            )));
        }
    };
    let replicas = replicas.filter(|r| *r >= 0).ok_or_else(|| {
        Error::BadRequest("spec.replicas of a Scale must be a non-negative integer".into())
    })?;
    let patch = json!({"spec": {"replicas": replicas}});
    let written = verbs::patch(store, events, t, &patch, PatchType::Merge, opts)?;
    Ok((StatusCode::OK, scale_of(&written)))
}
