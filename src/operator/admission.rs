//! The admission check on StarlarkControllers and ClusterStarlarkControllers: the
//! requesting user must hold every permission the resource would be granted (as RBAC's
//! escalation check does for Roles); what passes is stamped with a signed approval
//! naming its author, which the reconciler requires.

use json_patch::jsonptr::PointerBuf;
use json_patch::{AddOperation, Patch, PatchOperation};
use kube::ResourceExt;
use kube::core::DynamicObject;
use kube::core::admission::{AdmissionRequest, AdmissionResponse, Operation};
use serde_json::Value as Json;

use super::approval::{self, Author};
use super::assessment::{self, Assessment, assessment, read_script};
use super::authority::first_denied;
use super::reconciler::Context;
use super::resource::{ClusterStarlarkController, StarlarkController};
use super::tenant::Tenant;

/// The answer to one admission request.
pub async fn admission(ctx: &Context, req: &AdmissionRequest<DynamicObject>) -> AdmissionResponse {
    match req.kind.kind.as_str() {
        "StarlarkController" => review::<StarlarkController>(ctx, req).await,
        "ClusterStarlarkController" => review::<ClusterStarlarkController>(ctx, req).await,
        other => AdmissionResponse::from(req).deny(format!(
            "the kite operator's webhook reviews StarlarkControllers and ClusterStarlarkControllers, not {other}"
        )),
    }
}

/// The resource the request would store, or why it is refused.
fn resource<K: Tenant>(req: &AdmissionRequest<DynamicObject>) -> Result<K, String> {
    let Some(object) = &req.object else {
        return Err("the request carries no object".into());
    };
    let mut cr: K = match serde_json::to_value(object).and_then(serde_json::from_value) {
        Ok(cr) => cr,
        Err(e) => return Err(format!("not a valid {}: {e}", K::KIND)),
    };
    // The API server fills the namespace in from the request path before admission; the
    // request's own field is the source that never depends on that.
    if K::CONFINED && cr.namespace().is_none() {
        cr.meta_mut().namespace.clone_from(&req.namespace);
    }
    if cr.name_any().is_empty() {
        return Err(format!(
            "metadata.name is required: a {} is approved by name, so generateName cannot be used",
            K::KIND
        ));
    }
    Ok(cr)
}

