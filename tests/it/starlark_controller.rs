//! `kite operator` against the local cluster: StarlarkControllers become Ready and
//! work, reload on change, report invalid scripts and ceiling denials, run as their own
//! ServiceAccount, and stop cleanly when deleted. Each test runs its own operator,
//! restricted to its namespace and with its own ceiling.

use std::time::Duration;

use crate::support::operator::*;
use crate::support::*;
use serde_json::{Value as Json, json};

#[tokio::test]
async fn max_replicas_is_ready_corrects_drift_and_reloads() {
    install_starlarkcontroller_crd().await;
    let ns = TestNamespace::new("slc-max").await;
    let ns = ns.name.as_str();
    let ceiling = Ceiling::new(MAX_REPLICAS_CEILING).await;
    let mut op = Operator::start(ns, &ceiling).await;
    let pid = op.kite.pid();

    // 1. Ready within 5 s, with the columns users see.
    apply_slc(ns, "max-replicas", max_replicas_spec(ns, "3")).await;
    let s = wait_condition(ns, "max-replicas", "Ready", "True", Duration::from_secs(5)).await;
    assert_eq!(s["phase"], "Running");
    assert_eq!(s["watching"], "deployments");
    let sa = generated_name(ns, "max-replicas").await;
    assert_eq!(s["serviceAccount"], sa.as_str());
    assert_eq!(s["observedGeneration"], 1);
    assert_eq!(condition(&s, "ScriptValid")["status"], "True");
    assert_eq!(condition(&s, "RBACReady")["status"], "True");
    let ready = condition(&s, "Ready")["message"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    assert!(
        ready.contains("ignored: health_port=8081"),
        "the operator says it ignores health_port: {ready}"
    );
    let table = kubectl_ok(&["get", "starlarkcontrollers", "-n", ns]).await;
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(
        &row[..3],
        ["max-replicas", "deployments", "True"],
        "{table}"
    );
    let described = kubectl_ok(&["describe", "slc", "max-replicas", "-n", ns]).await;
    for needle in ["ScriptValid", "RBACReady", "Started"] {
        assert!(
            described.contains(needle),
            "describe shows {needle}:\n{described}"
        );
    }
    // The override confines the watch to this namespace: its role is a Role here.
    let roles = kubectl_ok(&["get", "roles", "-n", ns, "-o", "name"]).await;
    assert_eq!(
        roles.trim(),
        &format!("role.rbac.authorization.k8s.io/{sa}")
    );

    // The seed's walkthrough: drift is corrected.
    create_enforced_deployment(ns, "web", 5).await;
    replicas_become(ns, "web", "3").await;
    op.kite
        .wait_stdout("[DRIFT DETECTED]", Duration::from_secs(5))
        .await;
    wait_until(
        "reconciles counted in status",
        Duration::from_secs(10),
        || async {
            status(ns, "max-replicas").await["reconciles"]
                .as_u64()
                .unwrap_or(0)
                > 0
        },
    )
    .await;

    // 2. Hot reload: a new limit applies within 5 s, in the same process.
    apply_slc(ns, "max-replicas", max_replicas_spec(ns, "5")).await;
    wait_until("observedGeneration 2", Duration::from_secs(5), || async {
        status(ns, "max-replicas").await["observedGeneration"] == 2
    })
    .await;
    drifted(ns, "web", "6").await;
    replicas_become(ns, "web", "5").await;
    assert_eq!(op.kite.pid(), pid, "the operator was not restarted");
    let described = kubectl_ok(&["describe", "slc", "max-replicas", "-n", ns]).await;
    assert!(described.contains("Reloaded"), "{described}");
    let metrics = op.metrics().await;
    assert!(
        metrics.contains(&format!("starlarkcontroller=\"{ns}/max-replicas\"")),
        "per-controller series: {metrics}"
    );
}

#[tokio::test]
async fn an_invalid_script_is_reported_and_a_fix_makes_it_ready() {
    install_starlarkcontroller_crd().await;
    let ns = TestNamespace::new("slc-bad").await;
    let ns = ns.name.as_str();
    let ceiling = Ceiling::new(MAX_REPLICAS_CEILING).await;
    let _op = Operator::start(ns, &ceiling).await;
    let broken = "def reconcile(d):\n    print(d.metadata.name)\n\nk8s.control(\"deployments\", reconcile = reconcile,\n";
    apply_slc(
        ns,
        "broken",
        json!({"script": broken, "control": {"namespace": ns}}),
    )
    .await;
    let s = wait_condition(
        ns,
        "broken",
        "ScriptValid",
        "False",
        Duration::from_secs(10),
    )
    .await;
    assert_eq!(condition(&s, "Ready")["status"], "False");
    assert_eq!(s["phase"], "Failed");
    let message = condition(&s, "ScriptValid")["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.contains("broken.star:"),
        "names the place: {message}"
    );
    let err = kubectl(&[
        "get",
        "serviceaccount",
        &generated_name(ns, "broken").await,
        "-n",
        ns,
    ])
    .await;
    assert!(
        !err.status.success(),
        "nothing is granted for an invalid script"
    );

    // An unknown name is caught before anything runs, with line:col.
    let undefined = "def reconcile(d):\n    print(undefined_thing)\n\nk8s.control(\"deployments\", reconcile = reconcile)\n";
    apply_slc(
        ns,
        "broken",
        json!({"script": undefined, "control": {"namespace": ns}}),
    )
    .await;
    let s = wait_for("the lint error", Duration::from_secs(10), || async {
        let s = status(ns, "broken").await;
        let m = condition(&s, "ScriptValid")["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        m.contains("broken.star:2:11").then_some(s)
    })
    .await;
    assert_eq!(s["observedGeneration"], 2);

    let fixed = "def reconcile(d):\n    print(d.metadata.name)\n\nk8s.control(\"deployments\", reconcile = reconcile)\n";
    apply_slc(
        ns,
        "broken",
        json!({"script": fixed, "control": {"namespace": ns}}),
    )
    .await;
    wait_condition(ns, "broken", "Ready", "True", Duration::from_secs(10)).await;
}

#[tokio::test]
async fn rules_beyond_the_ceiling_start_nothing() {
    install_starlarkcontroller_crd().await;
    let ns = TestNamespace::new("slc-ceil").await;
    let ns = ns.name.as_str();
    // No patch on deployments: the max-replicas script needs it.
    let ceiling = Ceiling::new(
        r#"[{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list", "watch"]},
            {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "get", "patch"]}]"#,
    )
    .await;
    let _op = Operator::start(ns, &ceiling).await;
    apply_slc(ns, "greedy", max_replicas_spec(ns, "3")).await;
    let s = wait_condition(ns, "greedy", "RBACReady", "False", Duration::from_secs(10)).await;
    let message = condition(&s, "RBACReady")["message"]
        .as_str()
        .unwrap_or_default();
    assert!(
        message.contains("patch on deployments.apps"),
        "names the rule: {message}"
    );
    assert!(message.contains(&ceiling.0), "names the ceiling: {message}");
    assert_eq!(condition(&s, "Ready")["status"], "False");
    let sa = kubectl(&[
        "get",
        "serviceaccount",
        &generated_name(ns, "greedy").await,
        "-n",
        ns,
    ])
    .await;
    assert!(
        !sa.status.success(),
        "nothing is granted beyond the ceiling"
    );
    let described = kubectl_ok(&["describe", "slc", "greedy", "-n", ns]).await;
    assert!(described.contains("RBACDenied"), "{described}");

    // The administrator widens the ceiling: the controller starts.
    let name = ceiling.0.clone();
    let widen = |rules: &str| {
        let patch = format!(r#"{{"rules": {rules}}}"#);
        let name = name.clone();
        async move { kubectl_ok(&["patch", "clusterrole", &name, "--type=merge", "-p", &patch]).await }
    };
    widen(MAX_REPLICAS_CEILING).await;
    wait_condition(ns, "greedy", "Ready", "True", Duration::from_secs(10)).await;
    // ...and narrows it again: the controller stops.
    widen(r#"[{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list", "watch"]}]"#)
        .await;
    let s = wait_condition(ns, "greedy", "RBACReady", "False", Duration::from_secs(10)).await;
    assert_eq!(condition(&s, "Ready")["status"], "False");
    assert_eq!(s["phase"], "Failed");
}

#[tokio::test]
async fn a_hosted_script_acts_as_its_service_account_and_deletion_cleans_up() {
    install_starlarkcontroller_crd().await;
    let ns = TestNamespace::new("slc-who").await;
    let ns = ns.name.as_str();
    let ceiling = Ceiling::new(
        r#"[{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list", "watch", "get"]},
            {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "get", "patch"]}]"#,
    )
    .await;
    let op = Operator::start(ns, &ceiling).await;
    // The namespace is computed, so it is granted only the controller's own: the read
    // elsewhere is refused by the API server.
    let script = "def reconcile(cm):\n    k8s.get(\"configmap\", \"anything\", namespace = \"kube-\" + \"system\")\n\nk8s.control(\"configmaps\", reconcile = reconcile)\n";
    apply_slc(
        ns,
        "nosy",
        json!({"script": script, "control": {"namespace": ns, "maxRetries": 0}}),
    )
    .await;
    wait_condition(ns, "nosy", "Ready", "True", Duration::from_secs(10)).await;
    kubectl_ok(&["create", "configmap", "c1", "-n", ns]).await;
    let s = wait_for("a 403 in lastError", Duration::from_secs(15), || async {
        let s = status(ns, "nosy").await;
        s["lastError"]
            .as_str()
            .is_some_and(|e| e.contains("forbidden"))
            .then_some(s)
    })
    .await;
    let last = s["lastError"].as_str().unwrap();
    assert!(
        last.contains("nosy.star:2:"),
        "names the script line: {last}"
    );
    assert!(s["errors"].as_u64().unwrap_or(0) >= 1, "{s}");

    // The API server saw the ServiceAccount, not the operator. (The watch is the
    // operator's, shared, and entered only after a SubjectAccessReview for the
    // ServiceAccount: see sharing.rs.)
    let nosy = generated_name(ns, "nosy").await;
    let user = format!("system:serviceaccount:{ns}:{nosy}");
    let seen = wait_for(
        "audit entries as the ServiceAccount",
        Duration::from_secs(15),
        || async {
            let events: Vec<Json> = audit_events(&format!("\"{user}\""))
                .into_iter()
                .filter(|e| e["impersonatedUser"]["username"] == user.as_str())
                .collect();
            let listed = events.iter().any(|e| {
                e["verb"] == "get"
                    && e["objectRef"]["resource"] == "configmaps"
                    && e["objectRef"]["namespace"] == "kube-system"
            });
            let refused = events.iter().any(|e| {
                e["objectRef"]["resource"] == "configmaps"
                    && e["objectRef"]["namespace"] == "kube-system"
                    && e["responseStatus"]["code"] == 403
            });
            (listed && refused).then_some(events.len())
        },
    )
    .await;
    assert!(seen > 0);

    // Deletion stops the controller and removes its identity.
    kubectl_ok(&["delete", "slc", "nosy", "-n", ns, "--timeout=30s"]).await;
    for kind in ["serviceaccount", "role", "rolebinding"] {
        wait_until(
            &format!("the {kind} gone"),
            Duration::from_secs(30),
            || async {
                !kubectl(&["get", kind, &nosy, "-n", ns])
                    .await
                    .status
                    .success()
            },
        )
        .await;
    }
    wait_until(
        "no series for the deleted controller",
        Duration::from_secs(10),
        || async { !op.metrics().await.contains("/nosy\"") },
    )
    .await;
    assert!(
        count(&op.kite.stderr(), "controller stopped") >= 1,
        "{:?}",
        op.kite.stderr()
    );
}

