//! The Deployment that runs the script with `kite run` under the controller's ServiceAccount.

use serde_json::{Value as Json, json};

use super::{Error, Options, Result, labels, metadata};
use crate::rbac::ControlFacts;

/// Where the image built from [`super::dockerfile`] keeps the script and its loads.
pub(super) const SCRIPT_DIR: &str = "/controller";

/// The base image's user (distroless `nonroot`).
const USER_ID: u32 = 65532;

pub(super) fn deployment(control: &ControlFacts, opts: &Options) -> Result<Json> {
    let script = opts
        .script
        .file_name()
        .and_then(|s| s.to_str())
        .ok_or_else(|| Error::Validate {
            what: "the script path",
            value: opts.script.display().to_string(),
            reason: "has no file name".into(),
        })?;
    let mut args = vec![
        "run".to_owned(),
        format!("{SCRIPT_DIR}/{script}"),
        "--allow-k8s".to_owned(),
    ];
    for (k, v) in &opts.vars {
        args.push("--var".to_owned());
        args.push(format!("{k}={v}"));
    }

    let mut container = json!({
        "name": "controller",
        "image": opts.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["/usr/local/bin/kite"],
        "args": [],
        // POD_NAME is kite's leader-election identity, so `kubectl get lease` names the
        // leading pod; POD_NAMESPACE is where its lease lives when the script names none.
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        ],
        "resources": {
            "requests": {"cpu": "50m", "memory": "64Mi"},
            "limits": {"cpu": "500m", "memory": "256Mi"},
        },
        "securityContext": {
            "allowPrivilegeEscalation": false,
            "readOnlyRootFilesystem": true,
            "runAsNonRoot": true,
            "capabilities": {"drop": ["ALL"]},
        },
    });
    if let Some(port) = control.health_port {
        // kite's health server binds 127.0.0.1 unless told otherwise; the kubelet probes
        // the pod IP.
        args.extend(["--health-bind".to_owned(), "0.0.0.0".to_owned()]);
        container["ports"] = json!([{"name": "health", "containerPort": port, "protocol": "TCP"}]);
        container["livenessProbe"] = probe("/healthz", 15, 20, 3);
        // /readyz is 503 on a standby, and a Deployment counts an unready pod as
        // unavailable: a rollout of leader-elected replicas would wait forever for the
        // standby. Its pods are ready when they serve; /readyz still tells the leader.
        let ready = if control.leader_election {
            "/healthz"
        } else {
            "/readyz"
        };
        container["readinessProbe"] = probe(ready, 5, 10, 3);
    }
    container["args"] = json!(args);

    // Without leader election two pods reconcile side by side, which a rolling update
    // would cause on every rollout; replacing the pod avoids that. With it, one new pod
    // at a time: it stands by until the old leader, stopped next, hands over the lease.
    let strategy = if control.leader_election {
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}})
    } else {
        json!({"type": "Recreate"})
    };

    Ok(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(&opts.name, &opts.namespace, &opts.name),
        "spec": {
            "replicas": opts.replicas,
            "selector": {"matchLabels": {"app.kubernetes.io/name": opts.name}},
            "strategy": strategy,
            "template": {
                "metadata": {"labels": labels(&opts.name)},
                "spec": {
                    "serviceAccountName": opts.name,
                    // kite's default --grace-period is 30s: room for in-flight handlers
                    // to finish before the kubelet sends SIGKILL.
                    "terminationGracePeriodSeconds": 40,
                    "securityContext": {
                        "runAsNonRoot": true,
                        "runAsUser": USER_ID,
                        "runAsGroup": USER_ID,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [container],
                },
            },
        },
    }))
}

