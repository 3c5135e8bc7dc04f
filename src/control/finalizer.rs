//! Adding and removing this controller's finalizer, with JSON patches whose `test`
//! operations make a concurrent change fail instead of being overwritten.

use serde_json::{Value as Json, json};

use crate::k8s::ops::{self, Target};
use crate::k8s::session::Session;

/// True if `obj` carries the finalizer.
pub fn has(obj: &Json, finalizer: &str) -> bool {
    obj["metadata"]["finalizers"]
        .as_array()
        .is_some_and(|f| f.iter().any(|v| v == finalizer))
}

/// True once deletion has started.
pub fn deleting(obj: &Json) -> bool {
    obj["metadata"]["deletionTimestamp"].is_string()
}

/// The patch that adds `finalizer`.
pub fn add_patch(obj: &Json, finalizer: &str) -> Json {
    match obj["metadata"]["finalizers"].as_array() {
        Some(_) => json!([{"op": "add", "path": "/metadata/finalizers/-", "value": finalizer}]),
        // Creating the list must not replace one that someone else just created.
        None => json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": obj["metadata"]["resourceVersion"]},
            {"op": "add", "path": "/metadata/finalizers", "value": [finalizer]},
        ]),
    }
}

/// The patch that removes `finalizer`, or None if it is absent.
pub fn remove_patch(obj: &Json, finalizer: &str) -> Option<Json> {
    let i = obj["metadata"]["finalizers"]
        .as_array()?
        .iter()
        .position(|v| v == finalizer)?;
    let path = format!("/metadata/finalizers/{i}");
    Some(json!([{"op": "test", "path": path, "value": finalizer}, {"op": "remove", "path": path}]))
}

/// Applies a finalizer patch to the object.
///
/// # Errors
/// The API server's answer (422 when a `test` failed: the object changed meanwhile).
pub async fn patch(
    session: &Session,
    target: &Target,
    obj: &Json,
    body: Json,
) -> ops::Result<Json> {
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    let scoped = Target {
        resource: target.resource.clone(),
        namespace: obj["metadata"]["namespace"]
            .as_str()
            .map(str::to_owned)
            .filter(|_| target.resource.namespaced),
    };
    let body = ops::patch_body("json", body)?;
    let out = ops::patch(session, &scoped, name, &body, false).await?;
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patches_add_and_remove_only_our_finalizer() {
        let fresh = json!({"metadata": {"resourceVersion": "7"}});
        assert!(!has(&fresh, "a/b"));
        assert_eq!(add_patch(&fresh, "a/b")[1]["value"], json!(["a/b"]));
        let held = json!({"metadata": {"finalizers": ["x/y", "a/b"], "deletionTimestamp": "t"}});
        assert!(has(&held, "a/b") && deleting(&held));
        assert_eq!(add_patch(&held, "a/b")[0]["path"], "/metadata/finalizers/-");
        let remove = remove_patch(&held, "a/b").unwrap();
        assert_eq!(remove[1]["path"], "/metadata/finalizers/1");
        assert!(remove_patch(&fresh, "a/b").is_none());
    }
}