#[tokio::test]
async fn with_two_operators_exactly_one_leads() {
    install_starlarkcontroller_crd().await;
    let ns = TestNamespace::new("slc-ha").await;
    let ns = ns.name.as_str();
    let ceiling = Ceiling::new(MAX_REPLICAS_CEILING).await;
    let webhook = WebhookConfiguration::new(ns);
    let start = || {
        let port = free_port();
        let kite = Kite::spawn(&[
            "operator",
            "--namespace",
            ns,
            "--ceiling",
            &ceiling.0,
            "--health-port",
            &port.to_string(),
            "--leader-election",
            "--leader-election-namespace",
            ns,
            "--status-period",
            "1s",
            "--webhook-port",
            "0",
            "--webhook-configuration",
            &webhook.0,
        ]);
        (kite, port)
    };
    let (first, first_port) = start();
    let (second, second_port) = start();
    let leader = |port: u16| async move {
        let m = curl(&format!("http://127.0.0.1:{port}/metrics"))
            .await
            .unwrap_or_default();
        m.lines()
            .find_map(|l| l.strip_prefix("kite_operator_leader "))
            .map(str::to_owned)
    };
    let (a, b) = wait_for(
        "one leader and one standby",
        Duration::from_secs(30),
        || async {
            let (a, b) = (leader(first_port).await?, leader(second_port).await?);
            (a != b).then_some((a, b))
        },
    )
    .await;
    let (leading_port, standby_port) = if a == "1" {
        (first_port, second_port)
    } else {
        (second_port, first_port)
    };
    assert_eq!(
        [a.as_str(), b.as_str()]
            .iter()
            .filter(|x| **x == "1")
            .count(),
        1
    );
    let ready = |port: u16| async move {
        curl(&format!("http://127.0.0.1:{port}/readyz"))
            .await
            .is_some()
    };
    wait_until("the leader ready", Duration::from_secs(15), || {
        ready(leading_port)
    })
    .await;
    assert!(!ready(standby_port).await, "the standby is not ready");
    let holder = jsonpath("lease", "kite-operator", ns, "{.spec.holderIdentity}").await;
    assert!(!holder.is_empty());

    // Only the leader runs controllers: one Started event, one running controller.
    apply_slc(ns, "max-replicas", max_replicas_spec(ns, "3")).await;
    wait_condition(ns, "max-replicas", "Ready", "True", Duration::from_secs(10)).await;
    let running = |port: u16| async move {
        let m = curl(&format!("http://127.0.0.1:{port}/metrics"))
            .await
            .unwrap_or_default();
        m.lines()
            .find_map(|l| l.strip_prefix("kite_operator_controllers "))
            .map(str::to_owned)
            .unwrap_or_default()
    };
    assert_eq!(running(leading_port).await, "1");
    assert_eq!(running(standby_port).await, "0");
    drop((first, second));
}

