//! Namespace confinement: a StarlarkController is granted, and may touch, nothing
//! outside its own namespace, whatever the ceiling allows (as a Role cannot reach
//! beyond its namespace). Only a ClusterStarlarkController reaches further.

use crate::rbac::{Inference, Rules, Scope};

/// Why a namespaced controller's script is refused: the first thing it needs outside
/// `namespace`, with the script line that needs it, e.g.
/// `c.star:4:5: k8s.get("nodes") needs get on nodes (cluster-wide), but ...`.
pub fn first_outside(resolved: &Rules, namespace: &str) -> Option<String> {
    let own = Scope::Namespace(namespace.to_owned());
    let rule = resolved.sorted().into_iter().find(|r| r.scope != own)?;
    let verbs: Vec<&str> = rule.verbs.iter().map(String::as_str).collect();
    let where_ = match &rule.scope {
        Scope::Namespace(other) => format!("in namespace {other}"),
        _ => "cluster-wide".to_owned(),
    };
    let site = rule
        .sites
        .first()
        .map_or_else(|| "the script needs".to_owned(), |s| format!("{s} needs"));
    Some(format!(
        "{site} {} on {} ({where_}), but a StarlarkController is confined to its namespace {namespace}; \
         use a ClusterStarlarkController",
        verbs.join(","),
        rule.qualified_resource()
    ))
}

/// Why a script whose permissions cannot all be inferred is refused: the operator
/// could not check them against the ceiling and the author.
pub fn first_unresolved(inference: &Inference) -> Option<String> {
    inference.unresolved.first().map(|w| {
        format!("{w} (the operator grants only what it can check: name the kind literally)")
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rbac::Site;

    fn rules(scope: Scope) -> Rules {
        let mut r = Rules::default();
        let site = Site {
            position: "c.star:3:5".into(),
            what: "k8s.patch(\"configmap\")".into(),
        };
        r.add("", "configmaps", &["patch"], scope, &[], site);
        r
    }

    #[test]
    fn only_the_own_namespace_passes() {
        assert_eq!(
            first_outside(&rules(Scope::Own).resolved("team"), "team"),
            None
        );
        let other = first_outside(
            &rules(Scope::Namespace("kube-system".into())).resolved("team"),
            "team",
        )
        .unwrap();
        assert_eq!(
            other,
            "c.star:3:5 k8s.patch(\"configmap\") needs patch on configmaps (in namespace kube-system), \
             but a StarlarkController is confined to its namespace team; use a ClusterStarlarkController"
        );
        let cluster = first_outside(&rules(Scope::Cluster).resolved("team"), "team").unwrap();
        assert!(cluster.contains("(cluster-wide)"), "{cluster}");
    }
}
