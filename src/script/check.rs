//! `kite check`: parse and lint a script without running it.

use std::collections::HashSet;
use std::path::Path;

use starlark::analysis::AstModuleLint;

use super::host::position;
use super::library::Library;
use super::run::{self, parse};

/// A check that found problems; the message lists them with file:line:col.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Parse(#[from] run::Error),
    #[error("{report}{count} error(s) found")]
    Lint { report: String, count: usize },
}

impl Error {
    /// The process exit code: 2 for an unreadable file, 1 for problems in the script.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::Parse(e) => e.exit_code(),
            Error::Lint { .. } => 1,
        }
    }
}

/// Checks a script: unknown names, and wrong arguments to known builtins.
///
/// # Errors
/// [`Error::Lint`] with every problem, one per line; or the parse error.
pub fn check(library: &Library, path: &Path) -> Result<String, Error> {
    let (ast, _) = parse(path)?;
    lint(library, &ast)
}

/// [`check`] for script text without a file (a StarlarkController's), shown as `name`.
///
/// # Errors
/// As [`check`].
pub fn check_text(library: &Library, name: &str, text: &str) -> Result<String, Error> {
    let ast = starlark::syntax::AstModule::parse(name, text.to_owned(), &super::loader::dialect())
        .map_err(|e| Error::Parse(run::Error::Script(e.to_string())))?;
    lint(library, &ast)
}

fn lint(library: &Library, ast: &starlark::syntax::AstModule) -> Result<String, Error> {
    let names: HashSet<String> = library
        .globals()
        .names()
        .map(|n| n.as_str().to_owned())
        .collect();
    let mut errors = Vec::new();
    let mut warnings = Vec::new();
    // What this edition leaves out is named as such, not as an undefined name.
    let mut withheld_at = HashSet::new();
    for (span, problem) in super::lint::check_withheld(library, ast) {
        withheld_at.insert(position(&span));
        errors.push(format!("{}: {problem}", position(&span)));
    }
    for lint in ast.lint(Some(&names)) {
        if withheld_at.contains(&position(&lint.location)) {
            continue;
        }
        let line = format!(
            "{}: {} [{}]",
            position(&lint.location),
            lint.problem,
            lint.short_name
        );
        // Using an unknown name always fails at run time, so it is an error here.
        let fatal = lint.severity == starlark::analysis::EvalSeverity::Error
            || matches!(
                lint.short_name.as_str(),
                "using-undefined" | "undefined-variable"
            );
        if fatal {
            errors.push(line);
        } else {
            warnings.push(format!("warning: {line}"));
        }
    }
    for (span, problem) in super::lint::check_calls(library, ast) {
        errors.push(format!("{}: {problem}", position(&span)));
    }
    errors.sort();
    errors.dedup();
    let mut report = String::new();
    for line in warnings.iter().chain(errors.iter()) {
        report.push_str(line);
        report.push('\n');
    }
    if errors.is_empty() {
        Ok(report)
    } else {
        Err(Error::Lint {
            report,
            count: errors.len(),
        })
    }
}
