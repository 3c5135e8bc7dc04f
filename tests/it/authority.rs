//! The author check the operator's admission uses, against the real API server: a
//! SubjectAccessReview per permission, for the user who wrote the spec.

use std::time::Duration;

use crate::support::*;
use kite::Author;
use kite::{Permission, first_denied, impersonation};

fn permission(verb: &str, group: &str, resource: &str, ns: &str) -> Permission {
    Permission {
        verb: verb.into(),
        group: group.into(),
        resource: resource.into(),
        subresource: String::new(),
        namespace: ns.into(),
        name: String::new(),
        why: "c.star:3:5 k8s.x()".into(),
    }
}

#[tokio::test]
async fn an_author_is_checked_for_every_permission_they_would_grant() {
    let ns = TestNamespace::new("authority").await;
    let ns = ns.name.as_str();
    // The unprivileged user may edit Deployments here, and nothing else.
    kubectl_ok(&[
        "create",
        "role",
        "deployer",
        "-n",
        ns,
        "--verb=get,list,watch,patch",
        "--resource=deployments.apps",
    ])
    .await;
    kubectl_ok(&[
        "create",
        "rolebinding",
        "deployer",
        "-n",
        ns,
        "--role=deployer",
        "--user=kite-unprivileged",
    ])
    .await;
    let client = client().await;
    let author = Author {
        username: "kite-unprivileged".into(),
        groups: vec!["kite:users".into(), "system:authenticated".into()],
        ..Default::default()
    };
    let deployments = [
        permission("list", "apps", "deployments", ns),
        permission("patch", "apps", "deployments", ns),
    ];
    // The API server's authorizer sees the new binding through its own watch: poll
    // until it does, then the same answer must hold.
    wait_until(
        "the deployer binding allows list and patch",
        Duration::from_secs(30),
        || async {
            first_denied(&client, &author, &deployments)
                .await
                .unwrap()
                .is_none()
        },
    )
    .await;

    for (denied, says) in [
        (
            permission("get", "", "secrets", ns),
            format!("get secrets in namespace {ns}"),
        ),
        (
            permission("patch", "apps", "deployments", "kube-system"),
            "patch deployments (apps) in namespace kube-system".to_owned(),
        ),
        (
            permission("list", "apps", "deployments", ""),
            "list deployments (apps) cluster-wide".to_owned(),
        ),
        (
            impersonation(ns, "default"),
            format!("impersonate serviceaccounts named default in namespace {ns}"),
        ),
    ] {
        let mut wanted = deployments.to_vec();
        wanted.push(denied);
        let message = first_denied(&client, &author, &wanted)
            .await
            .unwrap()
            .unwrap();
        assert!(
            message.starts_with("kite-unprivileged may not "),
            "{message}"
        );
        assert!(message.contains(&says), "{message}");
        assert!(message.ends_with("needs"), "{message}");
    }

    // An administrator holds everything.
    let admin = Author {
        username: "kite-admin".into(),
        groups: vec!["system:masters".into()],
        ..Default::default()
    };
    let everything = [
        permission("get", "", "secrets", ns),
        permission("list", "apps", "deployments", ""),
        impersonation(ns, "default"),
    ];
    assert_eq!(
        first_denied(&client, &admin, &everything).await.unwrap(),
        None
    );
}
