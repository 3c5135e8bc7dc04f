//! `type(x)` as upstream's (Go) Starlark answers it: a builtin is
//! `"builtin_function_or_method"`, a `def` or `lambda` is `"function"`.

use starlark::environment::GlobalsBuilder;
use starlark::starlark_module;
use starlark::values::{FrozenStringValue, Value};

/// The name of a builtin's type in Go's Starlark (and Python's).
const BUILTIN: &str = "builtin_function_or_method";

#[starlark_module]
pub fn type_global(builder: &mut GlobalsBuilder) {
    /// The name of the type of `a`: `"int"`, `"dict"`, `"function"` for a `def` or
    /// `lambda`, `"builtin_function_or_method"` for a builtin, as upstream's scripts
    /// expect.
    #[starlark(speculative_exec_safe)]
    fn r#type<'v>(#[starlark(require = pos)] a: Value<'v>) -> anyhow::Result<FrozenStringValue> {
        // Rust's Starlark names both "function"; only a `def` has parameters of its own.
        if a.get_type() == "function" && a.parameters_spec().is_none() {
            return Ok(starlark::const_frozen_string!(BUILTIN));
        }
        Ok(a.get_type_value())
    }
}

#[cfg(test)]
mod tests {
    use crate::script::builtins::snippets::eval;

    #[test]
    fn builtins_and_defs_are_named_as_upstream_does() {
        assert_eq!(
            eval("def f(): pass\n[type(f), type(lambda: 1), type(len), type(json.encode), type('a'.upper), type(1), type({})]").unwrap(),
            "[\"function\", \"function\", \"builtin_function_or_method\", \"builtin_function_or_method\", \"builtin_function_or_method\", \"int\", \"dict\"]"
        );
    }
}
