//! `kite test`: finds `*_test.star` files, runs each `test_*` function with the
//! assertion builtins, files in parallel, and reports in file then definition order.

pub mod assert;
pub mod diff;
pub mod discover;
pub mod report;
pub mod source;
pub mod suite;

use std::io::Write;
use std::path::PathBuf;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::k8s::session::KubeOptions;
use crate::script::library::Library;
use crate::script::permissions::Permissions;
use report::{Case, Totals};

/// Why a test run could not be done (its tests failing is not an error: see [`Totals`]).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot read {path}: {source}")]
    Discover {
        path: String,
        source: std::io::Error,
    },
    #[error("no test files (*_test.star) found in {0}")]
    FindTestFiles(String),
    #[error("no test functions{filter} in {files}")]
    FindTests { filter: String, files: String },
    #[error(transparent)]
    ReadVars(#[from] crate::script::vars::Error),
    #[error("starting the async runtime: {0}")]
    StartRuntime(std::io::Error),
    #[error("starting a test thread: {0}")]
    SpawnThread(std::io::Error),
    #[error("writing the JUnit report {path}: {source}")]
    WriteJunit {
        path: String,
        source: std::io::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// The process exit code: 2 for what the user asked wrongly, 1 otherwise.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::StartRuntime(_) | Error::SpawnThread(_) => 1,
            _ => 2,
        }
    }
}

/// What `kite test` was asked to do.
#[derive(Debug, Clone)]
pub struct Options {
    /// Files and directories; the working directory when empty.
    pub paths: Vec<PathBuf>,
    /// Only tests whose name contains this run (`-k`, `--run`).
    pub filter: Option<String>,
    pub permissions: Permissions,
    pub vars: Vec<String>,
    pub var_files: Vec<PathBuf>,
    pub kube: KubeOptions,
    /// Print one JSON document instead of lines.
    pub json: bool,
    /// Also write JUnit XML here.
    pub junit: Option<PathBuf>,
    /// Show every test's duration and output.
    pub verbose: bool,
    /// Files run at once (default: the available parallelism).
    pub parallel: Option<usize>,
    pub timeout: Duration,
    /// The memory one test may use, in bytes.
    pub memory: usize,
}

/// The library scripts see plus the assertions, built once; `kite run` never sees them.
pub fn library() -> &'static Library {
    static LIBRARY: OnceLock<Library> = OnceLock::new();
    LIBRARY.get_or_init(|| {
        crate::library::builder()
            .globals(assert::register)
            // Upstream's test mode adds `ssh.test_server` and `ssh.test_key`.
            .globals(crate::script::builtins::ssh::test_namespace)
            .build()
    })
}

/// Whether `name` is a test file (`*_test.star`), which `kite test` runs with the
/// assertions and reads with upstream's `assert` accepted.
pub fn is_test_file(name: &str) -> bool {
    name.ends_with("_test.star")
}

pub use source::rewrite;

/// `kite check` of one file: a `*_test.star` file is checked as `kite test` runs it, with
/// the assertions known and upstream's `assert` accepted; any other file as `kite run`
/// runs it.
///
/// # Errors
/// As [`crate::script::check::check`]; an unreadable test file is a parse error.
pub fn check(path: &std::path::Path) -> Result<String, crate::script::check::Error> {
    let is_test = path
        .file_name()
        .and_then(|n| n.to_str())
        .is_some_and(is_test_file);
    if !is_test {
        return crate::script::check::check(crate::library::library(), path);
    }
    let text = std::fs::read_to_string(path).map_err(|e| {
        crate::script::run::Error::Script(format!(
            "error: reading {}: {e}
",
            path.display()
        ))
    })?;
    crate::script::check::check_text(
        library(),
        &path.display().to_string(),
        &source::rewrite(&text),
    )
}

