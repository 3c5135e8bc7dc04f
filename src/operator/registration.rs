//! The operator's MutatingWebhookConfiguration, kept current: where the API server
//! reaches the webhook (a loopback `url:` outside a pod, the Service inside one), the
//! CA it trusts, and which controller resources this operator reviews.

use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use kube::Api;
use kube::api::{Patch, PatchParams};
use serde_json::{Value as Json, json};

use std::future::Future;
use std::sync::Arc;

use super::approval;
use super::certs;
use super::webhook::Tls;

/// How often the configuration and the certificate are looked at again.
pub const PERIOD: Duration = Duration::from_secs(15);
const CALL_TIMEOUT: Duration = Duration::from_secs(10);
const MANAGER: &str = "kite-operator";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("reading MutatingWebhookConfiguration {name}: {source}")]
    ReadConfiguration { name: String, source: kube::Error },
    #[error("applying MutatingWebhookConfiguration {name}: {source}")]
    ApplyConfiguration { name: String, source: kube::Error },
    #[error("MutatingWebhookConfiguration {name}: no answer within 10s")]
    Timeout { name: String },
    #[error("--selector {selector:?}: {problem}")]
    ParseSelector { selector: String, problem: String },
    /// The API server stored the configuration without a field kite relies on: it is
    /// older than the feature. The webhook is then not taken as registered, so nothing
    /// is approved or started (reviews never get weaker than kite's own).
    #[error(
        "MutatingWebhookConfiguration {name}: the API server dropped `{field}`, which needs Kubernetes {needs} or newer (kite supports {supported}); upgrade the cluster"
    )]
    Unsupported {
        name: String,
        field: &'static str,
        needs: &'static str,
        supported: &'static str,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why keeping the webhook registered failed this time.
#[derive(Debug, thiserror::Error)]
pub enum RegisterError {
    #[error(transparent)]
    Register(#[from] Error),
    #[error(transparent)]
    Certify(#[from] certs::Error),
    #[error(transparent)]
    LoadCertificate(#[from] super::webhook::Error),
}

/// Where the API server reaches the webhook.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// `https://host:port/approve/<secret>` ([`super::webhook::path`]), e.g. on loopback
    /// when the operator runs beside the API server.
    Url(String),
    /// The Service `namespace/name` (port 443) at `path`, inside the cluster.
    Service {
        namespace: String,
        name: String,
        path: String,
    },
}

/// What this operator's configuration says.
#[derive(Debug, Clone)]
pub struct Registration {
    pub name: String,
    pub endpoint: Endpoint,
    /// `--namespace`: only StarlarkControllers there (and no cluster kind).
    pub namespace: Option<String>,
    /// `--selector`, as a LabelSelector.
    pub object_selector: Option<Json>,
}

impl Registration {
    /// The default configuration name: one per scope, so that operators with other
    /// `--namespace` or `--selector` scopes keep their own, and another for an operator
    /// run outside the cluster (`local`, registered with a `url:`), so that a local run
    /// and the in-cluster install (`config/webhook`, a `service:`) never write over
    /// each other's configuration.
    pub fn default_name(namespace: Option<&str>, selector: Option<&str>, local: bool) -> String {
        let base = if local {
            "kite-operator-local"
        } else {
            "kite-operator"
        };
        if namespace.is_none() && selector.is_none() {
            return base.into();
        }
        let scope = format!("{}\n{}", namespace.unwrap_or(""), selector.unwrap_or(""));
        let digest = ring::digest::digest(&ring::digest::SHA256, scope.as_bytes());
        let hash: String = digest.as_ref()[..6]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        format!("{base}-{hash}")
    }

    /// The configuration, trusting `ca` (PEM).
    pub fn configuration(&self, ca: &str) -> Json {
        use base64::Engine;
        let ca_bundle = base64::engine::general_purpose::STANDARD.encode(ca);
        let client_config = match &self.endpoint {
            Endpoint::Url(url) => json!({"url": url, "caBundle": ca_bundle}),
            Endpoint::Service {
                namespace,
                name,
                path,
            } => json!({
                "service": {"namespace": namespace, "name": name, "path": path, "port": 443},
                "caBundle": ca_bundle,
            }),
        };
        let resources: Vec<&str> = if self.namespace.is_some() {
            vec!["starlarkcontrollers"]
        } else {
            vec!["starlarkcontrollers", "clusterstarlarkcontrollers"]
        };
        let namespace_selector = match &self.namespace {
            Some(ns) => json!({"matchLabels": {"kubernetes.io/metadata.name": ns}}),
            None => json!({}),
        };
        let object_selector = self.object_selector.clone().unwrap_or_else(|| json!({}));
        // Only a create, or a change of the spec, the approval or the labels, needs a
        // review: finalizers and status do not wait for the webhook. Labels count because
        // they decide which operator (--selector) hosts a resource: a resource the
        // webhook never saw must not be labelled into an operator's scope unreviewed.
        let changed = format!(
            "request.operation == 'CREATE' || object.?spec != oldObject.?spec || \
             object.metadata.?annotations[?'{a}'] != oldObject.metadata.?annotations[?'{a}'] || \
             object.metadata.?labels != oldObject.metadata.?labels",
            a = approval::ANNOTATION
        );
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {
                "name": self.name,
                "labels": {"app.kubernetes.io/managed-by": MANAGER},
            },
            "webhooks": [{
                "name": "approval.starkite.io",
                "admissionReviewVersions": ["v1"],
                "clientConfig": client_config,
                "rules": [{
                    "apiGroups": ["starkite.io"],
                    "apiVersions": ["*"],
                    "operations": ["CREATE", "UPDATE"],
                    "resources": resources,
                    "scope": "*",
                }],
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "timeoutSeconds": 15,
                "reinvocationPolicy": "IfNeeded",
                "namespaceSelector": namespace_selector,
                "objectSelector": object_selector,
                "matchConditions": [{"name": "spec-approval-or-labels-changed", "expression": changed}],
            }],
        })
    }
}

/// Applies the configuration if it is missing or differs from `wanted`; returns
/// whether it had to.
///
/// # Errors
/// API errors and timeouts.
pub async fn registration(client: &kube::Client, reg: &Registration, ca: &str) -> Result<bool> {
    let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let name = reg.name.clone();
    let wanted = reg.configuration(ca);
    let timeout = || Error::Timeout { name: name.clone() };
    let existing = tokio::time::timeout(CALL_TIMEOUT, api.get_opt(&name))
        .await
        .map_err(|_| timeout())?
        .map_err(|source| Error::ReadConfiguration {
            name: name.clone(),
            source,
        })?;
    if let Some(existing) = existing {
        let actual = serde_json::to_value(&existing).unwrap_or_default();
        if holds(&actual["webhooks"], &wanted["webhooks"]) {
            return Ok(false);
        }
    }
    let params = PatchParams::apply(MANAGER).force();
    let stored = tokio::time::timeout(
        CALL_TIMEOUT,
        api.patch(&name, &params, &Patch::Apply(&wanted)),
    )
    .await
    .map_err(|_| timeout())?
    .map_err(|source| Error::ApplyConfiguration {
        name: name.clone(),
        source,
    })?;
    let stored = serde_json::to_value(&stored).unwrap_or_default();
    if let Some(field) = dropped(&stored["webhooks"], &wanted["webhooks"]) {
        return Err(Error::Unsupported {
            name,
            field,
            needs: "1.30",
            supported: crate::k8s::support::SUPPORTED,
        });
    }
    Ok(true)
}

/// A field kite needs that the API server did not keep: `matchConditions` (GA in 1.30),
/// without which the webhook would review what it should not, or the configuration would
/// be re-applied for ever.
fn dropped(stored: &Json, wanted: &Json) -> Option<&'static str> {
    let (Some(stored), Some(wanted)) = (stored.as_array(), wanted.as_array()) else {
        return None;
    };
    wanted
        .iter()
        .zip(stored.iter().chain(std::iter::repeat(&Json::Null)))
        .find_map(|(w, s)| {
            (w.get("matchConditions").is_some() && s.get("matchConditions").is_none())
                .then_some("matchConditions")
        })
}

