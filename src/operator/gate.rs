//! Who may subscribe to the operator's shared informers: a hosted controller's
//! ServiceAccount must itself be allowed to list and watch what it asks for, as the
//! API server would decide for an impersonated watch (SubjectAccessReviews).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use futures::future::BoxFuture;
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use kube::api::PostParams;
use kube::discovery::ApiResource;

use super::approval::Author;
use super::authority::{Permission, first_denied};
use crate::control::informers::{Admission, Error, Gate, Result};

/// How long one review may take.
const REVIEW_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the operator's own answer is kept (an administrator may grant it more).
const OWN_TTL: Duration = Duration::from_mins(5);
/// Freshly written RBAC reaches the API server's authorizer a moment later: a "no" is
/// asked again for this long before it refuses.
const SETTLE: Duration = Duration::from_secs(3);

/// (group, resource, namespace): what the operator may or may not read itself.
type Readable = (String, String, Option<String>);

/// The operator's gate: SubjectAccessReviews for the subscriber, and a cached
/// SelfSubjectAccessReview for whether the operator may run the shared watch itself.
pub struct ReadGate {
    client: kube::Client,
    /// (group, resource, namespace) → whether the operator may list and watch it.
    own: Mutex<HashMap<Readable, (bool, Instant)>>,
}

impl ReadGate {
    pub fn new(client: kube::Client) -> Self {
        Self {
            client,
            own: Mutex::default(),
        }
    }

