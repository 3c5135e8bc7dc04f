//! A hash of what the operator applies to a generated object, to tell from a watch
//! whether applying it again would change anything (see `seen`).

use std::hash::{DefaultHasher, Hash, Hasher};

use serde_json::Value as Json;

use super::grants::OWNER_LABEL;

/// The labels the operator sets on generated objects (a unit test keeps this in step
/// with `artifacts::identity_objects`). Others' labels are left alone by an apply, so
/// they do not count.
const MANAGED_LABELS: [&str; 4] = [
    "app.kubernetes.io/name",
    "app.kubernetes.io/managed-by",
    "app.kubernetes.io/component",
    OWNER_LABEL,
];

/// A hash of what an apply by `owner` sets on `obj`: the operator's labels, its owner
/// reference, and every field but `apiVersion`, `kind`, `metadata` and `status`, with
/// keys in order and empty values left out (the API server drops them).
pub fn fingerprint(obj: &Json, owner: &str) -> u64 {
    let mut h = DefaultHasher::new();
    let meta = &obj["metadata"];
    for key in MANAGED_LABELS {
        meta["labels"][key].as_str().hash(&mut h);
    }
    let ours = meta["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["uid"].as_str() == Some(owner));
    for r in ours {
        for field in ["apiVersion", "kind", "name", "uid"] {
            r[field].as_str().hash(&mut h);
        }
    }
    if let Some(fields) = obj.as_object() {
        let mut rest: Vec<_> = fields
            .iter()
            .filter(|(k, _)| !matches!(k.as_str(), "apiVersion" | "kind" | "metadata" | "status"))
            .collect();
        rest.sort_by_key(|(k, _)| k.as_str());
        for (k, v) in rest {
            if !empty(v) {
                k.hash(&mut h);
                canonical(v, &mut h);
            }
        }
    }
    h.finish()
}

fn empty(v: &Json) -> bool {
    match v {
        Json::Null => true,
        Json::String(s) => s.is_empty(),
        Json::Array(a) => a.is_empty(),
        Json::Object(m) => m.is_empty(),
        Json::Bool(_) | Json::Number(_) => false,
    }
}

fn canonical(v: &Json, h: &mut DefaultHasher) {
    match v {
        Json::Null => 0u8.hash(h),
        Json::Bool(b) => (1u8, b).hash(h),
        Json::Number(n) => (2u8, n.to_string()).hash(h),
        Json::String(s) => (3u8, s).hash(h),
        Json::Array(items) => {
            (4u8, items.len()).hash(h);
            for item in items {
                canonical(item, h);
            }
        }
        Json::Object(m) => {
            let mut fields: Vec<_> = m.iter().filter(|(_, v)| !empty(v)).collect();
            fields.sort_by_key(|(k, _)| k.as_str());
            (5u8, fields.len()).hash(h);
            for (k, v) in fields {
                k.hash(h);
                canonical(v, h);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ServiceAccount;
    use k8s_openapi::api::rbac::v1::{Role, RoleBinding};
    use serde_json::json;

    use super::*;
    use crate::rbac::Scope;

    fn identity(uid: &str) -> Vec<Json> {
        let rules = crate::artifacts::tests::rules(&[
            (
                "apps",
                "deployments",
                &["list", "watch", "patch"],
                Scope::Own,
            ),
            ("", "events", &["create"], Scope::Own),
        ]);
        let mut objects =
            crate::artifacts::identity_objects(&rules, "starkite-c-1", "team").unwrap();
        for obj in &mut objects {
            obj["metadata"]["labels"][OWNER_LABEL] = json!(uid);
            obj["metadata"]["ownerReferences"] = json!([{"apiVersion": "starkite.io/v1alpha1",
                "kind": "StarlarkController", "name": "c", "uid": uid}]);
        }
        objects
    }

    /// What the API server gives back: the typed object, with what it adds.
    fn served<T: serde::de::DeserializeOwned + serde::Serialize>(obj: &Json) -> Json {
        let typed: T = serde_json::from_value(obj.clone()).unwrap();
        let mut back = serde_json::to_value(typed).unwrap();
        back["metadata"]["uid"] = json!("server-uid");
        back["metadata"]["resourceVersion"] = json!("42");
        back["metadata"]["labels"]["someone.else/label"] = json!("x");
        back["metadata"]["managedFields"] = json!([{"manager": "kite-operator/u-1"}]);
        back
    }

    #[test]
    fn an_object_as_applied_has_the_fingerprint_of_what_is_wanted() {
        let objects = identity("u-1");
        let kinds: Vec<_> = objects
            .iter()
            .map(|o| o["kind"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["ServiceAccount", "Role", "RoleBinding"]);
        for (obj, back) in objects.iter().zip([
            served::<ServiceAccount>(&objects[0]),
            served::<Role>(&objects[1]),
            served::<RoleBinding>(&objects[2]),
        ]) {
            assert_eq!(fingerprint(obj, "u-1"), fingerprint(&back, "u-1"), "{obj}");
        }
    }

    #[test]
    fn what_an_apply_would_change_changes_the_fingerprint() {
        let wanted = identity("u-1");
        let role = &wanted[1];
        let print = fingerprint(role, "u-1");
        let mut edited = role.clone();
        edited["rules"][0]["verbs"] = json!(["list", "watch", "patch", "delete"]);
        assert_ne!(
            fingerprint(&edited, "u-1"),
            print,
            "a verb added by someone"
        );
        let mut relabelled = role.clone();
        relabelled["metadata"]["labels"]["app.kubernetes.io/name"] = json!("other");
        assert_ne!(
            fingerprint(&relabelled, "u-1"),
            print,
            "an operator label edited"
        );
        let mut orphaned = role.clone();
        orphaned["metadata"]["ownerReferences"] = json!([]);
        assert_ne!(
            fingerprint(&orphaned, "u-1"),
            print,
            "its owner reference removed"
        );
        let binding = &wanted[2];
        let mut rebound = binding.clone();
        rebound["subjects"][0]["name"] = json!("intruder");
        assert_ne!(fingerprint(&rebound, "u-1"), fingerprint(binding, "u-1"));
        let mut extra = binding.clone();
        extra["subjects"]
            .as_array_mut()
            .unwrap()
            .push(json!({"kind": "User", "name": "mallory"}));
        assert_ne!(
            fingerprint(&extra, "u-1"),
            fingerprint(binding, "u-1"),
            "a subject added"
        );
    }

    #[test]
    fn the_managed_labels_are_every_label_the_operator_sets() {
        for obj in identity("u-1") {
            for key in obj["metadata"]["labels"].as_object().unwrap().keys() {
                assert!(
                    MANAGED_LABELS.contains(&key.as_str()),
                    "{key} is set on generated objects but not in MANAGED_LABELS: an edit to it would go unseen"
                );
            }
        }
    }
}
