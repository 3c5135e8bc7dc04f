//! Proves that `k8s.obj` builders produce manifests the API server accepts: a CRD from
//! `crd(...)` that validates and defaults custom resources, and every other builder's
//! output through `kubectl apply --dry-run=server`.

use std::time::Duration;

use crate::support::*;
use serde_json::{Value as Json, json};
use starlark::environment::{GlobalsBuilder, Module};
use starlark::eval::Evaluator;
use starlark::syntax::{AstModule, Dialect};

/// Evaluates `code` in-process with `obj` in scope and returns its last value as JSON.
fn eval(code: &str) -> Json {
    let globals = GlobalsBuilder::standard()
        .with(|g| g.set("obj", kite::obj_namespace()))
        .build();
    let ast = AstModule::parse("obj.star", code.to_owned(), &Dialect::Extended)
        .unwrap_or_else(|e| panic!("parse: {e}"));
    Module::with_temp_heap(|module| {
        let mut eval = Evaluator::new(&module);
        let v = eval
            .eval_module(ast, &globals)
            .unwrap_or_else(|e| panic!("{code}\nfailed: {e}"));
        kite::from_starlark(v).expect("a builder result converts to JSON")
    })
}

/// Applies `manifest` as JSON with the given extra kubectl arguments.
async fn apply(manifest: &Json, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["apply", "-f", "-", "-o", "json"];
    args.extend_from_slice(extra);
    kubectl_stdin(&args, &manifest.to_string()).await
}

