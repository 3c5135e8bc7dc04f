//! Whether the author of a controller resource holds every permission it would be
//! granted, asked of the API server with SubjectAccessReviews, as RBAC's own escalation
//! check does for Roles: nobody gets a controller that can do what they could not.

use std::time::Duration;

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::Api;
use kube::api::PostParams;

use super::approval::Author;
use crate::rbac::{Rules, Scope};

/// How long one review may take.
const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);
/// Reviews in flight at once.
const PARALLEL: usize = 8;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("asking the API server whether {user} may {what}: {source}")]
    Review {
        user: String,
        what: String,
        source: kube::Error,
    },
    #[error("asking the API server whether {user} may {what}: no answer within 10s")]
    ReviewTimeout { user: String, what: String },
    #[error("reading the author's ServiceAccount {namespace}/{name}: {source}")]
    ReadAuthor {
        namespace: String,
        name: String,
        source: kube::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// One permission to check: what a rule grants, for one verb and object name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Permission {
    pub verb: String,
    pub group: String,
    pub resource: String,
    pub subresource: String,
    /// Empty: every namespace, or a cluster-scoped resource.
    pub namespace: String,
    /// Empty: every object.
    pub name: String,
    /// Why it is needed: the script line, or the spec field.
    pub why: String,
}

impl Permission {
    /// `get secrets in namespace team-a`, as messages say it.
    pub fn describe(&self) -> String {
        let mut what = format!("{} {}", self.verb, self.resource);
        if !self.subresource.is_empty() {
            what += &format!("/{}", self.subresource);
        }
        if !self.group.is_empty() {
            what += &format!(" ({})", self.group);
        }
        if !self.name.is_empty() {
            what += &format!(" named {}", self.name);
        }
        if self.namespace.is_empty() {
            what += " cluster-wide";
        } else {
            what += &format!(" in namespace {}", self.namespace);
        }
        what
    }
}

/// Every permission `rules` (resolved to namespaces) grant.
pub fn permissions(rules: &Rules) -> Vec<Permission> {
    let mut out = Vec::new();
    for rule in rules.sorted() {
        let (resource, subresource) = match rule.resource.split_once('/') {
            Some((r, s)) => (r.to_owned(), s.to_owned()),
            None => (rule.resource.clone(), String::new()),
        };
        let namespace = match &rule.scope {
            Scope::Namespace(ns) => ns.clone(),
            _ => String::new(),
        };
        let why = rule
            .sites
            .first()
            .map(std::string::ToString::to_string)
            .unwrap_or_default();
        let names: Vec<String> = if rule.resource_names.is_empty() {
            vec![String::new()]
        } else {
            rule.resource_names.clone()
        };
        for verb in &rule.verbs {
            for name in &names {
                out.push(Permission {
                    verb: verb.clone(),
                    group: rule.group.clone(),
                    resource: resource.clone(),
                    subresource: subresource.clone(),
                    namespace: namespace.clone(),
                    name: name.clone(),
                    why: why.clone(),
                });
            }
        }
    }
    out
}

/// Running as the existing ServiceAccount `namespace/name` needs `impersonate` on it.
pub fn impersonation(namespace: &str, name: &str) -> Permission {
    Permission {
        verb: "impersonate".into(),
        group: String::new(),
        resource: "serviceaccounts".into(),
        subresource: String::new(),
        namespace: namespace.into(),
        name: name.into(),
        why: "spec.serviceAccountName".into(),
    }
}

/// Why `author` can no longer be the author, when it is a ServiceAccount that was
/// deleted (or deleted and made again: another uid). RBAC alone does not see this: a
/// binding to a deleted account still answers "yes" to a SubjectAccessReview.
///
/// # Errors
/// The ServiceAccount could not be read.
pub async fn author_gone(client: &kube::Client, author: &Author) -> Result<Option<String>> {
    let Some(rest) = author.username.strip_prefix("system:serviceaccount:") else {
        return Ok(None);
    };
    let Some((namespace, name)) = rest.split_once(':') else {
        return Ok(None);
    };
    let api: Api<k8s_openapi::api::core::v1::ServiceAccount> =
        Api::namespaced(client.clone(), namespace);
    let found = tokio::time::timeout(REVIEW_TIMEOUT, api.get_opt(name))
        .await
        .map_err(|_| Error::ReviewTimeout {
            user: author.username.clone(),
            what: "exist".into(),
        })?
        .map_err(|source| Error::ReadAuthor {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            source,
        })?;
    Ok(match found {
        None => Some(format!(
            "the author, ServiceAccount {namespace}/{name}, no longer exists"
        )),
        Some(sa)
            if !author.uid.is_empty()
                && sa.metadata.uid.as_deref().is_some_and(|u| u != author.uid) =>
        {
            Some(format!(
                "the author, ServiceAccount {namespace}/{name}, was deleted and made again (another uid)"
            ))
        }
        Some(_) => None,
    })
}

