//! Tests of the `template` module, through the scripts' globals.

use crate::script::builtins::snippets::{eval, eval_allowing};

/// A Starlark string literal for `s`.
fn lit(s: &str) -> String {
    serde_json::to_string(s).unwrap()
}

/// `template.render(tmpl, data)`, its text or its error.
fn render(tmpl: &str, data: &str) -> Result<String, String> {
    eval(&format!("template.render({}, {data})", lit(tmpl)))
        .map(|repr| serde_json::from_str::<String>(&repr).unwrap())
}

fn ok(tmpl: &str, data: &str) -> String {
    render(tmpl, data).unwrap_or_else(|e| panic!("{tmpl}: {e}"))
}

fn err(tmpl: &str, data: &str) -> String {
    match render(tmpl, data) {
        Ok(out) => panic!("{tmpl} rendered {out:?}"),
        Err(e) => e,
    }
}

fn assert_err(tmpl: &str, data: &str, want: &str) {
    let e = err(tmpl, data);
    assert!(e.contains(want), "{tmpl}: {e}\n  wanted: {want}");
}

#[test]
fn upstream_examples() {
    assert_eq!(
        ok("Hello, {{.name}}!", "{'name': 'world'}"),
        "Hello, world!"
    );
    assert_eq!(
        eval("template.text('{{.greeting}}, {{.target}}!').render({'greeting': 'Hi', 'target': 'kite'})")
            .unwrap(),
        "\"Hi, kite!\""
    );
    assert_eq!(
        eval("template.text('<% .name %>', delims=('<%', '%>')).render({'name': 'custom'})")
            .unwrap(),
        "\"custom\""
    );
    let out = eval(
        "r = template.text('{{.required_field}}').try_render({}, missing_key='error')\n(r.ok, r.error)",
    )
    .unwrap();
    assert!(
        out.contains("False") && out.contains(r#"map has no entry for key \"required_field\""#),
        "{out}"
    );
    assert_eq!(
        eval("t = template.text('{{.}}')\n(t.source, bool(t), bool(template.text('')), type(t))")
            .unwrap(),
        "(\"{{.}}\", True, False, \"template\")"
    );
}

#[test]
fn fields_of_dicts_structs_and_attrdicts() {
    assert_eq!(ok("{{.a.b.c}}", "{'a': {'b': {'c': 'deep'}}}"), "deep");
    assert_eq!(ok("{{.a.b}}", "{'a': struct(b = 2)}"), "2");
    assert_eq!(
        ok(
            "{{.metadata.name}}",
            "json.decode('{\"metadata\": {\"name\": \"x\"}}')"
        ),
        "x"
    );
    assert_eq!(ok("{{.}}", "'plain'"), "plain");
    assert_eq!(ok("{{$.a}}", "{'a': 1}"), "1");
}

#[test]
fn values_print_as_go_prints_them() {
    assert_eq!(
        ok(
            "{{.s}} {{.i}} {{.f}} {{.b}} {{.l}} {{.m}}",
            "{'s': 'x', 'i': -3, 'f': 2.5, 'b': True, 'l': [1, 'a', None], 'm': {'z': 1, 'a': [2]}}"
        ),
        "x -3 2.5 true [1 a <nil>] map[a:[2] z:1]"
    );
    assert_eq!(
        ok(
            "{{.a}} {{.b}} {{.c}}",
            "{'a': 1000000.0, 'b': 3.0, 'c': 0.00001}"
        ),
        "1e+06 3 1e-05"
    );
    assert_eq!(ok("{{.missing}}", "{}"), "<no value>");
    assert_eq!(ok("{{.none}}", "{'none': None}"), "<no value>");
    assert_eq!(ok("{{.a.b}}", "{}"), "<no value>");
    assert_eq!(ok("{{.}}", "None"), "<no value>");
}

#[test]
fn missing_key_modes() {
    let t = "t = template.text('[{{.x}}]')\n";
    assert_eq!(
        eval(&format!("{t}t.render({{}}, missing_key='zero')")).unwrap(),
        "\"[<no value>]\""
    );
    assert_eq!(
        eval(&format!("{t}t.render({{}}, missing_key='default')")).unwrap(),
        "\"[<no value>]\""
    );
    let e = eval(&format!("{t}t.render({{}}, missing_key='error')")).unwrap_err();
    assert!(
        e.contains(r#"template.render: template: tmpl:1:3: executing "tmpl" at <.x>: map has no entry for key "x""#),
        "{e}"
    );
    let e = eval(&format!("{t}t.render({{}}, missing_key='sometimes')")).unwrap_err();
    assert!(e.contains("missing_key must be"), "{e}");
    let e = eval("template.text('{{.a.b}}').render(None, missing_key='error')").unwrap_err();
    assert!(e.contains(r#"nil data; no entry for key "a""#), "{e}");
}

#[test]
fn literals() {
    assert_eq!(
        ok(
            r#"{{"s"}} {{`raw\n`}} {{42}} {{-7}} {{0x1F}} {{1.5}} {{1e3}} {{'a'}} {{true}} {{false}}"#,
            "{}"
        ),
        r"s raw\n 42 -7 31 1.5 1000 97 true false"
    );
    assert_eq!(ok(r#"{{"tab\there"}}"#, "{}"), "tab\there");
    assert_eq!(ok("{{print nil}}", "{}"), "<nil>");
}

#[test]
fn comments_and_trim_markers() {
    assert_eq!(ok("a {{/* note */}} b", "{}"), "a  b");
    assert_eq!(ok("a  {{- /* note */ -}}  b", "{}"), "ab");
    assert_eq!(ok("x \n {{- .a -}} \n y", "{'a': 1}"), "x1y");
    assert_eq!(ok("{{- .a}} {{.a -}}   !", "{'a': 1}"), "1 1!");
    assert_eq!(ok("{{-3}}", "{}"), "-3");
}

#[test]
fn variables() {
    assert_eq!(ok("{{$x := .a}}{{$x}}-{{$x = 5}}{{$x}}", "{'a': 1}"), "1-5");
    assert_eq!(
        ok(
            "{{range .l}}{{$.name}}:{{.}} {{end}}",
            "{'l': [1, 2], 'name': 'n'}"
        ),
        "n:1 n:2 "
    );
    assert_eq!(ok("{{$v := .m}}{{$v.k}}", "{'m': {'k': 'v'}}"), "v");
    // A variable lives until the end of its block.
    assert_err(
        "{{if true}}{{$x := 1}}{{end}}{{$x}}",
        "{}",
        r#"undefined variable "$x""#,
    );
    assert_err(
        "{{$y}}",
        "{}",
        r#"template: tmpl:1: undefined variable "$y""#,
    );
}

#[test]
fn if_else_chains() {
    let t = "{{if eq .n 1}}one{{else if eq .n 2}}two{{else}}many{{end}}";
    assert_eq!(ok(t, "{'n': 1}"), "one");
    assert_eq!(ok(t, "{'n': 2}"), "two");
    assert_eq!(ok(t, "{'n': 3}"), "many");
    assert_eq!(ok("{{if .l}}y{{else}}n{{end}}", "{'l': []}"), "n");
    assert_eq!(ok("{{if .s}}y{{end}}", "{'s': 'x'}"), "y");
    assert_eq!(ok("{{if .missing}}y{{else}}n{{end}}", "{}"), "n");
}

#[test]
fn range_over_lists_maps_and_ints() {
    assert_eq!(ok("{{range .}}[{{.}}]{{end}}", "[1, 2, 3]"), "[1][2][3]");
    assert_eq!(
        ok("{{range $i, $v := .}}{{$i}}={{$v}} {{end}}", "['a', 'b']"),
        "0=a 1=b "
    );
    assert_eq!(
        ok(
            "{{range $k, $v := .}}{{$k}}:{{$v}},{{end}}",
            "{'b': 2, 'a': 1}"
        ),
        "a:1,b:2,"
    );
    assert_eq!(ok("{{range $v := .}}{{$v}}{{end}}", "('x', 'y')"), "xy");
    assert_eq!(ok("{{range .}}x{{else}}empty{{end}}", "[]"), "empty");
    assert_eq!(ok("{{range .nothing}}x{{else}}none{{end}}", "{}"), "none");
    assert_eq!(ok("{{range 3}}{{.}}{{end}}", "{}"), "012");
    assert_eq!(
        ok(
            "{{range .}}{{if eq . 3}}{{break}}{{end}}{{if eq . 1}}{{continue}}{{end}}{{.}}{{end}}",
            "[0, 1, 2, 3, 4]"
        ),
        "02"
    );
    assert_err(
        "{{range .}}{{end}}",
        "'str'",
        "range can't iterate over str",
    );
    assert_err("{{break}}", "{}", "{{break}} outside {{range}}");
}

#[test]
fn with_blocks() {
    assert_eq!(ok("{{with .a}}{{.b}}{{end}}", "{'a': {'b': 'in'}}"), "in");
    assert_eq!(ok("{{with .x}}y{{else}}n{{end}}", "{}"), "n");
    assert_eq!(ok("{{with $v := .a}}{{$v}}{{end}}", "{'a': 5}"), "5");
    assert_eq!(
        ok("{{with .a}}a{{else with .b}}b={{.}}{{end}}", "{'b': 2}"),
        "b=2"
    );
}

#[test]
fn define_template_and_block() {
    assert_eq!(
        ok(
            r#"{{define "item"}}<{{.}}>{{end}}{{range .}}{{template "item" .}}{{end}}"#,
            "[1, 2]"
        ),
        "<1><2>"
    );
    assert_eq!(ok(r#"{{define "t"}}T{{end}}{{template "t"}}"#, "{}"), "T");
    assert_eq!(ok(r#"{{block "b" .x}}[{{.}}]{{end}}"#, "{'x': 9}"), "[9]");
    assert_err(
        r#"{{template "nope"}}"#,
        "{}",
        r#"template "nope" not defined"#,
    );
    assert_err(
        r#"{{define "a"}}1{{end}}{{define "a"}}2{{end}}"#,
        "{}",
        r#"multiple definition of template "a""#,
    );
    assert_err(
        r#"{{if true}}{{define "x"}}{{end}}{{end}}"#,
        "{}",
        "unexpected <define> in command",
    );
}

#[test]
fn infinite_recursion_fails_cleanly() {
    let e = err(
        r#"{{define "loop"}}{{template "loop" .}}{{end}}{{template "loop" .}}"#,
        "{}",
    );
    assert!(e.contains("exceeded maximum template depth (300)"), "{e}");
    // Deep nesting at parse time is refused too.
    let deep = "{{if true}}".repeat(1000) + &"{{end}}".repeat(1000);
    assert_err(&deep, "{}", "exceeded maximum nesting depth");
    let parens = "{{".to_owned() + &"(".repeat(1000) + "1" + &")".repeat(1000) + "}}";
    assert_err(&parens, "{}", "exceeded maximum nesting depth");
}

#[test]
fn recursion_within_the_limit_fits_a_small_stack() {
    // A tree walk to the depth limit must not need more than a modest thread stack.
    let handle = std::thread::Builder::new()
        .stack_size(1 << 20)
        .spawn(|| {
            let t =
                r#"{{define "n"}}{{if .c}}({{template "n" .c}}){{end}}{{end}}{{template "n" .}}"#;
            let mut data = "{}".to_owned();
            for _ in 0..140 {
                data = format!("{{'c': {data}}}");
            }
            render(t, &data)
        })
        .unwrap();
    let out = handle.join().unwrap().unwrap();
    assert_eq!(out.matches('(').count(), 139);
}

#[test]
fn pipelines_and_parentheses() {
    assert_eq!(ok("{{.a | printf \"%03d\"}}", "{'a': 7}"), "007");
    assert_eq!(ok("{{\"x\" | printf \"%s-%s\" \"y\"}}", "{}"), "y-x");
    assert_eq!(ok("{{len (index . 1)}}", "['a', 'bcd']"), "3");
    assert_eq!(ok("{{(index . 0).k}}", "[{'k': 'v'}]"), "v");
    assert_eq!(ok("{{. | len | printf \"%d items\"}}", "[1, 2]"), "2 items");
    assert_err(
        "{{1 | 2}}",
        "{}",
        "non executable command in pipeline stage 2",
    );
}

#[test]
fn logic_functions() {
    assert_eq!(
        ok(
            "{{and 1 0 2}} {{and 1 2}} {{or 0 \"\" 3}} {{or 0 false}}",
            "{}"
        ),
        "0 2 3 false"
    );
    assert_eq!(ok("{{not 0}} {{not .l}}", "{'l': [1]}"), "true false");
    // and/or stop at the answer: the failing call after it never runs.
    assert_eq!(ok("{{and false (index .l 9)}}", "{'l': []}"), "false");
    assert_eq!(ok("{{if and .a (eq .a.b 1)}}y{{else}}n{{end}}", "{}"), "n");
}

#[test]
fn comparison_functions() {
    assert_eq!(
        ok(
            "{{eq 1 1}} {{eq \"a\" \"b\"}} {{eq 2 1 2}} {{ne 1 2}} {{lt 1 2}} {{le 2 2}} {{gt \"b\" \"a\"}} {{ge 1.5 2.5}}",
            "{}"
        ),
        "true false true true true true true false"
    );
    assert_eq!(
        ok("{{eq .x nil}} {{eq .n \"a\"}}", "{'x': None, 'n': None}"),
        "true false"
    );
    assert_err(
        "{{eq 1 1.5}}",
        "{}",
        "error calling eq: incompatible types for comparison",
    );
    assert_err(
        "{{lt true false}}",
        "{}",
        "error calling lt: invalid type for comparison",
    );
    assert_err("{{eq .l .l}}", "{'l': [1]}", "non-comparable type");
    assert_err("{{eq 1}}", "{}", "missing argument for comparison");
}

#[test]
fn len_index_slice() {
    assert_eq!(
        ok(
            "{{len .s}} {{len .l}} {{len .m}}",
            "{'s': 'héllo', 'l': [1], 'm': {}}"
        ),
        "6 1 0"
    );
    assert_eq!(
        ok(
            "{{index .l 1}} {{index .m \"k\"}} {{index .n 0 1}} {{index .m \"zz\"}}",
            "{'l': [5, 6], 'm': {'k': 'v'}, 'n': [[1, 2]]}"
        ),
        "6 v 2 <no value>"
    );
    assert_eq!(ok("{{index \"abc\" 1}}", "{}"), "98");
    assert_eq!(
        ok(
            "{{slice .l 1}} {{slice .l 1 2}} {{slice .s 1 3}} {{slice .l}}",
            "{'l': [1, 2, 3], 's': 'abcd'}"
        ),
        "[2 3] [2] bc [1 2 3]"
    );
    assert_err(
        "{{index .l 5}}",
        "{'l': [1]}",
        "error calling index: index out of range: 5",
    );
    assert_err("{{index 1 0}}", "{}", "can't index item of type int");
    assert_err(
        "{{index .m 1}}",
        "{'m': {}}",
        "value has type int; should be string",
    );
    assert_err(
        "{{slice .l 2 1}}",
        "{'l': [1, 2]}",
        "invalid slice index: 2 > 1",
    );
    assert_err("{{len 3}}", "{}", "error calling len: len of type int");
}

#[test]
fn print_functions() {
    assert_eq!(ok("{{print \"a\" 1 2 \"b\"}}", "{}"), "a1 2b");
    assert_eq!(ok("{{println \"a\" 1}}", "{}"), "a 1\n");
    assert_eq!(
        ok(
            "{{printf \"%s|%5d|%-4s|%.2f|%v|%q|%x|%t|%T\" \"s\" 42 \"l\" 3.14159 .l \"q\" 255 true .m}}",
            "{'l': [1, 2], 'm': {}}"
        ),
        "s|   42|l   |3.14|[1 2]|\"q\"|ff|true|map[string]interface {}"
    );
    assert_eq!(
        ok("{{printf \"%d %s\" \"x\"}}", "{}"),
        "%!d(string=x) %!s(MISSING)"
    );
    assert_eq!(ok("{{printf \"%d\" 1 2}}", "{}"), "1%!(EXTRA int=2)");
    assert_eq!(
        ok("{{printf \"%e %g %08.3f\" 1500.0 0.00001 -3.14159}}", "{}"),
        "1.500000e+03 1e-05 -003.142"
    );
    assert_err(
        "{{printf 1}}",
        "{}",
        "wrong type for value; expected string; got int",
    );
}

#[test]
fn escaping_functions() {
    assert_eq!(
        ok("{{html .}}", "\"<a href='x'>&\\\"\""),
        "&lt;a href=&#39;x&#39;&gt;&amp;&#34;"
    );
    assert_eq!(
        ok("{{js .}}", "\"it's <b>=\\\"\\\\\""),
        "it\\'s \\u003Cb\\u003E\\u003D\\\"\\\\"
    );
    assert_eq!(ok("{{urlquery .}}", "'a b&c=d/é'"), "a+b%26c%3Dd%2F%C3%A9");
    assert_eq!(ok("{{. | html}}", "'<'"), "&lt;");
    assert_eq!(ok("{{html 1 2}}", "{}"), "1 2");
}

#[test]
fn call_has_no_functions_to_call() {
    assert_err(
        "{{call .f}}",
        "{'f': 1}",
        "error calling call: non-function of type int",
    );
    assert_err("{{call .f}}", "{}", "error calling call: call of nil");
}

#[test]
fn parse_errors_name_the_line() {
    assert_err(
        "a\n{{.x",
        "{}",
        "template.render: template: tmpl:2: unclosed action",
    );
    assert_err(
        "{{nope 1}}",
        "{}",
        r#"template: tmpl:1: function "nope" not defined"#,
    );
    assert_err("{{if .a}}x", "{}", "template: tmpl:1: unexpected EOF");
    assert_err("{{end}}", "{}", "template: tmpl:1: unexpected {{end}}");
    assert_err("{{else}}", "{}", "unexpected {{else}}");
    assert_err("{{}}", "{}", "missing value for command");
    assert_err("{{/* open", "{}", "unclosed comment");
    assert_err(
        "{{/* c */ .a}}",
        "{}",
        "comment ends before closing delimiter",
    );
    assert_err("{{\"open}}", "{}", "unterminated quoted string");
    assert_err("{{`open}}", "{}", "unterminated raw quoted string");
    assert_err("{{(1}}", "{}", "unclosed left paren");
    assert_err("{{1)}}", "{}", "unexpected right paren");
    assert_err("{{3x}}", "{}", r#"bad number syntax: "3x""#);
    assert_err("{{.a;}}", "{}", "bad character U+003B ';'");
    assert_err("{{if}}{{end}}", "{}", "missing value for if");
    assert_err(
        "{{template .x}}",
        "{}",
        "unexpected \".x\" in template clause",
    );
    assert_err("{{$x, $y := 1}}", "{}", "too many declarations in command");
    assert_err(
        "{{.a 1 }}",
        "{'a': {}}",
        "a is not a method but has arguments",
    );
    assert_err(
        "{{\"x\" 1}}",
        "{}",
        "can't give argument to non-function \"x\"",
    );
    assert_err("{{nil}}", "{}", "nil is not a command");
}

#[test]
fn execution_errors_name_line_column_and_node() {
    assert_err(
        "line one\n  {{.a.b}}",
        "{'a': 'str'}",
        r#"template: tmpl:2:4: executing "tmpl" at <.a.b>: can't evaluate field b in type string"#,
    );
    assert_err(
        "{{.a.b}}",
        "{'a': None}",
        "nil pointer evaluating interface {}.b",
    );
    assert_err(
        r#"{{define "x"}}{{.q.r}}{{end}}{{template "x" 1}}"#,
        "{}",
        r#"executing "x" at <.q.r>: can't evaluate field q in type int"#,
    );
    assert_err(
        "{{not 1 2}}",
        "{}",
        "wrong number of args for not: want 1 got 2",
    );
    assert_err(
        "{{index}}",
        "{}",
        "wrong number of args for index: want at least 1 got 0",
    );
}

#[test]
fn output_size_is_bounded() {
    let e = err(
        "{{range .}}{{range $}}{{range $}}{{printf \"%5000d\" 1}}{{end}}{{end}}{{end}}",
        "list(range(100))",
    );
    assert!(e.contains("output exceeds"), "{e}");
}

#[test]
fn data_that_cannot_be_rendered() {
    assert_err(
        "{{.}}",
        "{'f': len}",
        "cannot use a function in template data (at $.f)",
    );
    assert_err("{{.}}", "{1: 2}", "dict key 1 at $ is not a string");
    assert_err(
        "{{.}}",
        "{'n': 1000000000000000000000000000000}",
        "does not fit in 64 bits",
    );
}

#[test]
fn factories_try_variants_and_files() {
    assert_eq!(eval("template.bytes(b'{{.}}').render(3)").unwrap(), "\"3\"");
    assert_eq!(
        eval("template.bytes('{{.}}').render('s')").unwrap(),
        "\"s\""
    );
    let e = eval("template.bytes(1)").unwrap_err();
    assert!(
        e.contains("template.bytes: argument must be bytes or string, got int"),
        "{e}"
    );
    let e = eval("template.text('{{', delims=['a'])").unwrap_err();
    assert!(e.contains("delims must be a tuple"), "{e}");
    assert_eq!(
        eval("r = template.try_text('{{')\n(r.ok, 'unclosed action' in r.error)").unwrap(),
        "(False, True)"
    );
    assert_eq!(
        eval("r = template.try_render('{{.}}', 1)\n(r.ok, r.value)").unwrap(),
        "(True, \"1\")"
    );
    assert_eq!(
        eval("template.try_bytes(b'x').value.render({})").unwrap(),
        "\"x\""
    );
    let e = eval("template.file('x.tmpl')").unwrap_err();
    assert!(e.contains("template.file needs --allow-fs"), "{e}");
    let dir = std::env::temp_dir().join(format!("kite-template-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let p = dir.join("deploy.tmpl");
    std::fs::write(&p, "replicas: {{.replicas}}\n").unwrap();
    let p = p.display();
    assert_eq!(
        eval_allowing(&format!("template.file('{p}').render({{'replicas': 3}})")).unwrap(),
        "\"replicas: 3\\n\""
    );
    assert_eq!(
        eval_allowing(&format!(
            "r = template.try_file('{p}.missing')\n(r.ok, 'template.file' in r.error)"
        ))
        .unwrap(),
        "(False, True)"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn kite_check_knows_the_module() {
    let script = "t = template.text('{{.a}}', delims = ('{{', '}}'))\nprint(t.render({'a': 1}), template.render('x', {}))\nr = template.try_file('f')\n";
    let library = crate::script::library::Library::standard();
    assert!(crate::script::check::check_text(library, "t.star", script).is_ok());
    let bad = "template.render('x')\n";
    assert!(crate::script::check::check_text(library, "t.star", bad).is_err());
}

#[test]
fn more_constructs() {
    // Assignment inside a range changes the outer variable.
    assert_eq!(
        ok(
            "{{$last := 0}}{{range .}}{{$last = .}}{{end}}{{$last}}",
            "[1, 2, 3]"
        ),
        "3"
    );
    // A called template sees only its own dot and `$`.
    assert_err(
        r#"{{define "t"}}{{$x}}{{end}}{{$x := 1}}{{template "t"}}"#,
        "{}",
        r#"undefined variable "$x""#,
    );
    assert_eq!(
        ok(
            r#"{{define "t"}}{{$.k}}{{end}}{{template "t" .in}}"#,
            "{'in': {'k': 'inner'}}"
        ),
        "inner"
    );
    assert_eq!(
        eval("template.text('a <%- .x -%> b', delims = ('<%', '%>')).render({'x': 1})").unwrap(),
        "\"a1b\""
    );
    // Delimiters that are not the defaults leave `{{` as text.
    assert_eq!(
        eval("template.text('{{.x}} [[.x]]', delims = ('[[', ']]')).render({'x': 1})").unwrap(),
        "\"{{.x}} 1\""
    );
    assert_eq!(
        ok(
            "{{with .a}}{{with .b}}{{.}}{{end}}{{end}}",
            "{'a': {'b': 'x'}}"
        ),
        "x"
    );
    assert_eq!(ok("{{(.).a}}", "{'a': 'dot'}"), "dot");
    assert_eq!(ok("{{if not (or .a .b)}}none{{end}}", "{}"), "none");
}

/// Issue 26: a few operands that format to far more than their data (a padded list,
/// one large value many times) stop at what a template may write, within the memory
/// budget.
#[test]
fn formatting_that_multiplies_its_data_is_bounded() {
    for code in [
        r#"template.render('{{printf "%65536v" .}}', [0] * 20000)"#,
        r#"template.render("{{println" + " ." * 200 + "}}", "x" * (1 << 20))"#,
    ] {
        let out = crate::script::memory::guard(64 << 20, || eval(code))
            .unwrap()
            .unwrap();
        let shown = &out[..out.len().min(200)];
        assert!(out.contains("%!(TOO LONG)"), "{shown}");
    }
}
