//! The operator pattern with namespaced controller variants: pruning, Progressing,
//! finalize retries, watch_related, watch_owned, and a quiet steady state.

use std::time::Duration;

use crate::support::*;

const T: Duration = Duration::from_secs(60);

async fn create_site(ns: &str, name: &str, replicas: u32) {
    let site = format!(
        "apiVersion: tutorial.starkite.io/v1\nkind: StaticSite\nmetadata: {{name: {name}, namespace: {ns}}}\nspec: {{replicas: {replicas}}}\n"
    );
    let out = kubectl_stdin(&["apply", "-f", "-"], &site).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn dropping_a_child_prunes_it_and_spares_everything_else() {
    install_staticsite_crd().await;
    let ns = TestNamespace::new("prune").await;
    let var = format!("namespace={}", ns.name);
    let mut kite = Kite::spawn(&[
        "run",
        "tests/scripts/operator/prune.star",
        "--allow-k8s",
        "--var",
        &var,
        "--var",
        "service=true",
    ]);
    create_site(&ns.name, "p", 1).await;
    // A Service kite did not create, with the same labels as the child.
    kubectl_ok(&[
        "create",
        "service",
        "clusterip",
        "bystander",
        "--tcp=80:80",
        "-n",
        &ns.name,
    ])
    .await;
    wait_until("both children", T, || async {
        kubectl(&["get", "deployment/p", "service/p", "-n", &ns.name])
            .await
            .status
            .success()
    })
    .await;
    sigterm(kite.pid());
    assert!(kite.wait(T).await.success());

    // The same controller, no longer returning the Service.
    let _kite = Kite::spawn(&[
        "run",
        "tests/scripts/operator/prune.star",
        "--allow-k8s",
        "--var",
        &var,
        "--var",
        "service=false",
    ]);
    wait_until("the Service to be pruned", T, || async {
        !kubectl(&["get", "service/p", "-n", &ns.name])
            .await
            .status
            .success()
    })
    .await;
    kubectl_ok(&["get", "deployment/p", "-n", &ns.name]).await;
    kubectl_ok(&["get", "service/bystander", "-n", &ns.name]).await;
    wait_until(
        "a Reconciled event naming the pruned Service",
        T,
        || async {
            kubectl_ok(&[
                "get",
                "events",
                "-n",
                &ns.name,
                "--field-selector",
                "involvedObject.name=p,reason=Reconciled",
                "-o",
                "jsonpath={.items[*].message}",
            ])
            .await
            .contains(&format!("pruned service {}/p", ns.name))
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_child_outside_the_parents_namespace_is_an_error_and_nothing_is_applied() {
    install_staticsite_crd().await;
    let ns = TestNamespace::new("unowned").await;
    let dir = std::env::temp_dir().join(unique_name("kite-unowned"));
    std::fs::create_dir_all(&dir).unwrap();
    let script = dir.join("bad.star");
    std::fs::write(
        &script,
        format!(
            r#"
def reconcile(site):
    return [k8s.obj.config_map(name = "ok", namespace = "{ns}"),
            k8s.obj.config_map(name = "elsewhere", namespace = "default")]
k8s.control("staticsites", reconcile = reconcile, namespace = "{ns}", max_retries = 0)
"#,
            ns = ns.name
        ),
    )
    .unwrap();
    let _kite = Kite::spawn(&["run", script.to_str().unwrap(), "--allow-k8s"]);
    create_site(&ns.name, "s", 1).await;
    wait_until("Ready=False/ReconcileError", T, || async {
        jsonpath(
            "staticsite",
            "s",
            &ns.name,
            r#"{.status.conditions[?(@.type=="Ready")].reason}"#,
        )
        .await
            == "ReconcileError"
    })
    .await;
    let message = jsonpath(
        "staticsite",
        "s",
        &ns.name,
        r#"{.status.conditions[?(@.type=="Ready")].message}"#,
    )
    .await;
    assert!(
        message.contains("can only own objects in its own namespace"),
        "{message}"
    );
    assert!(
        !kubectl(&["get", "configmap/ok", "-n", &ns.name])
            .await
            .status
            .success(),
        "nothing half-applied"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn finalize_that_fails_twice_then_succeeds_completes_the_deletion() {
    install_staticsite_crd().await;
    let ns = TestNamespace::new("finretry").await;
    let var = format!("namespace={}", ns.name);
    let kite = Kite::spawn(&[
        "run",
        "tests/scripts/operator/finalize_retry.star",
        "--allow-k8s",
        "--var",
        &var,
    ]);
    create_site(&ns.name, "f", 1).await;
    wait_until("the finalizer to be added", T, || async {
        jsonpath("staticsite", "f", &ns.name, "{.metadata.finalizers}")
            .await
            .contains("starkite.io/finalizer")
    })
    .await;
    kubectl_ok(&["delete", "staticsite", "f", "-n", &ns.name, "--wait=false"]).await;
    wait_until("the site to be gone", T, || async {
        !kubectl(&["get", "staticsite/f", "-n", &ns.name])
            .await
            .status
            .success()
    })
    .await;
    assert_eq!(
        count(&kite.stdout(), "FINALIZED f"),
        1,
        "{:?}",
        kite.stdout()
    );
    assert_eq!(
        count(&kite.stdout(), "FINALIZE attempt"),
        3,
        "{:?}",
        kite.stdout()
    );
    let warnings = kubectl_ok(&[
        "get",
        "events",
        "-n",
        &ns.name,
        "--field-selector",
        "involvedObject.name=f,type=Warning,reason=FinalizeFailed",
        "-o",
        "jsonpath={.items[*].count}",
    ])
    .await;
    assert_eq!(
        warnings.trim(),
        "1 1",
        "two distinct failures, one event each: {warnings}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn watch_related_requeues_the_sites_map_func_names() {
    install_staticsite_crd().await;
    let ns = TestNamespace::new("related").await;
    let var = format!("namespace={}", ns.name);
    let mut kite = Kite::spawn(&[
        "run",
        "tests/scripts/operator/related.star",
        "--allow-k8s",
        "--var",
        &var,
    ]);
    create_site(&ns.name, "a", 1).await;
    create_site(&ns.name, "b", 1).await;
    kite.wait_stdout("RECONCILED a", T).await;
    kite.wait_stdout("RECONCILED b", T).await;
    let before_a = count(&kite.stdout(), "RECONCILED a");
    let before_b = count(&kite.stdout(), "RECONCILED b");
    // Dict form: a Secret annotated with site=a requeues a only.
    kubectl_ok(&[
        "create",
        "secret",
        "generic",
        "creds",
        "--from-literal=k=v",
        "-n",
        &ns.name,
    ])
    .await;
    kubectl_ok(&["annotate", "secret", "creds", "site=a", "-n", &ns.name]).await;
    wait_until("a to be reconciled for the secret", T, || async {
        count(&kite.stdout(), "RECONCILED a") > before_a
    })
    .await;
    assert_eq!(
        count(&kite.stdout(), "RECONCILED b"),
        before_b,
        "b is not related to the secret"
    );
    // Tuple form: a ConfigMap labelled site=b requeues b.
    kubectl_ok(&[
        "create",
        "configmap",
        "settings",
        "--from-literal=k=v",
        "-n",
        &ns.name,
    ])
    .await;
    kubectl_ok(&["label", "configmap", "settings", "site=b", "-n", &ns.name]).await;
    wait_until("b to be reconciled for the configmap", T, || async {
        count(&kite.stdout(), "RECONCILED b") > before_b
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn watch_owned_requeues_the_owner_without_returned_children() {
    install_staticsite_crd().await;
    let ns = TestNamespace::new("owned").await;
    let var = format!("namespace={}", ns.name);
    let mut kite = Kite::spawn(&[
        "run",
        "tests/scripts/operator/owned.star",
        "--allow-k8s",
        "--var",
        &var,
    ]);
    create_site(&ns.name, "o", 1).await;
    kite.wait_stdout("RECONCILED o", T).await;
    let uid = jsonpath("staticsite", "o", &ns.name, "{.metadata.uid}").await;
    let before = count(&kite.stdout(), "RECONCILED o");
    let cm = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: owned-cm\n  namespace: {}\n  ownerReferences: [{{apiVersion: tutorial.starkite.io/v1, kind: StaticSite, name: o, uid: {uid}}}]\ndata: {{k: v}}\n",
        ns.name
    );
    assert!(
        kubectl_stdin(&["apply", "-f", "-"], &cm)
            .await
            .status
            .success()
    );
    wait_until("the owner to be requeued", T, || async {
        count(&kite.stdout(), "RECONCILED o") > before
    })
    .await;
}

#[tokio::test(flavor = "multi_thread")]
async fn the_ready_write_keeps_conditions_written_meanwhile() {
    install_staticsite_crd().await;
    let ns = TestNamespace::new("conds").await;
    let var = format!("namespace={}", ns.name);
    let mut kite = Kite::spawn(&[
        "run",
        "tests/scripts/operator/own_condition.star",
        "--allow-k8s",
        "--var",
        &var,
    ]);
    create_site(&ns.name, "c", 1).await;
    kite.wait_stdout("RECONCILED c", T).await;
    let types =
        || async { jsonpath("staticsite", "c", &ns.name, "{.status.conditions[*].type}").await };
    wait_until("Ready written", T, || async {
        types().await.contains("Ready")
    })
    .await;
    let both = types().await;
    assert!(
        both.contains("Custom"),
        "the script's condition was overwritten: {both}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn an_object_kite_did_not_create_is_not_taken_over_unless_the_child_says_so() {
    install_staticsite_crd().await;
    let ns = TestNamespace::new("adopt").await;
    let var = format!("namespace={}", ns.name);
    let cm = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: s, namespace: {}}}\ndata: {{k: mine}}\n",
        ns.name
    );
    assert!(
        kubectl_stdin(&["apply", "-f", "-"], &cm)
            .await
            .status
            .success()
    );
    let mut kite = Kite::spawn(&[
        "run",
        "tests/scripts/operator/adopt.star",
        "--allow-k8s",
        "--var",
        &var,
    ]);
    create_site(&ns.name, "s", 1).await;
    kite.wait_stdout("RECONCILED s", T).await;
    let ready = || async {
        jsonpath(
            "staticsite",
            "s",
            &ns.name,
            r#"{.status.conditions[?(@.type=="Ready")].message}"#,
        )
        .await
    };
    wait_until("the refusal in Ready", T, || async {
        ready().await.contains("this controller did not create it")
    })
    .await;
    assert_eq!(
        jsonpath("configmap", "s", &ns.name, "{.data.k}").await,
        "mine"
    );
    assert_eq!(
        jsonpath("configmap", "s", &ns.name, "{.metadata.ownerReferences}").await,
        ""
    );
    drop(kite);

    // Opting in takes it over.
    let mut kite = Kite::spawn(&[
        "run",
        "tests/scripts/operator/adopt.star",
        "--allow-k8s",
        "--var",
        &var,
        "--var",
        "adopt=true",
    ]);
    kite.wait_stdout("RECONCILED s", T).await;
    wait_until("the ConfigMap adopted", T, || async {
        jsonpath("configmap", "s", &ns.name, "{.data.k}").await == "kite"
    })
    .await;
    let owner = jsonpath(
        "configmap",
        "s",
        &ns.name,
        "{.metadata.ownerReferences[0].kind}",
    )
    .await;
    assert_eq!(owner, "StaticSite");
}

#[tokio::test(flavor = "multi_thread")]
async fn steady_state_writes_nothing() {
    install_staticsite_crd().await;
    let ns = TestNamespace::new("steady").await;
    let var = format!("namespace={}", ns.name);
    let mut kite = Kite::spawn(&[
        "run",
        "tests/scripts/operator/prune.star",
        "--allow-k8s",
        "--var",
        &var,
        "--var",
        "poll=5s",
    ]);
    create_site(&ns.name, "s", 1).await;
    wait_until("Ready=True", T, || async {
        jsonpath(
            "staticsite",
            "s",
            &ns.name,
            r#"{.status.conditions[?(@.type=="Ready")].status}"#,
        )
        .await
            == "True"
    })
    .await;
    let versions = || async {
        let mut v = Vec::new();
        for kind in ["staticsite", "deployment", "service"] {
            v.push(jsonpath(kind, "s", &ns.name, "{.metadata.resourceVersion}").await);
        }
        v
    };
    // The steady state starts once the rollout has finished.
    kubectl_ok(&[
        "rollout",
        "status",
        "deployment/s",
        "-n",
        &ns.name,
        "--timeout=60s",
    ])
    .await;
    let first = versions().await;
    let reconciles_before = count(&kite.stdout(), "RECONCILED s");
    // Over 30 s the poll reconciles (every 5 s) and nothing is written.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::time::Instant::now() < deadline {
        assert_eq!(
            versions().await,
            first,
            "resourceVersions changed in the steady state"
        );
        kite.wait_stdout("RECONCILED s", T).await;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let polls = count(&kite.stdout(), "RECONCILED s") - reconciles_before;
    assert!(
        (4..=8).contains(&polls),
        "about one reconcile per 5 s poll, got {polls}"
    );
    assert_eq!(versions().await, first);
}
#[tokio::test(flavor = "multi_thread")]
async fn progressing_while_the_deployment_is_not_available() {
    // A Deployment that cannot become available (a quota forbids its pods) keeps the
    // site Progressing, naming the child.
    kubectl_ok(&["apply", "-f", "examples/staticsite/crd.yaml"]).await;
    kubectl_ok(&[
        "wait",
        "--for=condition=Established",
        "crd/staticsites.tutorial.starkite.io",
    ])
    .await;
    let ns = TestNamespace::new("siteprog").await;
    kubectl_ok(&["create", "quota", "nopods", "--hard=pods=0", "-n", &ns.name]).await;
    let var = format!("namespace={}", ns.name);
    let _kite = Kite::spawn(&[
        "run",
        "tests/scripts/operator/prune.star",
        "--allow-k8s",
        "--var",
        &var,
    ]);
    let site = format!(
        "apiVersion: tutorial.starkite.io/v1\nkind: StaticSite\nmetadata: {{name: slow, namespace: {}}}\nspec: {{replicas: 2}}\n",
        ns.name
    );
    assert!(
        kubectl_stdin(&["apply", "-f", "-"], &site)
            .await
            .status
            .success()
    );
    wait_until("Progressing", T, || async {
        jsonpath(
            "staticsite",
            "slow",
            &ns.name,
            r#"{.status.conditions[?(@.type=="Ready")].reason}"#,
        )
        .await
            == "Progressing"
    })
    .await;
    let message = jsonpath(
        "staticsite",
        "slow",
        &ns.name,
        r#"{.status.conditions[?(@.type=="Ready")].message}"#,
    )
    .await;
    assert!(
        message.contains(&format!("deployment {}/slow", ns.name)),
        "{message}"
    );
    let status = jsonpath(
        "staticsite",
        "slow",
        &ns.name,
        r#"{.status.conditions[?(@.type=="Ready")].status}"#,
    )
    .await;
    assert_eq!(status, "False");
}
