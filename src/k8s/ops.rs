//! The cluster operations behind the `k8s` module, on JSON values, each with a deadline.

use std::time::Duration;

use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value as Json, json};

use super::discovery::{self, Resource};
use super::session::Session;

/// Why an operation failed. The API server's answer and kube's error are kept whole, so
/// retry and conflict handling can match on them (`code()`, `Error::Api(status)`).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Resolve(#[from] discovery::Error),
    /// The API server answered with an error status.
    #[error("{} ({})", .0.message, .0.code)]
    Api(Box<kube::core::Status>),
    /// The request did not get an answer (connection, TLS, decoding, ...).
    #[error(transparent)]
    Request(kube::Error),
    /// A response that could not be turned into JSON.
    #[error("{0}")]
    Encode(#[from] serde_json::Error),
    #[error("timed out after {0:?}")]
    Timeout(Duration),
    #[error("invalid manifest: {0}")]
    Manifest(String),
    #[error("{0}")]
    Invalid(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<kube::Error> for Error {
    fn from(e: kube::Error) -> Self {
        match e {
            kube::Error::Api(status) => Error::Api(status),
            other => Error::Request(other),
        }
    }
}

impl Error {
    /// The HTTP status code, when the API server answered with an error.
    pub fn code(&self) -> Option<u16> {
        match self {
            Error::Api(status) => Some(status.code),
            _ => None,
        }
    }
}

/// Runs `fut` with a deadline.
pub async fn with_timeout<T>(timeout: Duration, fut: impl Future<Output = Result<T>>) -> Result<T> {
    tokio::time::timeout(timeout, fut)
        .await
        .map_err(|_| Error::Timeout(timeout))?
}

/// A resolved kind and the namespace a call applies to (None for cluster scope).
pub struct Target {
    pub resource: Resource,
    pub namespace: Option<String>,
}

impl Target {
    /// Resolves `kind` and picks the namespace: the call's, else the session default.
    /// `namespace="*"` means all namespaces (list and watch only).
    pub async fn resolve(session: &Session, kind: &str, namespace: Option<&str>) -> Result<Self> {
        let resource = session.discovery.resolve(kind).await?;
        Ok(Self::new(session, resource, namespace))
    }

    fn new(session: &Session, resource: Resource, namespace: Option<&str>) -> Self {
        let namespace = resource.namespaced.then(|| {
            namespace
                .filter(|n| !n.is_empty())
                .unwrap_or(&session.namespace)
                .to_owned()
        });
        Self {
            resource,
            namespace,
        }
    }

    /// The dynamic API for this target.
    pub fn api(&self, session: &Session) -> Api<DynamicObject> {
        let ar = &self.resource.api_resource;
        match self.namespace.as_deref() {
            Some("*") | None => Api::all_with(session.client_here(), ar),
            Some(ns) => Api::namespaced_with(session.client_here(), ns, ar),
        }
    }

    /// `deployments.apps` or `pods`: how kubectl names the resource in messages.
    pub fn display_name(&self) -> String {
        let ar = &self.resource.api_resource;
        if ar.group.is_empty() {
            ar.plural.clone()
        } else {
            format!("{}.{}", ar.plural, ar.group)
        }
    }

    /// Fills in apiVersion and kind, which list items come back without.
    pub fn complete(&self, mut obj: Json) -> Json {
        if let Some(map) = obj.as_object_mut() {
            let ar = &self.resource.api_resource;
            map.entry("apiVersion")
                .or_insert_with(|| json!(ar.api_version));
            map.entry("kind").or_insert_with(|| json!(ar.kind));
        }
        obj
    }
}

/// A request builder for `target`'s URL and the client to send it with. Requests go out
/// and come back as JSON, never through a typed object: one decode per response.
fn raw(session: &Session, target: &Target) -> (kube::Client, kube::core::Request) {
    let api = target.api(session);
    let request = kube::core::Request::new(api.resource_url());
    (api.into_client(), request)
}

/// Sends a built request and decodes the answer as JSON.
async fn send(
    client: &kube::Client,
    request: std::result::Result<hyper::Request<Vec<u8>>, kube::core::request::Error>,
) -> Result<Json> {
    let request = request.map_err(kube::Error::BuildRequest)?;
    Ok(client.request::<Json>(request).await?)
}

fn dry_run_params(session: &Session, dry_run: bool) -> bool {
    session.dry_run || dry_run
}

/// GET one object.
pub async fn get(
    session: &Session,
    kind: &str,
    name: &str,
    namespace: Option<&str>,
) -> Result<Json> {
    let target = Target::resolve(session, kind, namespace).await?;
    get_of(session, &target, name).await
}

/// GET one object of a resolved kind.
pub async fn get_of(session: &Session, target: &Target, name: &str) -> Result<Json> {
    let (client, request) = raw(session, target);
    let obj = send(&client, request.get(name, &kube::api::GetParams::default())).await?;
    Ok(target.complete(obj))
}

/// LIST objects, optionally by label and field selector.
pub async fn list(
    session: &Session,
    kind: &str,
    namespace: Option<&str>,
    labels: Option<&str>,
    fields: Option<&str>,
) -> Result<Vec<Json>> {
    let target = Target::resolve(session, kind, namespace).await?;
    let mut params = ListParams::default();
    if let Some(l) = labels {
        params = params.labels(l);
    }
    if let Some(f) = fields {
        params = params.fields(f);
    }
    let (client, request) = raw(session, &target);
    let mut list = send(&client, request.list(&params)).await?;
    let items = match list.get_mut("items").map(Json::take) {
        Some(Json::Array(items)) => items,
        _ => Vec::new(),
    };
    Ok(items.into_iter().map(|o| target.complete(o)).collect())
}

/// The resolved target of a manifest: its apiVersion/kind, namespace and name.
pub async fn manifest_target(
    session: &Session,
    manifest: &Json,
    namespace: Option<&str>,
) -> Result<(Target, String)> {
    let api_version = manifest["apiVersion"]
        .as_str()
        .ok_or_else(|| Error::Manifest("apiVersion is missing".into()))?;
    let kind = manifest["kind"]
        .as_str()
        .ok_or_else(|| Error::Manifest("kind is missing".into()))?;
    let name = manifest["metadata"]["name"]
        .as_str()
        .ok_or_else(|| Error::Manifest(format!("{kind}: metadata.name is missing")))?;
    let resource = session.discovery.resolve_gvk(api_version, kind).await?;
    // Precedence: the call's namespace=, then metadata.namespace, then the default.
    let ns = namespace.or_else(|| manifest["metadata"]["namespace"].as_str());
    Ok((Target::new(session, resource, ns), name.to_owned()))
}

fn with_namespace(manifest: &Json, target: &Target) -> Json {
    let mut m = manifest.clone();
    if let (Some(ns), Some(meta)) = (
        &target.namespace,
        m.get_mut("metadata").and_then(Json::as_object_mut),
    ) {
        meta.insert("namespace".into(), json!(ns));
    }
    m
}

/// POST a manifest.
pub async fn create(
    session: &Session,
    manifest: &Json,
    namespace: Option<&str>,
    dry_run: bool,
) -> Result<Json> {
    let (target, _) = manifest_target(session, manifest, namespace).await?;
    let body = serde_json::to_vec(&with_namespace(manifest, &target)).map_err(Error::Encode)?;
    let params = PostParams {
        dry_run: dry_run_params(session, dry_run),
        ..Default::default()
    };
    let (client, request) = raw(session, &target);
    let created = send(&client, request.create(&params, body)).await?;
    Ok(target.complete(created))
}

/// Server-side apply of one manifest.
pub async fn apply(
    session: &Session,
    manifest: &Json,
    namespace: Option<&str>,
    field_manager: &str,
    force: bool,
    dry_run: bool,
) -> Result<Json> {
    let (target, name) = manifest_target(session, manifest, namespace).await?;
    let mut params = PatchParams::apply(field_manager);
    params.force = force;
    params.dry_run = dry_run_params(session, dry_run);
    let body = with_namespace(manifest, &target);
    let (client, request) = raw(session, &target);
    let applied = send(&client, request.patch(&name, &params, &Patch::Apply(&body))).await?;
    Ok(target.complete(applied))
}

/// DELETE one object.
pub async fn delete(
    session: &Session,
    kind: &str,
    name: &str,
    namespace: Option<&str>,
    propagation: &str,
) -> Result<()> {
    let target = Target::resolve(session, kind, namespace).await?;
    let policy = match propagation {
        "Background" => kube::api::PropagationPolicy::Background,
        "Foreground" => kube::api::PropagationPolicy::Foreground,
        "Orphan" => kube::api::PropagationPolicy::Orphan,
        other => {
            return Err(Error::Invalid(format!(
                "propagation must be Background, Foreground or Orphan, not {other:?}"
            )));
        }
    };
    let params = DeleteParams {
        propagation_policy: Some(policy),
        dry_run: session.dry_run,
        ..Default::default()
    };
    target.api(session).delete(name, &params).await?;
    Ok(())
}

/// The patch types `k8s.patch` accepts.
pub fn patch_body(patch_type: &str, body: Json) -> Result<Patch<Json>> {
    match patch_type {
        "merge" => Ok(Patch::Merge(body)),
        "strategic" => Ok(Patch::Strategic(body)),
        "json" => {
            let ops: json_patch::Patch = serde_json::from_value(body)
                .map_err(|e| Error::Invalid(format!("json patch: {e}")))?;
            Ok(Patch::Json(ops))
        }
        other => Err(Error::Invalid(format!(
            "type must be merge, strategic or json, not {other:?}"
        ))),
    }
}

/// PATCH one object (or its status subresource).
pub async fn patch(
    session: &Session,
    target: &Target,
    name: &str,
    patch: &Patch<Json>,
    subresource_status: bool,
) -> Result<Json> {
    let params = PatchParams {
        dry_run: session.dry_run,
        ..Default::default()
    };
    let (client, request) = raw(session, target);
    let built = if subresource_status {
        request.patch_subresource("status", name, &params, patch)
    } else {
        request.patch(name, &params, patch)
    };
    Ok(target.complete(send(&client, built).await?))
}

/// The API server's version.
pub async fn version(session: &Session) -> Result<Json> {
    let info = session.client_here().apiserver_version().await?;
    serde_json::to_value(info)
        .map(with_snake_keys)
        .map_err(Error::Encode)
}

/// The object with each camelCase key also under its snake_case name: upstream's
/// `version()` reports `git_version`, the API `gitVersion`; scripts use either.
fn with_snake_keys(mut v: Json) -> Json {
    if let Some(m) = v.as_object_mut() {
        let snake: Vec<(String, Json)> = m
            .iter()
            .filter(|(k, _)| k.chars().any(|c| c.is_ascii_uppercase()))
            .map(|(k, v)| {
                let mut out = String::with_capacity(k.len() + 2);
                for c in k.chars() {
                    if c.is_ascii_uppercase() {
                        out.push('_');
                    }
                    out.push(c.to_ascii_lowercase());
                }
                (out, v.clone())
            })
            .collect();
        m.extend(snake);
    }
    v
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn version_keys_also_in_snake_case() {
        let v =
            super::with_snake_keys(json!({"major": "1", "gitVersion": "v1.3", "goVersion": "go"}));
        assert_eq!(
            v,
            json!({"major": "1", "gitVersion": "v1.3", "git_version": "v1.3",
                   "goVersion": "go", "go_version": "go"})
        );
    }
}
