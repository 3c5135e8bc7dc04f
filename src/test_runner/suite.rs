//! One test file: parsed once, then each `test_*` function runs in a fresh module (the
//! file's top level evaluated again), between `setup()` and `teardown()` when the file
//! defines them, under a time and memory budget.

use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use starlark::PrintHandler;
use starlark::environment::Module;
use starlark::eval::Evaluator;
use starlark::syntax::AstModule;
use starlark_syntax::syntax::ast::StmtP;

use super::assert::{Record, Verdict};
use super::report::{Case, LOAD, Status};
use crate::k8s::session::KubeOptions;
use crate::script::budget::{self, Budget};
use crate::script::host::Host;
use crate::script::library::Library;
use crate::script::loader::{LoadCache, Loader, dialect, display_name};
use crate::script::memory;
use crate::script::permissions::Permissions;
use crate::script::vars::Vars;

/// What every test of a run shares.
pub struct Settings {
    pub library: &'static Library,
    pub permissions: Permissions,
    pub vars: Vec<String>,
    pub var_files: Vec<std::path::PathBuf>,
    pub kube: KubeOptions,
    pub runtime: tokio::runtime::Handle,
    /// Tests whose name does not contain this are left out.
    pub filter: Option<String>,
    /// How long one test (its top level, setup, test and teardown) may run.
    pub timeout: Duration,
    /// The memory one test may use, in bytes.
    pub memory: usize,
}

/// The names of the top-level `def test_*` of a file, in definition order.
pub fn test_names(ast: &AstModule) -> Vec<String> {
    let top: Vec<_> = match &ast.statement().node {
        StmtP::Statements(stmts) => stmts.iter().collect(),
        _ => vec![ast.statement()],
    };
    let mut names: Vec<String> = Vec::new();
    for stmt in top {
        if let StmtP::Def(def) = &stmt.node {
            let name = &def.name.node.ident;
            if name.starts_with("test_") && !names.contains(name) {
                names.push(name.clone());
            }
        }
    }
    names
}

/// Runs the tests of the file at `path` (on the calling thread, which must not be a
/// tokio worker: builtins block on the runtime).
pub fn run_file(path: &Path, settings: &Settings) -> Vec<Case> {
    let full = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    let file = display_name(&full);
    let load_failure = |message: String| Case {
        name: LOAD.to_owned(),
        file: file.clone(),
        status: Status::Failed,
        duration: Duration::ZERO,
        message,
        output: String::new(),
    };
    let ast = match parse(path, &file) {
        Ok(ast) => ast,
        Err(message) => return vec![load_failure(message)],
    };
    let dir = full
        .parent()
        .map_or_else(|| std::path::PathBuf::from("."), Path::to_path_buf);
    let mut cases = Vec::new();
    for name in test_names(&ast) {
        if settings
            .filter
            .as_ref()
            .is_some_and(|f| !name.contains(f.as_str()))
        {
            continue;
        }
        match run_case(&ast, &dir, &name, settings) {
            Ran::Case {
                status,
                message,
                duration,
                output,
            } => cases.push(Case {
                name,
                file: file.clone(),
                status,
                duration,
                message,
                output,
            }),
            // The top level fails the same way for every test: say it once.
            Ran::TopLevel(message) => {
                cases.push(load_failure(message));
                break;
            }
        }
    }
    cases
}

/// Reads and parses a test file, `assert` made parseable (see [`super::source`]).
fn parse(path: &Path, name: &str) -> Result<AstModule, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let text = super::source::rewrite(&text).into_owned();
    AstModule::parse(name, text, &dialect()).map_err(|e| e.to_string())
}

/// How one test's run ended.
enum Ran {
    Case {
        status: Status,
        message: String,
        duration: Duration,
        output: String,
    },
    /// The file's top level failed before the test could start.
    TopLevel(String),
}

/// Collects what a test prints, to show with its result instead of interleaved with
/// other files' output.
#[derive(Default)]
struct Capture(Mutex<String>);

impl PrintHandler for Capture {
    fn println(&self, text: &str) -> starlark::Result<()> {
        let mut out = self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        out.push_str(text);
        out.push('\n');
        Ok(())
    }
}

