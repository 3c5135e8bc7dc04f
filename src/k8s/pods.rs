//! Which pod and container a pod I/O call (`logs`, `exec`, `cp`, `port_forward`) means.

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;

use super::session::Session;

/// The annotation kubectl reads to pick a container when none is named.
const DEFAULT_CONTAINER: &str = "kubectl.kubernetes.io/default-container";

/// Why the pod or its container could not be chosen.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    ParseTarget(String),
    #[error("getting pod {namespace}/{pod}: {}", super::exec::describe(source))]
    GetPod {
        namespace: String,
        pod: String,
        #[source]
        source: kube::Error,
    },
    #[error("pod {pod} has no container {wanted:?} (containers: {})", .available.join(", "))]
    FindContainer {
        pod: String,
        wanted: String,
        available: Vec<String>,
    },
    #[error(
        "pod {pod} has {} containers ({}); name one with container=",
        .names.len(),
        .names.join(", ")
    )]
    ChooseContainer { pod: String, names: Vec<String> },
    #[error("pod {pod} has no containers")]
    NoContainers { pod: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A pod and the container a call runs against.
pub struct PodRef {
    pub api: Api<Pod>,
    /// For exec and port-forward: no idle read limit (see `Session::streaming`).
    pub streaming: Api<Pod>,
    pub name: String,
    pub namespace: String,
    pub container: String,
    /// `status.phase` when the pod was looked up ("" if unset).
    pub phase: String,
}

impl PodRef {
    /// Looks the pod up and picks the container: the named one, else the one the
    /// `kubectl.kubernetes.io/default-container` annotation names, else the only one.
    ///
    /// # Errors
    /// A target that is not a pod, a pod that cannot be read, or no single container.
    pub async fn resolve(
        session: &Session,
        target: &str,
        namespace: Option<&str>,
        container: Option<&str>,
    ) -> Result<Self> {
        let name = pod_name(target)?.to_owned();
        let namespace = namespace
            .filter(|n| !n.is_empty())
            .unwrap_or(&session.namespace)
            .to_owned();
        let api: Api<Pod> = Api::namespaced(session.client_here(), &namespace);
        let pod = api.get(&name).await.map_err(|source| Error::GetPod {
            namespace: namespace.clone(),
            pod: name.clone(),
            source,
        })?;
        let container = choose_container(&name, &pod, container)?;
        let phase = pod.status.and_then(|s| s.phase).unwrap_or_default();
        Ok(Self {
            streaming: Api::namespaced(session.streaming.clone(), &namespace),
            api,
            name,
            namespace,
            container,
            phase,
        })
    }

    /// `ns/pod[container]`, how messages name the target.
    pub fn display(&self) -> String {
        format!("{}/{}[{}]", self.namespace, self.name, self.container)
    }
}

/// The pod name in `web-1` or `pod/web-1`; other kinds are refused, as upstream only
/// takes pod names.
///
/// # Errors
/// An empty name, or a `kind/name` whose kind is not a pod.
pub fn pod_name(target: &str) -> Result<&str> {
    let name = match target.split_once('/') {
        Some(("pod" | "pods" | "po", name)) => name,
        Some((kind, _)) => {
            return Err(Error::ParseTarget(format!(
                "{target:?}: only pods are supported (got kind {kind:?}); pass the pod's name"
            )));
        }
        None => target,
    };
    if name.is_empty() || name.contains('/') {
        return Err(Error::ParseTarget(format!("{target:?} is not a pod name")));
    }
    Ok(name)
}

/// Picks the container of `pod` a call runs against.
///
/// # Errors
/// A named container the pod lacks, or several containers and no way to pick one.
pub fn choose_container(name: &str, pod: &Pod, wanted: Option<&str>) -> Result<String> {
    let spec = pod.spec.as_ref();
    let main: Vec<String> = spec
        .map(|s| s.containers.iter().map(|c| c.name.clone()).collect())
        .unwrap_or_default();
    if let Some(wanted) = wanted.filter(|w| !w.is_empty()) {
        // Init and ephemeral containers can be named explicitly, as with kubectl.
        let others = spec.into_iter().flat_map(|s| {
            let init = s.init_containers.iter().flatten().map(|c| &c.name);
            let eph = s.ephemeral_containers.iter().flatten().map(|c| &c.name);
            init.chain(eph)
        });
        if main.iter().chain(others).any(|c| c == wanted) {
            return Ok(wanted.to_owned());
        }
        return Err(Error::FindContainer {
            pod: name.to_owned(),
            wanted: wanted.to_owned(),
            available: main,
        });
    }
    let annotated = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(DEFAULT_CONTAINER))
        .filter(|c| main.contains(c));
    if let Some(c) = annotated {
        return Ok(c.clone());
    }
    match main.as_slice() {
        [] => Err(Error::NoContainers {
            pod: name.to_owned(),
        }),
        [one] => Ok(one.clone()),
        _ => Err(Error::ChooseContainer {
            pod: name.to_owned(),
            names: main,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(containers: &[&str], default: Option<&str>) -> Pod {
        let mut v = serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {
                "containers": containers.iter().map(|c| serde_json::json!({"name": c})).collect::<Vec<_>>(),
                "initContainers": [{"name": "init"}],
            },
        });
        if let Some(d) = default {
            v["metadata"]["annotations"] = serde_json::json!({ DEFAULT_CONTAINER: d });
        }
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn a_single_container_is_chosen_without_a_name() {
        assert_eq!(
            choose_container("p", &pod(&["app"], None), None).unwrap(),
            "app"
        );
        assert_eq!(
            choose_container("p", &pod(&["app"], None), Some("")).unwrap(),
            "app"
        );
    }

    #[test]
    fn several_containers_need_a_name_or_the_annotation() {
        let two = pod(&["app", "sidecar"], None);
        let err = choose_container("p", &two, None).unwrap_err().to_string();
        assert!(err.contains("2 containers (app, sidecar)"), "{err}");
        assert!(err.contains("container="), "{err}");
        assert_eq!(
            choose_container("p", &two, Some("sidecar")).unwrap(),
            "sidecar"
        );
        assert_eq!(choose_container("p", &two, Some("init")).unwrap(), "init");
        let annotated = pod(&["app", "sidecar"], Some("sidecar"));
        assert_eq!(choose_container("p", &annotated, None).unwrap(), "sidecar");
        // An annotation naming a container that does not exist is ignored.
        let stale = pod(&["app", "sidecar"], Some("gone"));
        assert!(choose_container("p", &stale, None).is_err());
    }

    #[test]
    fn a_missing_container_is_named_with_the_ones_there() {
        let err = choose_container("p", &pod(&["app"], None), Some("db"))
            .unwrap_err()
            .to_string();
        assert_eq!(err, r#"pod p has no container "db" (containers: app)"#);
    }

    #[test]
    fn targets_are_pod_names() {
        assert_eq!(pod_name("web-1").unwrap(), "web-1");
        assert_eq!(pod_name("pod/web-1").unwrap(), "web-1");
        assert_eq!(pod_name("pods/web-1").unwrap(), "web-1");
        assert!(
            pod_name("deployment/web")
                .unwrap_err()
                .to_string()
                .contains("only pods")
        );
        assert!(pod_name("").is_err());
        assert!(pod_name("pod/").is_err());
        assert!(pod_name("pod/a/b").is_err());
    }
}
