//! `kite dev` (alias `kite watch`): runs a controller like `kite run` and replaces it
//! whenever the script or a file it loads changes; a version that fails its check,
//! evaluation or start leaves the previous one running.
//!
//! The loop runs on the caller's thread (no runtime worker, so scripts may block):
//! [`watcher`] polls the files, [`version`] checks, evaluates and starts each version,
//! [`printer`] and [`events`] show reconciles with the [`diff`] of their writes.

mod diff;
mod events;
mod printer;
mod version;
mod watcher;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::Duration;

use self::printer::Printer;
use self::version::{Loaded, Version};
use self::watcher::Watcher;
use crate::control::controller::Controller;
use crate::k8s::session::KubeOptions;
use crate::script::permissions::Permissions;

/// How often the files are looked at.
const POLL: Duration = Duration::from_millis(300);

/// How long the files must stay unchanged before a reload: an editor's save is a write
/// and a rename, and both belong to one reload.
const QUIET: Duration = Duration::from_millis(250);

/// Why `kite dev` could not run at all (script problems are shown, not returned).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kite dev: installing signal handlers: {0}")]
    InstallSignals(std::io::Error),
    #[error("kite dev: installing the log subscriber: {0}")]
    InstallLogging(#[from] tracing_subscriber::util::TryInitError),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The `kite dev` flags (those of `kite run`, and `--no-clear`).
#[derive(Debug, Clone)]
pub struct Options {
    pub file: PathBuf,
    /// `--var NAME=VALUE`; read again for each version, as are the var files.
    pub vars: Vec<String>,
    pub var_files: Vec<PathBuf>,
    pub permissions: Permissions,
    pub kube: KubeOptions,
    /// The memory one evaluation may use, in bytes.
    pub memory: usize,
    pub handler_budget: Duration,
    pub grace: Duration,
    /// Clear the screen for each new version (when stdout is a terminal).
    pub clear: bool,
    pub log_json: bool,
    pub verbose: u8,
}

/// A version running as a controller.
struct Running {
    version: Version,
    controller: Controller,
}

/// The loop's state.
struct Dev {
    opts: Options,
    runtime: tokio::runtime::Handle,
    printer: Arc<Printer>,
    watcher: Watcher,
    running: Option<Running>,
    /// The number the next version that runs gets.
    next: u32,
}

/// Runs the reload loop until SIGINT or SIGTERM, then stops the controller within the
/// grace period. Blocks the calling thread, which must not be a runtime worker.
///
/// # Errors
/// Signal handlers or the log subscriber cannot be installed.
pub fn run(opts: Options, runtime: tokio::runtime::Handle) -> Result<()> {
    use std::io::IsTerminal;
    let printer = Arc::new(Printer::new(opts.clear && std::io::stdout().is_terminal()));
    events::install(printer.clone(), opts.log_json, opts.verbose)?;
    let signalled = {
        let _entered = runtime.enter();
        crate::signal::shutdown_signal().map_err(Error::InstallSignals)?
    };
    let (stop_tx, stop_rx) = mpsc::channel::<()>();
    runtime.spawn(async move {
        signalled.await;
        let _ = stop_tx.send(());
    });
    let mut dev = Dev {
        watcher: Watcher::new(QUIET),
        opts,
        runtime,
        printer,
        running: None,
        next: 1,
    };
    dev.watch();
    dev.reload();
    loop {
        match stop_rx.recv_timeout(POLL) {
            Ok(()) | Err(RecvTimeoutError::Disconnected) => break,
            Err(RecvTimeoutError::Timeout) => {}
        }
        if let Some(changed) = dev.watcher.poll() {
            let names: Vec<String> = changed.iter().map(|p| shown(p)).collect();
            dev.printer.say(&format!("reloading {}…", names.join(", ")));
            dev.watch();
            dev.reload();
        }
    }
    dev.stop();
    Ok(())
}

/// A path as messages show it: relative to the working directory when inside it.
fn shown(path: &std::path::Path) -> String {
    crate::script::loader::display_name(path)
}

impl Dev {
    /// Watches what the script loads now (a new version may load other files).
    fn watch(&mut self) {
        let files = watcher::sources(
            &self.opts.file,
            crate::library::library(),
            &self.opts.var_files,
        );
        self.watcher.watch(files);
    }

    /// Loads the script as it is now and, if it is sound, replaces the running version.
    fn reload(&mut self) {
        let loaded =
            version::load(&self.opts, self.next, &self.runtime, &self.printer).and_then(|loaded| {
                match loaded {
                    Loaded::Controller(v) => v.preflight().map(|()| Loaded::Controller(v)),
                    Loaded::Ran => Ok(Loaded::Ran),
                }
            });
        let loaded = match loaded {
            Ok(loaded) => loaded,
            Err(e) => {
                self.printer.say(&e.to_string());
                self.keeping();
                return;
            }
        };
        let previous = self.stop();
        match loaded {
            Loaded::Ran => {
                self.printer.say(&format!(
                    "{} ran to completion (no k8s.control); waiting for changes",
                    shown(&self.opts.file)
                ));
            }
            Loaded::Controller(v) => match v.start(&self.opts) {
                Ok(controller) => {
                    self.next += 1;
                    self.printer
                        .header(&shown(&self.opts.file), v.number, self.watcher.len());
                    self.running = Some(Running {
                        version: *v,
                        controller,
                    });
                }
                Err(e) => {
                    self.printer.say(&e.to_string());
                    self.restart(previous);
                }
            },
        }
    }

    /// Says what keeps running after a version was refused.
    fn keeping(&self) {
        let text = match &self.running {
            Some(r) => format!(
                "keeping the previous version running (version {})",
                r.version.number
            ),
            None => "nothing is running; waiting for a fix".to_owned(),
        };
        self.printer.say(&text);
    }

    /// Starts the previous version again after a newer one failed to start.
    fn restart(&mut self, previous: Option<Version>) {
        let Some(previous) = previous else {
            self.keeping();
            return;
        };
        match previous.start(&self.opts) {
            Ok(controller) => {
                self.printer.say(&format!(
                    "restarted the previous version (version {})",
                    previous.number
                ));
                self.running = Some(Running {
                    version: previous,
                    controller,
                });
            }
            Err(e) => {
                self.printer.say(&format!(
                    "the previous version (version {}) could not start again either: {e}\nnothing is running; waiting for a fix",
                    previous.number
                ));
            }
        }
    }

    /// Stops the running controller, if any, and gives back its version.
    fn stop(&mut self) -> Option<Version> {
        let Running {
            version,
            controller,
        } = self.running.take()?;
        self.runtime.block_on(controller.shutdown(self.opts.grace));
        Some(version)
    }
}