/// Renews the serving certificate if due and applies the webhook configuration if it
/// changed (someone edited or deleted it, or the CA or address is new).
///
/// # Errors
/// API errors, or a certificate that does not load.
pub async fn register(
    client: &kube::Client,
    reg: &Registration,
    tls: &Tls,
    operator_namespace: &str,
    hosts: &[String],
    first: bool,
) -> Result<(), RegisterError> {
    let material = certs::certs(client, operator_namespace, hosts).await?;
    tls.renew(&material)?;
    // Never the path: it is the webhook's secret.
    let at = match &reg.endpoint {
        Endpoint::Url(url) => url.split("/approve").next().unwrap_or_default().to_owned(),
        Endpoint::Service {
            namespace, name, ..
        } => format!("Service {namespace}/{name}"),
    };
    let applied = registration(client, reg, &material.ca).await?;
    if first && !applied {
        tracing::info!(configuration = %reg.name, webhook = %at, "the admission webhook is registered");
    }
    if applied {
        if first {
            tracing::info!(configuration = %reg.name, webhook = %at, "registered the admission webhook");
        } else {
            tracing::warn!(configuration = %reg.name, webhook = %at, "the admission webhook configuration had changed; restored it");
        }
    }
    Ok(())
}

/// Removes this local run's configuration as it exits, so that nothing is left that
/// would refuse creates (failurePolicy Fail) with no webhook behind it: only when it
/// still points at this run's `url` (another run of the same scope may have taken it
/// over since), and guarded by its resourceVersion. Returns the command that removes
/// it by hand when it could not.
pub async fn withdraw(client: &kube::Client, name: &str, url: &str) -> Option<String> {
    let api: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let by_hand = || format!("kubectl delete mutatingwebhookconfiguration {name}");
    let existing = match tokio::time::timeout(CALL_TIMEOUT, api.get_opt(name)).await {
        Ok(Ok(Some(c))) => c,
        Ok(Ok(None)) => return None,
        _ => return Some(by_hand()),
    };
    let ours = existing
        .webhooks
        .iter()
        .flatten()
        .any(|w| w.client_config.url.as_deref() == Some(url));
    if !ours {
        return None;
    }
    let params = kube::api::DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            resource_version: existing.metadata.resource_version.clone(),
            uid: existing.metadata.uid.clone(),
        }),
        ..kube::api::DeleteParams::default()
    };
    match tokio::time::timeout(CALL_TIMEOUT, api.delete(name, &params)).await {
        Ok(Ok(_)) => {
            tracing::info!(configuration = %name, "removed this run's admission webhook configuration");
            None
        }
        // Changed since (another run took it over): theirs now.
        Ok(Err(kube::Error::Api(e))) if e.code == 409 || e.code == 404 => None,
        _ => Some(by_hand()),
    }
}

