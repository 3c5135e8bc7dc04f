//! Helpers for tests of `kite operator`: a ceiling per test, an operator per test, and
//! reading StarlarkController status.

use std::time::Duration;

use serde_json::{Value as Json, json};

use super::*;

pub const MAX_REPLICAS: &str = include_str!("../../../examples/max-replicas-controller.star");

/// The verbs the max-replicas example needs, as an administrator would allow them.
pub const MAX_REPLICAS_CEILING: &str = r#"[
  {"apiGroups": ["apps"], "resources": ["deployments"], "verbs": ["list", "watch", "patch"]},
  {"apiGroups": [""], "resources": ["events"], "verbs": ["create", "get", "patch"]}
]"#;

/// A ceiling ClusterRole for one test, deleted when dropped.
pub struct Ceiling(pub String);

impl Ceiling {
    pub async fn new(rules: &str) -> Self {
        let name = unique_name("slc-ceiling");
        let role = json!({
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": serde_json::from_str::<Json>(rules).unwrap(),
        });
        let out = kubectl_stdin(&["apply", "-f", "-"], &role.to_string()).await;
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ceiling(name)
    }
}

impl Drop for Ceiling {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kubectl")
            .args([
                "delete",
                "clusterrole",
                &self.0,
                "--ignore-not-found",
                "--wait=false",
            ])
            .env("KUBECONFIG", kubeconfig())
            .stdout(std::process::Stdio::null())
            .status();
    }
}

/// A MutatingWebhookConfiguration a test's operator registered, deleted when dropped
/// (drop it after the operator, which would otherwise restore it).
pub struct WebhookConfiguration(pub String);

impl WebhookConfiguration {
    pub fn new(ns: &str) -> Self {
        WebhookConfiguration(format!("kite-test-{ns}"))
    }
}

impl Drop for WebhookConfiguration {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kubectl")
            .args([
                "delete",
                "mutatingwebhookconfiguration",
                &self.0,
                "--ignore-not-found",
                "--wait=false",
            ])
            .env("KUBECONFIG", kubeconfig())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .status();
    }
}

/// An operator for `ns`, ready to serve.
pub struct Operator {
    pub kite: Kite,
    pub port: u16,
    pub ns: String,
    /// Other namespaces whose StarlarkControllers go with it.
    pub also: Vec<String>,
    pub webhook: WebhookConfiguration,
}

impl Drop for Operator {
    fn drop(&mut self) {
        // Deleting what is left while the operator still runs removes the cluster-scoped
        // roles too; if it cannot, the finalizers go, or the namespace could never finish
        // deleting once the operator is gone.
        let kubectl = |args: &[&str]| {
            std::process::Command::new("kubectl")
                .args(args)
                .env("KUBECONFIG", kubeconfig())
                .stderr(std::process::Stdio::null())
                .output()
        };
        for ns in std::iter::once(&self.ns).chain(&self.also) {
            let _ = kubectl(&["delete", "slc", "--all", "-n", ns, "--timeout=20s"]);
            let Ok(out) = kubectl(&["get", "slc", "-n", ns, "-o", "name"]) else {
                continue;
            };
            for name in String::from_utf8_lossy(&out.stdout).lines() {
                let _ = kubectl(&[
                    "patch",
                    name,
                    "-n",
                    ns,
                    "--type=merge",
                    "-p",
                    r#"{"metadata":{"finalizers":null}}"#,
                ]);
            }
        }
        // Then the webhook configuration goes (once the operator cannot restore it).
        self.kite.kill();
    }
}

impl Operator {
    pub async fn start(ns: &str, ceiling: &Ceiling) -> Self {
        Self::start_with(ns, ceiling, &["--namespace", ns]).await
    }

    /// An operator with `args` (e.g. `--namespace NS` or `--selector L`), ready to
    /// serve; `ns` is where its StarlarkControllers are cleaned up from.
    pub async fn start_with(ns: &str, ceiling: &Ceiling, args: &[&str]) -> Self {
        let port = free_port().to_string();
        let webhook = WebhookConfiguration::new(ns);
        let mut all = vec![
            "operator",
            "--ceiling",
            &ceiling.0,
            "--health-port",
            &port,
            "--status-period",
            "1s",
            "--webhook-port",
            "0",
            "--webhook-configuration",
            &webhook.0,
        ];
        all.extend_from_slice(args);
        let kite = Kite::spawn(&all);
        let url = format!("http://127.0.0.1:{port}/readyz");
        wait_until("the operator ready", Duration::from_secs(30), || async {
            curl(&url).await.is_some_and(|b| b.trim() == "ok")
        })
        .await;
        Operator {
            kite,
            port: port.parse().unwrap(),
            ns: ns.to_owned(),
            also: Vec::new(),
            webhook,
        }
    }

    pub async fn metrics(&self) -> String {
        curl(&format!("http://127.0.0.1:{}/metrics", self.port))
            .await
            .unwrap_or_default()
    }
}