    /// The operator may list and watch `resource` in `namespace` (asked at most every
    /// [`OWN_TTL`]).
    async fn operator_may(&self, ar: &ApiResource, namespace: Option<&str>) -> Result<bool> {
        let key = (
            ar.group.clone(),
            ar.plural.clone(),
            namespace.map(str::to_owned),
        );
        if let Some((yes, at)) = self.lock().get(&key)
            && at.elapsed() < OWN_TTL
        {
            return Ok(*yes);
        }
        let mut yes = true;
        for verb in ["list", "watch"] {
            let review = SelfSubjectAccessReview {
                spec: SelfSubjectAccessReviewSpec {
                    resource_attributes: Some(attributes(verb, ar, namespace)),
                    ..Default::default()
                },
                ..Default::default()
            };
            let api = kube::Api::<SelfSubjectAccessReview>::all(self.client.clone());
            let done =
                tokio::time::timeout(REVIEW_TIMEOUT, api.create(&PostParams::default(), &review))
                    .await
                    .map_err(|_| {
                        Error::Review("the operator's own review: no answer within 10s".into())
                    })?
                    .map_err(|e| Error::Review(format!("the operator's own review: {e}")))?;
            yes &= done.status.is_some_and(|s| s.allowed);
        }
        if !yes {
            tracing::info!(resource = %ar.plural, group = %ar.group, namespace = namespace.unwrap_or("*"),
                "the operator may not list and watch this itself; hosted controllers watch it under their own identity");
        }
        self.lock().insert(key, (yes, Instant::now()));
        Ok(yes)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Readable, (bool, Instant)>> {
        self.own
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Gate for ReadGate {
    fn admit<'a>(
        &'a self,
        user: &'a str,
        resource: &'a ApiResource,
        namespace: Option<&'a str>,
    ) -> BoxFuture<'a, Result<Admission>> {
        Box::pin(async move {
            // The account as the API server sees it when the operator impersonates it.
            let account = Author {
                username: user.to_owned(),
                groups: service_account_groups(user),
                ..Author::default()
            };
            let wanted = reads(resource, namespace);
            let started = Instant::now();
            let mut pause = Duration::from_millis(100);
            while let Some(denied) = first_denied(&self.client, &account, &wanted)
                .await
                .map_err(|e| Error::Review(e.to_string()))?
            {
                if started.elapsed() >= SETTLE {
                    return Err(Error::Refuse(format!(
                        "{denied}; grant it to the ServiceAccount (the operator shares its \
                         watches only with controllers that could watch themselves)"
                    )));
                }
                tokio::time::sleep(pause).await;
                pause = (pause * 2).min(Duration::from_secs(1));
            }
            if self.operator_may(resource, namespace).await? {
                Ok(Admission::Shared(self.client.clone()))
            } else {
                Ok(Admission::Own)
            }
        })
    }
}

fn attributes(verb: &str, ar: &ApiResource, namespace: Option<&str>) -> ResourceAttributes {
    ResourceAttributes {
        verb: Some(verb.to_owned()),
        group: Some(ar.group.clone()),
        version: Some(ar.version.clone()),
        resource: Some(ar.plural.clone()),
        namespace: namespace.map(str::to_owned),
        ..Default::default()
    }
}

/// The groups the API server puts a ServiceAccount in when it authenticates (or is
/// impersonated as) one.
fn service_account_groups(user: &str) -> Vec<String> {
    let mut groups = vec!["system:serviceaccounts".to_owned()];
    if let Some(ns) = user
        .strip_prefix("system:serviceaccount:")
        .and_then(|rest| rest.split_once(':'))
        .map(|(ns, _)| ns)
    {
        groups.push(format!("system:serviceaccounts:{ns}"));
    }
    groups.push("system:authenticated".to_owned());
    groups
}

/// `list` and `watch` of `ar` in `namespace` (None: cluster-wide), as permissions to
/// review.
fn reads(ar: &ApiResource, namespace: Option<&str>) -> Vec<Permission> {
    ["list", "watch"]
        .into_iter()
        .map(|verb| Permission {
            verb: verb.to_owned(),
            group: ar.group.clone(),
            resource: ar.plural.clone(),
            subresource: String::new(),
            namespace: namespace.unwrap_or_default().to_owned(),
            name: String::new(),
            why: "the controller's watch".to_owned(),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_service_account_is_reviewed_with_its_groups() {
        assert_eq!(
            service_account_groups("system:serviceaccount:team:robot"),
            [
                "system:serviceaccounts",
                "system:serviceaccounts:team",
                "system:authenticated"
            ]
        );
    }

    #[test]
    fn a_refusal_names_the_permission_and_why() {
        let ar = ApiResource {
            group: "apps".into(),
            version: "v1".into(),
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            plural: "deployments".into(),
        };
        let namespaced = reads(&ar, Some("t"));
        assert_eq!(
            namespaced
                .iter()
                .map(Permission::describe)
                .collect::<Vec<_>>(),
            [
                "list deployments (apps) in namespace t",
                "watch deployments (apps) in namespace t"
            ]
        );
        assert_eq!(namespaced[1].why, "the controller's watch");
        assert_eq!(
            reads(&ar, None)[0].describe(),
            "list deployments (apps) cluster-wide"
        );
    }

    /// (group, resource) of every rule in the YAML documents' roles with one of `verbs`.
    fn readable(yaml: &str, verbs: &[&str]) -> std::collections::BTreeSet<(String, String)> {
        let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(yaml).unwrap();
        let mut out = std::collections::BTreeSet::new();
        for rule in docs
            .iter()
            .flat_map(|d| d["rules"].as_array().into_iter().flatten())
        {
            let has = |v: &str| rule["verbs"].as_array().unwrap().iter().any(|x| x == v);
            if !verbs.iter().any(|v| has(v)) {
                continue;
            }
            for g in rule["apiGroups"].as_array().unwrap() {
                for r in rule["resources"].as_array().unwrap() {
                    let r = r.as_str().unwrap();
                    if !r.contains('/') {
                        out.insert((g.as_str().unwrap().to_owned(), r.to_owned()));
                    }
                }
            }
        }
        out
    }

    #[test]
    fn the_operators_read_role_matches_what_the_default_ceiling_lets_be_read() {
        let ceiling = include_str!("../../config/rbac/ceiling.yaml");
        let read = include_str!("../../config/rbac/read_role.yaml");
        assert_eq!(
            readable(read, &["list", "watch"]),
            readable(ceiling, &["list", "watch"])
        );
        assert_eq!(
            readable(read, &["list", "watch"]),
            readable(read, &["list"])
                .intersection(&readable(read, &["watch"]))
                .cloned()
                .collect(),
            "list and watch both, for each"
        );
        assert!(
            readable(read, &["get", "create", "patch", "update", "delete", "*"]).is_empty(),
            "the operator only reads"
        );
    }
}