async fn review<K: Tenant>(
    ctx: &Context,
    req: &AdmissionRequest<DynamicObject>,
) -> AdmissionResponse {
    let allow = AdmissionResponse::from(req);
    if !matches!(req.operation, Operation::Create | Operation::Update) {
        return allow;
    }
    let cr: K = match resource(req) {
        Ok(cr) => cr,
        Err(message) => return allow.deny(message),
    };
    let old = req
        .old_object
        .as_ref()
        .and_then(|o| serde_json::from_value::<K>(serde_json::to_value(o).ok()?).ok());
    // The spec is unchanged: a change of labels, other metadata or the approval itself.
    let metadata_only = old
        .as_ref()
        .is_some_and(|old| spec_json(old) == spec_json(&cr));
    if let Some(old) = &old
        && metadata_only
        && approval_of(old) == approval_of(&cr)
        && old.labels() == cr.labels()
    {
        // Finalizers or other metadata only: the approval still holds.
        return allow;
    }
    let author = author(req);
    let spec = cr.common_spec();
    let home = cr.home(&ctx.operator_namespace);
    let script = match read_script(&ctx.client, &spec, &home).await {
        Ok(s) => s,
        Err(e) => return allow.deny(format!("reading the script to check its permissions: {e}")),
    };
    let namespace = cr.namespace().unwrap_or_default();
    let name = cr.name_any();
    let spec_value = spec_json(&cr);
    let subject = approval::Subject {
        kind: K::KIND,
        namespace: &namespace,
        name: &name,
        spec: &spec_value,
        script_from: spec
            .script_from
            .as_ref()
            .and_then(|_| script.as_ref().ok())
            .map(String::as_str),
    };
    // A change of labels alone never approves what was not approved: if the script
    // from the ConfigMap changed since (or the approval expired), only an explicit
    // review (a change of the approval annotation) may sign it.
    if let Some(old) = &old
        && metadata_only
        && approval_of(old) == approval_of(&cr)
        && let Some(kept) = approval_of(old)
        && ctx.approval.verify(subject, Some(kept)).is_err()
    {
        return allow;
    }
    // Whatever the script is (even one that cannot run, whose status would quote it),
    // naming a ConfigMap needs the right to read it. What can run is checked against
    // its author too.
    // The ConfigMap is checked before the script is even analysed: a refusal quoting
    // the script (a line, a kind it calls) would show what the requester may not read.
    // So is its size.
    let naming = assessment::script_permissions(&cr, &ctx.operator_namespace);
    let mut denied = first_denied(&ctx.client, &author, &naming).await;
    if matches!(denied, Ok(None)) {
        if let Ok(text) = &script
            && let Some(message) = assessment::too_large(text)
        {
            return allow.deny(format!("{} {}: {message}", K::KIND, cr.display()));
        }
        denied = match assessment(ctx, &cr, script.clone(), assessment::Turn::Wait).await {
            Assessment::Runnable(r) => {
                let wanted = assessment::permissions(&cr, &r, &ctx.operator_namespace);
                first_denied(&ctx.client, &author, &wanted).await
            }
            // Never when waiting; but what was not assessed is never approved.
            Assessment::Busy => return allow.deny(format!("{}: not analysed", cr.display())),
            // Approved as far as naming it goes: it cannot run, and its status says why.
            Assessment::Suspended | Assessment::Invalid { .. } | Assessment::Outside(_) => Ok(None),
        };
    }
    match denied {
        Ok(None) => {}
        Ok(Some(message)) => {
            // Someone who could not have written this controller relabels it (or asks
            // for a review): the earlier author's approval stays, not theirs.
            if metadata_only && let Some(kept) = old.as_ref().and_then(approval_of) {
                if approval_of(&cr) == Some(kept) {
                    return allow;
                }
                let patch = stamp_patch(cr.meta().annotations.is_some(), kept.clone());
                return allow
                    .clone()
                    .with_patch(patch)
                    .unwrap_or_else(|e| allow.deny(format!("encoding the approval: {e}")));
            }
            return allow.deny(format!(
                "{} {}: {message}; a {} may not do more than its author could",
                K::KIND,
                cr.display(),
                K::KIND
            ));
        }
        Err(e) => return allow.deny(format!("could not check the author's permissions: {e}")),
    }
    let stamp = ctx.approval.sign(subject, &author);
    let patch = stamp_patch(cr.meta().annotations.is_some(), stamp);
    match allow.clone().with_patch(patch) {
        Ok(r) => r,
        Err(e) => allow.deny(format!("encoding the approval: {e}")),
    }
}

/// The spec as signed: the typed spec re-encoded, so that the webhook and the
/// reconciler sign and check the same bytes whatever the request's spelling.
pub fn spec_json<K: Tenant>(cr: &K) -> Json {
    serde_json::to_value(cr.common_spec()).unwrap_or_default()
}

fn approval_of<K: Tenant>(cr: &K) -> Option<&String> {
    cr.annotations().get(approval::ANNOTATION)
}

/// The requesting user as the API server authenticated them.
fn author(req: &AdmissionRequest<DynamicObject>) -> Author {
    let u = &req.user_info;
    Author {
        username: u.username.clone().unwrap_or_default(),
        uid: u.uid.clone().unwrap_or_default(),
        groups: u.groups.clone().unwrap_or_default(),
        extra: u.extra.clone().unwrap_or_default(),
    }
}

/// Sets the approval annotation (creating the annotations map if there is none).
fn stamp_patch(has_annotations: bool, stamp: String) -> Patch {
    let op = if has_annotations {
        AddOperation {
            path: PointerBuf::from_tokens(["metadata", "annotations", approval::ANNOTATION]),
            value: Json::String(stamp),
        }
    } else {
        AddOperation {
            path: PointerBuf::from_tokens(["metadata", "annotations"]),
            value: serde_json::json!({ approval::ANNOTATION: stamp }),
        }
    };
    Patch(vec![PatchOperation::Add(op)])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stamp_patch_escapes_the_annotation_key() {
        let mut doc = serde_json::json!({"metadata": {"annotations": {"a": "b"}}});
        json_patch::patch(&mut doc, &stamp_patch(true, "s".into())).unwrap();
        assert_eq!(doc["metadata"]["annotations"][approval::ANNOTATION], "s");
        assert_eq!(doc["metadata"]["annotations"]["a"], "b");
        let mut bare = serde_json::json!({"metadata": {}});
        json_patch::patch(&mut bare, &stamp_patch(false, "s".into())).unwrap();
        assert_eq!(bare["metadata"]["annotations"][approval::ANNOTATION], "s");
    }
}