/// The host one test case runs with: a fresh one per case.
fn host(settings: &Settings) -> Host {
    // Validated before any file runs, so an error here cannot happen; be safe anyway.
    let vars = Vars::from_args(&settings.vars, &settings.var_files).unwrap_or_default();
    Host::new(
        settings.library,
        vars,
        settings.permissions,
        settings.runtime.clone(),
    )
    .with(settings.kube.clone())
}

fn run_case(ast: &AstModule, dir: &Path, name: &str, settings: &Settings) -> Ran {
    let started = Instant::now();
    let host = host(settings);
    let capture = Capture::default();
    let cache = LoadCache::default();
    let loader = Loader {
        dir: Some(dir.to_path_buf()),
        cache: &cache,
        host: &host,
    };
    let deadline = started + settings.timeout;
    let over_memory = std::cell::Cell::new(false);
    let evaluate = || {
        Module::with_temp_heap(|module| {
            let mut eval = Evaluator::new(&module);
            eval.extra = Some(&host);
            eval.set_loader(&loader);
            eval.set_print_handler(&capture);
            crate::script::builtins::lifecycle::open(&module);
            // Only fails when already set, which it is not on a new evaluator.
            let _ = eval.set_max_heap_size(settings.memory);
            let over_memory = &over_memory;
            eval.set_check_cancelled(Box::new(move || {
                if memory::exhausted() {
                    over_memory.set(true);
                    return true;
                }
                // A builtin's narrower budget (`budget::within`) cancels too.
                Instant::now() >= deadline || budget::check().is_err()
            }));
            eval.eval_module(ast.clone(), settings.library.globals())?;
            let mut call = |f: &str| match module.get(f).filter(|v| v.get_type() == "function") {
                Some(func) => eval.eval_function(func, &[], &[]).map(drop),
                None => Ok(()),
            };
            let mut result = call("setup").map_err(|e| ("setup", e));
            if result.is_ok() {
                result = call(name).map_err(|e| ("", e));
            }
            // The verdict of the test, before teardown's own assertions can replace it.
            let verdict = host.ext::<Record>().take();
            let teardown = call("teardown");
            // What the test deferred runs after its teardown; a failure fails the test.
            let deferred = crate::script::builtins::lifecycle::run_deferred(&mut eval);
            Ok::<_, starlark::Error>((result, verdict, teardown, deferred))
        })
    };
    let budgeted = || {
        budget::scope(
            Budget {
                deadline,
                stop: None,
            },
            evaluate,
        )
    };
    let ended = memory::guard(settings.memory, budgeted);
    let duration = started.elapsed();
    let timed_out = Instant::now() >= deadline;
    let exceeded = memory::Exceeded {
        limit: settings.memory,
    };
    let over = |e: &starlark::Error| {
        if over_memory.get() {
            format!("{exceeded} (--script-memory)")
        } else if timed_out {
            format!(
                "the test ran longer than {} and was cancelled (--timeout)",
                crate::duration::format(settings.timeout)
            )
        } else {
            e.to_string()
        }
    };
    let (status, message) = match ended {
        Err(exceeded) => (Status::Failed, format!("{exceeded} (--script-memory)")),
        Ok(Err(top_level)) => return Ran::TopLevel(over(&top_level)),
        Ok(Ok((result, verdict, teardown, deferred))) => match (result, verdict, teardown) {
            (Ok(()), _, Ok(())) if !deferred.is_empty() => (
                Status::Failed,
                format!("a deferred function failed: {}", deferred.join("\n")),
            ),
            (Ok(()), _, Ok(())) => (Status::Passed, String::new()),
            (Ok(()), _, Err(e)) => (Status::Failed, format!("teardown: {}", over(&e))),
            (Err(_), Some(Verdict::Skipped { reason }), _) => (Status::Skipped, reason),
            (Err((stage, _)), Some(Verdict::Failed { at, message }), _) => {
                (Status::Failed, staged(stage, &format!("{at}: {message}")))
            }
            (Err((stage, e)), None, _) => (Status::Failed, staged(stage, &over(&e))),
        },
    };
    Ran::Case {
        status,
        message,
        duration,
        output: capture
            .0
            .into_inner()
            .unwrap_or_else(std::sync::PoisonError::into_inner),
    }
}

fn staged(stage: &str, message: &str) -> String {
    if stage.is_empty() {
        message.to_owned()
    } else {
        format!("{stage}: {message}")
    }
}
