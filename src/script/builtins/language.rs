//! `type()` as upstream's Go Starlark answers it: a builtin function or method is a
//! `builtin_function_or_method`, a `def` or `lambda` a `function` (upstream's tests check
//! `type(printf)`, `type(io.confirm)`, `type(var_str)` ...). Everything else is the
//! language's own answer.

use starlark::environment::GlobalsBuilder;
use starlark::starlark_module;
use starlark::values::{FrozenStringValue, Value};

#[starlark_module]
pub fn language_globals(builder: &mut GlobalsBuilder) {
    /// The name of the type of `x`: `"int"`, `"string"`, `"list"`, ...; a builtin
    /// function is a `"builtin_function_or_method"`, a `def` or `lambda` a `"function"`.
    #[starlark(speculative_exec_safe)]
    fn r#type<'v>(#[starlark(require = pos)] x: Value<'v>) -> anyhow::Result<FrozenStringValue> {
        // Only def and lambda have a parameter spec the language can show.
        if x.get_type() == "function" && x.parameters_spec().is_none() {
            return Ok(starlark::const_frozen_string!("builtin_function_or_method"));
        }
        Ok(x.get_type_value())
    }
}

#[cfg(test)]
mod tests {
    use crate::script::builtins::testing::eval;

    #[test]
    fn builtins_are_named_as_go_starlark_names_them() {
        let out = eval(
            "def f():\n    pass\n\
             [type(len), type(print), type(json.encode), type(io.confirm), type(''.upper), \
              type(f), type(lambda x: x), type(1), type('s'), type(None), type([]), type(struct(a = 1))]",
        )
        .unwrap();
        assert_eq!(
            out,
            r#"["builtin_function_or_method", "builtin_function_or_method", "builtin_function_or_method", "builtin_function_or_method", "builtin_function_or_method", "function", "function", "int", "string", "NoneType", "list", "struct"]"#
        );
    }
}
