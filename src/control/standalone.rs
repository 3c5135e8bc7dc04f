//! `kite run` in controller mode: one controller in this process, its health server,
//! and shutdown on SIGTERM or SIGINT (a second signal exits at once).

use std::net::{IpAddr, SocketAddr};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::controller::{self, Config, Controller};
use super::handlers::Handlers;
use super::leader::{self, LeaderConfig};
use super::request::ControlRequest;
use crate::k8s::session::{KubeOptions, SessionCell};
use crate::script::host::Host;

/// Why the controller could not run.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("k8s.control: {0}")]
    Connect(#[from] crate::k8s::session::Error),
    #[error("k8s.control: {0}")]
    Start(#[from] controller::Error),
    #[error("k8s.control: health_port: {0}")]
    Health(#[from] crate::http::Error),
    #[error("k8s.control: installing signal handlers: {0}")]
    Signals(std::io::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The `kite run` flags that shape a controller.
#[derive(Debug, Clone)]
pub struct Options {
    pub handler_budget: Duration,
    pub grace: Duration,
    pub health_bind: IpAddr,
    /// The script, for the default leader-election lease name.
    pub script: std::path::PathBuf,
}

/// `kite-<script>-<kind>`, as a valid object name.
pub fn default_lease_name(script: &Path, kind: &str) -> String {
    let stem = script
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or("script");
    let raw = format!("kite-{stem}-{kind}").to_ascii_lowercase();
    let mut name: String = raw
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    name.truncate(63);
    name.trim_matches('-').to_owned()
}

/// The namespace this process runs in, when in a cluster.
pub fn own_namespace() -> Option<String> {
    std::env::var("POD_NAMESPACE")
        .ok()
        .filter(|s| !s.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
                .ok()
                .map(|s| s.trim().to_owned())
                .filter(|s| !s.is_empty())
        })
}

/// The lease `spec` contends for with `leader_election=True` (named after `script` and
/// the kind unless `leader_election_id` names it), or None.
pub fn leader_config(spec: &super::spec::ControlSpec, script: &Path) -> Option<LeaderConfig> {
    spec.leader_election.then(|| {
        let name = spec
            .leader_election_id
            .clone()
            .unwrap_or_else(|| default_lease_name(script, &spec.kind));
        let namespace = spec
            .leader_election_namespace
            .clone()
            .or_else(|| spec.namespace.clone())
            .or_else(own_namespace)
            .unwrap_or_else(|| "default".to_owned());
        let identity = spec
            .identity
            .clone()
            .unwrap_or_else(leader::default_identity);
        LeaderConfig::new(name, namespace, identity)
    })
}

/// Runs the controller until a signal arrives, then shuts it down gracefully.
/// Blocks the calling thread, which must not be a runtime worker.
///
/// # Errors
/// Connection set-up, an unknown kind, a busy health port, or signal set-up.
pub fn run(
    host: Arc<Host>,
    request: ControlRequest,
    handlers: Handlers,
    opts: Options,
) -> Result<()> {
    let runtime = host.runtime.clone();
    let session =
        (host.ext::<SessionCell>()).get(&request.session, &host.ext::<KubeOptions>(), &runtime)?;
    let spec = request.spec;
    let leader = leader_config(&spec, &opts.script);
    let health_port = spec.health_port;
    let name = format!(
        "{}/{}",
        opts.script
            .file_name()
            .and_then(|s| s.to_str())
            .unwrap_or("script"),
        spec.kind
    );
    runtime.block_on(async move {
        let signalled = crate::signal::shutdown_signal().map_err(Error::Signals)?;
        let config = Config {
            name,
            spec,
            handlers,
            host,
            session,
            handler_budget: opts.handler_budget,
            leader,
            outer_lease: None,
            informers: None,
            pool: None,
        };
        let controller = Controller::start(config).await?;
        let (stop_http, http_stopped) = tokio::sync::oneshot::channel::<()>();
        if let Some(port) = health_port {
            let addr = SocketAddr::new(opts.health_bind, port);
            let (bound, serve) = crate::http::bind(addr, controller.probe(), async {
                let _ = http_stopped.await;
            })
            .await?;
            tracing::info!(%bound, "serving /healthz, /readyz and /metrics");
            tokio::spawn(serve);
        }
        signalled.await;
        controller.shutdown(opts.grace).await;
        let _ = stop_http.send(());
        Ok(())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lease_names_are_valid_object_names() {
        assert_eq!(
            default_lease_name(
                Path::new("examples/max-replicas-controller.star"),
                "deployments"
            ),
            "kite-max-replicas-controller-deployments"
        );
        assert_eq!(
            default_lease_name(Path::new("My_Ctrl.star"), "widgets.example.com"),
            "kite-my-ctrl-widgets-example-com"
        );
        assert!(default_lease_name(Path::new(&"x".repeat(100)), "pods").len() <= 63);
    }
}
