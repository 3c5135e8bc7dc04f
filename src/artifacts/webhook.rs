//! The manifests that deploy a `k8s.webhook()` script (`kite kube
//! gen-webhook-artifacts`): its Deployment and Service, the serving certificate (made
//! here, or by cert-manager), and the webhook configurations that call it.

use serde_json::{Value as Json, json};

use super::deployment::SCRIPT_DIR;
use super::{Error, Options, Result, is_builtin_namespace, labels, metadata, validate_label};
use crate::rbac::{Inference, WebhookFacts};

/// Where the Deployment mounts the serving certificate (upstream's examples read
/// `/certs/tls.crt` and `/certs/tls.key`).
pub const CERT_DIR: &str = "/certs";

/// What to deploy besides [`Options`].
#[derive(Clone, Debug, Default)]
pub struct WebhookOptions {
    /// Admission rules in upstream's syntax: `group=apps resource=deployments
    /// operations=CREATE,UPDATE` (group and version optional).
    pub rules: Vec<String>,
    /// Let cert-manager issue the certificate and inject the CA.
    pub cert_manager: bool,
}

/// One parsed `--rule`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    pub group: String,
    pub version: String,
    pub resource: String,
    pub operations: Vec<String>,
}

/// Parses `--rule "group=apps resource=deployments operations=CREATE,UPDATE"`.
///
/// # Errors
/// An unknown key, a missing resource, or an unknown operation.
pub fn parse_rule(text: &str) -> Result<Rule> {
    let bad = |reason: String| Error::Validate {
        what: "--rule",
        value: text.to_owned(),
        reason,
    };
    let mut rule = Rule {
        group: String::new(),
        version: "*".to_owned(),
        resource: String::new(),
        operations: vec!["CREATE".to_owned(), "UPDATE".to_owned()],
    };
    for pair in text.split_whitespace() {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| bad(format!("{pair:?} is not key=value")))?;
        match key {
            "group" => value.clone_into(&mut rule.group),
            "version" => value.clone_into(&mut rule.version),
            "resource" => value.clone_into(&mut rule.resource),
            "operations" => {
                rule.operations = value.split(',').map(str::to_owned).collect();
                for op in &rule.operations {
                    if !matches!(
                        op.as_str(),
                        "CREATE" | "UPDATE" | "DELETE" | "CONNECT" | "*"
                    ) {
                        return Err(bad(format!(
                            "unknown operation {op:?}; expected CREATE, UPDATE, DELETE, CONNECT or *"
                        )));
                    }
                }
            }
            _ => {
                return Err(bad(format!(
                    "unknown key {key:?}; expected group, version, resource, operations"
                )));
            }
        }
    }
    if rule.resource.is_empty() {
        return Err(bad("names no resource=".to_owned()));
    }
    Ok(rule)
}

/// The objects that serve the script's webhook, in the order to apply them.
///
/// # Errors
/// Invalid names, a script without `k8s.webhook()`, a bad `--rule`, no rule at all,
/// or a wildcard RBAC rule.
pub fn render(
    inference: &Inference,
    opts: &Options,
    web: &WebhookOptions,
) -> Result<super::Rendered> {
    validate_label("--name", &opts.name)?;
    validate_label("--namespace", &opts.namespace)?;
    let facts = inference.webhook.as_deref().ok_or(Error::FindWebhook)?;
    let rules = rules(web, facts)?;
    let mut warnings = Vec::new();
    if !facts.tls_files {
        warnings.push(format!(
            "the script names no tls_cert/tls_key: it must serve {CERT_DIR}/tls.crt and {CERT_DIR}/tls.key, which the Deployment mounts"
        ));
    }
    let service_hosts = vec![
        format!("{}.{}.svc", opts.name, opts.namespace),
        format!("{}.{}.svc.cluster.local", opts.name, opts.namespace),
    ];
    let secret_name = format!("{}-tls", opts.name);
    let mut objects = Vec::new();
    if !is_builtin_namespace(&opts.namespace) {
        objects.push(json!({
            "apiVersion": "v1",
            "kind": "Namespace",
            "metadata": {"name": opts.namespace, "labels": labels(&opts.name)},
        }));
    }
    objects.push(json!({
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": metadata(&opts.name, &opts.namespace, &opts.name),
    }));
    objects.extend(super::rbac::objects(
        &inference.rules.resolved(&opts.namespace),
        opts,
    )?);
    let ca_bundle = if web.cert_manager {
        objects.extend(cert_manager(opts, &secret_name, &service_hosts));
        None
    } else {
        let issued =
            crate::tls::issue(&opts.name, &service_hosts, 365).map_err(|e| Error::Validate {
                what: "the serving certificate",
                value: service_hosts.join(","),
                reason: e.to_string(),
            })?;
        objects.push(json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/tls",
            "metadata": metadata(&secret_name, &opts.namespace, &opts.name),
            "stringData": {"tls.crt": issued.cert, "tls.key": issued.key, "ca.crt": issued.ca},
        }));
        Some(base64(&issued.ca))
    };
    objects.push(deployment(inference, facts, opts, &secret_name)?);
    objects.push(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(&opts.name, &opts.namespace, &opts.name),
        "spec": {
            "selector": {"app.kubernetes.io/name": opts.name},
            "ports": [{"name": "webhook", "port": 443, "targetPort": "webhook", "protocol": "TCP"}],
        },
    }));
    let injected = web
        .cert_manager
        .then(|| format!("{}/{}", opts.namespace, opts.name));
    for (kind, wanted) in [
        ("ValidatingWebhookConfiguration", facts.validates),
        ("MutatingWebhookConfiguration", facts.mutates),
    ] {
        if wanted {
            objects.push(configuration(
                kind,
                facts,
                opts,
                &rules,
                ca_bundle.as_deref(),
                injected.as_deref(),
            ));
        }
    }
    Ok(super::Rendered { objects, warnings })
}

