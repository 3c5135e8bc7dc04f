//! One RBAC permission the script needs, where it applies, and the lines that need it.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::fmt;

use serde_json::{Value as Json, json};

/// Where a permission applies.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Scope {
    /// Every namespace, or a cluster-scoped resource: a ClusterRole.
    Cluster,
    /// The namespace the controller runs in (its default namespace): a Role there.
    Own,
    /// One named namespace: a Role there.
    Namespace(String),
}

impl Scope {
    /// This scope with [`Scope::Own`] replaced by the namespace the controller runs in.
    pub fn resolve(&self, own: &str) -> Scope {
        match self {
            Scope::Own => Scope::Namespace(own.to_owned()),
            other => other.clone(),
        }
    }
}

impl fmt::Display for Scope {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Scope::Cluster => f.write_str("cluster"),
            Scope::Own => f.write_str("own namespace"),
            Scope::Namespace(ns) => write!(f, "namespace {ns}"),
        }
    }
}

/// A place in a script that needs a permission, and why.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Site {
    /// `file:line:col`.
    pub position: String,
    /// What is there, e.g. `k8s.patch("deployment")` or `control() kind`.
    pub what: String,
}

impl fmt::Display for Site {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.position, self.what)
    }
}

/// Verbs on one resource (or subresource) of one API group, in one scope.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// The API group; empty for the core group.
    pub group: String,
    /// The plural resource name, or `plural/subresource`.
    pub resource: String,
    pub verbs: BTreeSet<String>,
    pub scope: Scope,
    /// When not empty, the rule covers only these object names.
    pub resource_names: Vec<String>,
    pub sites: Vec<Site>,
}

impl Rule {
    /// The Kubernetes `PolicyRule` for this rule.
    pub fn policy_rule(&self) -> Json {
        let mut rule = json!({
            "apiGroups": [self.group],
            "resources": [self.resource],
            "verbs": self.verbs.iter().collect::<Vec<_>>(),
        });
        if !self.resource_names.is_empty() {
            rule["resourceNames"] = json!(self.resource_names);
        }
        rule
    }

    /// `resource.group`, or the resource alone in the core group.
    pub fn qualified_resource(&self) -> String {
        let (plural, sub) = match self.resource.split_once('/') {
            Some((p, s)) => (p, format!("/{s}")),
            None => (self.resource.as_str(), String::new()),
        };
        if self.group.is_empty() {
            format!("{plural}{sub}")
        } else {
            format!("{plural}.{}{sub}", self.group)
        }
    }
}

/// A set of rules, merged so that each (scope, group, resource, names) appears once.
///
/// Adding is constant time (an index of the rules and of each rule's sites), so
/// inference stays linear in the script however many calls it makes.
#[derive(Clone, Debug, Default)]
pub struct Rules {
    rules: Vec<Rule>,
    /// The position in `rules` of each (scope, group, resource, names).
    index: HashMap<(Scope, String, String, Vec<String>), usize>,
    /// (rule position, site) pairs already recorded.
    sites: HashSet<(usize, Site)>,
}

impl PartialEq for Rules {
    fn eq(&self, other: &Self) -> bool {
        self.rules == other.rules
    }
}

impl Eq for Rules {}

impl Rules {
    /// Adds `verbs` on `group`/`resource` in `scope`, needed at `site`.
    pub fn add(
        &mut self,
        group: &str,
        resource: &str,
        verbs: &[&str],
        scope: Scope,
        resource_names: &[String],
        site: Site,
    ) {
        let key = (
            scope.clone(),
            group.to_owned(),
            resource.to_owned(),
            resource_names.to_vec(),
        );
        let at = *self.index.entry(key).or_insert_with(|| {
            self.rules.push(Rule {
                group: group.to_owned(),
                resource: resource.to_owned(),
                verbs: BTreeSet::new(),
                scope,
                resource_names: resource_names.to_vec(),
                sites: Vec::new(),
            });
            self.rules.len() - 1
        });
        let rule = &mut self.rules[at];
        for v in verbs {
            if !rule.verbs.contains(*v) {
                rule.verbs.insert((*v).to_owned());
            }
        }
        if self.sites.insert((at, site.clone())) {
            rule.sites.push(site);
        }
    }

