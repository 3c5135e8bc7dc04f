//! The seed's staticsites operator (examples/staticsite/), exactly as written: children,
//! drift, spec changes, the Ready condition, and deletion with finalize. It holds the
//! cluster alone: the example watches every namespace and binds port 8081.

use std::time::Duration;

use crate::support::*;

const T: Duration = Duration::from_secs(60);

#[tokio::test(flavor = "multi_thread")]
async fn staticsite_operator_walkthrough() {
    // The example binds port 8081 and watches StaticSites in every namespace.
    let _cluster = exclusive().await;
    install_staticsite_crd().await;
    let ns = TestNamespace::new("site").await;
    let kite = Kite::spawn(&[
        "run",
        "examples/staticsite/staticsite-controller.star",
        "--allow-all",
    ]);
    let site = format!(
        "apiVersion: tutorial.starkite.io/v1\nkind: StaticSite\nmetadata: {{name: web, namespace: {}}}\nspec: {{replicas: 1}}\n",
        ns.name
    );
    assert!(
        kubectl_stdin(&["apply", "-f", "-"], &site)
            .await
            .status
            .success()
    );

    // 1. Children created, owned by the site, applied by "starkite".
    wait_until("the Deployment and Service", T, || async {
        kubectl(&["get", "deployment/web", "service/web", "-n", &ns.name])
            .await
            .status
            .success()
    })
    .await;
    let uid = jsonpath("staticsite", "web", &ns.name, "{.metadata.uid}").await;
    for kind in ["deployment", "service"] {
        let owner = jsonpath(kind, "web", &ns.name, "{.metadata.ownerReferences[0]}").await;
        let owner: serde_json::Value = serde_json::from_str(&owner).unwrap();
        assert_eq!(owner["kind"], "StaticSite", "{kind}");
        assert_eq!(owner["uid"], uid.as_str());
        assert_eq!(owner["controller"], true);
        assert_eq!(owner["blockOwnerDeletion"], true);
        let managers = jsonpath(
            kind,
            "web",
            &ns.name,
            "{.metadata.managedFields[*].manager}",
        )
        .await;
        assert!(
            managers.split_whitespace().any(|m| m == "starkite"),
            "{kind}: {managers}"
        );
    }

    // 5. Ready=True with observedGeneration once the Deployment is available on kwok.
    wait_until("Ready=True", T, || async {
        jsonpath(
            "staticsite",
            "web",
            &ns.name,
            r#"{.status.conditions[?(@.type=="Ready")].status}"#,
        )
        .await
            == "True"
    })
    .await;
    let generation = jsonpath("staticsite", "web", &ns.name, "{.metadata.generation}").await;
    let observed = jsonpath(
        "staticsite",
        "web",
        &ns.name,
        r#"{.status.conditions[?(@.type=="Ready")].observedGeneration}"#,
    )
    .await;
    assert_eq!(observed, generation);

    // 2. Drift restored within 2 s.
    kubectl_ok(&[
        "scale",
        "deployment",
        "web",
        "--replicas=10",
        "-n",
        &ns.name,
    ])
    .await;
    let scaled = std::time::Instant::now();
    wait_until(
        "the drift to be restored",
        Duration::from_secs(2),
        || async { jsonpath("deployment", "web", &ns.name, "{.spec.replicas}").await == "1" },
    )
    .await;
    println!("drift restored in {:?}", scaled.elapsed());

    // 3. + 5. A spec change updates the child; until it is available the site is Progressing.
    kubectl_ok(&[
        "patch",
        "staticsite",
        "web",
        "-n",
        &ns.name,
        "--type=merge",
        "-p",
        r#"{"spec":{"replicas":3}}"#,
    ])
    .await;
    wait_until("the child to follow the spec", T, || async {
        jsonpath("deployment", "web", &ns.name, "{.spec.replicas}").await == "3"
    })
    .await;
    wait_until("Ready=True for generation 2", T, || async {
        jsonpath(
            "staticsite",
            "web",
            &ns.name,
            r#"{.status.conditions[?(@.type=="Ready")].observedGeneration}"#,
        )
        .await
            == "2"
            && jsonpath(
                "staticsite",
                "web",
                &ns.name,
                r#"{.status.conditions[?(@.type=="Ready")].status}"#,
            )
            .await
                == "True"
    })
    .await;

    // 6. Deletion runs finalize exactly once, removes the finalizer, collects the children.
    kubectl_ok(&[
        "delete",
        "staticsite",
        "web",
        "-n",
        &ns.name,
        "--timeout=30s",
    ])
    .await;
    wait_until("the children to be garbage-collected", T, || async {
        let out = kubectl_ok(&["get", "deployments,services", "-n", &ns.name, "-o", "name"]).await;
        !out.contains("deployment.apps/web") && !out.contains("service/web")
    })
    .await;
    let finalized = kite
        .stdout()
        .iter()
        .filter(|l| *l == "Performing pre-deletion cleanup for web")
        .count();
    assert_eq!(finalized, 1, "{:?}", kite.stdout());
}
