//! k8s.webhook() end to end: kite serves the script's handlers on loopback with the
//! test's certificate, and the local API server calls them through webhook
//! configurations scoped to the test's namespace.

use std::time::{Duration, Instant};

use crate::support::certs::{Served, serving_127};
use crate::support::*;

const T: Duration = Duration::from_secs(30);

/// Webhook configurations that are deleted when the test ends, passed or failed.
struct Configurations(Vec<String>);

impl Drop for Configurations {
    fn drop(&mut self) {
        for what in &self.0 {
            let _ = std::process::Command::new("kubectl")
                .args(["delete", what, "--ignore-not-found", "--wait=false"])
                .env("KUBECONFIG", kubeconfig())
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .status();
        }
    }
}

/// Registers a configuration of `kind` (Validating or Mutating) sending `resource`
/// creates in `ns` to `https://127.0.0.1:port/path`.
async fn register(
    kind: &str,
    ns: &str,
    port: u16,
    path: &str,
    (group, resource): (&str, &str),
    served: &Served,
    keep: &mut Configurations,
) {
    let name = unique_name(&format!("kite-test-{}", kind.to_ascii_lowercase()));
    let manifest = format!(
        r#"apiVersion: admissionregistration.k8s.io/v1
kind: {kind}WebhookConfiguration
metadata: {{name: {name}}}
webhooks:
- name: {path_name}.kite.test
  admissionReviewVersions: [v1]
  sideEffects: None
  failurePolicy: Fail
  timeoutSeconds: 10
  clientConfig:
    url: https://127.0.0.1:{port}{path}
    caBundle: {ca}
  namespaceSelector:
    matchLabels: {{kubernetes.io/metadata.name: {ns}}}
  rules:
  - apiGroups: ["{group}"]
    apiVersions: ["*"]
    resources: [{resource}]
    operations: [CREATE, UPDATE]
"#,
        path_name = path.trim_matches('/'),
        ca = served.ca_bundle,
    );
    let out = kubectl_stdin(&["create", "-f", "-"], &manifest).await;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    keep.0.push(format!(
        "{}webhookconfiguration/{name}",
        kind.to_ascii_lowercase()
    ));
}

fn spawn(script: &str, port: u16, served: &Served, extra: &[&str]) -> Kite {
    let port = format!("port={port}");
    let cert = format!("tls_cert={}", served.cert.display());
    let key = format!("tls_key={}", served.key.display());
    let mut args = vec![
        "run",
        script,
        "--allow-k8s",
        "--allow-net",
        "--var",
        &port,
        "--var",
        &cert,
        "--var",
        &key,
    ];
    args.extend_from_slice(extra);
    Kite::spawn(&args)
}

/// `kubectl create` of `manifest`, with `--dry-run=server` if `dry`: the output, or the
/// error text.
async fn create(manifest: &str, dry: bool, output: &str) -> Result<String, String> {
    let mut args = vec!["create", "-f", "-", "-o", output];
    if dry {
        args.push("--dry-run=server");
    }
    let out = kubectl_stdin(&args, manifest).await;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

fn deployment(ns: &str, name: &str, replicas: u32) -> String {
    format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {{name: {name}, namespace: {ns}, labels: {{app: {name}}}}}\nspec:\n  replicas: {replicas}\n  selector: {{matchLabels: {{app: {name}}}}}\n  template:\n    metadata: {{labels: {{app: {name}}}}}\n    spec: {{containers: [{{name: c, image: nginx}}]}}\n"
    )
}

fn config_map(ns: &str, name: &str, data: &str) -> String {
    format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: {name}, namespace: {ns}}}\ndata: {{{data}}}\n"
    )
}

