//! The `StarlarkController` custom resource (starkite.io/v1alpha1): a script and its
//! `control()` options, with the status the operator reports.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMapKeySelector;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, CustomResourceExt, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Go-style durations as kite parses them ("30s", "1m30s", "500ms").
const DURATION: &str = r"^([0-9]+(\.[0-9]+)?(ns|us|ms|s|m|h))+$";

/// Defines a controller resource's spec (and so, through kube's derive, the resource):
/// the namespaced and the cluster-scoped kinds share every field, status and column.
macro_rules! controller_resource {
    ($(#[$meta:meta])* $spec:ident, #[kube($($kind:tt)*)]) => {
        $(#[$meta])*
        #[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
        #[kube(
            group = "starkite.io",
            version = "v1alpha1",
            $($kind)*,
            status = "StarlarkControllerStatus",
            category = "starkite",
            derive = "Default",
            derive = "PartialEq",
            printcolumn = r#"{"name": "Kind", "type": "string", "jsonPath": ".status.watching"}"#,
            printcolumn = r#"{"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"}"#,
            printcolumn = r#"{"name": "Reason", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].reason"}"#,
            printcolumn = r#"{"name": "Reconciles", "type": "integer", "jsonPath": ".status.reconciles"}"#,
            printcolumn = r#"{"name": "Errors", "type": "integer", "jsonPath": ".status.errors"}"#,
            printcolumn = r#"{"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"}"#,
            printcolumn = r#"{"name": "Replica", "type": "string", "priority": 1, "jsonPath": ".status.replica"}"#
        )]
        #[x_kube(validation = Rule::new("has(self.script) != has(self.scriptFrom)").message("exactly one of script and scriptFrom must be set"))]
        #[serde(rename_all = "camelCase")]
        pub struct $spec {
    /// The Starlark source, inline.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script: Option<String>,
    /// The Starlark source, from a ConfigMap key; a change to it reloads the controller.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub script_from: Option<ScriptSource>,
    /// Script variables, as `kite run --var NAME=VALUE`.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub vars: BTreeMap<String, String>,
    /// Overrides of the script's own `k8s.control()` options.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control: Option<ControlOverrides>,
    /// Run as this existing ServiceAccount instead of a generated one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    /// Stop the controller without deleting it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub suspend: bool,
}
    };
}

controller_resource!(
    /// A Starlark controller run by `kite operator` under its own ServiceAccount,
    /// confined to its namespace.
    StarlarkControllerSpec,
    #[kube(
        kind = "StarlarkController",
        namespaced,
        shortname = "slc",
        doc = "A Starlark controller script that kite operator runs in-process under its own ServiceAccount, confined to its namespace"
    )]
);

controller_resource!(
    /// A Starlark controller that may reach several namespaces or cluster-scoped kinds;
    /// its ServiceAccount lives in the operator's namespace. For cluster administrators.
    ClusterStarlarkControllerSpec,
    #[kube(
        kind = "ClusterStarlarkController",
        shortname = "cslc",
        doc = "A Starlark controller script that kite operator runs in-process under its own ServiceAccount, across namespaces"
    )]
);

impl From<ClusterStarlarkControllerSpec> for StarlarkControllerSpec {
    fn from(c: ClusterStarlarkControllerSpec) -> Self {
        StarlarkControllerSpec {
            script: c.script,
            script_from: c.script_from,
            vars: c.vars,
            control: c.control,
            service_account_name: c.service_account_name,
            suspend: c.suspend,
        }
    }
}

/// Where the script comes from when it is not inline.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ScriptSource {
    /// A key of a ConfigMap in the controller's namespace.
    pub config_map_key_ref: ConfigMapKeySelector,
}

/// `k8s.control()` options a StarlarkController may override.
// Each field is named as its option is; which options have one is decided in
// `hosted::hosting`, and a test there keeps the two in step. (A plain comment: a doc
// comment here would be the schema's description, and change the CRD.)
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ControlOverrides {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// A label selector, e.g. `app=web,tier!=cache`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub labels: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field_selector: Option<String>,
    /// Requeue every object this often, e.g. `30s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DURATION))]
    pub poll: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DURATION))]
    pub resync: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 64))]
    pub workers: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation_changed: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 1_000_000))]
    pub max_retries: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = DURATION))]
    pub backoff: Option<String>,
}

/// The controller's life cycle, as `kubectl get` shows it.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, JsonSchema)]
pub enum Phase {
    #[default]
    Pending,
    Running,
    Failed,
    Suspended,
}

