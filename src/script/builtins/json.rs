//! `json.encode` and `json.decode`, exact for integers; decoded objects are AttrDicts.
//! `json.file(path)` and `json.source(data)`, upstream Starkite's file readers and
//! writers, are in [`objects`].

use serde_json::Value as Json;
use starlark::environment::GlobalsBuilder;
use starlark::starlark_module;
use starlark::values::{Heap, Value};

use crate::script::builtins::input::text_of;
use crate::script::json::{from_starlark, to_starlark};

mod objects;

pub use objects::json_files;

fn encode_value(call: &str, value: Value, indent: bool) -> Result<String, String> {
    let json = from_starlark(value).map_err(|e| format!("{call}: {e}"))?;
    let text = if indent {
        serde_json::to_string_pretty(&json)
    } else {
        serde_json::to_string(&json)
    };
    text.map_err(|e| format!("{call}: {e}"))
}

/// Parses JSON text (node by node within the budgets: a short text can decode to a
/// huge tree).
fn parse(call: &str, text: &str) -> Result<Json, String> {
    crate::script::parse::json(text).map_err(|e| format!("{call}: {e}"))
}

fn decode_value<'v>(heap: Heap<'v>, call: &str, data: Value<'v>) -> Result<Value<'v>, String> {
    let json = parse(call, text_of(call, data)?)?;
    Ok(to_starlark(heap, &json))
}

starlark::globals_static!(FUNCTIONS = json_functions);

/// `json.encode` and `json.decode`, each with its `try_` form
/// ([`crate::script::try_form`]).
pub fn json_namespace(builder: &mut GlobalsBuilder) {
    crate::script::try_form::with_tries(builder, FUNCTIONS.globals(), &["encode", "decode"]);
}

#[starlark_module]
fn json_functions(builder: &mut GlobalsBuilder) {
    /// Encodes a value as JSON. `indent` pretty-prints.
    fn encode(
        #[starlark(require = pos)] value: Value,
        #[starlark(require = named, default = false)] indent: bool,
    ) -> anyhow::Result<String> {
        encode_value("json.encode", value, indent).map_err(anyhow::Error::msg)
    }

    /// Decodes JSON text (a string or UTF-8 bytes); objects become AttrDicts.
    fn decode<'v>(
        #[starlark(require = pos)] text: Value<'v>,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        decode_value(heap, "json.decode", text).map_err(anyhow::Error::msg)
    }
}

#[cfg(test)]
mod tests {
    use crate::script::builtins::snippets::eval;

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
    fn bytes_decode_and_try_forms() {
        assert_eq!(eval(r#"json.decode(b'{"a": [1]}').a"#).unwrap(), "[1]");
        let e = eval("json.decode(1)").unwrap_err();
        assert!(
            e.contains("json.decode: argument must be string or bytes, got int"),
            "{e}"
        );
        assert_eq!(
            eval("r = json.try_decode('{')\n(r.ok, 'json.decode' in r.error)").unwrap(),
            "(False, True)"
        );
        assert_eq!(
            eval("r = json.try_encode([1])\n(r.ok, r.value)").unwrap(),
            "(True, \"[1]\")"
        );
    }

    #[test]
    fn files_and_sources_need_the_flag() {
        use crate::script::builtins::snippets::eval_allowing;
        let e = eval("json.file('x.json')").unwrap_err();
        assert!(e.contains("json.file needs --allow-fs"), "{e}");
        let e = eval("json.source({'a': 1}).write_file('x.json')").unwrap_err();
        assert!(e.contains("json.writer.write_file needs --allow-fs"), "{e}");
        assert_eq!(
            eval("json.source({'a': [1]}).encode(indent = '  ', prefix = '>')").unwrap(),
            r#""{\n>  \"a\": [\n>    1\n>  ]\n>}""#
        );
        let dir = std::env::temp_dir().join(format!("kite-json-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let p = dir.join("v.json");
        let p = p.display();
        let out = eval_allowing(&format!(
            "w = json.source({{'tag': 'v1'}})\nw.write_file('{p}', indent = ' ')\nf = json.file('{p}')\n(f.decode().tag, f.path == '{p}', w.data.tag, type(f), type(w))"
        ))
        .unwrap();
        assert_eq!(out, r#"("v1", True, "v1", "json.file", "json.writer")"#);
        assert_eq!(
            std::fs::read_to_string(dir.join("v.json")).unwrap(),
            "{\n \"tag\": \"v1\"\n}\n"
        );
        let out = eval_allowing(&format!(
            "r = json.file('{p}.missing').try_decode()\n(r.ok, r.error)"
        ))
        .unwrap();
        assert_eq!(
            out,
            format!("(False, \"json.file.decode: open {p}.missing: no such file or directory\")")
        );
        std::fs::remove_dir_all(&dir).unwrap();
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