#[tokio::test]
async fn a_script_from_a_configmap_reloads_when_it_changes_and_is_approved_again() {
    install_starlarkcontroller_crd().await;
    let ns = TestNamespace::new("slc-cm").await;
    let ns = ns.name.as_str();
    let ceiling = Ceiling::new(
        r#"[{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list", "watch"]},
            {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "get", "patch"]}]"#,
    )
    .await;
    let mut op = Operator::start(ns, &ceiling).await;
    let script = |tag: &str| {
        format!(
            "def reconcile(cm):\n    print(\"{tag}\", cm.metadata.name)\n\nk8s.control(\"configmaps\", reconcile = reconcile, labels = \"kite.test/watched=true\")\n"
        )
    };
    let source = |tag: &str| {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "logger-script", "namespace": ns},
               "data": {"ctrl.star": script(tag)}})
        .to_string()
    };
    let out = kubectl_stdin(&["apply", "-f", "-"], &source("v1")).await;
    assert!(out.status.success());
    kubectl_ok(&["create", "configmap", "probe", "-n", ns]).await;
    kubectl_ok(&[
        "label",
        "configmap",
        "probe",
        "-n",
        ns,
        "kite.test/watched=true",
    ])
    .await;
    let from = json!({"configMapKeyRef": {"name": "logger-script", "key": "ctrl.star"}});
    apply_slc(
        ns,
        "logger",
        json!({"scriptFrom": from, "control": {"namespace": ns}}),
    )
    .await;
    op.kite
        .wait_stdout("v1 probe", Duration::from_secs(10))
        .await;

    let out = kubectl_stdin(&["apply", "-f", "-"], &source("v2")).await;
    assert!(out.status.success());
    // The approval pinned v1: v2 waits for a review (issue 26).
    let s = wait_condition(ns, "logger", "RBACReady", "False", Duration::from_secs(10)).await;
    assert_eq!(condition(&s, "RBACReady")["reason"], "NotApproved", "{s}");
    kubectl_ok(&[
        "annotate",
        "slc",
        "logger",
        "-n",
        ns,
        "starkite.io/approval=review",
        "--overwrite",
    ])
    .await;
    op.kite
        .wait_stdout("v2 probe", Duration::from_secs(10))
        .await;
    let described = kubectl_ok(&["describe", "slc", "logger", "-n", ns]).await;
    assert!(described.contains("Reloaded"), "{described}");
}

