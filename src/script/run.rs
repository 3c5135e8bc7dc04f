//! `kite run`: parse a script, evaluate it, call `main()` if it defines one and never
//! calls it, and report errors with file:line:col, the source snippet and a traceback.

use std::cell::Cell;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use starlark::environment::{FrozenModule, Module};
use starlark::eval::Evaluator;
use starlark::syntax::AstModule;

use super::budget::Cancel;
use super::builtins::lifecycle::{self, Signals};
use super::builtins::os::ScriptExit;
use super::host::Host;
use super::loader::{LoadCache, Loader, dialect, display_name};
use super::syntax;
use super::{budget, memory};

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
    /// A signal the script handles (`on_signal`) stopped it (exit code 128 + its number).
    #[error("{}: the script was stopped", lifecycle::signal_name(*.0))]
    Signal(i32),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The process exit code for this error.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::ReadScript { .. } => 2,
            Error::Script(_) => 1,
            Error::Signal(signo) => u8::try_from(128 + signo).unwrap_or(1),
        }
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
    /// A builtin handed something over and stopped the script (`k8s.control(...)`
    /// hands over the controller to start); the frozen module holds what it refers to.
    HandedOff {
        handoff: super::host::Handoff,
        module: FrozenModule,
        /// Where each function of the script is defined (`name` to `file:line:col`).
        positions: std::collections::HashMap<String, String>,
        /// Bytes the evaluation allocated and did not free: what the module keeps,
        /// its values' Rust-side parts included (0 without the counting allocator).
        kept: usize,
    },
}

/// Runs the script at `path` until it finishes or a builtin hands over (`k8s.control`).
///
/// # Errors
/// A parse or evaluation error, rendered for the terminal.
pub fn run(path: &Path, host: &Host) -> Result<Finished> {
    let (ast, source) = parse(path)?;
    let name = display_name(&path.canonicalize().unwrap_or_else(|_| path.to_path_buf()));
    evaluate(ast, &name, &source, Some(script_dir(path)), host, None)
}

/// Runs script text that has no file (a StarlarkController's script), shown as `name`
/// in messages. Only `load("k8s", ...)` works: there is no directory to load files from.
/// Evaluation is cancelled after `budget`, so a looping script cannot hold its thread.
///
/// # Errors
/// A parse or evaluation error, rendered for the terminal.
pub fn run_text(name: &str, text: &str, host: &Host, budget: Duration) -> Result<Finished> {
    let ast = AstModule::parse(name, text.to_owned(), &dialect())
        .map_err(|e| Error::Script(e.to_string()))?;
    evaluate(ast, name, text, None, host, Some(budget))
}

fn evaluate(
    ast: AstModule,
    name: &str,
    source: &str,
    dir: Option<PathBuf>,
    host: &Host,
    budget: Option<Duration>,
) -> Result<Finished> {
    let deadline = budget.map(|b| Instant::now() + b);
    let calls_main = syntax::calls(&ast, "main");
    let positions = syntax::def_positions(&ast);
    let cache = LoadCache::default();
    let loader = Loader {
        dir,
        cache: &cache,
        host,
    };
    let over_memory = Cell::new(false);
    // A signal the script handles stops it (see `lifecycle`); its cleanup then runs
    // within a grace period of its own.
    let caught = host.ext::<Signals>().flag();
    let cleaning = Arc::new(AtomicBool::new(false));
    let grace: Cell<Option<Instant>> = Cell::new(None);
    let evaluate = || {
        Module::with_temp_heap(|module| -> starlark::Result<Option<FrozenModule>> {
            let evaluated = {
                let mut eval = Evaluator::new(&module);
                eval.extra = Some(host);
                eval.set_loader(&loader);
                eval.set_print_handler(&host.printer);
                lifecycle::open(&module);
                // Only fails when already set, which it is not on a new evaluator.
                let _ = eval.set_max_heap_size(host.limits.memory);
                // Memory outside Starlark's heap (a dict's table) is checked here too.
                let over_memory = &over_memory;
                let (signal, cleaned, grace) = (caught.clone(), cleaning.clone(), &grace);
                eval.set_check_cancelled(Box::new(move || {
                    if memory::exhausted() {
                        over_memory.set(true);
                        return true;
                    }
                    if let Some(g) = grace.get() {
                        return Instant::now() >= g;
                    }
                    let signalled = signal.load(Ordering::Relaxed) != 0;
                    // A builtin's narrower budget (`budget::within`) cancels too.
                    (signalled && !cleaned.load(Ordering::Relaxed))
                        || deadline.is_some_and(|d| Instant::now() >= d)
                        || budget::check().is_err()
                }));
                let outcome = eval.eval_module(ast, host.library.globals()).and_then(|_| {
                    let main = module.get("main").filter(|m| m.get_type() == "function");
                    match (calls_main, main) {
                        (false, Some(main)) => eval.eval_function(main, &[], &[]).map(|_| ()),
                        _ => Ok(()),
                    }
                });
                cleanup(&mut eval, host, &cleaning, grace);
                outcome
            };
            match evaluated {
                // A builtin that hands over (k8s.control) unwinds the script with an
                // error once it has recorded what it hands over; anything else is a real
                // error.
                Err(_) if host.handed_off() => {}
                Err(e) => return Err(e),
                Ok(()) if !host.handed_off() => return Ok(None),
                Ok(()) => {}
            }
            module.freeze().map(Some).map_err(|e| {
                starlark::Error::new_other(anyhow::anyhow!("freezing the script: {e:?}"))
            })
        })
    };
    // Blocking builtins at the top level wake up at the deadline, or at a handled
    // signal, too.
    let kept = Cell::new(0);
    let scoped = || {
        let stop = {
            let (caught, cleaning) = (caught.clone(), cleaning.clone());
            Cancel::new(move || {
                caught.load(Ordering::Relaxed) != 0 && !cleaning.load(Ordering::Relaxed)
            })
        };
        let result = budget::scope(
            budget::Budget {
                deadline: deadline.unwrap_or_else(far_future),
                stop: Some(stop),
            },
            evaluate,
        );
        // The evaluation's own heap is gone by now: what is left is the frozen module.
        kept.set(memory::used());
        result
    };
    // A refused allocation has no position of its own: the script is named instead.
    let result = memory::guard_with(host.limits.memory, host.limits.overrun, scoped)
        .map_err(|e| Error::Script(format!("error: {e} (--script-memory)\n --> {name}\n")))?;
    for name in host.vars.unused(source) {
        eprintln!("warning: --var {name} is never read by the script");
    }
    if let Some(signo) = host.ext::<Signals>().caught() {
        return Err(Error::Signal(signo));
    }
    let frozen =
        result.map_err(|e| failure(&e, name, host, over_memory.get(), (budget, deadline)))?;
    let (Some(frozen), Some(handoff)) = (frozen, host.take_handoff()) else {
        return Ok(Finished::Done);
    };
    Ok(Finished::HandedOff {
        handoff,
        module: frozen,
        positions,
        kept: kept.get(),
    })
}

