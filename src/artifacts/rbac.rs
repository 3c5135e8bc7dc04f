//! Roles and bindings that grant the controller's ServiceAccount exactly the inferred rules.

use serde_json::{Value as Json, json};

use super::{Error, Options, Result, labels, metadata};
use crate::rbac::{Rules, Scope};

const RBAC_API: &str = "rbac.authorization.k8s.io/v1";

/// A Role (or ClusterRole) per scope with rules, then a binding per role; `rules` must
/// already be resolved against `opts.namespace`.
pub(super) fn objects(rules: &Rules, opts: &Options) -> Result<Vec<Json>> {
    let mut roles = Vec::new();
    let mut bindings = Vec::new();
    for scope in rules.scopes() {
        let policy = rules.policy_rules(&scope);
        if policy.is_empty() {
            continue;
        }
        for rule in &policy {
            refuse_wildcards(rule, &scope)?;
        }
        let subjects = json!([{
            "kind": "ServiceAccount",
            "name": opts.name,
            "namespace": opts.namespace,
        }]);
        let (role_kind, binding_kind, meta) = match &scope {
            Scope::Cluster => (
                "ClusterRole",
                "ClusterRoleBinding",
                json!({"name": shared_name(opts), "labels": labels(&opts.name)}),
            ),
            Scope::Own => (
                "Role",
                "RoleBinding",
                metadata(&opts.name, &opts.namespace, &opts.name),
            ),
            Scope::Namespace(ns) => {
                let name = if *ns == opts.namespace {
                    opts.name.clone()
                } else {
                    shared_name(opts)
                };
                ("Role", "RoleBinding", metadata(&name, ns, &opts.name))
            }
        };
        roles.push(json!({
            "apiVersion": RBAC_API,
            "kind": role_kind,
            "metadata": meta,
            "rules": policy,
        }));
        bindings.push(json!({
            "apiVersion": RBAC_API,
            "kind": binding_kind,
            "metadata": meta,
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": role_kind,
                "name": meta["name"],
            },
            "subjects": subjects,
        }));
    }
    roles.extend(bindings);
    Ok(roles)
}

/// The name of a role outside the controller's namespace. Two deployments of one script
/// (in two namespaces) would otherwise overwrite each other's ClusterRole, or each other's
/// Role in a namespace they both reach into.
fn shared_name(opts: &Options) -> String {
    format!("kite:{}:{}", opts.namespace, opts.name)
}

/// Inference only ever names resources and verbs; a `*` here is a bug that would grant
/// far more than the script needs, so it stops the output rather than reaching a cluster.
fn refuse_wildcards(rule: &Json, scope: &Scope) -> Result<()> {
    let wild = ["apiGroups", "resources", "verbs"].iter().any(|field| {
        rule[field]
            .as_array()
            .into_iter()
            .flatten()
            .any(|v| v.as_str().is_some_and(|s| s.contains('*')))
    });
    if wild {
        return Err(Error::GrantWildcard {
            scope: scope.to_string(),
            rule: rule.to_string(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::render;
    use super::super::tests::{control, inference, opts, rules};
    use super::*;

    fn render_rules(rules: Rules) -> Vec<Json> {
        render(&inference(rules, control(None, false)), &opts())
            .unwrap()
            .objects
            .into_iter()
            .filter(|o| o["apiVersion"] == RBAC_API)
            .collect()
    }

    fn summary(objects: &[Json]) -> Vec<(String, String, String)> {
        objects
            .iter()
            .map(|o| {
                let m = &o["metadata"];
                let ns = m["namespace"].as_str().unwrap_or("-");
                (
                    o["kind"].as_str().unwrap().into(),
                    ns.into(),
                    m["name"].as_str().unwrap().into(),
                )
            })
            .collect()
    }

    fn row(kind: &str, ns: &str, name: &str) -> (String, String, String) {
        (kind.into(), ns.into(), name.into())
    }

    #[test]
    fn own_namespace_rules_make_only_a_role() {
        let objects = render_rules(rules(&[(
            "apps",
            "deployments",
            &["get", "patch"],
            Scope::Own,
        )]));
        assert_eq!(
            summary(&objects),
            [
                row("Role", "team", "ctrl"),
                row("RoleBinding", "team", "ctrl")
            ]
        );
        assert_eq!(
            objects[0]["rules"],
            json!([{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["get", "patch"]}])
        );
        assert_eq!(
            objects[1]["roleRef"],
            json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "ctrl"})
        );
    }

    #[test]
    fn mixed_scopes_make_a_cluster_role_and_roles_before_bindings() {
        let objects = render_rules(rules(&[
            ("apps", "deployments", &["list", "watch"], Scope::Cluster),
            ("", "events", &["create"], Scope::Own),
            (
                "",
                "configmaps",
                &["get"],
                Scope::Namespace("default".into()),
            ),
        ]));
        assert_eq!(
            summary(&objects),
            [
                row("ClusterRole", "-", "kite:team:ctrl"),
                row("Role", "default", "kite:team:ctrl"),
                row("Role", "team", "ctrl"),
                row("ClusterRoleBinding", "-", "kite:team:ctrl"),
                row("RoleBinding", "default", "kite:team:ctrl"),
                row("RoleBinding", "team", "ctrl"),
            ]
        );
        let sa = json!([{"kind": "ServiceAccount", "name": "ctrl", "namespace": "team"}]);
        for binding in &objects[3..] {
            assert_eq!(binding["subjects"], sa, "{binding}");
        }
        assert_eq!(objects[3]["roleRef"]["kind"], "ClusterRole");
        assert_eq!(objects[4]["roleRef"]["name"], "kite:team:ctrl");
        assert_eq!(objects[1]["rules"][0]["apiGroups"], json!([""]));
    }

    #[test]
    fn no_rules_no_roles() {
        assert!(render_rules(Rules::default()).is_empty());
    }

    #[test]
    fn wildcards_are_refused() {
        for (group, resource, verb) in [("*", "pods", "get"), ("", "*", "get"), ("", "pods", "*")] {
            let r = rules(&[(group, resource, &[verb], Scope::Own)]);
            let err = render(&inference(r, control(None, false)), &opts()).unwrap_err();
            assert!(matches!(err, Error::GrantWildcard { .. }), "{err}");
            assert!(err.to_string().contains("namespace team"), "{err}");
        }
    }
}
