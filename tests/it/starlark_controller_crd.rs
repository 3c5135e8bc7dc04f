//! The StarlarkController CRD on the local cluster: it installs, its schema refuses bad
//! specs with the messages users see, and `kubectl get` shows the printer columns.

use std::time::Duration;

use crate::support::*;

fn manifest(name: &str, spec: &str) -> String {
    format!(
        "apiVersion: starkite.io/v1alpha1\nkind: StarlarkController\nmetadata:\n  name: {name}\nspec:\n{spec}"
    )
}

#[tokio::test]
async fn the_schema_refuses_bad_specs() {
    install_starlarkcontroller_crd().await;
    let ns = TestNamespace::new("slc-crd").await;
    let cases = [
        (
            "  script: \"print(1)\"\n  scriptFrom:\n    configMapKeyRef: {name: c, key: k}\n",
            "exactly one of script and scriptFrom must be set",
        ),
        (
            "  vars: {a: b}\n",
            "exactly one of script and scriptFrom must be set",
        ),
        (
            "  script: \"print(1)\"\n  control: {poll: 30}\n",
            "spec.control.poll",
        ),
        (
            "  script: \"print(1)\"\n  control: {resync: 1d}\n",
            "spec.control.resync: Invalid value",
        ),
        (
            "  script: \"print(1)\"\n  control: {workers: 0}\n",
            "spec.control.workers",
        ),
    ];
    for (i, (spec, needle)) in cases.iter().enumerate() {
        let out = kubectl_stdin(
            &["apply", "-n", &ns.name, "-f", "-"],
            &manifest(&format!("bad-{i}"), spec),
        )
        .await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "case {i} was accepted:\n{spec}");
        assert!(stderr.contains(needle), "case {i}: {stderr}");
    }
}

#[tokio::test]
async fn kubectl_get_shows_the_columns() {
    install_starlarkcontroller_crd().await;
    let ns = TestNamespace::new("slc-get").await;
    let spec = "  script: \"print(1)\"\n  vars: {max_replicas: \"3\"}\n  control: {poll: 1m30s, workers: 2}\n";
    let out = kubectl_stdin(&["apply", "-n", &ns.name, "-f", "-"], &manifest("ok", spec)).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let table = wait_for("the object listed", Duration::from_secs(10), || async {
        let out = kubectl_ok(&["get", "slc", "-n", &ns.name]).await;
        out.contains("ok").then_some(out)
    })
    .await;
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(
        header,
        [
            "NAME",
            "KIND",
            "READY",
            "REASON",
            "RECONCILES",
            "ERRORS",
            "AGE"
        ]
    );
    let listed = kubectl_ok(&["get", "starkite", "-n", &ns.name, "-o", "name"]).await;
    assert_eq!(listed.trim(), "starlarkcontroller.starkite.io/ok");
}

#[tokio::test]
async fn the_kustomize_tree_passes_a_server_dry_run() {
    // Objects in a namespace that does not exist yet cannot be dry-run, so the
    // operator's namespace is created first (it is empty and harmless).
    let ns = kubectl(&["create", "namespace", "starkite-system"]).await;
    let stderr = String::from_utf8_lossy(&ns.stderr);
    assert!(
        ns.status.success() || stderr.contains("AlreadyExists"),
        "{stderr}"
    );
    let out = kubectl(&["apply", "-k", "config/default", "--dry-run=server"]).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}\n{stdout}",
        String::from_utf8_lossy(&out.stderr)
    );
    for needle in [
        "customresourcedefinition.apiextensions.k8s.io/starlarkcontrollers.starkite.io",
        "customresourcedefinition.apiextensions.k8s.io/clusterstarlarkcontrollers.starkite.io",
        "clusterrole.rbac.authorization.k8s.io/starkite-controller-ceiling",
        "deployment.apps/kite-operator",
        "mutatingwebhookconfiguration.admissionregistration.k8s.io/kite-operator",
        "service/kite-operator-webhook",
        "rolebinding.rbac.authorization.k8s.io/kite-operator-webhook",
    ] {
        assert!(stdout.contains(needle), "{needle} missing from:\n{stdout}");
    }
    let samples = kubectl(&["kustomize", "config/samples"]).await;
    assert!(samples.status.success());
    let text = String::from_utf8_lossy(&samples.stdout);
    assert_eq!(
        text.matches("kind: StarlarkController\n").count(),
        2,
        "{text}"
    );
    assert_eq!(
        text.matches("kind: ClusterStarlarkController\n").count(),
        1,
        "{text}"
    );
}
