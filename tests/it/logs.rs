//! `kite logs` (issue 29): a StarlarkController's author reads its print() lines and
//! reconcile failures live through the operator's aggregated logs API, with the API
//! server authenticating them; nobody else may, unless a Role grants it.

use std::time::Duration;

use crate::support::operator::*;
use crate::support::*;
use serde_json::json;

const T: Duration = Duration::from_secs(60);

const CEILING: &str = r#"[
  {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]},
  {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "get", "patch"]}
]"#;

const TALKER: &str = "print(\"top level here\")\n\ndef reconcile(cm):\n    print(\"saw\", cm.metadata.name)\n    k8s.event(cm, reason = \"Saw\", message = \"seen\")\n    if cm.metadata.name == \"bad\":\n        fail(\"told to fail\")\n\nk8s.control(\"configmaps\", reconcile = reconcile)\n";

/// An author: may manage StarlarkControllers in `ns` and do what their script does
/// (read ConfigMaps, write events), nothing more; in particular, no `log` subresource.
async fn author(ns: &str) -> String {
    let user = format!("author-{ns}");
    grant(
        ns,
        &user,
        "author",
        json!([
            {"apiGroups": ["starkite.io"], "resources": ["starlarkcontrollers"], "verbs": ["*"]},
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "get", "patch"]},
        ]),
    )
    .await;
    user
}

fn slc(ns: &str, name: &str, script: &str) -> serde_json::Value {
    json!({
        "apiVersion": "starkite.io/v1alpha1",
        "kind": "StarlarkController",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"script": script},
    })
}

async fn apiservice_exists() -> bool {
    kubectl(&["get", "apiservice", "v1alpha1.logs.starkite.io"])
        .await
        .status
        .success()
}

#[tokio::test]
async fn an_author_follows_their_controller_and_is_refused_for_others() {
    install_starlarkcontroller_crd().await;
    kubectl_ok(&[
        "apply",
        "-f",
        &repo_root()
            .join("config/rbac/logs_access.yaml")
            .display()
            .to_string(),
    ])
    .await;
    let ns = TestNamespace::new("logs").await;
    let ns = ns.name.as_str();
    let elsewhere = TestNamespace::new("logs-other").await;
    let elsewhere = elsewhere.name.as_str();
    let user = author(ns).await;
    let ceiling = Ceiling::new(CEILING).await;
    let mut op = Operator::start_with(ns, &ceiling, &["--namespace", ns, "--logs-port", "0"]).await;
    wait_until("the logs API available", T, || async {
        jsonpath(
            "apiservice",
            "v1alpha1.logs.starkite.io",
            "",
            "{.status.conditions[?(@.type==\"Available\")].status}",
        )
        .await
            == "True"
    })
    .await;

    let out = apply_as(&user, &slc(ns, "talker", TALKER)).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // A colleague's controller in the same namespace.
    apply_slc(ns, "colleague", json!({"script": TALKER})).await;
    for name in ["talker", "colleague"] {
        wait_condition(ns, name, "Ready", "True", T).await;
    }

    // `kubectl describe` names the command.
    let command = format!("kite logs slc/talker -n {ns}");
    wait_until("the log command in the status", T, || async {
        status(ns, "talker").await["logs"] == command.as_str()
    })
    .await;
    let described = kubectl_ok(&["describe", "slc", "talker", "-n", ns]).await;
    assert!(described.contains(&command), "{described}");

    // The author follows their controller's log, live.
    let mut follow = Kite::spawn(&["logs", "slc/talker", "-n", ns, "-f", "--as", &user]);
    follow.wait_stdout("top level here", T).await;
    kubectl_ok(&["create", "configmap", "good", "-n", ns]).await;
    follow.wait_stdout("saw good", T).await;
    kubectl_ok(&["create", "configmap", "bad", "-n", ns]).await;
    let failed = follow.wait_stdout("reconcile of", T).await;
    assert!(failed.contains(&format!("{ns}/bad")), "{failed}");
    // With its traceback, naming the script's line.
    follow.wait_stdout("told to fail", T).await;
    follow.wait_stdout("talker.star:7", T).await;

    // The script's Events name the operator, never the machine it runs on.
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let instances = wait_for("the script's event", T, || async {
        let out = kubectl_ok(&[
            "get",
            "events",
            "-n",
            ns,
            "--field-selector",
            "reason=Saw",
            "-o",
            "jsonpath={.items[*].reportingInstance}",
        ])
        .await;
        (!out.trim().is_empty()).then_some(out)
    })
    .await;
    assert!(
        instances.split_whitespace().all(|i| i == "kite-operator"),
        "{instances}"
    );
    assert!(!instances.contains(host.trim()), "{instances}");

    // Refused for a colleague's controller, and for another namespace's.
    for (name, namespace) in [("colleague", ns), ("talker", elsewhere)] {
        let out = kite_output(
            &[
                "logs",
                &format!("slc/{name}"),
                "-n",
                namespace,
                "--as",
                &user,
            ],
            T,
        )
        .await;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{name}: {stderr}");
        assert!(
            stderr.contains(&format!(
                "User \"{user}\" cannot get resource \"starlarkcontrollers/log\""
            )),
            "{name}: {stderr}"
        );
        assert!(out.stdout.is_empty(), "{name}");
    }
    // Unless a Role grants it: a reader bound to the log-reader role in the namespace.
    kubectl_ok(&[
        "create",
        "rolebinding",
        "log-reader",
        "--clusterrole=kite-starlarkcontroller-log-reader",
        &format!("--user=reader-{ns}"),
        "-n",
        ns,
    ])
    .await;
    let reader = format!("reader-{ns}");
    let out = kite_output(
        &[
            "logs",
            "slc/colleague",
            "-n",
            ns,
            "--as",
            &reader,
            "--tail",
            "50",
        ],
        T,
    )
    .await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("top level here"));

    // The follower ends once its controller is gone.
    kubectl_ok(&["delete", "slc", "talker", "-n", ns]).await;
    assert!(follow.wait(T).await.success());

    // A clean exit withdraws the APIService (an unserved one breaks discovery).
    sigterm(op.kite.pid());
    assert!(op.kite.wait(T).await.success());
    assert!(!apiservice_exists().await);
}