/// Runs the tests and writes the report to `out` (JUnit XML also to its file).
///
/// # Errors
/// A path that cannot be read, no test files or no tests, a bad `--var`, or a report
/// that cannot be written; failing tests are counted in the [`Totals`] instead.
pub fn run(options: &Options, out: &mut dyn Write) -> Result<Totals> {
    let paths = if options.paths.is_empty() {
        vec![PathBuf::from(".")]
    } else {
        options.paths.clone()
    };
    let looked = || {
        paths
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    };
    let files = discover::discover(&paths)?;
    if files.is_empty() {
        return Err(Error::FindTestFiles(looked()));
    }
    // Checked once here, so that a bad --var is a usage error and not a failed test.
    crate::script::vars::Vars::from_args(&options.vars, &options.var_files)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(Error::StartRuntime)?;
    let settings = suite::Settings {
        library: library(),
        permissions: options.permissions,
        vars: options.vars.clone(),
        var_files: options.var_files.clone(),
        kube: options.kube.clone(),
        runtime: runtime.handle().clone(),
        filter: options.filter.clone(),
        timeout: options.timeout,
        memory: options.memory,
    };
    let text = !options.json;
    let verbose = options.verbose;
    let cases = run_files(&files, &settings, options.parallel, |file_cases| {
        if text {
            for case in file_cases {
                // A closed stdout must not stop the run; the JUnit file may still be read.
                let _ = out.write_all(report::text(case, verbose).as_bytes());
            }
            let _ = out.flush();
        }
    })?;
    drop(settings);
    runtime.shutdown_timeout(Duration::from_secs(1));
    if cases.is_empty() {
        let filter = options
            .filter
            .as_ref()
            .map(|f| format!(" matching -k {f:?}"))
            .unwrap_or_default();
        let files = format!("{} test file(s) under {}", files.len(), looked());
        return Err(Error::FindTests { filter, files });
    }
    let totals = Totals::of(&cases);
    if options.json {
        let _ = writeln!(out, "{}", report::json(&cases));
    } else {
        let _ = writeln!(out, "{}", totals.line());
    }
    if let Some(path) = &options.junit {
        std::fs::write(path, report::junit(&cases)).map_err(|source| Error::WriteJunit {
            path: path.display().to_string(),
            source,
        })?;
    }
    Ok(totals)
}

/// Runs `files` on up to `parallel` threads, handing each file's cases to `done` in the
/// order of `files` as soon as it and every file before it have finished.
fn run_files(
    files: &[PathBuf],
    settings: &suite::Settings,
    parallel: Option<usize>,
    mut done: impl FnMut(&[Case]),
) -> Result<Vec<Case>> {
    let available = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
    let threads = parallel.unwrap_or(available).clamp(1, files.len().max(1));
    let next = AtomicUsize::new(0);
    let (tx, rx) = std::sync::mpsc::channel::<(usize, Vec<Case>)>();
    std::thread::scope(|scope| {
        for _ in 0..threads {
            let tx = tx.clone();
            let next = &next;
            // Deep Starlark recursion needs more than a spawned thread's default stack.
            std::thread::Builder::new()
                .name("kite-test".to_owned())
                .stack_size(8 << 20)
                .spawn_scoped(scope, move || {
                    loop {
                        let i = next.fetch_add(1, Ordering::Relaxed);
                        let Some(file) = files.get(i) else { break };
                        if tx.send((i, suite::run_file(file, settings))).is_err() {
                            break;
                        }
                    }
                })
                .map_err(Error::SpawnThread)?;
        }
        drop(tx);
        let mut slots: Vec<Option<Vec<Case>>> = vec![None; files.len()];
        let mut shown = 0;
        for (i, cases) in rx {
            if let Some(slot) = slots.get_mut(i) {
                *slot = Some(cases);
            }
            while let Some(Some(ready)) = slots.get(shown) {
                done(ready);
                shown += 1;
            }
        }
        Ok(slots.into_iter().flatten().flatten().collect())
    })
}

#[cfg(test)]
mod tests;