pub async fn curl(url: &str) -> Option<String> {
    let out = tokio::process::Command::new("curl")
        .args(["-s", "-f", "-m", "2", url])
        .output()
        .await
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

pub async fn apply_slc(ns: &str, name: &str, spec: Json) {
    let obj = json!({
        "apiVersion": "starkite.io/v1alpha1",
        "kind": "StarlarkController",
        "metadata": {"name": name, "namespace": ns},
        "spec": spec,
    });
    let out = kubectl_stdin(&["apply", "-f", "-"], &obj.to_string()).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

pub async fn status(ns: &str, name: &str) -> Json {
    let out = kubectl(&["get", "slc", name, "-n", ns, "-o", "json"]).await;
    serde_json::from_slice::<Json>(&out.stdout)
        .map(|o| o["status"].clone())
        .unwrap_or(Json::Null)
}

pub fn condition<'a>(status: &'a Json, type_: &str) -> &'a Json {
    status["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == type_))
        .unwrap_or(&Json::Null)
}

/// Waits until the condition has `value` and returns the status.
pub async fn wait_condition(
    ns: &str,
    name: &str,
    type_: &str,
    value: &str,
    timeout: Duration,
) -> Json {
    let what = format!("{name}: {type_}={value}");
    wait_for(&what, timeout, || async {
        let s = status(ns, name).await;
        (condition(&s, type_)["status"] == value).then_some(s)
    })
    .await
}

pub fn max_replicas_spec(ns: &str, max: &str) -> Json {
    json!({"script": MAX_REPLICAS, "vars": {"max_replicas": max}, "control": {"namespace": ns}})
}

pub async fn drifted(ns: &str, deployment: &str, replicas: &str) {
    kubectl_ok(&[
        "scale",
        "deployment",
        deployment,
        "-n",
        ns,
        &format!("--replicas={replicas}"),
    ])
    .await;
}

pub async fn replicas_become(ns: &str, deployment: &str, want: &str) {
    wait_until(
        &format!("{deployment} at {want} replicas"),
        Duration::from_secs(5),
        || async { jsonpath("deployment", deployment, ns, "{.spec.replicas}").await == want },
    )
    .await;
}

/// Asserts that `text` is a valid Prometheus exposition as far as grouping goes: each
/// metric family has one TYPE line, and its samples follow it without another family's
/// in between (Prometheus rejects a scrape otherwise).
pub fn assert_grouped_exposition(text: &str) {
    let mut seen = std::collections::BTreeSet::new();
    let mut current: Option<String> = None;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let name = rest.split(' ').next().unwrap_or_default().to_owned();
            assert!(
                seen.insert(name.clone()),
                "{name} has two TYPE lines:\n{text}"
            );
            current = Some(name);
        } else if !line.starts_with('#') && !line.is_empty() {
            let sample = line.split(['{', ' ']).next().unwrap_or_default();
            let family = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| sample.strip_suffix(s))
                .filter(|f| current.as_deref() == Some(*f))
                .unwrap_or(sample);
            if seen.contains(family) {
                assert_eq!(
                    current.as_deref(),
                    Some(family),
                    "a sample of {family} outside its group:\n{text}"
                );
            }
        }
    }
}

/// The generated ServiceAccounts, Roles and RoleBindings (in any namespace) of the
/// controller resource with `uid`, by their owner label; "" when there are none.
pub async fn generated_for(uid: &str) -> String {
    let out = kubectl_ok(&[
        "get",
        "serviceaccounts,roles,rolebindings",
        "-A",
        "-l",
        &format!("starkite.io/owner-uid={uid}"),
        "-o",
        "name",
    ])
    .await;
    out.trim().to_owned()
}

/// The ServiceAccount (and Role and RoleBinding) name the operator generates for
/// StarlarkController `name` in `ns`: `starkite-<name>-<first 8 hex of its uid>`.
pub async fn generated_name(ns: &str, name: &str) -> String {
    let uid = crate::support::jsonpath("slc", name, ns, "{.metadata.uid}").await;
    assert!(!uid.is_empty(), "StarlarkController {ns}/{name} has no uid");
    format!("starkite-{name}-{}", &uid[..8])
}

/// `kubectl apply` of `obj` as `user`; the output.
pub async fn apply_as(user: &str, obj: &Json) -> std::process::Output {
    author_sends("apply", user, obj).await
}

/// `kubectl <verb> -f -` of `obj` as `user` (in the group kite:authors); the output.
pub async fn author_sends(verb: &str, user: &str, obj: &Json) -> std::process::Output {
    kubectl_stdin(
        &[verb, "--as", user, "--as-group", "kite:authors", "-f", "-"],
        &obj.to_string(),
    )
    .await
}

/// Asserts that the request was refused with a message containing each of `needles`.
pub fn refused(out: &std::process::Output, needles: &[&str]) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "expected a refusal, got: {err}");
    for n in needles {
        assert!(err.contains(n), "{n:?} not in: {err}");
    }
    err
}

/// A Role in `ns` bound to `user`.
pub async fn grant(ns: &str, user: &str, name: &str, rules: Json) {
    let role = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": name, "namespace": ns}, "rules": rules});
    let binding = json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": name, "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}]});
    for obj in [role, binding] {
        let out = kubectl_stdin(&["apply", "-f", "-"], &obj.to_string()).await;
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