fn probe(path: &str, initial_delay: u32, period: u32, failures: u32) -> Json {
    json!({
        "httpGet": {"path": path, "port": "health"},
        "initialDelaySeconds": initial_delay,
        "periodSeconds": period,
        "timeoutSeconds": 2,
        "failureThreshold": failures,
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::{control, opts};
    use super::*;

    fn container(d: &Json) -> &Json {
        &d["spec"]["template"]["spec"]["containers"][0]
    }

    #[test]
    fn args_carry_the_script_vars_and_health_bind() {
        let mut o = opts();
        o.vars = vec![("ns".into(), "team".into()), ("max".into(), "a=b".into())];
        let d = deployment(&control(Some(8081), true), &o).unwrap();
        let c = container(&d);
        assert_eq!(c["command"], json!(["/usr/local/bin/kite"]));
        assert_eq!(
            c["args"],
            json!([
                "run",
                "/controller/ctrl.star",
                "--allow-k8s",
                "--var",
                "ns=team",
                "--var",
                "max=a=b",
                "--health-bind",
                "0.0.0.0"
            ])
        );
        assert_eq!(c["image"], "example.com/ctrl:1");
        assert_eq!(c["imagePullPolicy"], "IfNotPresent");
        assert_eq!(c["env"][0]["name"], "POD_NAME");
        assert_eq!(
            c["env"][1]["valueFrom"]["fieldRef"]["fieldPath"],
            "metadata.namespace"
        );
        assert_eq!(d["spec"]["strategy"]["type"], "RollingUpdate");
        let no_health = deployment(&control(None, false), &opts()).unwrap();
        assert_eq!(
            container(&no_health)["args"],
            json!(["run", "/controller/ctrl.star", "--allow-k8s"])
        );
        assert_eq!(no_health["spec"]["strategy"]["type"], "Recreate");
    }

    #[test]
    fn probes_only_with_a_health_port() {
        let d = deployment(&control(Some(8081), false), &opts()).unwrap();
        let c = container(&d);
        assert_eq!(
            c["ports"],
            json!([{"name": "health", "containerPort": 8081, "protocol": "TCP"}])
        );
        assert_eq!(
            c["livenessProbe"]["httpGet"],
            json!({"path": "/healthz", "port": "health"})
        );
        assert_eq!(
            c["readinessProbe"]["httpGet"],
            json!({"path": "/readyz", "port": "health"})
        );
        // Leader-elected: a standby is ready (serving), or no rollout could finish.
        let d = deployment(&control(Some(8081), true), &opts()).unwrap();
        assert_eq!(
            container(&d)["readinessProbe"]["httpGet"],
            json!({"path": "/healthz", "port": "health"})
        );
        assert_eq!(
            d["spec"]["strategy"]["rollingUpdate"],
            json!({"maxSurge": 1, "maxUnavailable": 0})
        );
        let d = deployment(&control(None, false), &opts()).unwrap();
        let c = container(&d).as_object().unwrap();
        for key in ["ports", "livenessProbe", "readinessProbe"] {
            assert!(!c.contains_key(key), "{key}");
        }
    }

    #[test]
    fn pod_and_container_are_locked_down() {
        let mut o = opts();
        o.replicas = 2;
        let d = deployment(&control(None, true), &o).unwrap();
        let spec = &d["spec"]["template"]["spec"];
        assert_eq!(d["spec"]["replicas"], 2);
        assert_eq!(
            d["spec"]["selector"]["matchLabels"],
            json!({"app.kubernetes.io/name": "ctrl"})
        );
        assert_eq!(
            d["spec"]["template"]["metadata"]["labels"]["app.kubernetes.io/name"],
            "ctrl"
        );
        assert_eq!(spec["serviceAccountName"], "ctrl");
        assert_eq!(spec["terminationGracePeriodSeconds"], 40);
        assert_eq!(
            spec["securityContext"],
            json!({"runAsNonRoot": true, "runAsUser": 65532, "runAsGroup": 65532,
                   "seccompProfile": {"type": "RuntimeDefault"}})
        );
        let c = &spec["containers"][0];
        assert_eq!(c["name"], "controller");
        assert_eq!(
            c["securityContext"],
            json!({"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
                   "runAsNonRoot": true, "capabilities": {"drop": ["ALL"]}})
        );
        assert_eq!(
            c["resources"]["requests"],
            json!({"cpu": "50m", "memory": "64Mi"})
        );
        assert_eq!(
            c["resources"]["limits"],
            json!({"cpu": "500m", "memory": "256Mi"})
        );
    }

    #[test]
    fn a_script_path_without_a_file_name_is_an_error() {
        let mut o = opts();
        o.script = "..".into();
        let err = deployment(&control(None, false), &o)
            .unwrap_err()
            .to_string();
        assert!(err.starts_with("the script path \"..\""), "{err}");
    }
}