fn describe(out: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// Deletes a cluster-scoped CRD when the test ends, passed or failed.
struct CrdGuard(String);

impl Drop for CrdGuard {
    fn drop(&mut self) {
        let _ = std::process::Command::new("kubectl")
            .args([
                "delete",
                "crd",
                &self.0,
                "--wait=false",
                "--ignore-not-found",
            ])
            .env("KUBECONFIG", kubeconfig())
            .output();
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn crd_builder_output_is_served_validated_and_defaulted() {
    let ns = TestNamespace::new("obj-crd").await;
    let group = format!("{}.kite.test", unique_name("objcrd"));
    let crd = eval(&format!(
        r#"
obj.crd(group = "{group}", version = "v1alpha1", kind = "Widget", plural = "widgets",
    short_names = ["wdg"], categories = ["kite-test"],
    spec = {{
        "image": {{"type": "string", "required": True, "description": "image to run"}},
        "replicas": {{"type": "integer", "default": 3, "minimum": 0}},
        "mode": {{"type": "string", "enum": ["fast", "safe"], "default": "safe"}},
        "tags": {{"type": "array", "items": {{"type": "string"}}}},
        "ports": {{"type": "array", "items": {{"properties": {{
            "name": "string",
            "port": {{"type": "integer", "required": True, "maximum": 65535}},
        }}}}}},
        "config": {{"type": "object"}},
        "limits": {{"type": "object", "additionalProperties": {{"type": "string"}}}},
    }},
    status = {{"ready": "boolean", "conditions": {{"type": "array", "items": {{"type": "object"}}}}}},
    printer_columns = [{{"name": "Image", "type": "string", "jsonPath": ".spec.image"}}])
"#
    ));
    let name = format!("widgets.{group}");
    assert_eq!(crd["metadata"]["name"], name.as_str());

    let out = apply(&crd, &["--dry-run=server"]).await;
    assert!(out.status.success(), "dry-run CRD: {}", describe(&out));

    // Installing it proves more than the dry run: the schema defaults and validates.
    let _guard = CrdGuard(name.clone());
    let out = apply(&crd, &[]).await;
    assert!(out.status.success(), "apply CRD: {}", describe(&out));
    kubectl_ok(&[
        "wait",
        "--for=condition=Established",
        &format!("crd/{name}"),
        "--timeout=30s",
    ])
    .await;

    let widget = |spec: Json| {
        json!({
            "apiVersion": format!("{group}/v1alpha1"),
            "kind": "Widget",
            "metadata": { "name": "w", "namespace": ns.name },
            "spec": spec,
        })
    };
    let good = widget(json!({
        "image": "nginx",
        "ports": [{ "name": "http", "port": 80 }],
        "config": { "anything": { "goes": [1, 2] } },
        "limits": { "cpu": "1" },
    }));
    // Discovery may lag the new CRD for a moment, so retry until kubectl knows the kind.
    let served = wait_for(
        "the Widget kind to be served",
        Duration::from_secs(30),
        || {
            let good = good.clone();
            async move {
                let out = apply(&good, &["--dry-run=server"]).await;
                out.status.success().then_some(out)
            }
        },
    )
    .await;
    let served: Json = serde_json::from_slice(&served.stdout).expect("kubectl -o json");
    assert_eq!(served["spec"]["replicas"], 3, "{served}");
    assert_eq!(served["spec"]["mode"], "safe", "{served}");
    assert_eq!(served["spec"]["config"]["anything"]["goes"], json!([1, 2]));

    let missing_image = widget(json!({ "replicas": 1 }));
    let out = apply(&missing_image, &["--dry-run=server"]).await;
    assert!(!out.status.success(), "a missing required field passed");
    assert!(describe(&out).contains("spec.image"), "{}", describe(&out));

    let missing_port = widget(json!({ "image": "x", "ports": [{ "name": "p" }] }));
    let out = apply(&missing_port, &["--dry-run=server"]).await;
    assert!(
        !out.status.success(),
        "a missing nested required field passed"
    );
    assert!(describe(&out).contains("port"), "{}", describe(&out));
}

/// Every builder except `crd`, each at least once.
const BUILDERS: &[&str] = &[
    "deployment",
    "stateful_set",
    "daemon_set",
    "job",
    "cron_job",
    "pod",
    "container",
    "container_port",
    "env_var",
    "volume",
    "volume_mount",
    "service",
    "service_port",
    "config_map",
    "secret",
    "namespace",
    "service_account",
    "role",
    "cluster_role",
    "policy_rule",
    "role_binding",
    "cluster_role_binding",
    "ingress",
    "lease",
];

#[tokio::test(flavor = "multi_thread")]
async fn every_builder_output_passes_server_dry_run() {
    let ns = TestNamespace::new("obj-all").await;
    let cluster = unique_name("obj-all");
    let script = format!(
        r#"
ns = "{ns}"
cluster = "{cluster}"
app = obj.container("app", image = "nginx:alpine", command = ["nginx"], args = ["-g", "daemon off;"],
    env = [obj.env_var("MODE", value = "prod"), obj.env_var("POD", field_path = "metadata.name"),
           obj.env_var("PASS", secret_name = "creds", secret_key = "password", optional = True)],
    ports = [obj.container_port(80, name = "http"), 9090],
    requests = {{"cpu": "100m", "memory": "64Mi"}}, limits = {{"memory": "128Mi"}},
    volume_mounts = [obj.volume_mount("config", mount_path = "/etc/app", read_only = True),
                     obj.volume_mount("scratch", mount_path = "/tmp")],
    image_pull_policy = "IfNotPresent",
    readiness_probe = {{"httpGet": {{"path": "/", "port": "http"}}}})
volumes = [obj.volume("config", config_map = "settings", items = [{{"key": "a", "path": "a.conf"}}]),
           obj.volume("scratch", empty_dir = True),
           obj.volume("creds", secret = "creds", default_mode = 256)]
init = obj.container("init", image = "busybox", command = ["true"])
[
    obj.namespace(cluster, labels = {{"kite.test/owned": "true"}}),
    obj.service_account("sa", namespace = ns, automount_service_account_token = False),
    obj.config_map("settings", namespace = ns, data = {{"a": "1"}}, binary_data = {{"b": "eA=="}}),
    obj.secret("creds", namespace = ns, string_data = {{"password": "pw"}}, data = {{"user": "YWRtaW4="}}),
    obj.role("reader", namespace = ns, rules = [obj.policy_rule(resources = ["pods", "configmaps"], verbs = ["get", "list"])]),
    obj.cluster_role(cluster, rules = [obj.policy_rule(api_groups = ["apps"], resources = ["deployments"], verbs = ["get"]),
                                       obj.policy_rule(non_resource_urls = ["/healthz"], verbs = ["get"])]),
    obj.role_binding("reader", namespace = ns, role = "reader", subjects = [{{"kind": "ServiceAccount", "name": "sa"}}]),
    obj.role_binding("viewer", namespace = ns, role = "view", role_kind = "ClusterRole",
        subjects = [{{"kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io"}}]),
    obj.cluster_role_binding(cluster, role = cluster, subjects = [{{"kind": "ServiceAccount", "name": "sa", "namespace": ns}}]),
    obj.deployment("web", namespace = ns, replicas = 2, containers = [app], init_containers = [init], volumes = volumes,
        service_account_name = "sa", strategy = "RollingUpdate", node_selector = {{"kubernetes.io/os": "linux"}},
        pod_annotations = {{"kite.test/hash": "abc"}}, tolerations = [{{"operator": "Exists"}}]),
    obj.stateful_set("db", namespace = ns, replicas = 1, containers = [app], volumes = volumes,
        volume_claim_templates = [{{"metadata": {{"name": "data"}}, "spec": {{"accessModes": ["ReadWriteOnce"],
            "resources": {{"requests": {{"storage": "1Gi"}}}}}}}}]),
    obj.daemon_set("agent", namespace = ns, labels = {{"app": "agent", "tier": "node"}}, selector = {{"app": "agent"}},
        containers = [app], volumes = volumes, update_strategy = "RollingUpdate"),
    obj.job("once", namespace = ns, backoff_limit = 2, ttl_seconds_after_finished = 60,
        containers = [obj.container("run", image = "busybox", command = ["echo", "hi"])]),
    obj.cron_job("tick", namespace = ns, schedule = "*/5 * * * *", concurrency_policy = "Forbid",
        successful_jobs_history_limit = 1, containers = [obj.container("run", image = "busybox")]),
    obj.pod("solo", namespace = ns, containers = [obj.container("c", image = "busybox", command = ["sleep", "1"])],
        restart_policy = "Never"),
    obj.service("web", namespace = ns, ports = [obj.service_port(port = 80, target_port = "http", name = "http"),
        obj.service_port(9090, name = "metrics", protocol = "TCP")]),
    obj.service("db", namespace = ns, cluster_ip = "None", ports = [5432]),
    obj.service("nodeport", namespace = ns, type = "NodePort", ports = [obj.service_port(port = 80, target_port = 80)]),
    obj.service("external", namespace = ns, type = "ExternalName", external_name = "example.com"),
    obj.ingress("web", namespace = ns, host = "web.example.com", service = "web", service_port = 80,
        tls = [{{"hosts": ["web.example.com"], "secretName": "creds"}}]),
    obj.lease("leader", namespace = ns, holder_identity = "kite-0", lease_duration_seconds = 15,
        renew_time = "2026-01-01T00:00:00.000000Z", lease_transitions = 1),
]
"#,
        ns = ns.name
    );
    for b in BUILDERS {
        assert!(
            script.contains(&format!("obj.{b}(")),
            "the script does not use {b}"
        );
    }
    let Json::Array(objects) = eval(&script) else {
        panic!("the script returns a list")
    };
    for object in &objects {
        let what = format!(
            "{} {}",
            object["kind"],
            object["metadata"]["name"].as_str().unwrap_or("?")
        );
        let out = apply(object, &["--dry-run=server"]).await;
        assert!(
            out.status.success(),
            "dry-run {what}: {}\n{object:#}",
            describe(&out)
        );
    }
}