    /// The rules, sorted by scope, group and resource.
    pub fn sorted(&self) -> Vec<&Rule> {
        let mut out: Vec<&Rule> = self.rules.iter().collect();
        out.sort_by(|a, b| {
            (&a.scope, &a.group, &a.resource, &a.resource_names).cmp(&(
                &b.scope,
                &b.group,
                &b.resource,
                &b.resource_names,
            ))
        });
        out
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// These rules with [`Scope::Own`] resolved to `own`, merged again.
    pub fn resolved(&self, own: &str) -> Rules {
        let mut out = Rules::default();
        for r in &self.rules {
            let verbs: Vec<&str> = r.verbs.iter().map(String::as_str).collect();
            for site in &r.sites {
                out.add(
                    &r.group,
                    &r.resource,
                    &verbs,
                    r.scope.resolve(own),
                    &r.resource_names,
                    site.clone(),
                );
            }
        }
        out
    }

    /// The rules of one scope, as `PolicyRule`s.
    pub fn policy_rules(&self, scope: &Scope) -> Vec<Json> {
        self.sorted()
            .into_iter()
            .filter(|r| &r.scope == scope)
            .map(Rule::policy_rule)
            .collect()
    }

    /// Every scope with at least one rule, cluster first.
    pub fn scopes(&self) -> Vec<Scope> {
        let set: BTreeSet<Scope> = self.rules.iter().map(|r| r.scope.clone()).collect();
        set.into_iter().collect()
    }

    /// A table for reviewers: one line per rule, then the lines of the script that need it.
    pub fn table(&self) -> String {
        let rows: Vec<(String, String, String)> = self
            .sorted()
            .into_iter()
            .map(|r| {
                let mut res = r.qualified_resource();
                if !r.resource_names.is_empty() {
                    res = format!("{res} [{}]", r.resource_names.join(","));
                }
                let verbs = r.verbs.iter().cloned().collect::<Vec<_>>().join(",");
                (r.scope.to_string(), res, verbs)
            })
            .collect();
        let w0 = rows.iter().map(|r| r.0.len()).max().unwrap_or(0).max(5);
        let w1 = rows.iter().map(|r| r.1.len()).max().unwrap_or(0).max(8);
        let w2 = rows.iter().map(|r| r.2.len()).max().unwrap_or(0).max(5);
        let mut out = format!(
            "{:w0$}  {:w1$}  {:w2$}  NEEDED BY\n",
            "SCOPE", "RESOURCE", "VERBS"
        );
        for (row, rule) in rows.iter().zip(self.sorted()) {
            for (i, site) in rule.sites.iter().enumerate() {
                if i == 0 {
                    out += &format!("{:w0$}  {:w1$}  {:w2$}  {site}\n", row.0, row.1, row.2);
                } else {
                    out += &format!("{:w0$}  {:w1$}  {:w2$}  {site}\n", "", "", "");
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn site(p: &str) -> Site {
        Site {
            position: p.into(),
            what: "x".into(),
        }
    }

    #[test]
    fn merges_verbs_and_sites_per_resource_and_scope() {
        let mut rules = Rules::default();
        rules.add(
            "apps",
            "deployments",
            &["list", "watch"],
            Scope::Cluster,
            &[],
            site("a:1:1"),
        );
        rules.add(
            "apps",
            "deployments",
            &["patch"],
            Scope::Cluster,
            &[],
            site("a:2:1"),
        );
        rules.add(
            "apps",
            "deployments",
            &["get"],
            Scope::Own,
            &[],
            site("a:3:1"),
        );
        let sorted = rules.sorted();
        assert_eq!(sorted.len(), 2);
        assert_eq!(
            sorted[0].policy_rule(),
            json!({"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list", "patch", "watch"]})
        );
        assert_eq!(sorted[0].sites.len(), 2);
        let resolved = rules.resolved("team");
        assert_eq!(
            resolved.scopes(),
            vec![Scope::Cluster, Scope::Namespace("team".into())]
        );
    }

    #[test]
    fn resource_names_appear_in_the_policy_rule_and_the_table() {
        let mut rules = Rules::default();
        let names = vec!["my-lease".to_owned()];
        rules.add(
            "coordination.k8s.io",
            "leases",
            &["get", "update"],
            Scope::Own,
            &names,
            site("c.star:9:1"),
        );
        let pr = rules.policy_rules(&Scope::Own);
        assert_eq!(pr[0]["resourceNames"], json!(["my-lease"]));
        let table = rules.table();
        assert!(
            table.contains("leases.coordination.k8s.io [my-lease]"),
            "{table}"
        );
        assert!(table.contains("c.star:9:1 x"), "{table}");
    }
}
