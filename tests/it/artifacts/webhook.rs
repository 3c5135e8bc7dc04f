//! `kite kube gen-webhook-artifacts`: the stream the API server accepts, with a serving
//! certificate whose CA is the configuration's caBundle, or cert-manager's plumbing.

use std::time::Duration;

use crate::support::*;

const T: Duration = Duration::from_secs(60);

async fn generate(ns: &str, extra: &[&str]) -> (Vec<serde_json::Value>, String) {
    let mut args = vec![
        "kube",
        "gen-webhook-artifacts",
        "--webhook",
        "tests/scripts/webhook/replicas.star",
        "--name",
        "replicas-hook",
        "--image",
        "example.com/replicas-hook:1",
        "--namespace",
        ns,
        "--rule",
        "group=apps resource=deployments operations=CREATE,UPDATE",
        "--var",
        "port=9443",
        "--var",
        "tls_cert=/certs/tls.crt",
        "--var",
        "tls_key=/certs/tls.key",
        "--offline",
        "--output",
        "json",
    ];
    args.extend_from_slice(extra);
    let out = kite_output(&args, T).await;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{stderr}");
    let text = String::from_utf8(out.stdout).unwrap();
    let value: serde_json::Value = serde_json::from_str(&text).unwrap();
    let items = match value {
        serde_json::Value::Array(items) => items,
        other => other["items"].as_array().cloned().unwrap_or_default(),
    };
    (items, text)
}

fn kinds(objects: &[serde_json::Value]) -> Vec<String> {
    objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test]
async fn webhook_artifacts_are_accepted_by_the_api_server() {
    let ns = TestNamespace::new("art-webhook").await;
    let (objects, text) = generate(&ns.name, &[]).await;
    assert_eq!(
        kinds(&objects),
        [
            "Namespace",
            "ServiceAccount",
            "Secret",
            "Deployment",
            "Service",
            "ValidatingWebhookConfiguration",
            "MutatingWebhookConfiguration"
        ]
    );
    let secret = &objects[2];
    let ca = secret["stringData"]["ca.crt"].as_str().unwrap();
    let bundle = objects[5]["webhooks"][0]["clientConfig"]["caBundle"]
        .as_str()
        .unwrap();
    use base64::Engine;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(bundle)
        .unwrap();
    assert_eq!(String::from_utf8(decoded).unwrap(), ca);
    let args = objects[3]["spec"]["template"]["spec"]["containers"][0]["args"].to_string();
    assert!(
        args.contains("--allow-net") && args.contains("tls_cert=/certs/tls.crt"),
        "{args}"
    );
    let dry = kubectl_stdin(&["apply", "--dry-run=server", "-f", "-"], &text).await;
    assert!(
        dry.status.success(),
        "{}",
        String::from_utf8_lossy(&dry.stderr)
    );
}

#[tokio::test]
async fn cert_manager_artifacts_ask_cert_manager_for_the_certificate() {
    let (objects, _) = generate("hooks", &["--cert-manager"]).await;
    let kinds = kinds(&objects);
    assert!(
        kinds.contains(&"Certificate".to_owned()) && kinds.contains(&"Issuer".to_owned()),
        "{kinds:?}"
    );
    assert!(!kinds.contains(&"Secret".to_owned()), "{kinds:?}");
    let config = objects
        .iter()
        .find(|o| o["kind"] == "ValidatingWebhookConfiguration")
        .unwrap();
    assert_eq!(
        config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
        "hooks/replicas-hook"
    );
    assert!(config["webhooks"][0]["clientConfig"]["caBundle"].is_null());
}
