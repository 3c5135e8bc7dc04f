//! Where two Starlark values differ, for `assert_equal` failures: the keys and elements
//! only one side has and the values that differ, each named by its path.

use starlark::values::Value;
use starlark::values::dict::DictRef;
use starlark::values::list::ListRef;
use starlark::values::tuple::TupleRef;

/// The most lines a diff shows; the rest are counted, so a huge mismatch stays readable.
const MAX_LINES: usize = 20;

/// Nesting followed at most: a list that contains itself must not recurse forever.
const MAX_DEPTH: usize = 32;

/// The differences between `actual` and `expected`, one line each, when both are dicts
/// or both are lists (or tuples); empty for anything else, where showing both values
/// already says it all.
pub fn diff<'v>(actual: Value<'v>, expected: Value<'v>) -> Vec<String> {
    let mut lines = Vec::new();
    walk("", actual, expected, 0, &mut lines);
    if lines.len() > MAX_LINES {
        let more = lines.len() - MAX_LINES;
        lines.truncate(MAX_LINES);
        lines.push(format!("... and {more} more differences"));
    }
    lines
}

fn elements(v: Value<'_>) -> Option<&[Value<'_>]> {
    ListRef::from_value(v)
        .map(|l| &**l)
        .or_else(|| TupleRef::from_value(v).map(TupleRef::content))
}

/// Compares one level, recursing into values that are containers on both sides.
fn walk<'v>(
    path: &str,
    actual: Value<'v>,
    expected: Value<'v>,
    depth: usize,
    out: &mut Vec<String>,
) {
    if depth < MAX_DEPTH {
        if let (Some(a), Some(e)) = (DictRef::from_value(actual), DictRef::from_value(expected)) {
            for (key, value) in a.iter() {
                let at = format!("{path}[{}]", key.to_repr());
                match e.get(key) {
                    Ok(Some(other)) => walk(&at, value, other, depth + 1, out),
                    _ => out.push(format!("only in actual: {at} = {}", value.to_repr())),
                }
            }
            for (key, value) in e.iter() {
                if !matches!(a.get(key), Ok(Some(_))) {
                    let at = format!("{path}[{}]", key.to_repr());
                    out.push(format!("only in expected: {at} = {}", value.to_repr()));
                }
            }
            return;
        }
        if let (Some(a), Some(e)) = (elements(actual), elements(expected)) {
            for (i, (x, y)) in a.iter().zip(e).enumerate() {
                walk(&format!("{path}[{i}]"), *x, *y, depth + 1, out);
            }
            for (i, x) in a.iter().enumerate().skip(e.len()) {
                out.push(format!("only in actual: {path}[{i}] = {}", x.to_repr()));
            }
            for (i, y) in e.iter().enumerate().skip(a.len()) {
                out.push(format!("only in expected: {path}[{i}] = {}", y.to_repr()));
            }
            return;
        }
    }
    // The top level itself is not a line: the caller shows both values.
    if !path.is_empty() && !actual.equals(expected).unwrap_or(false) {
        out.push(format!(
            "{path}: {} (actual) != {} (expected)",
            actual.to_repr(),
            expected.to_repr()
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::diff;
    use starlark::environment::{Globals, Module};
    use starlark::eval::Evaluator;
    use starlark::syntax::{AstModule, Dialect};

    /// The diff of the two expressions `a` and `b`.
    fn of(a: &str, b: &str) -> Vec<String> {
        Module::with_temp_heap(|module| {
            let code = format!("({a}, {b})");
            let ast = AstModule::parse("d.star", code, &Dialect::Extended).unwrap();
            let mut eval = Evaluator::new(&module);
            let pair = eval.eval_module(ast, &Globals::standard()).unwrap();
            let pair = starlark::values::tuple::TupleRef::from_value(pair).unwrap();
            diff(pair.content()[0], pair.content()[1])
        })
    }

    #[test]
    fn dicts_show_keys_on_one_side_and_differing_values() {
        assert_eq!(
            of(r#"{"a": 1, "b": 2, "d": 5}"#, r#"{"a": 1, "b": 3, "c": 4}"#),
            [
                r#"["b"]: 2 (actual) != 3 (expected)"#,
                r#"only in actual: ["d"] = 5"#,
                r#"only in expected: ["c"] = 4"#,
            ]
        );
    }

    #[test]
    fn nested_values_are_named_by_their_path() {
        assert_eq!(
            of(
                r#"{"spec": {"ports": [80, 443]}}"#,
                r#"{"spec": {"ports": [80, 8443, 9000]}}"#
            ),
            [
                r#"["spec"]["ports"][1]: 443 (actual) != 8443 (expected)"#,
                r#"only in expected: ["spec"]["ports"][2] = 9000"#,
            ]
        );
        assert_eq!(
            of("[1, 2, 3]", "[1]"),
            ["only in actual: [1] = 2", "only in actual: [2] = 3"]
        );
    }

    #[test]
    fn scalars_and_mixed_types_have_no_lines() {
        assert!(of("1", "2").is_empty());
        assert!(of("[1]", r#"{"a": 1}"#).is_empty());
        assert!(of("{}", "{}").is_empty());
    }

    #[test]
    fn long_diffs_are_cut_and_counted() {
        let lines = of("list(range(30))", "[]");
        assert_eq!(lines.len(), 21);
        assert_eq!(lines[20], "... and 10 more differences");
    }

    #[test]
    fn a_list_that_holds_itself_ends() {
        let lines = Module::with_temp_heap(|module| {
            let code = "a = [1]\na.append(a)\nb = [2]\nb.append(b)\n(a, b)".to_owned();
            let ast = AstModule::parse("d.star", code, &Dialect::Extended).unwrap();
            let mut eval = Evaluator::new(&module);
            let pair = eval.eval_module(ast, &Globals::standard()).unwrap();
            let pair = starlark::values::tuple::TupleRef::from_value(pair).unwrap();
            diff(pair.content()[0], pair.content()[1])
        });
        assert!(
            lines.first().is_some_and(|l| l.starts_with("[0]: 1")),
            "{lines:?}"
        );
    }
}
