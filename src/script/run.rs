//! `kite run`: parse a script, evaluate it, call `main()` if it defines one and never
//! calls it, and report errors with file:line:col, the source snippet and a traceback.

use std::io::Write;
use std::path::{Path, PathBuf};

use starlark::PrintHandler;
use starlark::environment::{FrozenModule, Module};
use starlark::eval::Evaluator;
use starlark::syntax::AstModule;

use super::builtins::globals;
use super::host::{ControlRequest, Host};
use super::loader::{LoadCache, Loader, dialect, display_name};
use super::syntax;
use crate::control::handlers::Handlers;

/// Why a run failed, which decides the exit code.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The script file could not be read (a usage error: exit code 2).
    #[error("cannot read {path}: {source}")]
    ReadScript {
        path: String,
        source: std::io::Error,
    },
    /// The script failed to parse or raised an error (exit code 1). The message is the
    /// fully rendered diagnostic.
    #[error("{0}")]
    Script(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::ReadScript { .. } => 2,
            Error::Script(_) => 1,
        }
    }
}

/// Writes `print()` output to stdout a line at a time, so it interleaves correctly
/// with other processes' output and shows up as it happens.
pub struct StdoutPrinter;

impl PrintHandler for StdoutPrinter {
    fn println(&self, text: &str) -> starlark::Result<()> {
        let mut out = std::io::stdout().lock();
        // A closed stdout must not kill the controller; the line is simply lost.
        let _ = writeln!(out, "{text}").and_then(|_| out.flush());
        Ok(())
    }
}

/// Parses a script file.
///
/// # Errors
/// [`Error::ReadScript`] or the rendered syntax error.
pub fn parse(path: &Path) -> Result<(AstModule, String)> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::ReadScript {
        path: path.display().to_string(),
        source,
    })?;
    let full = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    let ast = AstModule::parse(&display_name(&full), text.clone(), &dialect())
        .map_err(|e| Error::Script(e.to_string()))?;
    Ok((ast, text))
}

/// How a script run ended.
pub enum Finished {
    /// The script ran to completion.
    Done,
    /// The script called `k8s.control(...)`: the controller to start, with the script's
    /// frozen handlers.
    Controller {
        request: Box<ControlRequest>,
        handlers: Handlers,
    },
}

/// Runs the script at `path` until it finishes or calls `k8s.control(...)`.
///
/// # Errors
/// A parse or evaluation error, rendered for the terminal.
pub fn run(path: &Path, host: &Host) -> Result<Finished> {
    let (ast, source) = parse(path)?;
    let calls_main = syntax::calls(&ast, "main");
    let cache = LoadCache::default();
    let loader = Loader {
        dir: script_dir(path),
        cache: &cache,
        host,
    };
    let result = Module::with_temp_heap(|module| -> starlark::Result<Option<FrozenModule>> {
        let evaluated = {
            let mut eval = Evaluator::new(&module);
            eval.extra = Some(host);
            eval.set_loader(&loader);
            eval.set_print_handler(&StdoutPrinter);
            eval.eval_module(ast, globals()).and_then(|_| {
                let main = module.get("main").filter(|m| m.get_type() == "function");
                match (calls_main, main) {
                    (false, Some(main)) => eval.eval_function(main, &[], &[]).map(|_| ()),
                    _ => Ok(()),
                }
            })
        };
        match evaluated {
            // k8s.control() unwinds the script with an error once it has recorded the
            // controller; anything else is a real error.
            Err(_) if host.control_requested() => {}
            Err(e) => return Err(e),
            Ok(()) if !host.control_requested() => return Ok(None),
            Ok(()) => {}
        }
        module
            .freeze()
            .map(Some)
            .map_err(|e| starlark::Error::new_other(anyhow::anyhow!("freezing the script: {e:?}")))
    });
    for name in host.vars.unused(&source) {
        eprintln!("warning: --var {name} is never read by the script");
    }
    let frozen = result.map_err(|e| Error::Script(e.to_string()))?;
    let (Some(frozen), Some(request)) = (frozen, host.take_control()) else {
        return Ok(Finished::Done);
    };
    let handlers = Handlers::from_module(frozen)
        .ok_or_else(|| Error::Script(format!("error: {}", crate::k8s::module::CONTROL_STARTED)))?;
    Ok(Finished::Controller {
        request: Box::new(request),
        handlers,
    })
}

fn script_dir(path: &Path) -> PathBuf {
    let full = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    full.parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from("."))
}