/// The error of a top level that failed: over its memory, over its time `budget`, or
/// the script's own.
fn failure(
    e: &starlark::Error,
    name: &str,
    host: &Host,
    over_memory: bool,
    (budget, deadline): (Option<Duration>, Option<Instant>),
) -> Error {
    match (budget, deadline) {
        _ if over_memory => Error::Script(format!(
            "error: {} (--script-memory)\n --> {name}\n",
            memory::Exceeded {
                limit: host.limits.memory
            }
        )),
        // Cancellation carries no position of its own: name the script and the budget.
        (Some(b), Some(d)) if Instant::now() >= d => Error::Script(format!(
            "error: the script's top level ran longer than {} and was cancelled (a loop that never ends?)\n --> {name}\n",
            crate::duration::format(b)
        )),
        _ => Error::Script(e.to_string()),
    }
}

/// How long a handled signal leaves its handler and the deferred functions.
const SIGNAL_GRACE: Duration = Duration::from_secs(10);

/// A deadline that never comes, for a run without a time budget.
fn far_future() -> Instant {
    let now = Instant::now();
    now.checked_add(Duration::from_hours(10 * 365 * 24))
        .unwrap_or(now + Duration::from_hours(24))
}

/// The end of the script's own run: the handler of a signal that stopped it, then its
/// deferred functions, unless it handed over a controller (whose deferred functions run
/// when it stops). Their errors are reported, not raised.
fn cleanup(
    eval: &mut Evaluator<'_, '_, '_>,
    host: &Host,
    cleaning: &AtomicBool,
    grace: &Cell<Option<Instant>>,
) {
    let signalled = host.ext::<Signals>().caught();
    if signalled.is_none() && host.handed_off_besides::<ScriptExit>() {
        return;
    }
    cleaning.store(true, Ordering::Relaxed);
    let mut run = || {
        if let Some(signo) = signalled
            && let Err(e) = lifecycle::call_handler(eval, signo)
        {
            eprintln!("warning: the on_signal handler failed: {e}");
        }
        for e in lifecycle::run_deferred(eval) {
            eprintln!("warning: a deferred function failed: {e}");
        }
    };
    if signalled.is_some() {
        let until = Instant::now() + SIGNAL_GRACE;
        grace.set(Some(until));
        let scope = budget::Budget {
            deadline: until,
            stop: None,
        };
        budget::scope(scope, run);
    } else {
        run();
    }
}

/// One line for a rendered diagnostic: `file:line:col: message`, from its `error:` line
/// and its `-->` position (the innermost one), for status fields and summaries.
pub fn summary(rendered: &str) -> String {
    let message = rendered
        .lines()
        .find_map(|l| l.strip_prefix("error: "))
        .or_else(|| rendered.lines().find(|l| !l.trim().is_empty()))
        .unwrap_or_default()
        .trim();
    let line = match position(rendered) {
        Some(p) if !message.contains(&p) => format!("{p}: {message}"),
        _ => message.to_owned(),
    };
    line.chars().take(1000).collect()
}

/// The innermost `file:line:col` of a rendered diagnostic (its `-->` line).
pub fn position(rendered: &str) -> Option<String> {
    rendered
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("--> "))
        .map(|p| p.trim().to_owned())
}

fn script_dir(path: &Path) -> PathBuf {
    let full = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    full.parent()
        .map_or_else(|| PathBuf::from("."), Path::to_path_buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summaries_name_the_innermost_position() {
        let rendered = "Traceback (most recent call last):\n  * e1.star:5, in main\n      f({})\nerror: Key `\"a\"` was not found\n --> e1.star:2:12\n  |\n";
        assert_eq!(summary(rendered), "e1.star:2:12: Key `\"a\"` was not found");
        assert_eq!(
            summary("error: Parse error: x\n--> e2.star:1:1\n"),
            "e2.star:1:1: Parse error: x"
        );
        assert_eq!(summary("plain failure"), "plain failure");
    }
}
