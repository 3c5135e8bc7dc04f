//! Tests of the `csv` module: reading and writing files, their options, errors and the
//! `--allow-fs` they need.

use crate::script::builtins::snippets::{eval, eval_allowing, eval_permitted};
use crate::script::permissions::{Access, Permissions};

/// A fresh directory for one test, and its path as a Starlark string literal.
fn temp_dir(tag: &str) -> (std::path::PathBuf, String) {
    let dir = std::env::temp_dir().join(format!("kite-csv-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let lit = format!("{:?}", dir.display().to_string());
    (dir, lit)
}

#[test]
fn reads_rows_with_upstreams_options() {
    let (dir, d) = temp_dir("read");
    std::fs::write(
        dir.join("a.csv"),
        "name,value\n# a comment\nfoo,1\n\"bar, baz\",\"two\nlines\"\nshort\n",
    )
    .unwrap();
    std::fs::write(dir.join("b.csv"), "x;y\r\n1;2\r\n").unwrap();
    let out = eval_allowing(&format!(
        "f = csv.file({d} + '/a.csv')\n\
         (f.read(comment = '#'), f.read(comment = '#', skip = 2), f.read(skip = 9), \
          f.read(header = True, comment = '#'), csv.file({d} + '/b.csv').read(sep = ';'))"
    ))
    .unwrap();
    assert_eq!(
        out,
        "([[\"name\", \"value\"], [\"foo\", \"1\"], [\"bar, baz\", \"two\\nlines\"], [\"short\"]], \
         [[\"bar, baz\", \"two\\nlines\"], [\"short\"]], [], \
         [{\"name\": \"foo\", \"value\": \"1\"}, {\"name\": \"bar, baz\", \"value\": \"two\\nlines\"}, {\"name\": \"short\", \"value\": \"\"}], \
         [[\"x\", \"y\"], [\"1\", \"2\"]])"
    );
    // Without comment=, '#' is data.
    assert!(
        eval_allowing(&format!("csv.file({d} + '/a.csv').read()[1]"))
            .unwrap()
            .contains("# a comment")
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn writes_lists_and_dicts() {
    let (dir, d) = temp_dir("write");
    let out = eval_allowing(&format!(
        "p = {d} + '/out.csv'\n\
         csv.source([['a', 'b,c'], [1, None], ('t', 'u\"v')]).write_file(p)\n\
         one = read_text(p)\n\
         csv.source([{{'name': 'x', 'n': 1}}, {{'n': 2, 'extra': 3}}]).write_file(p, sep = ';')\n\
         two = read_text(p)\n\
         csv.source([['1', '2']]).write_file(p, headers = ['h1', 'h2'])\n\
         three = read_text(p)\n\
         csv.source([{{'a': 1, 'b': 2}}]).write_file(p, headers = ['b'])\n\
         four = read_text(p)\n\
         csv.source([]).write_file(p)\n\
         (one, two, three, four, read_text(p))"
    ))
    .unwrap();
    assert_eq!(
        out,
        r#"("a,\"b,c\"\n1,None\nt,\"u\"\"v\"\n", "name;n\nx;1\n;2\n", "h1,h2\n1,2\n", "b\n2\n", "")"#
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn values_repr_and_try() {
    let out = eval(
        "w = csv.source([['a']])\n\
         f = csv.file('/x.csv')\n\
         (str(w), type(w), bool(w), bool(csv.source([])), w.data, str(f), type(f), f.path, \
          csv.try_file('/y').value.path, csv.try_source('no').ok, 'must be a list' in csv.try_source('no').error)",
    )
    .unwrap();
    assert_eq!(
        out,
        r#"("csv.writer(1 rows)", "csv.writer", True, False, [["a"]], "csv.file(\"/x.csv\")", "csv.file", "/x.csv", "/y", False, True)"#
    );
}

#[test]
fn errors_name_the_call_and_the_problem() {
    let (dir, d) = temp_dir("errors");
    std::fs::write(dir.join("a.csv"), "a,b\n").unwrap();
    let e = eval_allowing(&format!("csv.file({d} + '/a.csv').read(sep = '::')")).unwrap_err();
    assert!(
        e.contains("csv.file.read: sep must be one ASCII character"),
        "{e}"
    );
    let e = eval_allowing(&format!("csv.file({d} + '/a.csv').read(skip = -1)")).unwrap_err();
    assert!(
        e.contains("csv.file.read: skip must not be negative"),
        "{e}"
    );
    let e = eval_allowing(&format!("csv.file({d} + '/missing.csv').read()")).unwrap_err();
    assert!(
        e.contains("csv.file.read: ") && e.contains("missing.csv: no such file"),
        "{e}"
    );
    let e = eval_allowing(&format!(
        "csv.source([{{'a': 1}}, ['x']]).write_file({d} + '/o.csv')"
    ))
    .unwrap_err();
    assert!(
        e.contains("csv.writer.write_file: expected dict, got list"),
        "{e}"
    );
    let e = eval_allowing(&format!(
        "csv.source([['a'], 1]).write_file({d} + '/o.csv')"
    ))
    .unwrap_err();
    assert!(e.contains("expected list of lists, got int"), "{e}");
    assert!(!dir.join("o.csv").exists(), "a failed write leaves no file");
    let e = eval("csv.source(1)").unwrap_err();
    assert!(
        e.contains("csv.source: data must be a list, got int"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn files_need_allow_fs() {
    let e = eval("csv.file('/etc/hostname').read()").unwrap_err();
    assert!(e.contains("csv.file.read needs --allow-fs"), "{e}");
    let e = eval("csv.source([['a']]).write_file('/tmp/x.csv')").unwrap_err();
    assert!(e.contains("csv.writer.write_file needs --allow-fs"), "{e}");
    let out = eval_permitted(
        Permissions::only(Access::Env),
        "csv.source([['a']]).try_write_file('/tmp/x.csv').ok",
    )
    .unwrap();
    assert_eq!(out, "False");
}

#[test]
fn a_huge_write_stops_at_the_memory_budget() {
    let (dir, d) = temp_dir("budget");
    // Each row repeats one 65 KB string; the records built in Rust are far larger than
    // the script's heap.
    let code = format!(
        "s = 'x' * 65000\nrows = [[s] * 10] * 2000\ncsv.source(rows).write_file({d} + '/big.csv')"
    );
    let e = crate::script::memory::guard(64 << 20, || eval_allowing(&code))
        .unwrap()
        .unwrap_err();
    assert!(
        e.contains("csv.writer.write_file: stopped: it passed the script's memory limit"),
        "{e}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}