#[tokio::test(flavor = "multi_thread")]
async fn webhook_refuses_bad_deployments_and_mutates_good_ones() {
    let ns = TestNamespace::new("webhook").await;
    let served = serving_127();
    let port = free_port();
    let mut kite = spawn("tests/scripts/webhook/replicas.star", port, &served, &[]);
    kite.wait_stdout(
        &format!("k8s.webhook: serving https://127.0.0.1:{port}/deployments"),
        T,
    )
    .await;
    let mut keep = Configurations(Vec::new());
    let target = ("apps", "deployments");
    register(
        "Validating",
        &ns.name,
        port,
        "/deployments",
        target,
        &served,
        &mut keep,
    )
    .await;
    register(
        "Mutating",
        &ns.name,
        port,
        "/deployments",
        target,
        &served,
        &mut keep,
    )
    .await;
    // The API server picks up new configurations a moment later: wait on dry runs.
    let bad = deployment(&ns.name, "big", 5);
    let refusal = wait_for("the bad Deployment to be refused", T, || async {
        create(&bad, true, "name").await.err()
    })
    .await;
    assert!(
        refusal.contains("max 3 replicas, CREATE asked for 5"),
        "{refusal}"
    );
    let good = deployment(&ns.name, "small", 2);
    wait_until("the mutating configuration to be in use", T, || async {
        create(&good, true, "jsonpath={.metadata.labels.managed-by}")
            .await
            .as_deref()
            == Ok("kite")
    })
    .await;
    create(&good, false, "name").await.unwrap();
    let label = jsonpath(
        "deployment",
        "small",
        &ns.name,
        "{.metadata.labels.managed-by}",
    )
    .await;
    assert_eq!(label, "kite");
    let refused = create(&bad, false, "name").await.unwrap_err();
    assert!(refused.contains("max 3 replicas"), "{refused}");
    assert!(
        kubectl(&["get", "deployment", "big", "-n", &ns.name])
            .await
            .status
            .code()
            != Some(0)
    );
}

/// Runs failing.star with `policy` (and `spin`) against ConfigMaps; returns the answer
/// to a create and how long it took.
async fn failing(policy: &str, spin: bool) -> (Result<String, String>, Duration) {
    let ns = TestNamespace::new("webhook-fail").await;
    let served = serving_127();
    let port = free_port();
    let policy_var = format!("policy={policy}");
    let spin_var = format!("spin={spin}");
    let mut kite = spawn(
        "tests/scripts/webhook/failing.star",
        port,
        &served,
        &["--var", &policy_var, "--var", &spin_var],
    );
    kite.wait_stdout("k8s.webhook: serving https://", T).await;
    let mut keep = Configurations(Vec::new());
    register(
        "Validating",
        &ns.name,
        port,
        "/fails",
        ("", "configmaps"),
        &served,
        &mut keep,
    )
    .await;
    // Wait until the configuration is in use: the webhook has answered a review.
    let probe = config_map(&ns.name, "probe", "a: b");
    wait_until("the configuration to be in use", T, || async {
        let _ = create(&probe, true, "name").await;
        kite.stderr().iter().any(|l| l.contains("handler failed"))
    })
    .await;
    let started = Instant::now();
    let answer = create(&config_map(&ns.name, "cm", "a: b"), false, "name").await;
    (answer, started.elapsed())
}

