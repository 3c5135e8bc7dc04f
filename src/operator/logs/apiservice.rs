//! The logs API's registration with the API server's aggregation layer: the
//! APIService, and for a local run an ExternalName Service that sends the API server
//! to `localhost`; withdrawn when the run ends.

use base64::Engine as _;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, Preconditions};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::json;

use super::{CALL_TIMEOUT, Error, GROUP, Result, SERVICE, VERSION};

/// The field manager of the registration.
const MANAGER: &str = "kite-operator-logs";

/// A local run's ExternalName Service: never the install's Service of the same name.
pub const LOCAL_SERVICE: &str = "kite-operator-logs-local";

/// The APIService's name.
pub fn name() -> String {
    format!("{VERSION}.{GROUP}")
}

fn apiservices(client: &kube::Client) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk("apiregistration.k8s.io", "v1", "APIService");
    Api::all_with(client.clone(), &ApiResource::from_gvk(&gvk))
}

fn services(client: &kube::Client, namespace: &str) -> Api<k8s_openapi::api::core::v1::Service> {
    Api::namespaced(client.clone(), namespace)
}

/// The Service an APIService points at (`namespace/name`).
fn service_of(obj: &DynamicObject) -> (String, String) {
    let s = &obj.data["spec"]["service"];
    let text = |k: &str| s[k].as_str().unwrap_or_default().to_owned();
    (text("namespace"), text("name"))
}

/// Points the APIService at this operator, trusting `ca`: through the Service the
/// install made (port 443), or for a `local` run through an ExternalName Service to
/// `localhost:port`.
///
/// # Errors
/// [`Error::Taken`] when a local run finds an install's registration;
/// [`Error::Register`] or [`Error::RegisterTimeout`] for the API calls.
pub async fn register(
    client: &kube::Client,
    namespace: &str,
    port: u16,
    ca: &str,
    local: bool,
) -> Result<()> {
    let params = PatchParams::apply(MANAGER).force();
    let service_name = if local { LOCAL_SERVICE } else { SERVICE };
    // A cluster has one APIService for the group: a local run never takes over an
    // install's (an install does take over a local run's, which goes with its run).
    if local {
        let what = format!("APIService {}", name());
        if let Some(current) = bounded(&what, apiservices(client).get_opt(&name())).await?
            && service_of(&current).1 != LOCAL_SERVICE
        {
            let (ns, svc) = service_of(&current);
            return Err(Error::Taken {
                service: format!("{ns}/{svc}"),
            });
        }
        let service = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": LOCAL_SERVICE, "namespace": namespace},
            "spec": {"type": "ExternalName", "externalName": "localhost"},
        });
        let what = format!("Service {namespace}/{LOCAL_SERVICE}");
        let api = services(client, namespace);
        bounded(
            &what,
            api.patch(LOCAL_SERVICE, &params, &Patch::Apply(&service)),
        )
        .await?;
    }
    let apiservice = json!({
        "apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService",
        "metadata": {"name": name(), "labels": {"app.kubernetes.io/managed-by": "kite"}},
        "spec": {
            "group": GROUP, "version": VERSION,
            "service": {"namespace": namespace, "name": service_name, "port": if local { port } else { 443 }},
            "caBundle": base64::engine::general_purpose::STANDARD.encode(ca),
            "groupPriorityMinimum": 1000, "versionPriority": 15,
        },
    });
    let what = format!("APIService {}", name());
    bounded(
        &what,
        apiservices(client).patch(&name(), &params, &Patch::Apply(&apiservice)),
    )
    .await?;
    Ok(())
}

/// Removes a local run's APIService and Service, if the APIService is still this
/// run's (a local registration trusting `ca`), and only as read (a precondition on
/// its resourceVersion): an APIService nobody serves makes discovery fail, and
/// namespaces then cannot finish deleting. Returns the command that removes it when
/// that fails.
pub async fn withdraw(client: &kube::Client, namespace: &str, ca: &str) -> Option<String> {
    let ours = base64::engine::general_purpose::STANDARD.encode(ca);
    let api = apiservices(client);
    let command = format!("kubectl delete apiservice {}", name());
    let version = match tokio::time::timeout(CALL_TIMEOUT, api.get_opt(&name())).await {
        Ok(Ok(Some(obj)))
            if obj.data["spec"]["caBundle"].as_str() == Some(ours.as_str())
                && service_of(&obj).1 == LOCAL_SERVICE =>
        {
            obj.metadata.resource_version.clone()
        }
        Ok(Ok(_)) => return None,
        _ => return Some(command),
    };
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            resource_version: version,
            uid: None,
        }),
        ..DeleteParams::default()
    };
    let deleted = tokio::time::timeout(CALL_TIMEOUT, api.delete(&name(), &params)).await;
    if !matches!(deleted, Ok(Ok(_))) {
        return Some(command);
    }
    let services = services(client, namespace);
    let _ = tokio::time::timeout(
        CALL_TIMEOUT,
        services.delete(LOCAL_SERVICE, &DeleteParams::default()),
    )
    .await;
    None
}

async fn bounded<T>(
    what: &str,
    call: impl std::future::Future<Output = Result<T, kube::Error>>,
) -> Result<T> {
    tokio::time::timeout(CALL_TIMEOUT, call)
        .await
        .map_err(|_| Error::RegisterTimeout {
            what: what.to_owned(),
        })?
        .map_err(|source| Error::Register {
            what: what.to_owned(),
            source,
        })
}
