//! Loading a controller script for a test and driving its queue: settle the informers
//! on the fake cluster, take keys, move the clock.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::control::controller::Config;
use crate::control::handlers::Handlers;
use crate::control::manual::{Manual, Step};
use crate::control::request::ControlRequest;
use crate::fake_cluster::FakeCluster;
use crate::k8s::session::{Session, SessionCell};
use crate::script::host::Host;
use crate::script::run::Finished;
use crate::script::vars::Vars;

/// Why a controller could not be loaded or driven.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: no such script")]
    FindScript { path: String },
    #[error("loading {path}:\n{message}")]
    LoadScript { path: String, message: String },
    #[error("{path} never calls k8s.control(...), so there is no controller to test")]
    FindControl { path: String },
    #[error("starting the controller of {path}: {message}")]
    Start { path: String, message: String },
    #[error(
        "the informers did not catch up with the fake cluster within {}s",
        .0.as_secs()
    )]
    Settle(Duration),
    #[error(
        "still busy after {0} reconciles (a reconcile that always writes, or always requeues at once?); last keys: {1}"
    )]
    Busy(usize, String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How long the informers get to see the fake cluster's latest writes.
const SETTLE: Duration = Duration::from_secs(10);

/// A loaded controller and the fake cluster it runs against.
pub struct Driver {
    pub manual: Manual,
    pub fake: FakeCluster,
    pub script: String,
    /// The namespace names without one resolve to.
    pub default_namespace: String,
    /// The controller's host: its `print()` lines are captured for the reports.
    pub host: Arc<Host>,
    runtime: tokio::runtime::Handle,
}

/// Where `path` is: absolute, beside the calling test file, or from the working directory.
pub fn locate(path: &str, caller: Option<&str>) -> Result<PathBuf> {
    let given = Path::new(path);
    let mut candidates = Vec::new();
    if given.is_absolute() {
        candidates.push(given.to_path_buf());
    } else {
        if let Some(dir) = caller.map(Path::new).and_then(Path::parent) {
            candidates.push(dir.join(given));
        }
        candidates.push(given.to_path_buf());
    }
    candidates
        .into_iter()
        .find(|p| p.is_file())
        .ok_or_else(|| Error::FindScript {
            path: path.to_owned(),
        })
}

impl Driver {
    /// Evaluates the script's top level with `vars` against `fake` and starts its
    /// controller without workers. Runs on the calling thread (not a runtime worker).
    ///
    /// # Errors
    /// A script error, no `k8s.control`, an unknown kind.
    pub fn load(
        path: &Path,
        vars: Vec<(String, String)>,
        fake: FakeCluster,
        default_namespace: &str,
        caller: &Host,
    ) -> Result<Self> {
        let shown = path.display().to_string();
        let runtime = caller.runtime.clone();
        // The script reaches only the fake cluster (its session is pinned there and
        // other kubeconfigs are refused), so it may use k8s whatever the test's flags.
        let mut permissions = caller.permissions;
        permissions.k8s = true;
        let mut host = Host::new(
            super::library(),
            Vars::from_map(vars),
            permissions,
            runtime.clone(),
        );
        host.limits = caller.limits.clone();
        host.printer = crate::script::printer::Printer::capturing();
        let host = Arc::new(host);
        let session = {
            // kube's client spawns its request buffer on the runtime.
            let _entered = runtime.enter();
            Arc::new(
                Session::from_client(
                    fake.client(default_namespace),
                    default_namespace.to_owned(),
                    false,
                )
                .with_immediate_events(),
            )
        };
        host.ext::<SessionCell>().pin(session.clone());
        let finished = crate::script::run::run(path, &host).map_err(|e| Error::LoadScript {
            path: shown.clone(),
            message: e.to_string(),
        })?;
        let Finished::HandedOff {
            handoff,
            module,
            positions,
            ..
        } = finished
        else {
            return Err(Error::FindControl { path: shown });
        };
        let load_err = |message: String| Error::LoadScript {
            path: shown.clone(),
            message,
        };
        let request = ControlRequest::from_handoff(handoff).map_err(load_err)?;
        let handlers = Handlers::of_script(module, positions).map_err(load_err)?;
        let name = format!(
            "{}/{}",
            path.file_name()
                .and_then(|s| s.to_str())
                .unwrap_or("script"),
            request.spec.kind
        );
        let config = Config {
            name,
            spec: request.spec,
            handlers,
            host: host.clone(),
            session,
            handler_budget: Duration::from_mins(1),
            leader: None,
            outer_lease: None,
            informers: None,
            pool: None,
        };
        let manual = crate::script::budget::block_on(&runtime, Manual::start(config))
            .map_err(|e| Error::Start {
                path: shown.clone(),
                message: e.to_string(),
            })?
            .map_err(|e| Error::Start {
                path: shown.clone(),
                message: e.to_string(),
            })?;
        let driver = Self {
            manual,
            fake,
            script: shown,
            default_namespace: default_namespace.to_owned(),
            host,
            runtime,
        };
        driver.settle()?;
        // The top level's lines (a banner) belong to no reconcile.
        driver.host.printer.take();
        Ok(driver)
    }

    /// Waits until every informer has listed and seen every write the fake cluster
    /// has taken, so the queue holds all the work those writes cause.
    ///
    /// # Errors
    /// [`Error::Settle`] when that takes longer than a few seconds.
    pub fn settle(&self) -> Result<()> {
        let deadline = Instant::now() + SETTLE;
        loop {
            if self.manual.synced()
                && self.fake.open_watches() >= self.manual.informers()
                && self.fake.watches_caught_up()
            {
                return Ok(());
            }
            if Instant::now() >= deadline {
                return Err(Error::Settle(SETTLE));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// The namespace and name a script names: `name`, `namespace/name`, or a manifest.
    pub fn key_of(&self, namespace: Option<&str>, name: &str) -> (String, String) {
        if !self.manual.namespaced() {
            return (String::new(), name.to_owned());
        }
        if let Some((ns, n)) = name.split_once('/') {
            return (ns.to_owned(), n.to_owned());
        }
        let ns = namespace
            .or(self.manual.namespace())
            .unwrap_or(&self.default_namespace);
        (ns.to_owned(), name.to_owned())
    }

    /// Reconciles one primary now (as a watch event would ask), after the informers
    /// settle; `None` when the informer has no such object.
    ///
    /// # Errors
    /// As [`settle`](Self::settle).
    pub fn reconcile(&self, namespace: &str, name: &str) -> Result<Option<Step>> {
        self.settle()?;
        if self.manual.cached(namespace, name).is_none() {
            return Ok(None);
        }
        self.manual.kick(namespace, name, "test");
        let step = self.manual.step_key(namespace, name);
        self.settle()?;
        Ok(step)
    }

    /// Processes every ready key (and the work each causes) until none is left.
    ///
    /// # Errors
    /// [`Error::Busy`] after `max` steps; [`Error::Settle`].
    pub fn run_until_idle(&self, max: usize, each: &mut dyn FnMut(Step, u64)) -> Result<()> {
        let mut last = Vec::new();
        for _ in 0..max {
            self.settle()?;
            let seq = self.fake.write_seq();
            let Some(step) = self.manual.step() else {
                return Ok(());
            };
            last.push(step.key.clone());
            if last.len() > 5 {
                last.remove(0);
            }
            each(step, seq);
        }
        self.settle()?;
        if self.manual.step().is_none() {
            return Ok(());
        }
        Err(Error::Busy(max, last.join(", ")))
    }

    /// Deletes a primary in the fake cluster, then processes what that causes for it.
    ///
    /// # Errors
    /// The fake cluster's answer (not found), as text.
    pub fn delete(&self, namespace: &str, name: &str) -> Result<(), String> {
        crate::script::budget::block_on(&self.runtime, self.manual.delete(namespace, name))
            .map_err(|e| e.to_string())?
            .map_err(|e| e.to_string())
    }
}
