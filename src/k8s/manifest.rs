//! Manifests as scripts give them: dicts, AttrDicts, builder results, lists of those, or
//! YAML strings with one or more documents.

use serde_json::Value as Json;
use starlark::values::Value;
use starlark::values::list::ListRef;
use starlark::values::tuple::TupleRef;

use crate::script::json::from_starlark;
use crate::script::yaml::parse_yaml;

/// Flattens a script value into a list of JSON manifests.
///
/// # Errors
/// A value that is not a mapping, a list of them, or YAML text; YAML syntax errors.
pub fn manifests(value: Value) -> anyhow::Result<Vec<Json>> {
    let mut out = Vec::new();
    collect(value, &mut out, 0)?;
    Ok(out)
}

/// Lists of lists deeper than this are refused: a list that contains itself
/// (`a = []; a.append(a)`) would otherwise recurse until the stack overflows.
const MAX_NESTING: usize = 100;

fn collect(value: Value, out: &mut Vec<Json>, depth: usize) -> anyhow::Result<()> {
    if depth > MAX_NESTING {
        anyhow::bail!(
            "lists nested deeper than {MAX_NESTING} levels (a list that contains itself?)"
        );
    }
    if let Some(text) = value.unpack_str() {
        // A list may repeat one large text many times: each parse is counted against
        // the call's budgets, before and after.
        if let Some(why) = crate::script::budget::walk_step(text.len()) {
            anyhow::bail!("reading the manifests stopped: {why}");
        }
        let docs = parse_yaml(text)?;
        if crate::script::memory::exhausted() {
            anyhow::bail!("reading the manifests stopped: it passed the script's memory limit");
        }
        for doc in docs {
            push(doc, out, 0)?;
        }
        return Ok(());
    }
    let items = ListRef::from_value(value)
        .map(starlark::values::list::ListRef::content)
        .or_else(|| TupleRef::from_value(value).map(starlark::values::tuple::TupleRef::content));
    if let Some(items) = items {
        for item in items {
            collect(*item, out, depth + 1)?;
        }
        return Ok(());
    }
    push(from_starlark(value)?, out, 0)
}

fn push(doc: Json, out: &mut Vec<Json>, depth: usize) -> anyhow::Result<()> {
    if depth > MAX_NESTING {
        anyhow::bail!("List manifests nested deeper than {MAX_NESTING} levels");
    }
    match doc {
        Json::Null => Ok(()), // an empty YAML document
        // Its items are moved out, not copied: a List nested a hundred deep around one
        // large item would otherwise be copied once per level.
        Json::Object(mut map) if map.get("kind").and_then(Json::as_str) == Some("List") => {
            if let Some(Json::Array(items)) = map.remove("items") {
                for item in items {
                    push(item, out, depth + 1)?;
                }
            }
            Ok(())
        }
        Json::Object(_) => {
            out.push(doc);
            Ok(())
        }
        other => anyhow::bail!("a manifest must be a mapping, got {}", type_name(&other)),
    }
}

fn type_name(v: &Json) -> &'static str {
    match v {
        Json::Null => "null",
        Json::Bool(_) => "a boolean",
        Json::Number(_) => "a number",
        Json::String(_) => "a string",
        Json::Array(_) => "a list",
        Json::Object(_) => "a mapping",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::script::yaml::to_yaml;
    use serde_json::json;

    /// Issue 26: one large manifest text repeated in a list is parsed within the
    /// memory budget, not once per element unchecked.
    #[test]
    fn a_repeated_manifest_text_stops_at_the_budget() {
        use starlark::environment::{Globals, Module};
        use starlark::eval::Evaluator;
        use starlark::syntax::{AstModule, Dialect};
        let code = "doc = 'kind: ConfigMap\\ndata:\\n' + ''.join(['  k%d: v\\n' % i for i in range(20000)])\n[doc] * 2000";
        let e = Module::with_temp_heap(|module| {
            let ast = AstModule::parse("m.star", code.to_owned(), &Dialect::Extended).unwrap();
            let mut eval = Evaluator::new(&module);
            let docs = eval.eval_module(ast, &Globals::standard()).unwrap();
            crate::script::memory::guard(64 << 20, || manifests(docs).map(|d| d.len()))
                .unwrap()
                .unwrap_err()
                .to_string()
        });
        assert!(e.contains("passed the script's memory limit"), "{e}");
    }

    #[test]
    fn yaml_numbers_are_plain() {
        let text = to_yaml(&[json!({"replicas": 3, "ratio": 0.5, "neg": -1})]).unwrap();
        assert_eq!(text, "replicas: 3\nratio: 0.5\nneg: -1\n");
    }

    #[test]
    fn multi_document_yaml_and_lists_flatten() {
        let docs = parse_yaml("a: 1\n---\n---\nb: [x]\n").unwrap();
        let mut out = Vec::new();
        for d in docs {
            push(d, &mut out, 0).unwrap();
        }
        assert_eq!(out, vec![json!({"a": 1}), json!({"b": ["x"]})]);
        let mut out = Vec::new();
        push(
            json!({"kind": "List", "items": [{"kind": "A"}]}),
            &mut out,
            0,
        )
        .unwrap();
        assert_eq!(out, vec![json!({"kind": "A"})]);
        assert!(push(json!(3), &mut Vec::new(), 0).is_err());
    }

    #[test]
    fn a_list_that_contains_itself_is_an_error_not_a_stack_overflow() {
        use starlark::environment::{Globals, Module};
        use starlark::eval::Evaluator;
        use starlark::syntax::{AstModule, Dialect};
        Module::with_temp_heap(|module| {
            let ast = AstModule::parse(
                "t.star",
                "a = []\na.append(a)\na".to_owned(),
                &Dialect::Extended,
            )
            .unwrap();
            let mut eval = Evaluator::new(&module);
            let list = eval.eval_module(ast, &Globals::standard()).unwrap();
            let e = manifests(list).unwrap_err().to_string();
            assert!(e.contains("nested deeper than 100 levels"), "{e}");
        });
    }
}
