//! Day two (issue 29): what a platform team meets around an install of kite, such as
//! a local run of the operator beside the in-cluster one.

use std::time::Duration;

use crate::support::operator::*;
use crate::support::*;
use serde_json::{Value as Json, json};

const T: Duration = Duration::from_secs(60);

/// The names of the operator's webhook configurations that review `ns`.
async fn configurations_for(ns: &str) -> Vec<String> {
    let out = kubectl_ok(&[
        "get",
        "mutatingwebhookconfigurations",
        "-l",
        "app.kubernetes.io/managed-by=kite-operator",
        "-o",
        "json",
    ])
    .await;
    let list: Json = serde_json::from_str(&out).unwrap();
    list["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| {
            c["webhooks"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
                == ns
        })
        .map(|c| {
            c["metadata"]["name"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        })
        .collect()
}

/// A locally run operator registers a configuration named apart from the in-cluster
/// install's, and takes it with it when it exits cleanly: nothing is left that would
/// refuse creates with no webhook behind it.
#[tokio::test(flavor = "multi_thread")]
async fn a_local_run_leaves_no_webhook_configuration_behind() {
    install_starlarkcontroller_crd().await;
    let ns = TestNamespace::new("local-run").await;
    let ns = ns.name.as_str();
    let ceiling = Ceiling::new(MAX_REPLICAS_CEILING).await;
    let port = free_port().to_string();
    let mut kite = Kite::spawn(&[
        "operator",
        "--namespace",
        ns,
        "--ceiling",
        &ceiling.0,
        "--health-port",
        &port,
        "--webhook-port",
        "0",
    ]);
    let ready = format!("http://127.0.0.1:{port}/readyz");
    wait_until("the operator ready", T, || async {
        curl(&ready).await.is_some_and(|b| b.trim() == "ok")
    })
    .await;
    let names = configurations_for(ns).await;
    assert_eq!(names.len(), 1, "{names:?}");
    assert!(names[0].starts_with("kite-operator-local-"), "{names:?}");

    sigterm(kite.pid());
    assert!(kite.wait(T).await.success());
    assert_eq!(configurations_for(ns).await, Vec::<String>::new());
    let stderr = kite.stderr().join("\n");
    assert!(
        stderr.contains("removed this run's admission webhook configuration"),
        "{stderr}"
    );
    // A create is not refused by a webhook that nobody serves.
    let slc = json!({
        "apiVersion": "starkite.io/v1alpha1",
        "kind": "StarlarkController",
        "metadata": {"name": "after", "namespace": ns},
        "spec": {"script": "k8s.control(\"deployments\", reconcile = lambda d: None)\n"},
    });
    let out = kubectl_stdin(&["create", "-f", "-"], &slc.to_string()).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The `kite_*` metric names in `text`.
fn named_metrics(text: &str) -> std::collections::BTreeSet<String> {
    let mut names = std::collections::BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("kite_") {
        let tail = &rest[at..];
        let end = tail
            .find(|c: char| !(c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_'))
            .unwrap_or(tail.len());
        // Not part of a longer identifier (e.g. a label value "...kite_x").
        let before = rest[..at].chars().last();
        if !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            names.insert(tail[..end].to_owned());
        }
        rest = &tail[end..];
    }
    names
}

/// Issue 29: the alerts and the dashboard in `config/prometheus` name only metrics a
/// running operator exports (sharded, with a controller that ran), and every alert has
/// what Alertmanager routes and shows.
#[tokio::test(flavor = "multi_thread")]
async fn the_alerts_and_the_dashboard_name_only_exported_metrics() {
    install_starlarkcontroller_crd().await;
    let ns = TestNamespace::new("dashboards").await;
    let ns = ns.name.as_str();
    let ceiling = Ceiling::new(MAX_REPLICAS_CEILING).await;
    let args = [
        "--namespace",
        ns,
        "--shards",
        "auto",
        "--operator-namespace",
        ns,
    ];
    let op = Operator::start_with(ns, &ceiling, &args).await;
    apply_slc(ns, "watched", max_replicas_spec(ns, "3")).await;
    wait_condition(ns, "watched", "Ready", "True", T).await;
    let scrape = wait_for("the controller's and the shard's series", T, || async {
        let m = op.metrics().await;
        (m.contains("kite_reconcile_total{") && m.contains("kite_operator_shard_controllers"))
            .then_some(m)
    })
    .await;
    let exported: std::collections::BTreeSet<String> = scrape
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .map(str::to_owned)
        .collect();
    assert!(
        exported.contains("kite_operator_ready")
            && exported.contains("kite_operator_admission_reviews_total")
            && exported.contains("kite_operator_events_dropped_total"),
        "{scrape}"
    );
    let root = repo_root().join("config/prometheus");
    let rules_text = std::fs::read_to_string(root.join("rules.yaml")).unwrap();
    let dashboard_text = std::fs::read_to_string(root.join("dashboard.json")).unwrap();
    for (file, text) in [
        ("rules.yaml", &rules_text),
        ("dashboard.json", &dashboard_text),
    ] {
        let named = named_metrics(text);
        assert!(!named.is_empty(), "{file} names no kite metric");
        let unknown: Vec<&String> = named.iter().filter(|n| !exported.contains(*n)).collect();
        assert!(
            unknown.is_empty(),
            "{file} names {unknown:?}, which kite does not export ({exported:?})"
        );
    }
    let rules: Json = serde_saphyr::from_str(&rules_text).unwrap();
    assert_eq!(rules["kind"], "PrometheusRule");
    let alerts: Vec<&Json> = rules["spec"]["groups"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_array().unwrap())
        .collect();
    assert!(alerts.len() >= 8, "{alerts:?}");
    for a in alerts {
        assert!(
            a["alert"].is_string()
                && a["expr"].is_string()
                && a["labels"]["severity"].is_string()
                && a["annotations"]["summary"].is_string(),
            "{a}"
        );
    }
    // Prometheus's own check of the rule groups (the PrometheusRule's spec; JSON is
    // YAML), with promtool built from the version pinned in tests/tools.
    let groups = std::env::temp_dir().join(format!("kite-rules-{ns}.yaml"));
    std::fs::write(&groups, rules["spec"].to_string()).unwrap();
    let checked = std::process::Command::new(tool("promtool"))
        .args(["check", "rules"])
        .arg(&groups)
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&groups);
    assert!(
        checked.status.success(),
        "promtool check rules: {}{}",
        String::from_utf8_lossy(&checked.stdout),
        String::from_utf8_lossy(&checked.stderr)
    );
    let dashboard: Json = serde_json::from_str(&dashboard_text).unwrap();
    let rows: Vec<&str> = dashboard["panels"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["type"] == "row")
        .filter_map(|p| p["repeat"].as_str())
        .collect();
    assert_eq!(
        rows,
        ["starlarkcontroller", "pod"],
        "one row per controller and per replica"
    );
    // The kustomization builds, with the dashboard in a ConfigMap Grafana's sidecar finds.
    let built = kubectl_ok(&["kustomize", "config/prometheus"]).await;
    for kind in [
        "kind: Service",
        "kind: ServiceMonitor",
        "kind: PrometheusRule",
        "kind: ClusterRoleBinding",
        "kind: ConfigMap",
        "grafana_dashboard: \"1\"",
    ] {
        assert!(built.contains(kind), "{kind} not in:\n{built}");
    }
}

/// Issue 29: a tenant sees their controller's last reconciles in its status, and
/// `kubectl describe`: the object, what started it, the result, and the error with the
/// script's line.
#[tokio::test(flavor = "multi_thread")]
async fn describe_shows_the_last_reconciles() {
    install_starlarkcontroller_crd().await;
    let ns = TestNamespace::new("recent").await;
    let ns = ns.name.as_str();
    let ceiling = Ceiling::new(
        r#"[{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "get", "patch"]}]"#,
    )
    .await;
    let _op = Operator::start(ns, &ceiling).await;
    let script = "def reconcile(cm):\n    if cm.metadata.name == \"bad\":\n        fail(\"told to fail\")\n\nk8s.control(\"configmaps\", reconcile = reconcile)\n";
    apply_slc(ns, "picky", json!({"script": script})).await;
    wait_condition(ns, "picky", "Ready", "True", T).await;
    kubectl_ok(&["create", "configmap", "good", "-n", ns]).await;
    kubectl_ok(&["create", "configmap", "bad", "-n", ns]).await;
    let recent = wait_for("both reconciles in the status", T, || async {
        let s = status(ns, "picky").await;
        let recent = s["recentReconciles"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        let seen = |object: &str, result: &str| {
            recent
                .iter()
                .any(|r| r["object"] == format!("{ns}/{object}") && r["result"] == result)
        };
        (seen("good", "success") && seen("bad", "error")).then_some(recent)
    })
    .await;
    assert!(recent.len() <= 5, "{recent:?}");
    let failed = recent.iter().find(|r| r["result"] == "error").unwrap();
    let error = failed["error"].as_str().unwrap_or_default();
    assert!(
        error.contains("told to fail") && error.contains("picky.star:3:"),
        "{failed}"
    );
    assert!(
        failed["trigger"].is_string() && failed["durationMs"].is_u64(),
        "{failed}"
    );
    let described = kubectl_ok(&["describe", "slc", "picky", "-n", ns]).await;
    assert!(
        described.contains("Recent Reconciles:") && described.contains("told to fail"),
        "{described}"
    );
}
