//! Starlark builtins, one file per namespace, assembled into the script globals.

pub mod base64;
pub mod json;
pub mod vars;

use std::sync::OnceLock;

use starlark::environment::{Globals, GlobalsBuilder, LibraryExtension};

/// The globals every script sees: the Starlark standard library, `print`, `struct`,
/// `json`, `base64`, the `var_*` readers and the predeclared `k8s` module.
pub fn globals() -> &'static Globals {
    static GLOBALS: OnceLock<Globals> = OnceLock::new();
    GLOBALS.get_or_init(|| {
        GlobalsBuilder::extended_by(&[
            LibraryExtension::StructType,
            LibraryExtension::Print,
            LibraryExtension::Map,
            LibraryExtension::Filter,
            LibraryExtension::Partial,
            LibraryExtension::Debug,
            LibraryExtension::SetType,
        ])
        .with_namespace("json", json::json_namespace)
        .with_namespace("base64", base64::base64_namespace)
        .with(vars::var_builtins)
        .with(crate::k8s::module::register)
        .build()
    })
}

#[cfg(test)]
pub(crate) mod testing {
    //! Evaluates snippets against the real globals, with a host that allows nothing.
    use starlark::environment::Module;
    use starlark::eval::Evaluator;
    use starlark::syntax::{AstModule, Dialect};

    use crate::script::host::{Host, KubeOptions};
    use crate::script::permissions::Permissions;
    use crate::script::vars::Vars;

    /// Runs `code` and returns the repr of its last expression, or the error message.
    pub fn eval_with(vars: Vars, code: &str) -> Result<String, String> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let host = Host::new(
            vars,
            Permissions::default(),
            rt.handle().clone(),
            KubeOptions::default(),
        );
        Module::with_temp_heap(|module| {
            let ast = AstModule::parse("test.star", code.to_owned(), &Dialect::Extended)
                .map_err(|e| e.to_string())?;
            let mut eval = Evaluator::new(&module);
            eval.extra = Some(&host);
            eval.eval_module(ast, super::globals())
                .map(|v| v.to_repr())
                .map_err(|e| e.to_string())
        })
    }

    pub fn eval(code: &str) -> Result<String, String> {
        eval_with(Vars::default(), code)
    }
}
