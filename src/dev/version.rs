//! One version of the script under `kite dev`: checked, evaluated with a fresh host,
//! its kinds resolved, and started (or started again) as a controller.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use starlark::environment::FrozenModule;

use super::Options;
use super::printer::Printer;
use crate::control::controller::{self, Config, Controller};
use crate::control::handlers::Handlers;
use crate::control::request::ControlRequest;
use crate::control::standalone::leader_config;
use crate::control::webhook::WebhookRequest;
use crate::k8s::session::{KubeOptions, Session, SessionCell};
use crate::k8s::write_log::WriteLog;
use crate::script::builtins::os::ScriptExit;
use crate::script::host::Host;
use crate::script::run::Finished;

/// How long resolving one kind may take before the version is refused.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a version cannot run; each message is complete, positions included.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("error: {0}")]
    ReadVars(#[from] crate::script::vars::Error),
    #[error("{0}")]
    Check(#[from] crate::script::check::Error),
    #[error("{0}")]
    Evaluate(#[from] crate::script::run::Error),
    #[error("{0}")]
    TakeHandoff(String),
    #[error("error: the script serves k8s.webhook(...), which kite dev does not run; use kite run")]
    ServeWebhook,
    #[error("error: k8s.control: {0}")]
    Connect(#[from] crate::k8s::session::Error),
    #[error("error: k8s.control: kind {kind:?}: {source}")]
    ResolveKind {
        kind: String,
        source: crate::k8s::discovery::Error,
    },
    #[error("error: k8s.control: resolving kind {kind:?} took longer than {RESOLVE_TIMEOUT:?}")]
    ResolveTimedOut { kind: String },
    #[error("error: k8s.control: {0}")]
    Start(#[from] controller::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A script version that asked to be a controller, evaluated and frozen; it can be
/// started again after a newer version failed to start.
pub struct Version {
    pub number: u32,
    host: Arc<Host>,
    request: ControlRequest,
    module: FrozenModule,
    positions: HashMap<String, String>,
}

/// What evaluating a version gave.
pub enum Loaded {
    Controller(Box<Version>),
    /// The script ran to completion (it is not a controller).
    Ran,
}

/// Checks the script (parse and lint errors), then evaluates its top level with a
/// fresh host whose writes are shown by `printer`.
///
/// # Errors
/// The first problem found, rendered with its file:line:col.
pub fn load(
    opts: &Options,
    number: u32,
    runtime: &tokio::runtime::Handle,
    printer: &Arc<Printer>,
) -> Result<Loaded> {
    let library = crate::library::library();
    crate::script::check::check(library, &opts.file)?;
    let vars = crate::script::vars::Vars::from_args(&opts.vars, &opts.var_files)?;
    let mut host = Host::new(library, vars, opts.permissions, runtime.clone())
        .with(opts.kube.clone())
        .with(crate::script::builtins::ssh::DryRun(opts.kube.dry_run));
    host.limits.memory = opts.memory;
    let host = Arc::new(host);
    let shown = printer.clone();
    host.ext::<WriteLog>()
        .observe(Box::new(move |obj| shown.wrote(obj)));
    // Called on the loop's own thread, which is no runtime worker: builtins may block.
    let (handoff, module, positions) = match crate::script::run::run(&opts.file, &host)? {
        Finished::Done => return Ok(Loaded::Ran),
        Finished::HandedOff {
            handoff,
            module,
            positions,
            ..
        } => (handoff, module, positions),
    };
    if handoff.holds::<ScriptExit>() {
        return Ok(Loaded::Ran);
    }
    if WebhookRequest::in_handoff(&handoff) {
        return Err(Error::ServeWebhook);
    }
    let request = ControlRequest::from_handoff(handoff).map_err(Error::TakeHandoff)?;
    // Taken here once so that a version without handlers is refused before it replaces
    // the running one.
    Handlers::of_script(module.clone(), positions.clone()).map_err(Error::TakeHandoff)?;
    Ok(Loaded::Controller(Box::new(Version {
        number,
        host,
        request,
        module,
        positions,
    })))
}

impl Version {
    fn session(&self) -> Result<Arc<Session>> {
        Ok(self.host.ext::<SessionCell>().get(
            &self.request.session,
            &self.host.ext::<KubeOptions>(),
            &self.host.runtime,
        )?)
    }

    /// Resolves every kind the controller watches, so that a version naming an unknown
    /// kind is refused while the previous one still runs.
    ///
    /// # Errors
    /// The connection, or a kind the cluster does not serve.
    pub fn preflight(&self) -> Result<()> {
        let session = self.session()?;
        let spec = &self.request.spec;
        let kinds = std::iter::once(&spec.kind)
            .chain(&spec.watch_owned)
            .chain(&spec.watch_related);
        for kind in kinds {
            // The timer needs the runtime: it is made inside the future.
            let resolved = self.host.runtime.block_on(async {
                tokio::time::timeout(RESOLVE_TIMEOUT, session.discovery.resolve(kind)).await
            });
            match resolved {
                Ok(Ok(_)) => {}
                Ok(Err(source)) => {
                    return Err(Error::ResolveKind {
                        kind: kind.clone(),
                        source,
                    });
                }
                Err(_) => return Err(Error::ResolveTimedOut { kind: kind.clone() }),
            }
        }
        Ok(())
    }

    /// Starts this version as a controller, as `kite run` would (without its health
    /// server: a restarting dev loop has no stable port to offer).
    ///
    /// # Errors
    /// The connection, an unknown kind, or a worker thread that cannot start.
    pub fn start(&self, opts: &Options) -> Result<Controller> {
        let session = self.session()?;
        let handlers = Handlers::of_script(self.module.clone(), self.positions.clone())
            .map_err(Error::TakeHandoff)?;
        let spec = self.request.spec.clone();
        if spec.health_port.is_some() {
            tracing::info!("kite dev does not serve health_port; kite run does");
        }
        let leader = leader_config(&spec, &opts.file);
        let file = opts
            .file
            .file_name()
            .and_then(|s| s.to_str())
            .unwrap_or("script");
        let config = Config {
            name: format!("{file}/{}", spec.kind),
            spec,
            handlers,
            host: self.host.clone(),
            session,
            handler_budget: opts.handler_budget,
            leader,
            outer_lease: None,
            informers: None,
            pool: None,
        };
        Ok(self.host.runtime.block_on(Controller::start(config))?)
    }
}
