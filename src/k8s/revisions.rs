//! A Deployment's revisions: its ReplicaSets, numbered by the
//! `deployment.kubernetes.io/revision` annotation, for `rollout` undo and history.

use serde_json::{Value as Json, json};

use super::ops::{Error, Result};

pub const REVISION: &str = "deployment.kubernetes.io/revision";
const CHANGE_CAUSE: &str = "kubernetes.io/change-cause";

/// The revision number an object carries (0 when it has none).
pub fn revision_of(obj: &Json) -> u64 {
    obj["metadata"]["annotations"][REVISION]
        .as_str()
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

/// Whether `rs` is controlled by the object with `uid`.
pub fn owned_by(rs: &Json, uid: &str) -> bool {
    rs["metadata"]["ownerReferences"]
        .as_array()
        .into_iter()
        .flatten()
        .any(|r| r["uid"] == uid && r["controller"] == true)
}

/// The ReplicaSet to roll back to: revision `to`, or with `to == 0` the newest one
/// older than `current`, as `kubectl rollout undo` picks.
///
/// # Errors
/// `Invalid` when that revision does not exist (or there is no earlier one).
pub fn select_undo(owned: &[Json], current: u64, to: u64) -> Result<&Json> {
    if to > 0 {
        return owned
            .iter()
            .find(|rs| revision_of(rs) == to)
            .ok_or_else(|| Error::Invalid(format!("revision {to} not found in the history")));
    }
    owned
        .iter()
        .filter(|rs| {
            let r = revision_of(rs);
            r > 0 && r != current
        })
        .max_by_key(|rs| revision_of(rs))
        .ok_or_else(|| Error::Invalid("no earlier revision to roll back to".into()))
}

/// The pod template to restore from `rs`: the ReplicaSet's own, without the
/// `pod-template-hash` label the Deployment controller adds.
pub fn rollback_template(rs: &Json) -> Json {
    let mut t = rs["spec"]["template"].clone();
    if let Some(labels) = t["metadata"]["labels"].as_object_mut() {
        labels.remove("pod-template-hash");
    }
    t
}

/// One row per revision, oldest first: revision, replicaset, change_cause, images.
pub fn history(owned: &[Json]) -> Vec<Json> {
    let mut rows: Vec<(u64, Json)> = owned
        .iter()
        .filter(|rs| revision_of(rs) > 0)
        .map(|rs| {
            let images: Vec<&Json> = rs["spec"]["template"]["spec"]["containers"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|c| &c["image"])
                .collect();
            let cause = rs["metadata"]["annotations"][CHANGE_CAUSE]
                .as_str()
                .unwrap_or("");
            (
                revision_of(rs),
                json!({
                    "revision": revision_of(rs),
                    "replicaset": rs["metadata"]["name"],
                    "change_cause": cause,
                    "images": images,
                }),
            )
        })
        .collect();
    rows.sort_by_key(|(r, _)| *r);
    rows.into_iter().map(|(_, row)| row).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rs(name: &str, rev: &str, image: &str) -> Json {
        json!({"metadata": {"name": name, "annotations": {REVISION: rev},
                            "ownerReferences": [{"uid": "d1", "controller": true}]},
               "spec": {"template": {"metadata": {"labels": {"app": "w", "pod-template-hash": "abc"}},
                                     "spec": {"containers": [{"name": "c", "image": image}]}}}})
    }

    #[test]
    fn undo_picks_the_previous_or_the_named_revision() {
        let owned = vec![
            rs("a", "1", "i:1"),
            rs("c", "3", "i:3"),
            rs("b", "2", "i:2"),
        ];
        assert_eq!(select_undo(&owned, 3, 0).unwrap()["metadata"]["name"], "b");
        assert_eq!(select_undo(&owned, 3, 1).unwrap()["metadata"]["name"], "a");
        let e = select_undo(&owned, 3, 7).unwrap_err().to_string();
        assert!(e.contains("revision 7 not found"), "{e}");
        assert!(select_undo(&owned[1..2], 3, 0).is_err());
    }

    #[test]
    fn history_is_ordered_and_templates_lose_the_hash() {
        let owned = vec![rs("c", "3", "i:3"), rs("a", "1", "i:1")];
        let h = history(&owned);
        assert_eq!(h[0]["revision"], 1);
        assert_eq!(h[1]["images"], json!(["i:3"]));
        assert!(owned_by(&owned[0], "d1") && !owned_by(&owned[0], "other"));
        let t = rollback_template(&owned[0]);
        assert_eq!(t["metadata"]["labels"], json!({"app": "w"}));
    }
}
