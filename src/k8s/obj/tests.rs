//! Tests for the `k8s.obj` builders, run as Starlark snippets.

use std::sync::OnceLock;

use serde_json::{Value as Json, json};
use starlark::environment::{Globals, GlobalsBuilder, Module};
use starlark::eval::Evaluator;
use starlark::syntax::{AstModule, Dialect};

use super::{ALL, obj_namespace};
use crate::script::json::from_starlark;

fn globals() -> &'static Globals {
    static GLOBALS: OnceLock<Globals> = OnceLock::new();
    GLOBALS.get_or_init(|| {
        GlobalsBuilder::standard()
            .with(|g| g.set("obj", obj_namespace()))
            .build()
    })
}

/// Evaluates `code` with `obj` in scope and returns its last expression as JSON.
pub(super) fn eval(code: &str) -> Result<Json, String> {
    let ast = AstModule::parse("test.star", code.to_owned(), &Dialect::Extended)
        .map_err(|e| e.to_string())?;
    Module::with_temp_heap(|module| {
        let mut eval = Evaluator::new(&module);
        let v = eval
            .eval_module(ast, globals())
            .map_err(|e| e.to_string())?;
        from_starlark(v).map_err(|e| e.to_string())
    })
}

pub(super) fn ok(code: &str) -> Json {
    eval(code).unwrap_or_else(|e| panic!("{code}\nfailed: {e}"))
}

pub(super) fn err(code: &str) -> String {
    match eval(code) {
        Ok(v) => panic!("{code}\nsucceeded with {v}"),
        Err(e) => e,
    }
}

#[test]
fn seed_example_builds_deployment_and_service() {
    let both = ok(r#"
child_dep = obj.deployment(name = "site", namespace = "ns", replicas = 2, containers = [obj.container(name="web", image="nginx:alpine")])
child_svc = obj.service(name = "site", namespace = "ns", ports = [obj.service_port(port=80, target_port=80)])
[child_dep, child_svc]
"#);
    let expected_dep = json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": { "name": "site", "namespace": "ns", "labels": { "app": "site" } },
        "spec": {
            "replicas": 2,
            "selector": { "matchLabels": { "app": "site" } },
            "template": {
                "metadata": { "labels": { "app": "site" } },
                "spec": { "containers": [{ "name": "web", "image": "nginx:alpine" }] },
            },
        },
    });
    let expected_svc = json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": { "name": "site", "namespace": "ns" },
        "spec": { "ports": [{ "port": 80, "targetPort": 80 }], "selector": { "app": "site" } },
    });
    assert_eq!(both, json!([expected_dep, expected_svc]));
}