/// Keeps the webhook registered and its certificate current until `stop`.
pub async fn keep_registered(
    client: kube::Client,
    reg: Registration,
    tls: Arc<Tls>,
    operator_namespace: String,
    hosts: Vec<String>,
    stop: impl Future<Output = ()>,
) {
    let mut stop = std::pin::pin!(stop);
    let mut delay = PERIOD;
    loop {
        tokio::select! {
            () = &mut stop => return,
            () = tokio::time::sleep(delay) => {}
        }
        match register(&client, &reg, &tls, &operator_namespace, &hosts, false).await {
            Ok(()) => delay = PERIOD,
            Err(e) => {
                tracing::warn!(error = %e, "keeping the admission webhook registered; retrying");
                delay = (delay * 2).min(Duration::from_mins(2));
            }
        }
    }
}

/// Whether `actual` says everything `wanted` says (the API server adds defaults); an
/// empty object in `wanted` (a selector that selects everything) must be empty there too.
fn holds(actual: &Json, wanted: &Json) -> bool {
    match (actual, wanted) {
        (Json::Object(a), Json::Object(w)) if w.is_empty() => a.is_empty(),
        (Json::Object(a), Json::Object(w)) => w
            .iter()
            .all(|(k, wv)| holds(a.get(k).unwrap_or(&Json::Null), wv)),
        (Json::Null, Json::Object(w)) => w.is_empty(),
        (Json::Array(a), Json::Array(w)) => {
            a.len() == w.len() && a.iter().zip(w).all(|(a, w)| holds(a, w))
        }
        (a, w) => a == w,
    }
}

/// `--selector` (`k=v`, `k==v`, `k!=v`, `k`, `!k`, `k in (a,b)`, `k notin (a,b)`,
/// comma-separated) as a LabelSelector.
///
/// # Errors
/// A term that is none of these.
pub fn label_selector(selector: &str) -> Result<Json> {
    let bad = |problem: String| Error::ParseSelector {
        selector: selector.into(),
        problem,
    };
    let mut labels = serde_json::Map::new();
    let mut expressions = Vec::new();
    for term in terms(selector) {
        let term = term.trim();
        if term.is_empty() {
            return Err(bad("an empty term".into()));
        }
        // `key in (a,b)`, `key notin(a)`: a space after the key, none needed before `(`.
        let set = |term: &str| -> Option<Json> {
            let (key, rest) = term.split_once(char::is_whitespace)?;
            let rest = rest.trim_start();
            let (op, rest) = match rest.strip_prefix("notin") {
                Some(r) => ("NotIn", r),
                None => ("In", rest.strip_prefix("in")?),
            };
            let values = rest.trim().strip_prefix('(')?.strip_suffix(')')?;
            let values: Vec<&str> = values.split(',').map(str::trim).collect();
            Some(json!({"key": key, "operator": op, "values": values}))
        };
        if let Some(e) = set(term) {
            expressions.push(e);
        } else if let Some((k, v)) = term.split_once("!=") {
            expressions.push(json!({"key": k.trim(), "operator": "NotIn", "values": [v.trim()]}));
        } else if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
            labels.insert(k.trim().into(), Json::String(v.trim().into()));
        } else if let Some(k) = term.strip_prefix('!') {
            expressions.push(json!({"key": k.trim(), "operator": "DoesNotExist"}));
        } else if term
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
        {
            expressions.push(json!({"key": term, "operator": "Exists"}));
        } else {
            return Err(bad(format!("cannot read the term {term:?}")));
        }
    }
    let mut out = serde_json::Map::new();
    if !labels.is_empty() {
        out.insert("matchLabels".into(), Json::Object(labels));
    }
    if !expressions.is_empty() {
        out.insert("matchExpressions".into(), Json::Array(expressions));
    }
    Ok(Json::Object(out))
}