/// What the operator reports about one controller.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StarlarkControllerStatus {
    /// Ready, ScriptValid and RBACReady.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<Phase>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// The kind the controller watches.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub watching: Option<String>,
    #[serde(default)]
    pub reconciles: u64,
    #[serde(default)]
    pub errors: u64,
    /// The last error, with file:line:col when it comes from the script.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_reconcile_time: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    /// The operator replica running it (`kite operator --shards auto`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replica: Option<String>,
    /// The command that shows its print() lines and reconciles (`kite logs`), when
    /// the operator serves the logs API.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub logs: Option<String>,
    /// The last few reconciles, oldest first (`kubectl describe` shows them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub recent_reconciles: Vec<RecentReconcile>,
}

/// One recent reconcile of a hosted controller.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RecentReconcile {
    pub time: Time,
    /// `namespace/name` of the object reconciled.
    pub object: String,
    /// What started it: add, update, event, resync, related...
    pub trigger: String,
    pub duration_ms: u64,
    /// success, requeue or error.
    pub result: String,
    /// The first line of its error, with the script's file:line:col.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Both CustomResourceDefinitions, as YAML (`kite crd`, `crds/starlarkcontroller.yaml`).
///
/// # Errors
/// Only when serialization fails (not expected).
pub fn crd_yaml() -> anyhow::Result<String> {
    let namespaced = serde_json::to_value(StarlarkController::crd())?;
    let cluster = serde_json::to_value(ClusterStarlarkController::crd())?;
    crate::script::yaml::to_yaml(&[namespaced, cluster])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_committed_crds_are_current() {
        // kustomize cannot reach outside config/, so config/crd keeps its own copy.
        let generated = crd_yaml().unwrap();
        for (path, committed) in [
            (
                "crds/starlarkcontroller.yaml",
                include_str!("../../crds/starlarkcontroller.yaml"),
            ),
            (
                "config/crd/bases/starlarkcontroller.yaml",
                include_str!("../../config/crd/bases/starlarkcontroller.yaml"),
            ),
        ] {
            assert!(
                committed == generated,
                "{path} is stale: run `cargo run -- crd > {path}`"
            );
        }
    }

    #[test]
    fn names_columns_and_validation() {
        let crd = serde_json::to_value(StarlarkController::crd()).unwrap();
        assert_eq!(crd["metadata"]["name"], "starlarkcontrollers.starkite.io");
        assert_eq!(
            crd["spec"]["names"]["shortNames"],
            serde_json::json!(["slc"])
        );
        assert_eq!(
            crd["spec"]["names"]["categories"],
            serde_json::json!(["starkite"])
        );
        let v = &crd["spec"]["versions"][0];
        let columns: Vec<&str> = v["additionalPrinterColumns"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(
            columns,
            [
                "Kind",
                "Ready",
                "Reason",
                "Reconciles",
                "Errors",
                "Age",
                "Replica"
            ]
        );
        assert_eq!(
            v["additionalPrinterColumns"][6]["priority"], 1,
            "the replica shows with -o wide"
        );
        let spec = &v["schema"]["openAPIV3Schema"]["properties"]["spec"];
        assert_eq!(
            spec["x-kubernetes-validations"][0]["rule"],
            "has(self.script) != has(self.scriptFrom)"
        );
        let poll = &spec["properties"]["control"]["properties"]["poll"];
        assert_eq!(poll["pattern"], DURATION);
        assert!(v["subresources"]["status"].is_object());

        let cluster = serde_json::to_value(ClusterStarlarkController::crd()).unwrap();
        assert_eq!(
            cluster["metadata"]["name"],
            "clusterstarlarkcontrollers.starkite.io"
        );
        assert_eq!(cluster["spec"]["scope"], "Cluster");
        assert_eq!(crd["spec"]["scope"], "Namespaced");
        assert_eq!(
            cluster["spec"]["names"]["shortNames"],
            serde_json::json!(["cslc"])
        );
        let cv = &cluster["spec"]["versions"][0];
        assert_eq!(
            cv["additionalPrinterColumns"],
            v["additionalPrinterColumns"]
        );
        let schema = |v: &serde_json::Value, part: &str, key: &str| {
            v["schema"]["openAPIV3Schema"]["properties"][part][key].clone()
        };
        for (part, key) in [
            ("spec", "properties"),
            ("spec", "x-kubernetes-validations"),
            ("status", "properties"),
        ] {
            assert_eq!(schema(cv, part, key), schema(v, part, key), "{part}.{key}");
        }
    }

    #[test]
    fn the_duration_pattern_accepts_what_kite_parses() {
        let pattern = regex::Regex::new(DURATION).unwrap();
        for text in [
            "30s", "1m30s", "500ms", "2h", "1.5s", "1h2m3s", "30", "s", "-1s", "1d", "", "5 s",
        ] {
            assert_eq!(
                pattern.is_match(text),
                crate::duration::parse(text).is_ok(),
                "{text:?}"
            );
        }
    }
}
