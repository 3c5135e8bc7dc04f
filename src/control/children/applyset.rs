//! The ApplySet convention (KEP-3659) for tracking the children kite applied for a
//! parent: an id label on the parent, `part-of` labels on the children, and the set of
//! child kinds in an annotation on the parent, so that pruning knows where to look.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde_json::Value as Json;

/// On the parent: the ApplySet id.
pub const ID_LABEL: &str = "applyset.kubernetes.io/id";
/// On every child: the id of the ApplySet it belongs to.
pub const PART_OF_LABEL: &str = "applyset.kubernetes.io/part-of";
/// On the parent: the tool that manages the ApplySet.
pub const TOOLING_ANNOTATION: &str = "applyset.kubernetes.io/tooling";
/// On the parent: `Kind.group` of every kind the set may contain, comma-separated.
pub const KINDS_ANNOTATION: &str = "applyset.kubernetes.io/contains-group-kinds";
/// The value of [`TOOLING_ANNOTATION`].
pub const TOOLING: &str = "starkite/v1";

/// The id of the ApplySet rooted at a parent: `applyset-<base64url(sha256(name.namespace.Kind.group))>-v1`.
pub fn id(name: &str, namespace: &str, kind: &str, group: &str) -> String {
    let digest = ring::digest::digest(
        &ring::digest::SHA256,
        format!("{name}.{namespace}.{kind}.{group}").as_bytes(),
    );
    format!("applyset-{}-v1", URL_SAFE_NO_PAD.encode(digest.as_ref()))
}

/// `Kind.group` (just `Kind` for the core group), as the annotation lists kinds.
pub fn group_kind(api_version: &str, kind: &str) -> String {
    match api_version.split_once('/') {
        Some((group, _)) => format!("{kind}.{group}"),
        None => kind.to_owned(),
    }
}

/// The most kinds read from a parent's annotation: more than any controller applies.
/// Whoever may edit the parent may edit the annotation, and every kind listed costs
/// each reconcile a lookup and a watch.
pub const MAX_KINDS: usize = 64;

/// The kinds a parent's annotation lists (the first [`MAX_KINDS`]).
pub fn kinds_of(parent: &Json) -> Vec<String> {
    parent["metadata"]["annotations"][KINDS_ANNOTATION]
        .as_str()
        .map(|s| {
            s.split(',')
                .map(str::trim)
                .filter(|k| !k.is_empty())
                .take(MAX_KINDS)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}

/// The annotation value for a set of kinds (sorted, so it is stable).
pub fn kinds_value(kinds: &std::collections::BTreeSet<String>) -> String {
    kinds.iter().cloned().collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ids_are_stable_and_distinct() {
        let a = id("site", "ns", "StaticSite", "tutorial.starkite.io");
        assert_eq!(a, id("site", "ns", "StaticSite", "tutorial.starkite.io"));
        assert_ne!(a, id("site", "other", "StaticSite", "tutorial.starkite.io"));
        assert!(a.starts_with("applyset-") && a.ends_with("-v1"));
        // A label value: at most 63 characters, no padding.
        assert!(a.len() <= 63 && !a.contains('='), "{a}");
    }

    #[test]
    fn an_annotation_listing_too_many_kinds_is_read_only_so_far() {
        let many: Vec<String> = (0..1000).map(|i| format!("K{i}.x.io")).collect();
        let parent = json!({"metadata": {"annotations": {KINDS_ANNOTATION: many.join(",")}}});
        assert_eq!(kinds_of(&parent), many[..MAX_KINDS]);
    }

    #[test]
    fn group_kinds_round_trip_through_the_annotation() {
        assert_eq!(group_kind("apps/v1", "Deployment"), "Deployment.apps");
        assert_eq!(group_kind("v1", "Service"), "Service");
        let set: std::collections::BTreeSet<String> =
            ["Service".into(), "Deployment.apps".into()].into();
        let parent = json!({"metadata": {"annotations": {KINDS_ANNOTATION: kinds_value(&set)}}});
        assert_eq!(kinds_of(&parent), vec!["Deployment.apps", "Service"]);
        assert!(kinds_of(&json!({})).is_empty());
    }
}
