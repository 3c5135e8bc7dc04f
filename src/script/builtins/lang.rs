//! `type()` as the Starlark spec (and upstream's Go interpreter) names builtins:
//! `type(len) == "builtin_function_or_method"`, where starlark-rust says "function".

use starlark::environment::GlobalsBuilder;
use starlark::starlark_module;
use starlark::values::Value;

/// What `type()` calls a function implemented by the interpreter or by kite.
const BUILTIN: &str = "builtin_function_or_method";

/// The spec's name for `v`'s type: as starlark-rust's, except that only a `def` or a
/// `lambda` is a "function"; builtins and bound methods are "builtin_function_or_method".
fn type_name(v: Value<'_>) -> &str {
    let name = v.get_type();
    // starlark-rust knows the parameters of exactly the script's own functions.
    if name == "function" && v.parameters_spec().is_none() {
        return BUILTIN;
    }
    name
}

#[starlark_module]
pub fn lang_globals(builder: &mut GlobalsBuilder) {
    /// The name of `a`'s type: `"int"`, `"string"`, `"function"` (a `def` or `lambda`),
    /// `"builtin_function_or_method"` (a builtin), ...
    fn r#type<'v>(#[starlark(require = pos)] a: Value<'v>) -> anyhow::Result<&'v str> {
        Ok(type_name(a))
    }
}

#[cfg(test)]
mod tests {
    use crate::script::builtins::testing::eval;

    #[test]
    fn builtins_are_named_as_the_spec_names_them() {
        assert_eq!(
            eval("def f(): pass\n[type(f), type(lambda: 1), type(len), type('x'.upper), type(json.encode), type(1), type(None)]")
                .unwrap(),
            r#"["function", "function", "builtin_function_or_method", "builtin_function_or_method", "builtin_function_or_method", "int", "NoneType"]"#
        );
        assert_eq!(eval("type(1) == 'int'").unwrap(), "True");
    }
}
