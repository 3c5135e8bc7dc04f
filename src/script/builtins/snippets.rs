//! Unit-test helpers that evaluate Starlark snippets against the real globals, with a
//! host that allows nothing unless told.

use starlark::environment::Module;
use starlark::eval::Evaluator;
use starlark::syntax::{AstModule, Dialect};

use crate::script::host::Host;
use crate::script::library::Library;
use crate::script::permissions::Permissions;
use crate::script::vars::Vars;

/// Runs `code` and returns the repr of its last expression, or the error message.
pub fn eval_with(vars: Vars, code: &str) -> Result<String, String> {
    run(vars, Permissions::default(), code)
}

fn run(vars: Vars, permissions: Permissions, code: &str) -> Result<String, String> {
    run_as(vars, permissions, None, false, code)
}

/// Runs `code` with `permissions`, cancelled as the runners cancel a script once
/// the budget on this thread (a builtin's narrower one too) has run out.
pub fn eval_cancellable(permissions: Permissions, code: &str) -> Result<String, String> {
    run_as(Vars::default(), permissions, None, true, code)
}

/// Runs `code` as a hosted controller named `name` prints and logs.
pub fn eval_hosted(name: &str, code: &str) -> Result<String, String> {
    run_as(
        Vars::default(),
        Permissions::default(),
        Some(name),
        false,
        code,
    )
}

fn run_as(
    vars: Vars,
    permissions: Permissions,
    hosted: Option<&str>,
    cancellable: bool,
    code: &str,
) -> Result<String, String> {
    // Multi-threaded: a handle drives timers (time.sleep, retry) only on one.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let mut host = Host::new(Library::standard(), vars, permissions, rt.handle().clone());
    if let Some(name) = hosted {
        host.printer =
            crate::script::printer::Printer::hosted(name, crate::script::printer::HOSTED);
    }
    Module::with_temp_heap(|module| {
        let ast = AstModule::parse("test.star", code.to_owned(), &Dialect::Extended)
            .map_err(|e| e.to_string())?;
        let mut eval = Evaluator::new(&module);
        eval.extra = Some(&host);
        if cancellable {
            // As the runners do: a builtin's narrower budget cancels evaluation.
            eval.set_check_cancelled(Box::new(|| crate::script::budget::check().is_err()));
        }
        eval.eval_module(ast, host.library.globals())
            .map(starlark::values::Value::to_repr)
            .map_err(|e| e.to_string())
    })
}

pub fn eval(code: &str) -> Result<String, String> {
    eval_with(Vars::default(), code)
}

/// Whether running `code` (which must succeed) marked its host as having reached
/// outside the script ([`Host::reached`]).
pub fn reaches(code: &str) -> bool {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let host = Host::new(
        Library::standard(),
        Vars::default(),
        Permissions::default(),
        rt.handle().clone(),
    );
    Module::with_temp_heap(|module| {
        let ast = AstModule::parse("test.star", code.to_owned(), &Dialect::Extended).unwrap();
        let mut eval = Evaluator::new(&module);
        eval.extra = Some(&host);
        eval.eval_module(ast, host.library.globals()).unwrap();
    });
    host.reached()
}

/// Runs `code` with every permission (`--allow-all`).
pub fn eval_allowing(code: &str) -> Result<String, String> {
    run(Vars::default(), Permissions::all(), code)
}

/// Runs `code` with exactly `permissions`.
pub fn eval_permitted(permissions: Permissions, code: &str) -> Result<String, String> {
    run(Vars::default(), permissions, code)
}
