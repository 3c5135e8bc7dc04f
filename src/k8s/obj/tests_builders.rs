//! Output shapes of the storage, DRA, Gateway API, admission, policy, container-part
//! and RBAC-reference builders, and their errors on wrong input.

use serde_json::json;

use super::ALL;
use super::tests::{err, eval, ok};

#[test]
fn storage_example_from_upstream() {
    let v = ok(r#"
sc = obj.storage_class(name = "fast-ssd", provisioner = "kubernetes.io/no-provisioner",
    volume_binding_mode = "WaitForFirstConsumer", allow_volume_expansion = True)
pvc = obj.persistent_volume_claim(name = "app-storage", storage = "50Gi",
    storage_class_name = "fast-ssd", access_modes = ["ReadWriteOnce"])
vols = [obj.volume(name = "data", pvc = pvc), obj.volume(name = "scratch", empty_dir = True),
    obj.volume(name = "config", config_map = "app-cm")]
[sc, pvc, vols]
"#);
    assert_eq!(
        v[0],
        json!({
            "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": { "name": "fast-ssd" },
            "provisioner": "kubernetes.io/no-provisioner",
            "volumeBindingMode": "WaitForFirstConsumer", "allowVolumeExpansion": true,
        })
    );
    assert_eq!(
        v[1]["spec"],
        json!({
            "accessModes": ["ReadWriteOnce"],
            "resources": { "requests": { "storage": "50Gi" } },
            "storageClassName": "fast-ssd",
        })
    );
    assert_eq!(
        v[2],
        json!([
            { "name": "data", "persistentVolumeClaim": { "claimName": "app-storage" } },
            { "name": "scratch", "emptyDir": {} },
            { "name": "config", "configMap": { "name": "app-cm" } },
        ])
    );
}

#[test]
fn persistent_volume_shape() {
    let v = ok(
        r#"obj.persistent_volume("pv1", storage = "10Gi", host_path = {"path": "/d"}, reclaim_policy = "Retain")"#,
    );
    assert_eq!(v["metadata"], json!({ "name": "pv1" }));
    assert_eq!(
        v["spec"],
        json!({
            "capacity": { "storage": "10Gi" }, "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain", "hostPath": { "path": "/d" },
        })
    );
    let e = err(r#"obj.persistent_volume("pv1", storage = "1Gi", nfs = {}, csi = {})"#);
    assert!(e.contains("only one volume source"), "{e}");
}

#[test]
fn dra_example_from_upstream() {
    let v = ok(r#"
dc = obj.device_class(name = "gpu.nvidia.com",
    selectors = [{"cel": {"expression": "device.capacity.memory >= 40Gi"}}])
claim = obj.resource_claim(name = "ml-gpu-claim", device_class = "gpu.nvidia.com", count = 1,
    device_tolerations = [{"key": "gpu.nvidia.com/mig", "operator": "Exists"}])
dep = obj.deployment(name = "llm", resource_claims = [{"name": "gpu", "claim_name": "ml-gpu-claim"}],
    containers = [obj.container(name = "engine", image = "vllm", claims = [{"name": "gpu"}])])
[dc, claim, dep]
"#);
    assert_eq!(v[0]["apiVersion"], "resource.k8s.io/v1");
    assert_eq!(
        v[0]["spec"]["selectors"][0]["cel"]["expression"],
        "device.capacity.memory >= 40Gi"
    );
    assert_eq!(
        v[1]["spec"],
        json!({ "devices": { "requests": [{ "name": "device", "exactly": {
            "deviceClassName": "gpu.nvidia.com", "count": 1,
            "tolerations": [{ "key": "gpu.nvidia.com/mig", "operator": "Exists" }],
        } }] } })
    );
    let pod = &v[2]["spec"]["template"]["spec"];
    assert_eq!(
        pod["resourceClaims"],
        json!([{ "name": "gpu", "resourceClaimName": "ml-gpu-claim" }])
    );
    assert_eq!(
        pod["containers"][0]["resources"],
        json!({ "claims": [{ "name": "gpu" }] })
    );
}

#[test]
fn claim_template_and_slice_shapes() {
    let v = ok(r#"
c = obj.resource_claim("c", device_class = "gpu", allocation_mode = "All")
[obj.resource_claim_template("t", spec = c, claim_metadata = {"labels": {"a": "b"}}),
 obj.resource_slice("s", driver = "d.io", node_name = "n1", devices = [{"name": "g0"}])]
"#);
    assert_eq!(
        v[0]["spec"]["spec"]["devices"]["requests"][0]["exactly"],
        json!({ "deviceClassName": "gpu", "allocationMode": "All" })
    );
    assert_eq!(v[0]["spec"]["metadata"], json!({ "labels": { "a": "b" } }));
    assert_eq!(
        v[1]["spec"],
        json!({
            "driver": "d.io", "nodeName": "n1", "devices": [{ "name": "g0" }],
            "pool": { "name": "n1", "generation": 1, "resourceSliceCount": 1 },
        })
    );
    let e =
        err(r#"obj.resource_claim("c", device_class = "g", allocation_mode = "All", count = 2)"#);
    assert!(e.contains("\"count\""), "{e}");
    assert!(err(r#"obj.resource_claim("c")"#).contains("device_class or devices"));
}

#[test]
fn gateway_example_from_upstream() {
    let v = ok(r#"
gc = obj.gateway_class(name = "envoy", controller_name = "gateway.envoyproxy.io/c")
gw = obj.gateway(name = "edge-gw", gateway_class = gc, listeners = [{"name": "http", "port": 80,
    "protocol": "HTTP", "allowed_routes": {"namespaces": {"from": "Same"}}}])
route = obj.http_route(name = "app-route", parent_refs = [gw], hostnames = ["app.example.com"],
    rules = [{"matches": [{"path": {"type": "PathPrefix", "value": "/api"}}],
              "backend_refs": [{"name": "app-svc", "port": 8080}]}])
[gc, gw, route]
"#);
    assert_eq!(
        v[0]["spec"],
        json!({ "controllerName": "gateway.envoyproxy.io/c" })
    );
    assert_eq!(v[1]["spec"]["gatewayClassName"], "envoy");
    assert_eq!(
        v[1]["spec"]["listeners"][0]["allowedRoutes"],
        json!({ "namespaces": { "from": "Same" } })
    );
    assert_eq!(v[2]["kind"], "HTTPRoute");
    assert_eq!(v[2]["spec"]["parentRefs"], json!([{ "name": "edge-gw" }]));
    assert_eq!(
        v[2]["spec"]["rules"][0]["backendRefs"],
        json!([{ "name": "app-svc", "port": 8080 }])
    );
}

#[test]
fn admission_example_from_upstream() {
    let v = ok(r#"
vap = obj.vap(name = "require-non-root",
    match_constraints = {"resource_rules": [{"api_groups": [""], "api_versions": ["v1"],
        "resources": ["pods"], "operations": ["CREATE", "UPDATE"]}]},
    validations = [{"expression": "object.spec.x == true", "message": "m"}])
b = obj.validating_admission_policy_binding(name = "b", policy_name = vap)
m = obj.map("m", mutations = [{"patch_type": "ApplyConfiguration"}])
[vap, b, m, obj.mutating_admission_policy_binding("mb", policy_name = m)]
"#);
    assert_eq!(v[0]["apiVersion"], "admissionregistration.k8s.io/v1");
    assert_eq!(v[0]["kind"], "ValidatingAdmissionPolicy");
    assert_eq!(
        v[0]["spec"]["matchConstraints"]["resourceRules"][0]["apiVersions"],
        json!(["v1"])
    );
    assert_eq!(
        v[1]["spec"],
        json!({ "policyName": "require-non-root", "validationActions": ["Deny"] })
    );
    assert_eq!(v[2]["apiVersion"], "admissionregistration.k8s.io/v1alpha1");
    assert_eq!(
        v[2]["spec"]["mutations"],
        json!([{ "patchType": "ApplyConfiguration" }])
    );
    assert_eq!(v[3]["spec"], json!({ "policyName": "m" }));
}

#[test]
fn pdb_shape() {
    let v = ok(
        r#"[obj.pdb("api-pdb", min_available = 2, selector = {"app": "api"}),
        obj.pod_disruption_budget("p", max_unavailable = "25%")]"#,
    );
    assert_eq!(
        v[0],
        json!({
            "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
            "metadata": { "name": "api-pdb" },
            "spec": { "minAvailable": 2, "selector": { "matchLabels": { "app": "api" } } },
        })
    );
    assert_eq!(v[1]["spec"]["maxUnavailable"], "25%");
    assert_eq!(v[1]["spec"]["selector"]["matchLabels"]["app"], "p");
    assert!(err(r#"obj.pdb("p", min_available = 1, max_unavailable = 1)"#).contains("not both"));
}

#[test]
fn hardened_pod_example_from_upstream() {
    let v = ok(r#"
obj.pod(name = "w", host_users = False,
    security_context = obj.security_context(run_as_non_root = True,
        apparmor_profile = {"type": "RuntimeDefault"}, seccomp_profile = {"type": "RuntimeDefault"}),
    containers = [obj.container(name = "w", image = "alpine", resize_policy = [
        {"resource_name": "cpu", "restart_policy": "NotRequired"}],
        readiness_probe = obj.probe(http_get = {"path": "/healthz", "port": 80}, initial_delay_seconds = 5),
        env_from = [obj.env_from(secret_ref = "s", prefix = "S_")],
        resources = obj.resource_requirements(requests = {"cpu": "1"}, claims = ["gpu"]))])
"#);
    let spec = &v["spec"];
    assert_eq!(spec["hostUsers"], false);
    assert_eq!(
        spec["securityContext"],
        json!({
            "runAsNonRoot": true, "seccompProfile": { "type": "RuntimeDefault" },
            "appArmorProfile": { "type": "RuntimeDefault" },
        })
    );
    let c = &spec["containers"][0];
    assert_eq!(
        c["resizePolicy"],
        json!([{ "resourceName": "cpu", "restartPolicy": "NotRequired" }])
    );
    assert_eq!(
        c["readinessProbe"],
        json!({ "httpGet": { "path": "/healthz", "port": 80 }, "initialDelaySeconds": 5 })
    );
    assert_eq!(
        c["envFrom"],
        json!([{ "secretRef": { "name": "s" }, "prefix": "S_" }])
    );
    assert_eq!(
        c["resources"],
        json!({ "requests": { "cpu": "1" }, "claims": [{ "name": "gpu" }] })
    );
}

#[test]
fn deployment_template_and_cron_job_template() {
    let v = ok(r#"
t = obj.pod("p", labels = {"tier": "x"}, containers = [obj.container("c", image = "i")])
j = obj.job("j", containers = [obj.container("c", image = "i")])
[obj.deployment("d", template = t), obj.cron_job("cj", schedule = "@daily", job_template = j)]
"#);
    let tpl = &v[0]["spec"]["template"];
    assert_eq!(
        tpl["metadata"]["labels"],
        json!({ "tier": "x", "app": "d" })
    );
    assert_eq!(tpl["spec"]["containers"][0]["name"], "c");
    assert_eq!(
        v[0]["spec"]["selector"]["matchLabels"],
        json!({ "app": "d" })
    );
    let jt = &v[1]["spec"]["jobTemplate"];
    assert_eq!(jt["metadata"]["labels"], json!({ "app": "j" }));
    assert_eq!(jt["spec"]["template"]["spec"]["restartPolicy"], "Never");
    assert!(err(r#"obj.deployment("d")"#).contains("\"containers\""));
}

#[test]
fn cron_job_history_limits_under_upstream_names() {
    let c = r#"containers = [obj.container("c", image = "i")]"#;
    let v = ok(&format!(
        r#"obj.cron_job("cj", schedule = "@daily", history_limit = 3, failed_history = 1, {c})"#
    ));
    assert_eq!(v["spec"]["successfulJobsHistoryLimit"], 3);
    assert_eq!(v["spec"]["failedJobsHistoryLimit"], 1);
    let both = err(&format!(
        r#"obj.cron_job("cj", schedule = "@daily", history_limit = 3, successful_jobs_history_limit = 2, {c})"#
    ));
    assert!(both.contains("not both"), "{both}");
}

#[test]
fn bindings_take_role_ref_and_subjects() {
    let v = ok(r#"
cr = obj.cluster_role("reader", rules = [obj.policy_rule(resources = ["pods"], verbs = ["get"])])
sa = obj.service_account("bot", namespace = "ops")
[obj.cluster_role_binding("b", role_ref = cr, subjects = [sa, obj.subject("alice", kind = "User")]),
 obj.role_binding("rb", namespace = "ops", role_ref = {"kind": "ClusterRole", "name": "view"},
     subjects = [obj.subject("bot")]),
 obj.cluster_role_binding("c", role_ref = "admin")]
"#);
    assert_eq!(
        v[0]["roleRef"],
        json!({ "apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "reader" })
    );
    assert_eq!(
        v[0]["subjects"],
        json!([
            { "kind": "ServiceAccount", "name": "bot", "namespace": "ops" },
            { "kind": "User", "name": "alice", "apiGroup": "rbac.authorization.k8s.io" },
        ])
    );
    assert_eq!(
        v[1]["roleRef"],
        json!({ "kind": "ClusterRole", "name": "view", "apiGroup": "rbac.authorization.k8s.io" })
    );
    assert_eq!(
        v[1]["subjects"],
        json!([{ "kind": "ServiceAccount", "name": "bot", "namespace": "ops" }])
    );
    assert_eq!(v[2]["roleRef"]["name"], "admin");
    assert!(err(r#"obj.role_binding("b", role = "r", role_ref = "r")"#).contains("not both"));
    assert!(err(r#"obj.cluster_role_binding("b")"#).contains("role_ref"));
    assert!(err(r#"obj.subject("x", kind = "Robot")"#).contains("\"kind\""));
}

#[test]
fn wrong_types_name_the_builder_and_argument() {
    let cases = [
        (
            r#"obj.gateway("g", gateway_class = 3, listeners = [{}])"#,
            "gateway",
            "gateway_class",
        ),
        (
            r#"obj.persistent_volume_claim("p", storage = 5)"#,
            "persistent_volume_claim",
            "storage",
        ),
        ("obj.probe(exec = 3)", "probe", "exec"),
        (
            r#"obj.security_context(run_as_user = "root")"#,
            "security_context",
            "run_as_user",
        ),
        (r#"obj.vap("v", validations = "x")"#, "vap", "validations"),
        (r#"obj.volume("v", pvc = 1)"#, "volume", "pvc"),
        (
            r#"obj.pod("p", containers = [{}], resource_claims = [1])"#,
            "pod",
            "resource_claims[0]",
        ),
        (
            r#"obj.http_route("r", parent_refs = [1])"#,
            "http_route",
            "parent_refs[0]",
        ),
        (
            r#"obj.storage_class("s", provisioner = "p", parameters = {"a": 1})"#,
            "storage_class",
            "parameters",
        ),
    ];
    for (code, builder, arg) in cases {
        let e = err(code);
        assert!(
            e.contains(&format!("k8s.obj.{builder}: argument \"{arg}")),
            "{code}: {e}"
        );
    }
}

#[test]
fn new_builders_survive_odd_nested_values() {
    // Deep and odd nesting in the fields that are converted recursively.
    let odd = [
        "{\"a_b\": [{\"c_d\": {\"e_f\": [1, None, \"x\"]}}]}",
        "[[[]]]",
        "{\"_\": 1, \"__\": {\"___\": 2}, \"a__b\": 3, \"a_\": 4}",
        "[{\"labels\": {\"a_b\": \"c\"}}]",
    ];
    for b in ALL {
        for key in b.keywords {
            for value in odd {
                let _ = eval(&format!("obj.{}({key} = {value})", b.name));
            }
        }
    }
    let v = ok(
        r#"obj.gateway_class("g", controller_name = "c", parameters_ref = {"a__b": 1, "a_": 2, "_x": 3, "labels": {"k_k": "v"}})"#,
    );
    assert_eq!(
        v["spec"]["parametersRef"],
        json!({ "aB": 1, "a": 2, "_x": 3, "labels": { "k_k": "v" } })
    );
}

#[test]
fn ingress_rule_and_path_as_upstream_writes_them() {
    let v = ok(r#"
p = obj.ingress_path(path = "/api", backend = {"service": {"name": "api", "port": {"number": 8080}}})
r = obj.ingress_rule(host = "app.test", paths = {"paths": [p]})
[obj.ingress("web", rules = [r], tls = []), obj.ingress_rule(paths = [p])]
"#);
    let rule = &v[0]["spec"]["rules"][0];
    assert_eq!(rule["host"], "app.test");
    assert_eq!(
        rule["http"]["paths"][0],
        json!({
            "path": "/api", "pathType": "Prefix",
            "backend": { "service": { "name": "api", "port": { "number": 8080 } } },
        })
    );
    assert_eq!(v[1]["http"]["paths"][0]["path"], "/api");
    assert!(err(r#"obj.ingress_path(path = "/")"#).contains("\"backend\""));
}

#[test]
fn limit_range_and_resource_quota() {
    let v = ok(r#"
item = obj.limit_range_item(type = "Container", default = {"cpu": "500m"},
    default_request = {"memory": "128Mi"}, max_limit_request_ratio = {"cpu": 4})
[obj.limit_range("l", namespace = "n", limits = [item]),
 obj.resource_quota("q", hard = {"pods": "20", "requests.cpu": 4}, scopes = ["NotTerminating"])]
"#);
    assert_eq!(v[0]["kind"], "LimitRange");
    assert_eq!(
        v[0]["spec"]["limits"][0],
        json!({
            "type": "Container", "default": { "cpu": "500m" },
            "defaultRequest": { "memory": "128Mi" }, "maxLimitRequestRatio": { "cpu": "4" },
        })
    );
    assert_eq!(
        v[1]["spec"],
        json!({ "hard": { "pods": "20", "requests.cpu": "4" }, "scopes": ["NotTerminating"] })
    );
    let e = err(r#"obj.resource_quota("q", hard = {"pods": [1]})"#);
    assert!(
        e.contains("pods") && e.contains("must be a quantity"),
        "{e}"
    );
}

#[test]
fn volume_sources_given_as_their_own_fields() {
    let v = ok(r#"
[obj.volume(name = "c", config_map = {"name": "cm", "default_mode": 420}),
 obj.volume(name = "d", pvc = {"claimName": "data"}),
 obj.volume(name = "s", secret = {"secretName": "tls"}),
 obj.volume(name = "e", config_map = {"metadata": {"name": "from-object"}})]
"#);
    assert_eq!(
        v[0]["configMap"],
        json!({ "name": "cm", "defaultMode": 420 })
    );
    assert_eq!(
        v[1]["persistentVolumeClaim"],
        json!({ "claimName": "data" })
    );
    assert_eq!(v[2]["secret"], json!({ "secretName": "tls" }));
    assert_eq!(v[3]["configMap"], json!({ "name": "from-object" }));
}
