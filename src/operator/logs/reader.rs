//! `kite logs`: reads a StarlarkController's log from the logs API with the user's
//! own kubeconfig, as `kubectl logs` reads a pod's.

use std::time::Duration;

use futures::AsyncReadExt as _;
use tokio::io::AsyncWriteExt as _;

use super::{GROUP, VERSION};

/// What `kite logs` was asked for.
#[derive(Debug, Clone, Default)]
pub struct Request {
    /// `slc/NAME`, `cslc/NAME` (or the long kind names).
    pub target: String,
    /// The StarlarkController's namespace (default: the kubeconfig's).
    pub namespace: Option<String>,
    pub follow: bool,
    pub since: Option<Duration>,
    pub tail: Option<usize>,
    pub timestamps: bool,
}

/// Why `kite logs` failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "{0:?} names no StarlarkController: use slc/NAME or cslc/NAME (starlarkcontroller/NAME, clusterstarlarkcontroller/NAME)"
    )]
    ParseTarget(String),
    #[error("reading the log of {what}: {}", explain(.source))]
    Read { what: String, source: kube::Error },
    #[error("reading the log of {what}: {source}")]
    Stream {
        what: String,
        source: std::io::Error,
    },
}

/// What the API server's refusal means for `kite logs`.
fn explain(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if s.code == 404 && s.message.contains("page not found") => {
            format!(
                "the API server does not serve {GROUP}: no kite operator runs with --logs-port (or the aggregation layer is off)"
            )
        }
        kube::Error::Api(s) if s.code == 503 => format!(
            "the logs API is registered, but its operator does not answer (kubectl get apiservice {VERSION}.{GROUP}): {}",
            s.message
        ),
        kube::Error::Api(s) => s.message.clone(),
        other => other.to_string(),
    }
}

/// The API path of the log `request` names, and what to call it in messages.
///
/// # Errors
/// [`Error::ParseTarget`] for anything but `slc/NAME` or `cslc/NAME`.
pub fn path(request: &Request, default_namespace: &str) -> Result<(String, String), Error> {
    let bad = || Error::ParseTarget(request.target.clone());
    let (kind, name) = request.target.split_once('/').ok_or_else(bad)?;
    if name.is_empty() || name.contains('/') {
        return Err(bad());
    }
    let base = format!("/apis/{GROUP}/{VERSION}");
    let (path, what) = match kind.to_ascii_lowercase().as_str() {
        "slc" | "starlarkcontroller" | "starlarkcontrollers" => {
            let ns = request.namespace.as_deref().unwrap_or(default_namespace);
            (
                format!("{base}/namespaces/{ns}/starlarkcontrollers/{name}/log"),
                format!("StarlarkController {ns}/{name}"),
            )
        }
        "cslc" | "clusterstarlarkcontroller" | "clusterstarlarkcontrollers" => (
            format!("{base}/clusterstarlarkcontrollers/{name}/log"),
            format!("ClusterStarlarkController {name}"),
        ),
        _ => return Err(bad()),
    };
    let mut query = form_urlencoded::Serializer::new(String::new());
    if request.follow {
        query.append_pair("follow", "true");
    }
    if request.timestamps {
        query.append_pair("timestamps", "true");
    }
    if let Some(t) = request.tail {
        query.append_pair("tailLines", &t.to_string());
    }
    if let Some(s) = request.since {
        query.append_pair("sinceSeconds", &s.as_secs().max(1).to_string());
    }
    let query = query.finish();
    let path = if query.is_empty() {
        path
    } else {
        format!("{path}?{query}")
    };
    Ok((path, what))
}

/// Writes the log to stdout; with `follow`, until the controller is gone or the
/// process is stopped.
///
/// # Errors
/// A bad target, or the API server's refusal (its message says why: 403 when the
/// caller may not read it, 404 when it does not run, 503 when no operator serves logs).
pub async fn reader(client: kube::Client, request: &Request) -> Result<(), Error> {
    let (path, what) = path(request, client.default_namespace())?;
    let http = hyper::Request::get(&path)
        .body(Vec::new())
        .map_err(|e| Error::Read {
            what: what.clone(),
            source: kube::Error::HttpError(e),
        })?;
    let mut body = client
        .request_stream(http)
        .await
        .map_err(|source| Error::Read {
            what: what.clone(),
            source,
        })?;
    let mut out = tokio::io::stdout();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = body.read(&mut buf).await.map_err(|source| Error::Stream {
            what: what.clone(),
            source,
        })?;
        if n == 0 {
            return Ok(());
        }
        // A closed stdout (`| head`) ends the command quietly.
        if out.write_all(&buf[..n]).await.is_err() || out.flush().await.is_err() {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(target: &str) -> Request {
        Request {
            target: target.into(),
            ..Request::default()
        }
    }

    #[test]
    fn targets_become_paths() {
        let (p, what) = path(&request("slc/web"), "team").unwrap();
        assert_eq!(
            p,
            "/apis/logs.starkite.io/v1alpha1/namespaces/team/starlarkcontrollers/web/log"
        );
        assert_eq!(what, "StarlarkController team/web");
        let (p, _) = path(
            &Request {
                namespace: Some("other".into()),
                follow: true,
                tail: Some(5),
                since: Some(Duration::from_mins(5)),
                ..request("starlarkcontroller/web")
            },
            "team",
        )
        .unwrap();
        assert_eq!(
            p,
            "/apis/logs.starkite.io/v1alpha1/namespaces/other/starlarkcontrollers/web/log?follow=true&tailLines=5&sinceSeconds=300"
        );
        let (p, _) = path(&request("cslc/all"), "team").unwrap();
        assert!(p.ends_with("/clusterstarlarkcontrollers/all/log"), "{p}");
        for bad in ["web", "pod/web", "slc/", "slc/a/b"] {
            let e = path(&request(bad), "team").unwrap_err().to_string();
            assert!(e.contains("names no StarlarkController"), "{e}");
        }
    }
}
