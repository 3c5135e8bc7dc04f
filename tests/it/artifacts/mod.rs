//! `kite kube gen-controller-artifacts` against the local cluster: the stream is valid,
//! and the inferred role is sufficient (the example's scenario runs under it with no 403),
//! minimal (every granted verb is used) and nothing more (other requests are refused).

use std::time::Duration;

use crate::support::{self, *};

mod deployed;
mod webhook;
mod workload_rbac;

use deployed::Deployed;

#[tokio::test]
async fn max_replicas_runs_under_its_inferred_role() {
    // The example binds port 8081 and watches every namespace.
    let _cluster = exclusive().await;
    let d = Deployed::new(
        "art-maxrep",
        "examples/max-replicas-controller.star",
        &[],
        None,
    )
    .await;
    assert_eq!(
        d.kinds(),
        [
            "Namespace",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Deployment"
        ]
    );
    let mut kite = d.run("examples/max-replicas-controller.star", &[]);
    kite.wait_stdout("Starting max-replicas controller", Duration::from_secs(30))
        .await;
    let ns = &d.ns.name;
    create_enforced_deployment(ns, "web", 5).await;
    let replicas = || async { jsonpath("deployment", "web", ns, "{.spec.replicas}").await == "3" };
    wait_until("the drift corrected", Duration::from_secs(20), replicas).await;
    // A second identical drift: the event is aggregated (read, then its count patched).
    kubectl_ok(&["scale", "deployment", "web", "-n", ns, "--replicas=5"]).await;
    wait_until(
        "the count of the aggregated event is 2",
        Duration::from_secs(20),
        || async {
            let out = kubectl_ok(&[
                "get",
                "events",
                "-n",
                ns,
                "--field-selector",
                "reason=DriftCorrected",
                "-o",
                "jsonpath={.items[*].count}",
            ])
            .await;
            out.trim() == "2"
        },
    )
    .await;
    wait_until(
        "the drift corrected again",
        Duration::from_secs(20),
        replicas,
    )
    .await;
    d.assert_minimal_and_sufficient(&kite, &[], &[]).await;
    d.assert_refused(&["get", "secrets", "-n", ns]).await;
    d.assert_refused(&["delete", "deployment", "web", "-n", ns])
        .await;
    d.assert_refused(&["get", "deployment", "web", "-n", ns])
        .await;
}

