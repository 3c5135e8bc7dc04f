//! `json.encode` and `json.decode`, exact for integers; decoded objects are AttrDicts.

use starlark::environment::GlobalsBuilder;
use starlark::starlark_module;
use starlark::values::{Heap, Value};

use crate::script::json::{from_starlark, to_starlark};

#[starlark_module]
pub fn json_namespace(builder: &mut GlobalsBuilder) {
    /// Encodes a value as JSON. `indent` pretty-prints.
    fn encode(
        #[starlark(require = pos)] value: Value,
        #[starlark(require = named, default = false)] indent: bool,
    ) -> anyhow::Result<String> {
        let json = from_starlark(value)?;
        Ok(if indent {
            serde_json::to_string_pretty(&json)?
        } else {
            serde_json::to_string(&json)?
        })
    }

    /// Decodes a JSON string; objects become AttrDicts.
    fn decode<'v>(
        #[starlark(require = pos)] text: &str,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        // Node by node within the budgets: a short text can decode to a huge tree.
        let json =
            crate::script::parse::json(text).map_err(|e| anyhow::anyhow!("json.decode: {e}"))?;
        Ok(to_starlark(heap, &json))
    }
}

#[cfg(test)]
mod tests {
    use crate::script::builtins::testing::eval;

    /// Issue 26: a value that repeats a shared one (512 million strings in a few KB of
    /// heap) is not copied out past the memory budget or the deadline.
    /// Issue 26: dict keys are counted as they are copied, not only values.
    #[test]
    fn large_keys_repeated_stop_at_the_memory_budget() {
        let code = "d = {'x' * (1 << 20): 0}\nl = [d] * 300\njson.encode(l)";
        let e = crate::script::memory::guard(64 << 20, || eval(code))
            .unwrap()
            .unwrap_err();
        assert!(e.contains("passed the script's memory limit"), "{e}");
    }

    #[test]
    fn a_value_repeating_a_shared_one_stops_at_the_budgets() {
        use crate::script::budget::{Budget, scope};
        use std::time::{Duration, Instant};
        let code = "a = ['x'] * 800\nb = [a] * 800\nc = [b] * 800\njson.encode(c)";
        let e = crate::script::memory::guard(64 << 20, || eval(code))
            .unwrap()
            .unwrap_err();
        assert!(
            e.contains("converting the value to JSON stopped at $[")
                && e.contains("passed the script's memory limit"),
            "{e}"
        );
        let budget = Budget {
            deadline: Instant::now() + Duration::from_millis(50),
            stop: None,
        };
        let code = "a = [1] * 800\nb = [a] * 800\nc = [b] * 800\nlen(json.encode(c))";
        let e = scope(budget, || {
            crate::script::memory::guard(1 << 40, || eval(code)).unwrap()
        })
        .unwrap_err();
        assert!(e.contains("ran out of its time budget"), "{e}");
    }

    #[test]
    fn round_trip_is_exact() {
        let code = r#"json.encode(json.decode('{"a": 9223372036854775807, "b": 18446744073709551615, "c": null, "d": [1.5, true]}'))"#;
        assert_eq!(
            eval(code).unwrap(),
            r#""{\"a\":9223372036854775807,\"b\":18446744073709551615,\"c\":null,\"d\":[1.5,true]}""#
        );
    }

    #[test]
    fn decoded_objects_have_attribute_access() {
        assert_eq!(
            eval(r#"d = json.decode('{"m": {"n": 1}}'); [d.m.n, d.x, d["m"]["n"]]"#).unwrap(),
            "[1, None, 1]"
        );
    }

    #[test]
    fn unencodable_values_name_their_path() {
        let err = eval("json.encode({'a': [1, len]})").unwrap_err();
        assert!(err.contains("at $.a[1]"), "{err}");
        let err = eval("json.encode({1: 2})").unwrap_err();
        assert!(err.contains("not a string"), "{err}");
        let err = eval("a = []\na.append(a)\njson.encode(a)").unwrap_err();
        assert!(err.contains("cycle"), "{err}");
        let err = eval("json.encode(1 << 70)").unwrap_err();
        assert!(err.contains("64 bits"), "{err}");
    }

    #[test]
    fn bad_json_is_an_error() {
        assert!(
            eval("json.decode('{')")
                .unwrap_err()
                .contains("json.decode")
        );
    }
}