#[tokio::test]
async fn a_looping_script_affects_only_its_own_controller() {
    install_starlarkcontroller_crd().await;
    let ns = TestNamespace::new("slc-iso").await;
    let ns = ns.name.as_str();
    let ceiling = Ceiling::new(
        r#"[{"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list", "watch", "patch"]},
            {"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list", "watch"]},
            {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "get", "patch"]}]"#,
    )
    .await;
    let op = Operator::start_with(
        ns,
        &ceiling,
        &["--namespace", ns, "--handler-timeout", "2s"],
    )
    .await;
    let spin = "def reconcile(cm):\n    n = 0\n    for i in range(1000000000):\n        n = i % 7\n\nk8s.control(\"configmaps\", reconcile = reconcile)\n";
    apply_slc(
        ns,
        "spinner",
        json!({"script": spin, "control": {"namespace": ns, "maxRetries": 0}}),
    )
    .await;
    apply_slc(ns, "max-replicas", max_replicas_spec(ns, "3")).await;
    wait_condition(ns, "spinner", "Ready", "True", Duration::from_secs(20)).await;
    wait_condition(ns, "max-replicas", "Ready", "True", Duration::from_secs(20)).await;
    kubectl_ok(&["create", "configmap", "trigger", "-n", ns]).await;
    create_enforced_deployment(ns, "web", 5).await;
    // The neighbour works while the spinner burns its budget.
    replicas_become(ns, "web", "3").await;
    let s = wait_for(
        "the spinner's budget error",
        Duration::from_secs(20),
        || async {
            let s = status(ns, "spinner").await;
            s["lastError"]
                .as_str()
                .is_some_and(|e| e.contains("2s"))
                .then_some(s)
        },
    )
    .await;
    assert!(s["errors"].as_u64().unwrap_or(0) >= 1, "{s}");
    assert_eq!(status(ns, "max-replicas").await["errors"], 0);
    drop(op);
}