/// The comma-separated terms, keeping the commas inside `( )` sets.
fn terms(selector: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in selector.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&selector[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&selector[start..]);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An API server older than matchConditions stores the configuration without them:
    /// that is an error, never a registration that reviews other updates.
    #[test]
    fn a_dropped_match_condition_is_found() {
        let wanted =
            json!([{"name": "a", "matchConditions": [{"name": "c", "expression": "true"}]}]);
        assert_eq!(dropped(&wanted, &wanted), None);
        let stored = json!([{"name": "a"}]);
        assert_eq!(dropped(&stored, &wanted), Some("matchConditions"));
        assert_eq!(dropped(&json!([]), &wanted), Some("matchConditions"));
        assert_eq!(dropped(&stored, &json!([{"name": "a"}])), None);
    }

    #[test]
    fn selectors_become_label_selectors() {
        assert_eq!(
            label_selector("team=a, tier in (web, api),!legacy,env!=dev,canary").unwrap(),
            json!({
                "matchLabels": {"team": "a"},
                "matchExpressions": [
                    {"key": "tier", "operator": "In", "values": ["web", "api"]},
                    {"key": "legacy", "operator": "DoesNotExist"},
                    {"key": "env", "operator": "NotIn", "values": ["dev"]},
                    {"key": "canary", "operator": "Exists"},
                ],
            })
        );
        assert_eq!(
            label_selector("tier in(web,api), env  notin  ( dev )").unwrap(),
            json!({
                "matchExpressions": [
                    {"key": "tier", "operator": "In", "values": ["web", "api"]},
                    {"key": "env", "operator": "NotIn", "values": ["dev"]},
                ],
            })
        );
        let e = label_selector("team=a,,x").unwrap_err().to_string();
        assert!(e.contains("empty term"), "{e}");
        assert!(label_selector("a b c").is_err());
    }

    #[test]
    fn scoped_operators_get_their_own_configuration() {
        assert_eq!(
            Registration::default_name(None, None, false),
            "kite-operator"
        );
        let a = Registration::default_name(Some("team-a"), None, false);
        let b = Registration::default_name(Some("team-b"), None, false);
        assert_ne!(a, b);
        assert_eq!(a, Registration::default_name(Some("team-a"), None, false));
        assert!(a.starts_with("kite-operator-") && a.len() <= 63);
        // A local run never shares a name with the in-cluster install.
        assert_eq!(
            Registration::default_name(None, None, true),
            "kite-operator-local"
        );
        let local = Registration::default_name(Some("team-a"), None, true);
        assert!(local.starts_with("kite-operator-local-") && local.len() <= 63);
        assert_ne!(local, a);
    }

    #[test]
    fn defaults_the_api_server_adds_do_not_count_as_a_change() {
        let reg = Registration {
            name: "kite-operator".into(),
            endpoint: Endpoint::Url("https://127.0.0.1:9443/approve".into()),
            namespace: Some("team-a".into()),
            object_selector: None,
        };
        let wanted = reg.configuration("CA");
        let mut actual = wanted.clone();
        actual["webhooks"][0]["matchPolicy"] = json!("Equivalent");
        actual["metadata"]["resourceVersion"] = json!("7");
        assert!(holds(&actual["webhooks"], &wanted["webhooks"]));
        actual["webhooks"][0]["objectSelector"] = json!({"matchLabels": {"x": "y"}});
        assert!(!holds(&actual["webhooks"], &wanted["webhooks"]));
        let moved = Registration {
            endpoint: Endpoint::Url("https://127.0.0.1:9444/approve".into()),
            ..reg
        };
        assert!(!holds(
            &wanted["webhooks"],
            &moved.configuration("CA")["webhooks"]
        ));
    }
}
