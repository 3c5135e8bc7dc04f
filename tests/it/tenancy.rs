//! Tenancy in `kite operator`: a StarlarkController is confined to its namespace
//! whatever the ceiling allows, and a ClusterStarlarkController reaches across
//! namespaces with its identity in the operator's namespace.

use std::time::Duration;

use crate::support::operator::*;
use crate::support::*;
use serde_json::json;

const T: Duration = Duration::from_secs(30);

/// A ceiling generous enough that only the namespace confinement can refuse.
const WIDE_CEILING: &str = r#"[
  {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list", "watch", "patch"]},
  {"apiGroups": [""], "resources": ["configmaps", "nodes"], "verbs": ["get", "list", "watch", "patch"]},
  {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "get", "patch"]}
]"#;

fn message(s: &serde_json::Value, type_: &str) -> String {
    condition(s, type_)["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test]
async fn a_starlarkcontroller_is_confined_to_its_namespace() {
    install_starlarkcontroller_crd().await;
    let ns = TestNamespace::new("slc-confined").await;
    let ns = ns.name.as_str();
    let ceiling = Ceiling::new(WIDE_CEILING).await;
    let _op = Operator::start(ns, &ceiling).await;

    // Another namespace: refused with the line that names it, and nothing granted there.
    let escape = "def reconcile(d):\n    k8s.patch(\"configmap\", \"victim\", {\"data\": {\"x\": \"1\"}}, namespace = \"kube-system\")\n\nk8s.control(\"deployments\", reconcile = reconcile)\n";
    apply_slc(ns, "escape", json!({"script": escape})).await;
    let s = wait_condition(ns, "escape", "RBACReady", "False", T).await;
    assert_eq!(condition(&s, "RBACReady")["reason"], "OutsideNamespace");
    let m = message(&s, "RBACReady");
    assert!(
        m.contains("escape.star:2:5") && m.contains("in namespace kube-system"),
        "{m}"
    );
    assert_eq!(condition(&s, "Ready")["status"], "False");
    let uid = jsonpath("slc", "escape", ns, "{.metadata.uid}").await;
    assert_eq!(generated_for(&uid).await, "", "nothing is granted anywhere");

    // A cluster-scoped kind.
    let nodes = "def reconcile(n):\n    pass\n\nk8s.control(\"nodes\", reconcile = reconcile)\n";
    apply_slc(ns, "nodes", json!({"script": nodes})).await;
    let s = wait_condition(ns, "nodes", "RBACReady", "False", T).await;
    let m = message(&s, "RBACReady");
    assert!(
        m.contains("nodes.star:4:1") && m.contains("cluster-wide"),
        "{m}"
    );

    // spec.control.namespace may only name its own namespace.
    let elsewhere = json!({"script": MAX_REPLICAS, "control": {"namespace": "default"}});
    apply_slc(ns, "elsewhere", elsewhere).await;
    let s = wait_condition(ns, "elsewhere", "ScriptValid", "False", T).await;
    assert_eq!(condition(&s, "ScriptValid")["reason"], "OutsideNamespace");
    assert!(
        message(&s, "ScriptValid").contains("spec.control.namespace"),
        "{s}"
    );

    // A kind the operator cannot know without running the script.
    let computed = "def reconcile(d):\n    k8s.get(d.metadata.labels.kind, \"x\")\n\nk8s.control(\"deployments\", reconcile = reconcile)\n";
    apply_slc(ns, "computed", json!({"script": computed})).await;
    let s = wait_condition(ns, "computed", "ScriptValid", "False", T).await;
    assert_eq!(condition(&s, "ScriptValid")["reason"], "NotInferable");
    assert!(
        message(&s, "ScriptValid").contains("computed.star:2:13"),
        "{s}"
    );

    // A script that names no namespace runs in the StarlarkController's own.
    apply_slc(ns, "home", json!({"script": MAX_REPLICAS})).await;
    let s = wait_condition(ns, "home", "Ready", "True", T).await;
    let home_sa = generated_name(ns, "home").await;
    let home = home_sa.as_str();
    assert_eq!(s["serviceAccount"], home);
    let roles = kubectl_ok(&["get", "roles", "-n", ns, "-o", "name"]).await;
    assert!(
        roles.contains(&format!("role.rbac.authorization.k8s.io/{home}")),
        "{roles}"
    );
    let cluster_roles = kubectl_ok(&[
        "get",
        "clusterroles",
        "-l",
        &format!(
            "starkite.io/owner-uid={}",
            jsonpath("slc", "home", ns, "{.metadata.uid}").await
        ),
        "-o",
        "name",
    ])
    .await;
    assert_eq!(cluster_roles.trim(), "", "no cluster-wide grant");
    create_enforced_deployment(ns, "web", 5).await;
    replicas_become(ns, "web", "3").await;

    // A generated Role someone deletes, or edits, is restored.
    let rules =
        || async { kubectl(&["get", "role", home, "-n", ns, "-o", "jsonpath={.rules}"]).await };
    let granted = String::from_utf8_lossy(&rules().await.stdout).into_owned();
    assert!(granted.contains("deployments"), "{granted}");
    kubectl_ok(&["delete", "role", home, "-n", ns]).await;
    wait_until(
        "the deleted Role restored",
        Duration::from_secs(60),
        || async { String::from_utf8_lossy(&rules().await.stdout) == granted },
    )
    .await;
    kubectl_ok(&[
        "patch",
        "role",
        home,
        "-n",
        ns,
        "--type=json",
        "-p",
        r#"[{"op": "replace", "path": "/rules", "value": []}]"#,
    ])
    .await;
    wait_until(
        "the edited Role restored",
        Duration::from_secs(60),
        || async { String::from_utf8_lossy(&rules().await.stdout) == granted },
    )
    .await;
    drifted(ns, "web", "6").await;
    replicas_become(ns, "web", "3").await;
}

#[tokio::test]
async fn a_cluster_starlark_controller_reaches_across_namespaces() {
    install_starlarkcontroller_crd().await;
    let home = TestNamespace::new("cslc-home").await;
    let a = TestNamespace::new("cslc-a").await;
    let b = TestNamespace::new("cslc-b").await;
    let ceiling = Ceiling::new(MAX_REPLICAS_CEILING).await;
    // Only this test's ClusterStarlarkController, found by its label.
    let selector = format!("starkite.io/test={}", home.name);
    let _op = Operator::start_with(
        &home.name,
        &ceiling,
        &["--selector", &selector, "--operator-namespace", &home.name],
    )
    .await;
    let name = home.name.clone();
    let labels = format!("cslc-test={}", home.name);
    let cslc = json!({
        "apiVersion": "starkite.io/v1alpha1",
        "kind": "ClusterStarlarkController",
        "metadata": {"name": name, "labels": {"starkite.io/test": home.name}},
        "spec": {"script": MAX_REPLICAS, "vars": {"max_replicas": "2"},
                 "control": {"labels": labels}},
    });
    let out = kubectl_stdin(&["apply", "-f", "-"], &cslc.to_string()).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let status = || async {
        let out = kubectl(&["get", "cslc", &name, "-o", "json"]).await;
        serde_json::from_slice::<serde_json::Value>(&out.stdout)
            .map(|o| o["status"].clone())
            .unwrap_or_default()
    };
    let s = wait_for("the ClusterStarlarkController Ready", T, || async {
        let s = status().await;
        (condition(&s, "Ready")["status"] == "True").then_some(s)
    })
    .await;
    let cslc_uid = kubectl_ok(&["get", "cslc", &name, "-o", "jsonpath={.metadata.uid}"]).await;
    let sa = format!("starkite-cluster-{name}-{}", &cslc_uid[..8]);
    assert_eq!(s["serviceAccount"], sa.as_str());
    // Its identity lives in the operator's namespace, never a tenant's.
    kubectl_ok(&["get", "serviceaccount", &sa, "-n", &home.name]).await;
    let uid = kubectl_ok(&["get", "cslc", &name, "-o", "jsonpath={.metadata.uid}"]).await;
    let owned = format!("starkite.io/owner-uid={uid}");
    let cluster_roles = kubectl_ok(&["get", "clusterroles", "-l", &owned, "-o", "name"]).await;
    assert!(!cluster_roles.trim().is_empty(), "a cluster-wide grant");

    for ns in [&a.name, &b.name] {
        create_enforced_deployment(ns, "web", 5).await;
        kubectl_ok(&["label", "deployment", "web", "-n", ns, &labels]).await;
        replicas_become(ns, "web", "2").await;
    }

    // Deleting it removes everything generated for it, cluster roles included.
    kubectl_ok(&["delete", "cslc", &name, "--timeout=30s"]).await;
    wait_until("the cluster roles removed", T, || async {
        kubectl_ok(&[
            "get",
            "clusterroles,clusterrolebindings",
            "-l",
            &owned,
            "-o",
            "name",
        ])
        .await
        .trim()
        .is_empty()
    })
    .await;
}

/// A hosted script gets the cluster and nothing else: running programs, reading the
/// environment, the filesystem and the network are refused, whatever it tries, and
/// nothing runs.
#[tokio::test]
async fn a_hosted_script_cannot_exec_read_files_env_or_the_network() {
    install_starlarkcontroller_crd().await;
    let ns = TestNamespace::new("slc-abuse").await;
    let ns = ns.name.as_str();
    let ceiling = Ceiling::new(WIDE_CEILING).await;
    let op = Operator::start(ns, &ceiling).await;
    let marker = std::env::temp_dir().join(format!("kite-hosted-abuse-{ns}"));
    let script = format!(
        r#"def show(what, r):
    print("abuse %s: %s" % (what, r.error if not r.ok else "ALLOWED"))

show("exec", try_exec("touch", ["{marker}"]))
show("env", os.try_env("HOME"))
show("file", fs.path("/etc/hostname").try_read_text())
show("http", http.try_get("http://127.0.0.1:1/"))

def reconcile(cm):
    pass

k8s.control("configmaps", reconcile = reconcile)
"#,
        marker = marker.display()
    );
    apply_slc(ns, "abuse", json!({"script": script})).await;
    // None of it exists for a hosted script: refused before anything runs, each use
    // named at its line.
    let s = wait_condition(ns, "abuse", "ScriptValid", "False", T).await;
    let m = message(&s, "ScriptValid");
    for (at, what) in [
        ("abuse.star:4:14", "try_exec"),
        ("abuse.star:5:13", "os"),
        ("abuse.star:6:14", "fs"),
        ("abuse.star:7:14", "http"),
    ] {
        assert!(
            m.contains(&format!("{at}: {what} is not available in kite operator")),
            "{what}: {m}"
        );
    }
    assert_eq!(
        op.kite
            .stdout()
            .iter()
            .filter(|l| l.contains("abuse "))
            .count(),
        0
    );
    assert!(!marker.exists(), "the hosted script ran a program");
}