#[tokio::test(flavor = "multi_thread")]
async fn a_raising_handler_refuses_under_fail() {
    let (answer, _) = failing("Fail", false).await;
    let e = answer.unwrap_err();
    assert!(
        e.contains("/fails: validate:") && e.contains("no validator for cm"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn a_raising_handler_admits_under_ignore() {
    let (answer, _) = failing("Ignore", false).await;
    assert_eq!(answer.unwrap().trim(), "configmap/cm");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_looping_handler_is_cut_off_before_the_api_server_gives_up() {
    let (answer, took) = failing("Fail", true).await;
    let e = answer.unwrap_err();
    assert!(e.contains("time budget of 2s"), "{e}");
    // The configuration's timeoutSeconds is 10; the handler's budget is 2s.
    assert!(took < Duration::from_secs(8), "took {took:?}");
}

/// Runs `script` (a webhook and a controller on ConfigMaps) and checks both work.
async fn webhook_and_controller(script: &str) {
    let ns = TestNamespace::new("webhook-ctl").await;
    let served = serving_127();
    let port = free_port();
    let ns_var = format!("ns={}", ns.name);
    let mut kite = spawn(script, port, &served, &["--var", &ns_var]);
    kite.wait_stdout("k8s.webhook: serving https://", T).await;
    let mut keep = Configurations(Vec::new());
    register(
        "Validating",
        &ns.name,
        port,
        "/configmaps",
        ("", "configmaps"),
        &served,
        &mut keep,
    )
    .await;
    let bad = config_map(&ns.name, "anon", "a: b");
    let refusal = wait_for("the ConfigMap without a team to be refused", T, || async {
        create(&bad, true, "name").await.err()
    })
    .await;
    assert!(refusal.contains("team entry required"), "{refusal}");
    create(&config_map(&ns.name, "owned", "team: blue"), false, "name")
        .await
        .unwrap();
    kite.wait_stdout("reconciled owned", T).await;
    sigterm(kite.pid());
    assert!(kite.wait(T).await.success());
}

#[tokio::test(flavor = "multi_thread")]
async fn one_script_serves_a_webhook_and_runs_a_controller() {
    webhook_and_controller("tests/scripts/webhook/combined.star").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_controller_declared_first_still_gets_its_webhook() {
    webhook_and_controller("tests/scripts/webhook/combined_control_first.star").await;
}

/// POSTs `body` to the webhook with curl (no API server in between, as an attacker on
/// the network would): the HTTP status and the response text.
async fn post(url: &str, body: Vec<u8>) -> (String, String) {
    use tokio::io::AsyncWriteExt;
    let mut child = tokio::process::Command::new("curl")
        .args(["-sk", "--max-time", "20", "-w", "\n%{http_code}", "-H"])
        .args(["content-type: application/json", "--data-binary", "@-", url])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("curl runs");
    let mut stdin = child.stdin.take().unwrap();
    // A server that stops reading early closes the pipe; that is an answer too.
    let _ = stdin.write_all(&body).await;
    drop(stdin);
    let out = child.wait_with_output().await.unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let (body, code) = text.rsplit_once('\n').unwrap_or(("", &text));
    (code.to_owned(), body.to_owned())
}

/// Whatever reaches the port: garbage, a body over the 4 MiB cap, and JSON nested past
/// any sane depth are refused with 400 at once; the server keeps answering real reviews.
#[tokio::test(flavor = "multi_thread")]
async fn forged_huge_and_deep_bodies_are_refused_and_serving_goes_on() {
    let served = serving_127();
    let port = free_port();
    let mut kite = spawn("tests/scripts/webhook/replicas.star", port, &served, &[]);
    kite.wait_stdout(
        &format!("k8s.webhook: serving https://127.0.0.1:{port}/deployments"),
        T,
    )
    .await;
    let url = format!("https://127.0.0.1:{port}/deployments");
    let (code, text) = post(&url, b"{not json".to_vec()).await;
    assert_eq!(code, "400", "garbage: {text}");
    assert!(text.contains("not an AdmissionReview"), "{text}");
    let mut huge = br#"{"request": {"object": {"pad": ""#.to_vec();
    huge.extend(std::iter::repeat_n(b'x', 5 << 20));
    huge.extend(br#""}}}"#);
    let (code, text) = post(&url, huge).await;
    assert_eq!(code, "400", "5 MiB body: {text}");
    assert!(text.contains("length limit"), "{text}");
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    let (code, text) = post(&url, deep.into_bytes()).await;
    assert_eq!(code, "400", "deep nesting: {text}");
    let review = r#"{"request": {"uid": "u1", "operation": "CREATE", "object": {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d", "labels": {}}, "spec": {"replicas": 9}}}}"#;
    let (code, text) = post(&url, review.as_bytes().to_vec()).await;
    assert_eq!(code, "200", "{text}");
    assert!(
        text.contains(r#""allowed":false"#) && text.contains("max 3 replicas, CREATE asked for 9"),
        "{text}"
    );
}
