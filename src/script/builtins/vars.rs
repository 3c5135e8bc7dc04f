//! `var_str`, `var_int`, `var_bool` and `var_float`: typed reads of `--var` values.

use starlark::environment::GlobalsBuilder;
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::{Heap, Value, none::NoneOr};

use crate::script::host::{Host, call_site};
use crate::script::vars::{VarType, VarValue, convert};

fn read<'v>(
    eval: &mut Evaluator<'v, '_, '_>,
    func: &str,
    name: &str,
    default: NoneOr<Value<'v>>,
    ty: VarType,
) -> anyhow::Result<Value<'v>> {
    let default = default.into_option().unwrap_or(Value::new_none());
    let host = Host::of(eval)?;
    let heap = eval.heap();
    let Some(raw) = host.vars.get(name) else {
        return Ok(default);
    };
    match convert(raw, ty) {
        Ok(v) => Ok(alloc(heap, v)),
        Err(why) => Err(anyhow::anyhow!(
            "{func}({name:?}) at {}: {why}",
            call_site(eval)
        )),
    }
}

fn alloc(heap: Heap<'_>, v: VarValue) -> Value<'_> {
    match v {
        VarValue::Str(s) => heap.alloc(s),
        VarValue::Int(i) => heap.alloc(i),
        VarValue::Bool(b) => Value::new_bool(b),
        VarValue::Float(f) => heap.alloc(f),
    }
}

#[starlark_module]
pub fn var_builtins(builder: &mut GlobalsBuilder) {
    /// The string value of `--var name=...`, or `default`.
    fn var_str<'v>(
        #[starlark(require = pos)] name: &str,
        #[starlark(default = NoneOr::None)] default: NoneOr<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        read(eval, "var_str", name, default, VarType::Str)
    }

    /// The integer value of `--var name=...`, or `default`.
    fn var_int<'v>(
        #[starlark(require = pos)] name: &str,
        #[starlark(default = NoneOr::None)] default: NoneOr<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        read(eval, "var_int", name, default, VarType::Int)
    }

    /// The boolean value of `--var name=...` (true/false/yes/no/1/0), or `default`.
    fn var_bool<'v>(
        #[starlark(require = pos)] name: &str,
        #[starlark(default = NoneOr::None)] default: NoneOr<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        read(eval, "var_bool", name, default, VarType::Bool)
    }

    /// The float value of `--var name=...`, or `default`.
    fn var_float<'v>(
        #[starlark(require = pos)] name: &str,
        #[starlark(default = NoneOr::None)] default: NoneOr<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        read(eval, "var_float", name, default, VarType::Float)
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::script::builtins::testing::{eval, eval_with};
    use crate::script::vars::Vars;

    fn vars(args: &[&str]) -> Vars {
        let args: Vec<String> = args.iter().map(std::string::ToString::to_string).collect();
        Vars::from_args(&args, &[] as &[&Path]).unwrap()
    }

    #[test]
    fn defaults_apply_when_unset() {
        assert_eq!(eval("var_int('n', 3)").unwrap(), "3");
        assert_eq!(eval("var_str('s')").unwrap(), "None");
    }

    #[test]
    fn values_are_typed() {
        let v = vars(&["n=5", "b=true", "f=1.5", "s=hi"]);
        assert_eq!(
            eval_with(
                v,
                "[var_int('n', 3), var_bool('b'), var_float('f'), var_str('s')]"
            )
            .unwrap(),
            "[5, True, 1.5, \"hi\"]"
        );
    }

    #[test]
    fn bad_value_names_variable_value_type_and_call_site() {
        let err = eval_with(
            vars(&["max_replicas=abc"]),
            "\n\nmax_replicas = var_int(\"max_replicas\", 3)",
        )
        .unwrap_err();
        assert!(
            err.contains("var_int(\"max_replicas\") at test.star:3:16: \"abc\" is not an integer"),
            "{err}"
        );
    }
}