#[test]
fn results_read_as_attributes() {
    let v = ok(r#"
d = obj.deployment("site", replicas = 2, containers = [obj.container("web", image = "nginx")])
[d.spec.replicas == 2, d.spec.template.spec.containers[0].image, d.kind, d.metadata.missing]
"#);
    assert_eq!(v, json!([true, "nginx", "Deployment", null]));
}

#[test]
fn unknown_keyword_lists_accepted_ones() {
    let e = err(r#"obj.deployment(name = "a", replica = 2, containers = [])"#);
    assert!(
        e.contains(r#"k8s.obj.deployment: unknown keyword argument "replica""#),
        "{e}"
    );
    assert!(e.contains(r#"did you mean "replicas"?"#), "{e}");
    assert!(
        e.contains("(accepted: name, namespace, replicas, labels,"),
        "{e}"
    );
    let e = err(r"obj.service_port(port = 80, targetPort = 80)");
    assert!(e.contains("accepted: port, target_port, name"), "{e}");
}

#[test]
fn wrong_types_and_missing_arguments_are_named() {
    let e = err(r#"obj.deployment(name = "a", replicas = "3", containers = [])"#);
    assert!(
        e.contains(r#"k8s.obj.deployment: argument "replicas": must be an int, got string "3""#),
        "{e}"
    );
    let e = err(r#"obj.container(name = "web")"#);
    assert!(
        e.contains(r#"k8s.obj.container: missing required argument "image""#),
        "{e}"
    );
    let e = err(r#"obj.deployment(name = "a", containers = [1])"#);
    assert!(
        e.contains(r#"argument "containers[0]": must be a dict, got int 1"#),
        "{e}"
    );
    let e = err(r#"obj.config_map("c", labels = {"a": 1})"#);
    assert!(
        e.contains(r#"argument "labels[\"a\"]": must be a string"#),
        "{e}"
    );
    let e = err(r#"obj.pod("a", "b")"#);
    assert!(
        e.contains("takes at most 1 positional argument (name), got 2"),
        "{e}"
    );
    let e = err(r#"obj.pod("a", name = "b")"#);
    assert!(e.contains("given both by position and by keyword"), "{e}");
    let e = err(r#"obj.policy_rule("a")"#);
    assert!(e.contains("keyword arguments only"), "{e}");
    let e = err(r#"obj.secret("s", data = {"k": "not base64!"})"#);
    assert!(e.contains("must be base64"), "{e}");
}

#[test]
fn workloads_flatten_the_pod_template() {
    let v = ok(r#"
c = obj.container("app", image = "busybox", command = ["sh"], env = {"A": "1", "B": 2},
    ports = [8080, obj.container_port(9090, name = "metrics")], requests = {"cpu": "100m"},
    volume_mounts = [obj.volume_mount("data", mount_path = "/data", read_only = True)])
obj.stateful_set("db", namespace = "ns", labels = {"app": "db", "tier": "x"}, selector = {"app": "db"},
    pod_labels = {"v": "1"}, containers = [c], volumes = [obj.volume("data", config_map = "cm", default_mode = 420)],
    service_account_name = "sa", node_selector = {"disk": "ssd"}, update_strategy = "OnDelete")
"#);
    assert_eq!(v["spec"]["serviceName"], "db");
    assert_eq!(
        v["spec"]["selector"],
        json!({ "matchLabels": { "app": "db" } })
    );
    assert_eq!(v["spec"]["updateStrategy"], json!({ "type": "OnDelete" }));
    let t = &v["spec"]["template"];
    assert_eq!(
        t["metadata"]["labels"],
        json!({ "app": "db", "tier": "x", "v": "1" })
    );
    assert_eq!(t["spec"]["serviceAccountName"], "sa");
    assert_eq!(
        t["spec"]["volumes"][0],
        json!({ "name": "data", "configMap": { "name": "cm", "defaultMode": 420 } })
    );
    let c = &t["spec"]["containers"][0];
    assert_eq!(
        c["env"],
        json!([{ "name": "A", "value": "1" }, { "name": "B", "value": "2" }])
    );
    assert_eq!(
        c["ports"],
        json!([{ "containerPort": 8080 }, { "containerPort": 9090, "name": "metrics" }])
    );
    assert_eq!(c["resources"], json!({ "requests": { "cpu": "100m" } }));
    assert_eq!(c["volumeMounts"][0]["mountPath"], "/data");

    let job = ok(
        r#"obj.cron_job("tick", schedule = "*/5 * * * *", backoff_limit = 1, containers = [{"name": "c", "image": "i"}])"#,
    );
    let jt = &job["spec"]["jobTemplate"]["spec"];
    assert_eq!(jt["backoffLimit"], 1);
    assert_eq!(jt["template"]["spec"]["restartPolicy"], "Never");
    assert!(jt.get("selector").is_none());
}

#[test]
fn rbac_ingress_and_env_sources() {
    let v = ok(r#"
[obj.policy_rule(resources = ["pods"], verbs = ["get"]),
 obj.role_binding("rb", namespace = "ns", role = "r", subjects = [{"kind": "ServiceAccount", "name": "sa"}]),
 obj.ingress("web", host = "x.test", service = "web", service_port = "http"),
 obj.env_var("P", secret_name = "s", secret_key = "k")]
"#);
    assert_eq!(v[0]["apiGroups"], json!([""]));
    assert_eq!(v[1]["subjects"][0]["namespace"], "ns");
    assert_eq!(
        v[1]["roleRef"],
        json!({ "apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "r" })
    );
    let path = &v[2]["spec"]["rules"][0]["http"]["paths"][0];
    assert_eq!(
        path["backend"]["service"]["port"],
        json!({ "name": "http" })
    );
    assert_eq!(path["pathType"], "Prefix");
    assert_eq!(
        v[3]["valueFrom"],
        json!({ "secretKeyRef": { "name": "s", "key": "k" } })
    );
    let e = err(r#"obj.env_var("P", value = "x", field_path = "metadata.name")"#);
    assert!(e.contains("only one value source"), "{e}");
}

#[test]
fn crd_builds_structural_schema() {
    let v = ok(r#"
obj.crd(group = "example.com", version = "v1", kind = "Widget", plural = "widgets", short_names = ["wd"],
    spec = {
        "size": {"type": "integer", "default": 1, "minimum": 0},
        "image": {"type": "string", "required": True, "description": "what to run"},
        "tags": {"type": "array", "items": {"type": "string"}},
        "config": {"type": "object"},
        "mode": "string",
        "db": {"properties": {"host": {"type": "string", "required": True}, "port": "integer"}},
    },
    status = {"ready": "boolean"})
"#);
    assert_eq!(v["apiVersion"], "apiextensions.k8s.io/v1");
    assert_eq!(v["metadata"]["name"], "widgets.example.com");
    assert_eq!(v["spec"]["scope"], "Namespaced");
    assert_eq!(v["spec"]["names"]["singular"], "widget");
    let version = &v["spec"]["versions"][0];
    assert_eq!(version["subresources"], json!({ "status": {} }));
    let root = &version["schema"]["openAPIV3Schema"];
    assert_eq!(root["required"], json!(["spec"]));
    let spec = &root["properties"]["spec"];
    assert_eq!(spec["required"], json!(["image"]));
    let p = &spec["properties"];
    assert_eq!(
        p["size"],
        json!({ "type": "integer", "default": 1, "minimum": 0 })
    );
    assert_eq!(
        p["image"],
        json!({ "type": "string", "description": "what to run" })
    );
    assert_eq!(
        p["tags"],
        json!({ "type": "array", "items": { "type": "string" } })
    );
    assert_eq!(
        p["config"],
        json!({ "type": "object", "x-kubernetes-preserve-unknown-fields": true })
    );
    assert_eq!(p["mode"], json!({ "type": "string" }));
    assert_eq!(p["db"]["type"], "object");
    assert_eq!(p["db"]["required"], json!(["host"]));
    assert_eq!(p["db"]["properties"]["port"], json!({ "type": "integer" }));
    assert_eq!(
        root["properties"]["status"]["properties"]["ready"],
        json!({ "type": "boolean" })
    );

    let e = err(
        r#"obj.crd(group = "g", version = "v1", kind = "K", plural = "ks", spec = {"a": {"type": "array"}})"#,
    );
    assert!(e.contains("spec.a: an array needs items"), "{e}");
    let e = err(
        r#"obj.crd(group = "g", version = "v1", kind = "K", plural = "ks", spec = {"a": {"default": 1}})"#,
    );
    assert!(e.contains("spec.a: needs a type"), "{e}");
}

/// The smallest valid call of each builder, as keyword-argument source.
pub(super) fn base_args(builder: &str) -> &'static str {
    const CONTAINERS: &str = r#"name = "a", containers = [{"name": "c", "image": "i"}]"#;
    match builder {
        "deployment" | "stateful_set" | "daemon_set" | "job" | "pod" => CONTAINERS,
        "cron_job" => {
            r#"name = "a", schedule = "* * * * *", containers = [{"name": "c", "image": "i"}]"#
        }
        "container" => r#"name = "c", image = "i""#,
        "ingress_path" => {
            r#"path = "/", backend = {"service": {"name": "s", "port": {"number": 80}}}"#
        }
        "ingress_rule" => r#"host = "h""#,
        "limit_range_item" => r#"type = "Container""#,
        "container_port" => "container_port = 80",
        "volume_mount" => r#"name = "v", mount_path = "/m""#,
        "service_port" => "port = 80",
        "policy_rule" => r#"verbs = ["get"]"#,
        "role_binding" | "cluster_role_binding" => r#"name = "b", role = "r""#,
        "crd" => r#"group = "g.io", version = "v1", kind = "K", plural = "ks""#,
        "env_from" => r#"config_map_ref = "cm""#,
        "resource_requirements" | "probe" | "security_context" => "",
        "persistent_volume" | "persistent_volume_claim" => r#"name = "x", storage = "1Gi""#,
        "storage_class" => r#"name = "x", provisioner = "p""#,
        "resource_claim" => r#"name = "x", device_class = "gpu""#,
        "resource_claim_template" => r#"name = "x", spec = {"devices": {"requests": []}}"#,
        "resource_slice" => r#"name = "x", driver = "d""#,
        "gateway_class" => r#"name = "x", controller_name = "c""#,
        "gateway" => {
            r#"name = "x", gateway_class = "gc", listeners = [{"name": "h", "port": 80, "protocol": "HTTP"}]"#
        }
        "reference_grant" => {
            r#"name = "x", from_refs = [{"group": "", "kind": "K", "namespace": "n"}], to_refs = [{"group": "", "kind": "Service"}]"#
        }
        "validating_admission_policy_binding" | "mutating_admission_policy_binding" => {
            r#"name = "x", policy_name = "p""#
        }
        _ => r#"name = "x""#,
    }
}

/// `base` with `key = value` set, replacing `base`'s own `key`.
pub(super) fn call(builder: &str, base: &str, key: &str, value: &str) -> String {
    let mut parts: Vec<String> = split_args(base)
        .into_iter()
        .filter(|p| p.split('=').next().map(str::trim) != Some(key))
        .collect();
    parts.push(format!("{key} = {value}"));
    format!("obj.{builder}({})", parts.join(", "))
}

/// Splits top-level `k = v` pairs; the base arguments nest brackets but hold no commas
/// inside strings.
fn split_args(s: &str) -> Vec<String> {
    let (mut out, mut cur, mut depth) = (Vec::new(), String::new(), 0i32);
    for ch in s.chars() {
        match ch {
            '[' | '{' | '(' => depth += 1,
            ']' | '}' | ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(ch);
    }
    if !cur.trim().is_empty() {
        out.push(cur);
    }
    out
}

const ODD_VALUES: &[&str] = &[
    "None",
    "0",
    "1",
    "-1",
    "2**40",
    "2**70",
    "1.5",
    "float('nan')",
    "True",
    "False",
    "\"\"",
    "\"x\"",
    "\"Cluster\"",
    "[]",
    "[1]",
    "[\"x\"]",
    "[None]",
    "[{}]",
    "[[]]",
    "{}",
    "{\"a\": 1}",
    "{\"a\": \"b\"}",
    "{\"a\": {\"b\": []}}",
    "{1: 2}",
    "(1, 2)",
    "len",
    "lambda: 1",
    "obj.container(name = \"c\", image = \"i\")",
    "{\"type\": \"array\"}",
    "{\"f\": {\"items\": {\"required\": True}}}",
    "{\"f\": {\"properties\": 1}}",
];

#[test]
fn base_calls_succeed() {
    for b in ALL {
        let code = format!("obj.{}({})", b.name, base_args(b.name));
        let v = ok(&code);
        assert!(v.is_object(), "{code}: {v}");
        let e = err(&call(b.name, base_args(b.name), "bogus", "1"));
        assert!(e.contains("accepted: "), "{e}");
    }
}

#[test]
fn odd_values_never_panic() {
    for b in ALL {
        for key in b.keywords {
            for value in ODD_VALUES {
                let _ = eval(&call(b.name, base_args(b.name), key, value));
            }
        }
        let _ = eval(&format!("obj.{}()", b.name));
        let _ = eval(&format!("obj.{}(1, 2, 3)", b.name));
        let _ = eval(&format!("obj.{}(None)", b.name));
    }
}

#[test]
fn random_combinations_never_panic() {
    // A fixed-seed LCG keeps the test reproducible without a random-number dependency.
    let mut seed: u64 = 0x2545_F491_4F6C_DD1D;
    let mut next = |n: usize| {
        seed = seed
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        ((seed >> 33) as usize) % n.max(1)
    };
    for _ in 0..3000 {
        let b = ALL[next(ALL.len())];
        let mut code = base_args(b.name).to_owned();
        for _ in 0..=next(4) {
            let key = b.keywords[next(b.keywords.len())];
            let value = ODD_VALUES[next(ODD_VALUES.len())];
            code = call(b.name, &code, key, value);
            code = code[b.name.len() + 5..code.len() - 1].to_owned();
        }
        let _ = eval(&format!("obj.{}({code})", b.name));
    }
}

/// The base call for trying `key`: [`base_args`] without the arguments `key` excludes,
/// plus the ones it needs (see [`companions`]).
pub(super) fn base_with(builder: &str, key: &str) -> String {
    let base = match (builder, key) {
        ("role_binding" | "cluster_role_binding", "role_ref") => r#"name = "b""#,
        ("cron_job", "job_template") => r#"name = "a", schedule = "* * * * *""#,
        ("env_from", "secret_ref") => "",
        _ => base_args(builder),
    };
    [base, companions(builder, key)]
        .iter()
        .filter(|s| !s.is_empty())
        .copied()
        .collect::<Vec<_>>()
        .join(", ")
}

/// Values to try for a keyword: one of them fits each keyword some builder accepts.
pub(super) const CANDIDATES: &[&str] = &[
    "\"x\"",
    "3",
    "True",
    "{\"a\": \"b\"}",
    "[\"x\"]",
    "[{\"name\": \"n\"}]",
    "\"Cluster\"",
    "\"ClusterRole\"",
    "\"eA==\"",
    "{\"f\": \"string\"}",
    "{\"k\": \"eA==\"}",
    "[3]",
    "\"All\"",
    "\"Ignore\"",
    "\"AlwaysAllow\"",
    "\"User\"",
    "{\"metadata\": {\"labels\": {\"t\": \"x\"}}, \"spec\": {}}",
];

/// Arguments some keywords need alongside them to be accepted.
fn companions(builder: &str, key: &str) -> &'static str {
    match (builder, key) {
        ("volume", "items" | "default_mode" | "optional") => r#"config_map = "cm""#,
        ("volume", "read_only") => r#"persistent_volume_claim = "p""#,
        ("volume", "host_path_type") => r#"host_path = "/h""#,
        ("env_var", "secret_name") => r#"secret_key = "k""#,
        ("env_var", "secret_key" | "optional") => r#"secret_name = "s", secret_key = "k""#,
        ("env_var", "config_map_name") => r#"config_map_key = "k""#,
        ("env_var", "config_map_key") => r#"config_map_name = "c""#,
        ("ingress", "service") => "service_port = 80",
        ("ingress", "host" | "path" | "path_type" | "service_port") => {
            r#"service = "s", service_port = 80"#
        }
        _ => "",
    }
}

#[test]
fn every_keyword_reaches_the_manifest() {
    for b in ALL {
        for key in b.keywords {
            let base = base_with(b.name, key);
            let before = eval(&format!("obj.{}({base})", b.name)).ok();
            let reached = CANDIDATES.iter().any(|value| {
                let after = eval(&call(b.name, &base, key, value)).ok();
                after.is_some() && after != before
            });
            assert!(
                reached,
                "k8s.obj.{}: keyword {key:?} never changes the result",
                b.name
            );
        }
    }
}
