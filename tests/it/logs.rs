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
    author_named(ns, "author").await
}

/// [`author`] under the name `who-NS`.
async fn author_named(ns: &str, who: &str) -> String {
    let user = format!("{who}-{ns}");
    grant(
        ns,
        &user,
        who,
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

/// The one APIService v1alpha1.logs.starkite.io a cluster can have: held by one test
/// at a time, and removed when it ends, however it ends (an APIService nobody serves
/// makes discovery fail, and namespaces then cannot finish deleting).
struct LogsApi {
    _held: tokio::sync::MutexGuard<'static, ()>,
}

impl LogsApi {
    async fn take() -> Self {
        static HELD: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
        install_starlarkcontroller_crd().await;
        let access = repo_root().join("config/rbac/logs_access.yaml");
        kubectl_ok(&["apply", "-f", &access.display().to_string()]).await;
        LogsApi {
            _held: HELD.lock().await,
        }
    }
}

impl Drop for LogsApi {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kubectl")
            .args([
                "delete",
                "apiservice",
                "v1alpha1.logs.starkite.io",
                "--ignore-not-found",
            ])
            .env("KUBECONFIG", kubeconfig())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// Waits until the API server finds the logs API available.
async fn logs_api_available() {
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
}

async fn apiservice_exists() -> bool {
    kubectl(&["get", "apiservice", "v1alpha1.logs.starkite.io"])
        .await
        .status
        .success()
}

#[tokio::test]
async fn an_author_follows_their_controller_and_is_refused_for_others() {
    let _api = LogsApi::take().await;
    let ns = TestNamespace::new("logs").await;
    let ns = ns.name.as_str();
    let elsewhere = TestNamespace::new("logs-other").await;
    let elsewhere = elsewhere.name.as_str();
    let user = author(ns).await;
    let ceiling = Ceiling::new(CEILING).await;
    // Its own operator namespace: the serving certificate it adds the logs Service's
    // names to is not the one other tests' operators share.
    let args = [
        "--namespace",
        ns,
        "--logs-port",
        "0",
        "--operator-namespace",
        ns,
    ];
    let mut op = Operator::start_with(ns, &ceiling, &args).await;
    logs_api_available().await;

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
    // The API server's authorizer learns of a new binding through its own watch.
    wait_until("the binding in force", T, || async {
        kubectl(&[
            "auth",
            "can-i",
            "get",
            "starlarkcontrollers.starkite.io",
            "--subresource=log",
            "-n",
            ns,
            "--as",
            &reader,
        ])
        .await
        .status
        .success()
    })
    .await;
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

    // Another author takes the controller over (an edit re-signed as them): the first
    // author's follower ends, the first author may no longer read it, and the new
    // author reads a journal of their own, without the first one's lines.
    let second = author_named(ns, "second").await;
    let edited = slc(
        ns,
        "talker",
        &TALKER.replace("top level here", "second top level"),
    );
    let out = apply_as(&second, &edited).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        follow.wait(T).await.success(),
        "the first author's follower ends"
    );
    let theirs = wait_for("the second author's journal", T, || async {
        let out = kite_output(&["logs", "slc/talker", "-n", ns, "--as", &second], T).await;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        text.contains("second top level").then_some(text)
    })
    .await;
    // (It reconciles the same ConfigMaps again, so only the first top level's line
    // tells the two journals apart.)
    assert!(!theirs.contains("top level here"), "{theirs}");
    let out = kite_output(&["logs", "slc/talker", "-n", ns, "--as", &user], T).await;
    assert_eq!(
        out.status.code(),
        Some(1),
        "the first author is refused now"
    );
    assert!(out.stdout.is_empty());

    // A follower ends once its controller is gone.
    let mut follow = Kite::spawn(&["logs", "slc/talker", "-n", ns, "-f", "--as", &second]);
    follow.wait_stdout("second top level", T).await;
    kubectl_ok(&["delete", "slc", "talker", "-n", ns]).await;
    assert!(follow.wait(T).await.success());

    // A clean exit withdraws the APIService (an unserved one breaks discovery).
    sigterm(op.kite.pid());
    assert!(op.kite.wait(T).await.success());
    assert!(!apiservice_exists().await);
}

/// With `--shards`, the API server reaches one replica (the one it was last pointed
/// at); a replica that does not run the controller passes the request to the one that
/// does, which decides who may read it.
#[tokio::test]
async fn a_replica_passes_a_request_to_the_one_that_runs_the_controller() {
    let _api = LogsApi::take().await;
    let ns = TestNamespace::new("logs-shards").await;
    let ns = ns.name.as_str();
    let ceiling = Ceiling::new(CEILING).await;
    let args = [
        "--namespace",
        ns,
        "--shards",
        "auto",
        "--operator-namespace",
        ns,
        "--logs-port",
        "0",
    ];
    let mut ops = Vec::new();
    for _ in 0..2 {
        ops.push(Operator::start_with(ns, &ceiling, &args).await);
    }
    logs_api_available().await;
    // Controllers until one runs on the replica the APIService does not point at.
    let served_port = jsonpath(
        "apiservice",
        "v1alpha1.logs.starkite.io",
        "",
        "{.spec.service.port}",
    )
    .await;
    let port_of = |identity: String| async move {
        let address = jsonpath(
            "lease",
            &format!("kite-operator-shard-{identity}"),
            ns,
            "{.metadata.annotations.starkite\\.io/logs-address}",
        )
        .await;
        address.rsplit(':').next().unwrap_or_default().to_owned()
    };
    let mut elsewhere = None;
    for i in 0..12 {
        let name = format!("c{i}");
        let script = format!("print(\"I am {name}\")\n\n{TALKER}");
        apply_slc(ns, &name, json!({"script": script})).await;
        wait_condition(ns, &name, "Ready", "True", T).await;
        let replica = status(ns, &name).await["replica"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(!replica.is_empty(), "{name} has no replica");
        if port_of(replica).await != served_port {
            elsewhere = Some(name);
            break;
        }
    }
    let name = elsewhere.expect("a controller on the replica the APIService does not point at");
    let out = kite_output(&["logs", &format!("slc/{name}"), "-n", ns], T).await;
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains(&format!("I am {name}")), "{stdout}");
    // The replica that runs it refuses a stranger, as it would without forwarding.
    let out = kite_output(
        &["logs", &format!("slc/{name}"), "-n", ns, "--as", "stranger"],
        T,
    )
    .await;
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("User \"stranger\" cannot get resource \"starlarkcontrollers/log\""),
        "{stderr}"
    );
    for op in &mut ops {
        sigterm(op.kite.pid());
        assert!(op.kite.wait(T).await.success());
    }
}
