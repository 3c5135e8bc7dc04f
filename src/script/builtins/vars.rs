//! `var_str`, `var_int`, `var_bool`, `var_float`, `var_names`, `var_list` and
//! `var_dict`: typed reads of `--var` values, as globals and as the `vars` module.

use starlark::environment::GlobalsBuilder;
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::dict::AllocDict;
use starlark::values::list::AllocList;
use starlark::values::{Heap, Value};

use crate::script::host::{Host, call_site};
use crate::script::vars::{VarType, VarValue, convert};

/// `default` when given (None included), else upstream's zero value of `ty`.
fn or_zero<'v>(heap: Heap<'v>, default: Option<Value<'v>>, ty: VarType) -> Value<'v> {
    default.unwrap_or_else(|| match ty {
        VarType::Str => heap.alloc(""),
        VarType::Int => heap.alloc(0),
        VarType::Bool => Value::new_bool(false),
        VarType::Float => heap.alloc(0.0),
    })
}

fn read<'v>(
    eval: &mut Evaluator<'v, '_, '_>,
    func: &str,
    name: &str,
    default: Option<Value<'v>>,
    ty: VarType,
) -> anyhow::Result<Value<'v>> {
    let host = Host::of(eval)?;
    let heap = eval.heap();
    let Some(raw) = host.vars.get(name) else {
        return Ok(or_zero(heap, default, ty));
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

/// Whether `var_list` or `var_dict` is reading.
#[derive(Clone, Copy)]
enum Shape {
    List,
    Dict,
}

/// A list or dict variable: a YAML list or map from `--var-file`, or a `--var` string
/// holding JSON (as upstream reads it).
fn read_structured<'v>(
    eval: &mut Evaluator<'v, '_, '_>,
    func: &str,
    name: &str,
    default: Option<Value<'v>>,
    shape: Shape,
) -> anyhow::Result<Value<'v>> {
    use serde_json::Value as J;
    let host = Host::of(eval)?;
    let heap = eval.heap();
    let Some(raw) = host.vars.get(name) else {
        return Ok(default.unwrap_or_else(|| match shape {
            Shape::List => heap.alloc(AllocList::EMPTY),
            Shape::Dict => heap.alloc(AllocDict::EMPTY),
        }));
    };
    let fail = |why: String| anyhow::anyhow!("{func}({name:?}) at {}: {why}", call_site(eval));
    let parsed;
    let value = match raw {
        J::String(text) => {
            // serde_json stops at 128 levels of nesting, so this cannot recurse deeply.
            parsed = serde_json::from_str::<J>(text)
                .map_err(|e| fail(format!("{text:?} is not JSON: {e}")))?;
            &parsed
        }
        other => other,
    };
    let size = value.to_string().len();
    if let Some(why) = crate::script::budget::walk_step(size) {
        return Err(fail(why));
    }
    match (shape, value) {
        (Shape::List, J::Array(_)) | (Shape::Dict, J::Object(_)) => {
            Ok(crate::script::json::to_starlark(heap, value))
        }
        (Shape::List, _) => Err(fail("the value is not a list".to_owned())),
        (Shape::Dict, _) => Err(fail("the value is not a dict".to_owned())),
    }
}

/// The `var_*` functions, registered both as globals and as `vars.var_*`.
#[starlark_module]
pub fn var_builtins(builder: &mut GlobalsBuilder) {
    /// The string value of `--var name=...`, or `default` ("" when not given).
    fn var_str<'v>(
        #[starlark(require = pos)] name: &str,
        default: Option<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        read(eval, "var_str", name, default, VarType::Str)
    }

    /// The integer value of `--var name=...`, or `default` (0 when not given).
    fn var_int<'v>(
        #[starlark(require = pos)] name: &str,
        default: Option<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        read(eval, "var_int", name, default, VarType::Int)
    }

    /// The boolean value of `--var name=...` (true/false/yes/no/1/0), or `default`
    /// (False when not given).
    fn var_bool<'v>(
        #[starlark(require = pos)] name: &str,
        default: Option<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        read(eval, "var_bool", name, default, VarType::Bool)
    }

    /// The float value of `--var name=...`, or `default` (0.0 when not given).
    fn var_float<'v>(
        #[starlark(require = pos)] name: &str,
        default: Option<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        read(eval, "var_float", name, default, VarType::Float)
    }

    /// The names of every variable set, sorted.
    fn var_names(eval: &mut Evaluator<'_, '_, '_>) -> anyhow::Result<Vec<String>> {
        Ok(Host::of(eval)?.vars.names())
    }

    /// The list value of `--var name=...` (JSON, or a list in `--var-file`), or
    /// `default` (`[]` when not given).
    fn var_list<'v>(
        #[starlark(require = pos)] name: &str,
        default: Option<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        read_structured(eval, "var_list", name, default, Shape::List)
    }

    /// The dict value of `--var name=...` (JSON, or a map in `--var-file`), or
    /// `default` (`{}` when not given).
    fn var_dict<'v>(
        #[starlark(require = pos)] name: &str,
        default: Option<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        read_structured(eval, "var_dict", name, default, Shape::Dict)
    }
}

/// The `vars` module: the same functions under a namespace, as upstream has them.
pub fn vars_namespace(builder: &mut GlobalsBuilder) {
    var_builtins(builder);
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::script::builtins::snippets::{eval, eval_with};
    use crate::script::vars::Vars;

    fn vars(args: &[&str]) -> Vars {
        let args: Vec<String> = args.iter().map(std::string::ToString::to_string).collect();
        Vars::from_args(&args, &[] as &[&Path]).unwrap()
    }

    #[test]
    fn defaults_apply_when_unset() {
        assert_eq!(eval("var_int('n', 3)").unwrap(), "3");
        assert_eq!(eval("var_str('s', None)").unwrap(), "None");
        // Without a default, upstream's zero values.
        assert_eq!(
            eval("[var_str('s'), var_int('n'), var_bool('b'), var_float('f'), var_list('l'), var_dict('d')]").unwrap(),
            r#"["", 0, False, 0.0, [], {}]"#
        );
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
    fn lists_and_dicts_are_json_and_names_are_sorted() {
        let v = vars(&["l=[1, \"a\"]", "d={\"k\": [true]}", "bad=[1"]);
        assert_eq!(
            eval_with(
                v,
                "[var_list('l'), var_dict('d').k, vars.var_names(), dir(vars)[:3]]"
            )
            .unwrap(),
            r#"[[1, "a"], [True], ["bad", "d", "l"], ["var_bool", "var_dict", "var_float"]]"#
        );
        let e = eval_with(vars(&["bad=[1"]), "var_list('bad')").unwrap_err();
        assert!(
            e.contains("var_list(\"bad\") at test.star:1:1: \"[1\" is not JSON"),
            "{e}"
        );
        let e = eval_with(vars(&["l=[1]"]), "var_dict('l')").unwrap_err();
        assert!(e.contains("the value is not a dict"), "{e}");
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