/// The `--rule`s, or else the script's own controller kind, created and updated.
fn rules(web: &WebhookOptions, facts: &WebhookFacts) -> Result<Vec<Rule>> {
    let mut rules = web
        .rules
        .iter()
        .map(|r| parse_rule(r))
        .collect::<Result<Vec<_>>>()?;
    if rules.is_empty()
        && let Some((group, resource)) = &facts.watched
    {
        rules.push(Rule {
            group: group.clone(),
            version: "*".to_owned(),
            resource: resource.clone(),
            operations: vec!["CREATE".to_owned(), "UPDATE".to_owned()],
        });
    }
    if rules.is_empty() {
        return Err(Error::Validate {
            what: "--rule",
            value: String::new(),
            reason: "give at least one, e.g. --rule \"group=apps resource=deployments operations=CREATE,UPDATE\" (the script's own controller kind is used when it has one)".into(),
        });
    }
    Ok(rules)
}

fn base64(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// A self-signed Issuer and the serving Certificate it signs into `secret`.
fn cert_manager(opts: &Options, secret: &str, hosts: &[String]) -> Vec<Json> {
    let issuer = format!("{}-selfsigned", opts.name);
    vec![
        json!({
            "apiVersion": "cert-manager.io/v1",
            "kind": "Issuer",
            "metadata": metadata(&issuer, &opts.namespace, &opts.name),
            "spec": {"selfSigned": {}},
        }),
        json!({
            "apiVersion": "cert-manager.io/v1",
            "kind": "Certificate",
            "metadata": metadata(&opts.name, &opts.namespace, &opts.name),
            "spec": {
                "secretName": secret,
                "dnsNames": hosts,
                "issuerRef": {"kind": "Issuer", "name": issuer},
            },
        }),
    ]
}

fn deployment(
    inference: &Inference,
    facts: &WebhookFacts,
    opts: &Options,
    secret: &str,
) -> Result<Json> {
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
        "--allow-net".to_owned(),
        // The API server reaches the webhook through the Service, not loopback.
        "--health-bind".to_owned(),
        "0.0.0.0".to_owned(),
    ];
    if inference.control.is_some() || !inference.rules.is_empty() {
        args.push("--allow-k8s".to_owned());
    }
    for (k, v) in &opts.vars {
        args.push("--var".to_owned());
        args.push(format!("{k}={v}"));
    }
    let probe = |delay: u32| {
        json!({
            "httpGet": {"path": "/healthz", "port": "webhook", "scheme": "HTTPS"},
            "initialDelaySeconds": delay,
            "periodSeconds": 10,
            "timeoutSeconds": 2,
            "failureThreshold": 3,
        })
    };
    let container = json!({
        "name": "webhook",
        "image": opts.image,
        "imagePullPolicy": "IfNotPresent",
        "command": ["/usr/local/bin/kite"],
        "args": args,
        "env": [
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "POD_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        ],
        "ports": [{"name": "webhook", "containerPort": facts.port, "protocol": "TCP"}],
        "readinessProbe": probe(2),
        "livenessProbe": probe(15),
        "volumeMounts": [{"name": "certs", "mountPath": CERT_DIR, "readOnly": true}],
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
    Ok(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata(&opts.name, &opts.namespace, &opts.name),
        "spec": {
            "replicas": opts.replicas,
            "selector": {"matchLabels": {"app.kubernetes.io/name": opts.name}},
            "template": {
                "metadata": {"labels": labels(&opts.name)},
                "spec": {
                    "serviceAccountName": opts.name,
                    "terminationGracePeriodSeconds": 40,
                    "securityContext": {
                        "runAsNonRoot": true,
                        "runAsUser": 65532,
                        "runAsGroup": 65532,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "containers": [container],
                    "volumes": [{"name": "certs", "secret": {"secretName": secret}}],
                },
            },
        },
    }))
}

fn configuration(
    kind: &str,
    facts: &WebhookFacts,
    opts: &Options,
    rules: &[Rule],
    ca_bundle: Option<&str>,
    inject_from: Option<&str>,
) -> Json {
    let mut meta = json!({"name": opts.name, "labels": labels(&opts.name)});
    if let Some(from) = inject_from {
        meta["annotations"] = json!({"cert-manager.io/inject-ca-from": from});
    }
    let mut client = json!({
        "service": {
            "name": opts.name,
            "namespace": opts.namespace,
            "path": facts.path.as_deref().unwrap_or("/"),
            "port": 443,
        },
    });
    if let Some(ca) = ca_bundle {
        client["caBundle"] = json!(ca);
    }
    let short = if kind.starts_with("Mutating") {
        "mutate"
    } else {
        "validate"
    };
    // The API server waits one second past the handlers' budget: kite answers first.
    let timeout = (facts.timeout_seconds + 1).clamp(1, 30);
    json!({
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": kind,
        "metadata": meta,
        "webhooks": [{
            "name": format!("{short}.{}.{}.svc", opts.name, opts.namespace),
            "admissionReviewVersions": ["v1"],
            "sideEffects": "None",
            "failurePolicy": facts.failure_policy,
            "timeoutSeconds": timeout,
            "clientConfig": client,
            // Never the webhook's own namespace: its pods must start without it.
            "namespaceSelector": {"matchExpressions": [{
                "key": "kubernetes.io/metadata.name",
                "operator": "NotIn",
                "values": [opts.namespace],
            }]},
            "rules": rules.iter().map(|r| json!({
                "apiGroups": [r.group],
                "apiVersions": [r.version],
                "resources": [r.resource],
                "operations": r.operations,
            })).collect::<Vec<_>>(),
        }],
    })
}

#[cfg(test)]
mod tests {
    use super::super::tests::opts;
    use super::*;

    fn facts() -> WebhookFacts {
        WebhookFacts {
            path: Some("/validate".into()),
            port: 9443,
            validates: true,
            mutates: false,
            failure_policy: "Fail".into(),
            timeout_seconds: 5,
            tls_files: true,
            watched: None,
        }
    }

    fn inference(f: WebhookFacts) -> Inference {
        Inference {
            webhook: Some(Box::new(f)),
            ..Default::default()
        }
    }

    #[test]
    fn rules_use_upstreams_syntax() {
        let r = parse_rule("group=apps resource=deployments operations=CREATE,UPDATE").unwrap();
        assert_eq!(
            (r.group.as_str(), r.resource.as_str()),
            ("apps", "deployments")
        );
        assert_eq!(r.operations, ["CREATE", "UPDATE"]);
        assert_eq!(parse_rule("resource=pods").unwrap().group, "");
        let e = parse_rule("resource=pods operations=MAKE")
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown operation \"MAKE\""), "{e}");
        assert!(parse_rule("group=apps").is_err());
    }

    #[test]
    fn a_validating_webhook_gets_a_secret_a_service_and_its_configuration() {
        let web = WebhookOptions {
            rules: vec!["group=apps resource=deployments".into()],
            cert_manager: false,
        };
        let out = render(&inference(facts()), &opts(), &web).unwrap();
        let kinds: Vec<&str> = out
            .objects
            .iter()
            .map(|o| o["kind"].as_str().unwrap())
            .collect();
        assert_eq!(
            kinds,
            [
                "Namespace",
                "ServiceAccount",
                "Secret",
                "Deployment",
                "Service",
                "ValidatingWebhookConfiguration"
            ]
        );
        let config = &out.objects[5];
        let hook = &config["webhooks"][0];
        assert_eq!(hook["clientConfig"]["service"]["path"], "/validate");
        assert!(
            hook["clientConfig"]["caBundle"]
                .as_str()
                .is_some_and(|c| !c.is_empty())
        );
        assert_eq!(hook["timeoutSeconds"], 6);
        assert_eq!(hook["rules"][0]["apiGroups"][0], "apps");
        let container = &out.objects[3]["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["ports"][0]["containerPort"], 9443);
        assert_eq!(container["readinessProbe"]["httpGet"]["scheme"], "HTTPS");
    }

    #[test]
    fn cert_manager_replaces_the_secret_and_injects_the_ca() {
        let mut f = facts();
        f.mutates = true;
        f.validates = false;
        f.watched = Some(("example.com".into(), "widgets".into()));
        let web = WebhookOptions {
            rules: Vec::new(),
            cert_manager: true,
        };
        let out = render(&inference(f), &opts(), &web).unwrap();
        let kinds: Vec<&str> = out
            .objects
            .iter()
            .map(|o| o["kind"].as_str().unwrap())
            .collect();
        assert!(
            kinds.contains(&"Certificate") && !kinds.contains(&"Secret"),
            "{kinds:?}"
        );
        let config = out.objects.last().unwrap();
        assert_eq!(config["kind"], "MutatingWebhookConfiguration");
        assert_eq!(
            config["metadata"]["annotations"]["cert-manager.io/inject-ca-from"],
            "team/ctrl"
        );
        assert_eq!(config["webhooks"][0]["rules"][0]["resources"][0], "widgets");
    }

    #[test]
    fn a_script_without_a_webhook_or_rules_is_refused() {
        let e = render(&Inference::default(), &opts(), &WebhookOptions::default()).unwrap_err();
        assert!(matches!(e, Error::FindWebhook));
        let mut f = facts();
        f.watched = None;
        let e = render(&inference(f), &opts(), &WebhookOptions::default()).unwrap_err();
        assert!(e.to_string().contains("--rule"), "{e}");
    }
}