#[tokio::test]
async fn pod_logger_runs_under_a_role_in_default() {
    let d = Deployed::new(
        "art-podlog",
        "examples/pod-logger-controller.star",
        &[],
        None,
    )
    .await;
    let roles: Vec<(&str, &str)> = d
        .objects
        .iter()
        .filter(|o| o["kind"].as_str().unwrap().contains("Role"))
        .map(|o| {
            (
                o["kind"].as_str().unwrap(),
                o["metadata"]["namespace"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(
        roles,
        [("Role", "default"), ("RoleBinding", "default")],
        "only a Role, in the namespace the script watches"
    );
    let mut kite = d.run("examples/pod-logger-controller.star", &[]);
    kite.wait_stdout("Starting pod logger controller", Duration::from_secs(30))
        .await;
    let pod = unique_name("art-pod");
    kubectl_ok(&[
        "run",
        &pod,
        "-n",
        "default",
        "--image=nginx",
        "--restart=Never",
    ])
    .await;
    kite.wait_stdout(&format!("Pod Name: {pod}"), Duration::from_secs(20))
        .await;
    kubectl_ok(&["delete", "pod", &pod, "-n", "default", "--wait=false"]).await;
    kite.wait_stdout(
        &format!("Event: DELETED | Pod Name: {pod}"),
        Duration::from_secs(60),
    )
    .await;
    let why = "the runtime's ReconcileFailed warning: this handler cannot fail";
    d.assert_minimal_and_sufficient(
        &kite,
        &[
            ("create", "", "events", why),
            ("get", "", "events", why),
            ("patch", "", "events", why),
        ],
        &[],
    )
    .await;
    d.assert_refused(&["get", "pods", "-n", &d.ns.name]).await;
    d.assert_refused(&["delete", "pod", "anything", "-n", "default"])
        .await;
}

#[tokio::test]
async fn staticsite_operator_runs_under_its_inferred_role() {
    // The example binds port 8081 and watches StaticSites in every namespace.
    let _cluster = exclusive().await;
    install_staticsite_crd().await;
    let script = "examples/staticsite/staticsite-controller.star";
    let d = Deployed::new(
        "art-site",
        script,
        &["--crd", "examples/staticsite/crd.yaml"],
        None,
    )
    .await;
    let mut kite = d.run(script, &[]);
    let ns = &d.ns.name;
    let site = "apiVersion: tutorial.starkite.io/v1\nkind: StaticSite\nmetadata:\n  name: blog\nspec:\n  replicas: 2\n";
    let out = kubectl_stdin(&["apply", "-n", ns, "-f", "-"], site).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    wait_until("the site Ready", Duration::from_secs(60), || async {
        jsonpath(
            "staticsite",
            "blog",
            ns,
            "{.status.conditions[?(@.type==\"Ready\")].status}",
        )
        .await
            == "True"
    })
    .await;
    assert_eq!(
        jsonpath("service", "blog", ns, "{.metadata.name}").await,
        "blog"
    );
    // The children are watched where the Role lets them be: drift on a child is undone
    // at once (no poll), and the probe passes.
    wait_until("/readyz", Duration::from_secs(30), || async {
        support::operator::curl("http://127.0.0.1:8081/readyz")
            .await
            .is_some()
    })
    .await;
    // Twice: each correction records the same event ("applied Deployment/blog"), so the
    // second is aggregated into the first (get, patch).
    for _ in 0..2 {
        kubectl_ok(&["scale", "deployment", "blog", "-n", ns, "--replicas=5"]).await;
        wait_until("the child restored", Duration::from_secs(10), || async {
            jsonpath("deployment", "blog", ns, "{.spec.replicas}").await == "2"
        })
        .await;
    }
    kubectl_ok(&["delete", "staticsite", "blog", "-n", ns, "--timeout=60s"]).await;
    kite.wait_stdout(
        "Performing pre-deletion cleanup for blog",
        Duration::from_secs(5),
    )
    .await;
    let prune = "pruning: the seed's script always returns both children, so nothing is pruned";
    d.assert_minimal_and_sufficient(
        &kite,
        &[
            ("delete", "apps", "deployments", prune),
            ("delete", "", "services", prune),
        ],
        &[(
            "get",
            "tutorial.starkite.io",
            "staticsites",
            "re-reading the parent: only after a Ready write conflicts with another writer",
        )],
    )
    .await;
    d.assert_refused(&["get", "secrets", "-n", ns]).await;
    d.assert_refused(&["create", "configmap", "x", "-n", ns])
        .await;
}

#[tokio::test]
async fn leader_elected_controller_runs_under_its_inferred_role() {
    let script = "tests/scripts/artifacts/leader-labeller.star";
    // The namespace is chosen with --var, so the whole role is a Role there.
    let d = Deployed::new("art-leader", script, &[], Some("ns")).await;
    let ns = d.ns.name.clone();
    assert_eq!(
        d.kinds(),
        [
            "Namespace",
            "ServiceAccount",
            "Role",
            "RoleBinding",
            "Deployment"
        ]
    );
    let var = format!("ns={ns}");
    let mut kite = d.run(script, &["--var", &var]);
    kubectl_ok(&["create", "configmap", "c1", "-n", &ns]).await;
    kubectl_ok(&[
        "label",
        "configmap",
        "c1",
        "-n",
        &ns,
        "kite.test/leader=true",
    ])
    .await;
    kite.wait_stdout("annotated c1", Duration::from_secs(30))
        .await;
    // The leader renews its lease (an update) every retry period.
    wait_until("the lease renewed", Duration::from_secs(30), || async {
        let (used, _) = d.used();
        used.contains(&(
            "update".to_owned(),
            "coordination.k8s.io".to_owned(),
            "leases".to_owned(),
        ))
    })
    .await;
    let holder = jsonpath(
        "lease",
        "kite-leader-labeller-configmaps",
        &ns,
        "{.spec.holderIdentity}",
    )
    .await;
    assert!(!holder.is_empty(), "the lease has a holder");
    let why = "the runtime's events: this handler does not fail and returns no children";
    d.assert_minimal_and_sufficient(
        &kite,
        &[
            ("create", "", "events", why),
            ("get", "", "events", why),
            ("patch", "", "events", why),
        ],
        &[],
    )
    .await;
    d.assert_refused(&["get", "lease", "other-lease", "-n", &ns])
        .await;
    d.assert_refused(&["get", "configmaps", "-n", "default"])
        .await;
}

#[tokio::test]
async fn namespaced_children_run_under_the_generated_role() {
    // The cluster-wide StaticSite operator of another test would reconcile this site too.
    let _cluster = exclusive().await;
    install_staticsite_crd().await;
    // The site operator scoped to one namespace: a Role there is all it gets, so its
    // children must be watched there, not across the cluster. With a health port: its
    // /readyz passes only once the children's caches synced.
    let port = free_port();
    let text = std::fs::read_to_string("tests/scripts/operator/prune.star").unwrap();
    let probed = text.replace(
        "poll = var_str(\"poll\", \"10m\"))",
        &format!("poll = var_str(\"poll\", \"10m\"), health_port = {port})"),
    );
    assert_ne!(probed, text, "prune.star's k8s.control() call changed");
    let path = std::env::temp_dir().join(format!("{}.star", unique_name("prune")));
    std::fs::write(&path, probed).unwrap();
    let script = path.to_str().unwrap();
    let d = Deployed::new(
        "art-kids",
        script,
        &["--crd", "examples/staticsite/crd.yaml"],
        Some("namespace"),
    )
    .await;
    assert!(!d.kinds().contains(&"ClusterRole"), "{:?}", d.kinds());
    let ns = d.ns.name.clone();
    let var = format!("namespace={ns}");
    let kite = d.run(script, &["--var", &var]);
    let started = std::time::Instant::now();
    let site = "apiVersion: tutorial.starkite.io/v1\nkind: StaticSite\nmetadata:\n  name: blog\nspec:\n  replicas: 2\n";
    let out = kubectl_stdin(&["apply", "-n", &ns, "-f", "-"], site).await;
    assert!(out.status.success());
    let ready = format!("http://127.0.0.1:{port}/readyz");
    wait_until("/readyz 200", Duration::from_secs(30), || async {
        support::operator::curl(&ready).await.is_some()
    })
    .await;
    let readied = started.elapsed();
    wait_until("the site Ready", Duration::from_secs(60), || async {
        jsonpath(
            "staticsite",
            "blog",
            &ns,
            "{.status.conditions[?(@.type==\"Ready\")].status}",
        )
        .await
            == "True"
    })
    .await;
    // Drift on a child is undone from the children's watch (the script polls every 10
    // minutes).
    kubectl_ok(&["scale", "deployment", "blog", "-n", &ns, "--replicas=5"]).await;
    let scaled = std::time::Instant::now();
    wait_until("the child restored", Duration::from_secs(10), || async {
        jsonpath("deployment", "blog", &ns, "{.spec.replicas}").await == "2"
    })
    .await;
    println!(
        "under the generated Role: /readyz 200 after {readied:?}, a scaled child restored in {:?}",
        scaled.elapsed()
    );
    let (_, denied) = d.used();
    assert!(denied.is_empty(), "requests refused with 403: {denied:#?}");
    let log = [kite.stdout(), kite.stderr()].concat().join("\n");
    assert!(!log.contains("(403)"), "{log}");
}