/// The first of `wanted` that `author` does not hold, described for a refusal, e.g.
/// `alice may not get secrets in namespace team-a, which c.star:3:5 k8s.get("secret") needs`.
///
/// # Errors
/// A review that failed or timed out (the caller refuses rather than guesses).
pub async fn first_denied(
    client: &kube::Client,
    author: &Author,
    wanted: &[Permission],
) -> Result<Option<String>> {
    use futures::StreamExt;
    // Owned futures: a borrowing closure here is not Send for every lifetime, which
    // the controller runtime's reconcile future needs.
    let reviews = futures::stream::iter(wanted.to_vec())
        .map(|p| {
            let (client, author) = (client.clone(), author.clone());
            async move {
                let ok = allowed(&client, &author, &p).await?;
                Ok::<_, Error>((!ok).then_some(p))
            }
        })
        .buffered(PARALLEL)
        .collect::<Vec<_>>()
        .await;
    for r in reviews {
        if let Some(p) = r? {
            return Ok(Some(format!(
                "{} may not {}, which {} needs",
                author.username,
                p.describe(),
                p.why
            )));
        }
    }
    Ok(None)
}

/// Whether `author` holds `p`, by a SubjectAccessReview.
///
/// # Errors
/// The review failed or timed out.
pub async fn allowed(client: &kube::Client, author: &Author, p: &Permission) -> Result<bool> {
    let opt = |s: &str| (!s.is_empty()).then(|| s.to_owned());
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: Some(author.username.clone()),
            uid: opt(&author.uid),
            groups: (!author.groups.is_empty()).then(|| author.groups.clone()),
            extra: (!author.extra.is_empty()).then(|| author.extra.clone()),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(p.verb.clone()),
                group: Some(p.group.clone()),
                resource: Some(p.resource.clone()),
                subresource: opt(&p.subresource),
                namespace: opt(&p.namespace),
                name: opt(&p.name),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let api: Api<SubjectAccessReview> = Api::all(client.clone());
    let what = p.describe();
    match tokio::time::timeout(REVIEW_TIMEOUT, api.create(&PostParams::default(), &review)).await {
        Ok(Ok(done)) => Ok(done
            .status
            .is_some_and(|s| s.allowed && !s.denied.unwrap_or(false))),
        Ok(Err(source)) => Err(Error::Review {
            user: author.username.clone(),
            what,
            source,
        }),
        Err(_) => Err(Error::ReviewTimeout {
            user: author.username.clone(),
            what,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rbac::Site;

    #[test]
    fn each_verb_and_name_of_a_rule_is_one_permission() {
        let mut rules = Rules::default();
        let site = |p: &str| Site {
            position: p.into(),
            what: "k8s.x()".into(),
        };
        rules.add(
            "apps",
            "deployments",
            &["list", "patch"],
            Scope::Namespace("team".into()),
            &[],
            site("c.star:1:1"),
        );
        rules.add(
            "coordination.k8s.io",
            "leases",
            &["get"],
            Scope::Namespace("team".into()),
            &["a".to_owned(), "b".to_owned()],
            site("c.star:2:1"),
        );
        rules.add(
            "",
            "nodes/status",
            &["patch"],
            Scope::Cluster,
            &[],
            site("c.star:3:1"),
        );
        let all = permissions(&rules);
        assert_eq!(all.len(), 5);
        let patch = all
            .iter()
            .find(|p| p.verb == "patch" && p.group == "apps")
            .unwrap();
        assert_eq!(
            patch.describe(),
            "patch deployments (apps) in namespace team"
        );
        assert_eq!(patch.why, "c.star:1:1 k8s.x()");
        let status = all.iter().find(|p| p.resource == "nodes").unwrap();
        assert_eq!(status.subresource, "status");
        assert_eq!(status.describe(), "patch nodes/status cluster-wide");
        assert_eq!(
            all.iter()
                .filter(|p| p.resource == "leases")
                .map(|p| p.name.as_str())
                .collect::<Vec<_>>(),
            ["a", "b"]
        );
        assert_eq!(
            impersonation("team", "robot").describe(),
            "impersonate serviceaccounts named robot in namespace team"
        );
    }
}
