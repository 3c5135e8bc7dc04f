//! The runner end to end on temporary files: assertions, fresh modules, setup and
//! teardown, skips, permissions, budgets, and the report.

use std::path::PathBuf;
use std::time::Duration;

use super::report::{Case, LOAD, Status};
use super::{Options, suite};
use crate::script::permissions::Permissions;

/// A fresh directory for one test's files.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("kite-test-runner-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

fn options(paths: Vec<PathBuf>) -> Options {
    Options {
        paths,
        filter: None,
        permissions: Permissions::none(),
        vars: Vec::new(),
        var_files: Vec::new(),
        kube: crate::k8s::session::KubeOptions::default(),
        json: false,
        junit: None,
        verbose: false,
        parallel: None,
        timeout: Duration::from_secs(30),
        memory: 256 << 20,
    }
}

/// Runs the file `code` as `<name>_test.star` and returns its cases.
fn run_code(name: &str, code: &str, tweak: impl FnOnce(&mut Options)) -> Vec<Case> {
    let dir = scratch(name);
    let file = dir.join(format!("{name}_test.star"));
    std::fs::write(&file, code).unwrap();
    let mut opts = options(vec![file.clone()]);
    tweak(&mut opts);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let settings = suite::Settings {
        library: super::library(),
        permissions: opts.permissions,
        vars: opts.vars.clone(),
        var_files: Vec::new(),
        kube: opts.kube.clone(),
        runtime: rt.handle().clone(),
        filter: opts.filter.clone(),
        timeout: opts.timeout,
        memory: opts.memory,
    };
    let cases = suite::run_file(&file, &settings);
    let _ = std::fs::remove_dir_all(&dir);
    cases
}

fn outcome(cases: &[Case]) -> Vec<(&str, Status)> {
    cases.iter().map(|c| (c.name.as_str(), c.status)).collect()
}

#[test]
fn assertions_pass_and_fail_with_their_position() {
    let code = r#"
def test_ok():
    assert(True)
    assert_true([1])
    assert_false("")
    assert_equal({"a": [1, 2]}, {"a": [1, 2]})
    assert_not_equal(1, 2)
    assert_contains("hello world", "world")
    assert_contains([1, 2], 2)
    assert_contains({"k": 1}, "k")
    test.assert_equal(1 + 1, 2)

def test_dict():
    got = {"a": 1, "b": 2}
    assert_equal(got, {"a": 1, "b": 3, "c": 4}, "config for %s", "web")

def test_contains():
    assert_contains([1, 2], 3)

def test_fail():
    fail("not yet")

def test_error():
    return {}["missing"]
"#;
    let cases = run_code("asserts", code, |_| {});
    assert_eq!(
        outcome(&cases),
        [
            ("test_ok", Status::Passed),
            ("test_dict", Status::Failed),
            ("test_contains", Status::Failed),
            ("test_fail", Status::Failed),
            ("test_error", Status::Failed),
        ]
    );
    let dict = &cases[1].message;
    assert!(
        dict.contains("asserts_test.star:15:5: assert_equal: config for web"),
        "{dict}"
    );
    assert!(dict.contains(r#"actual:   {"a": 1, "b": 2}"#), "{dict}");
    assert!(
        dict.contains(r#"["b"]: 2 (actual) != 3 (expected)"#),
        "{dict}"
    );
    assert!(dict.contains(r#"only in expected: ["c"] = 4"#), "{dict}");
    assert!(
        cases[2].message.contains("needle:   3"),
        "{}",
        cases[2].message
    );
    assert!(
        cases[3].message.ends_with("fail: not yet"),
        "{}",
        cases[3].message
    );
    assert!(cases[4].message.contains("missing"), "{}", cases[4].message);
}

#[test]
fn each_test_gets_a_fresh_module_between_setup_and_teardown() {
    let code = r#"
seen = []
def setup():
    seen.append("setup")
    print("setup ran")

def teardown():
    print("teardown ran")

def test_one():
    seen.append("one")
    assert_equal(seen, ["setup", "one"])

def test_two():
    seen.append("two")
    assert_equal(seen, ["setup", "two"])
    fail("show output")
"#;
    let cases = run_code("fresh", code, |_| {});
    assert_eq!(cases[0].status, Status::Passed, "{}", cases[0].message);
    assert_eq!(cases[1].status, Status::Failed);
    assert!(
        cases[1].message.contains("fail: show output"),
        "{}",
        cases[1].message
    );
    assert_eq!(cases[1].output, "setup ran\nteardown ran\n");
}

#[test]
fn skips_filters_and_teardown_failures() {
    let code = r#"
def teardown():
    assert(False, "cleanup broke")

def test_skipped():
    skip("linux only")

def test_torn():
    pass
"#;
    let cases = run_code("skips", code, |_| {});
    assert_eq!(cases[0].status, Status::Skipped);
    assert_eq!(cases[0].message, "linux only");
    assert_eq!(cases[1].status, Status::Failed);
    assert!(
        cases[1].message.contains("teardown:"),
        "{}",
        cases[1].message
    );
    let cases = run_code("filter", code, |o| o.filter = Some("torn".to_owned()));
    assert_eq!(outcome(&cases), [("test_torn", Status::Failed)]);
}

#[test]
fn tests_run_without_permissions_unless_granted() {
    let code = "def test_env():\n    os.env(\"HOME\")\n";
    let cases = run_code("denied", code, |_| {});
    assert_eq!(cases[0].status, Status::Failed);
    assert!(
        cases[0].message.contains("--allow-env"),
        "{}",
        cases[0].message
    );
    let cases = run_code("granted", code, |o| o.permissions = Permissions::all());
    assert_eq!(cases[0].status, Status::Passed, "{}", cases[0].message);
}

#[test]
fn broken_files_and_endless_tests_fail_clearly() {
    let cases = run_code("syntax", "def test_x(:\n    pass\n", |_| {});
    assert_eq!(outcome(&cases), [(LOAD, Status::Failed)]);
    assert!(
        cases[0].message.contains("syntax_test.star:1"),
        "{}",
        cases[0].message
    );
    let code = "x = {}['nope']\ndef test_a():\n    pass\ndef test_b():\n    pass\n";
    let cases = run_code("toplevel", code, |_| {});
    assert_eq!(outcome(&cases), [(LOAD, Status::Failed)], "reported once");
    let code = "def test_loop():\n    for i in range(1 << 30):\n        for j in range(1 << 30):\n            pass\n";
    let cases = run_code("loop", code, |o| o.timeout = Duration::from_millis(200));
    assert!(
        cases[0].message.contains("--timeout"),
        "{}",
        cases[0].message
    );
}

#[test]
fn the_run_reports_in_order_and_needs_tests() {
    let dir = scratch("order");
    std::fs::write(dir.join("b_test.star"), "def test_b():\n    pass\n").unwrap();
    std::fs::write(
        dir.join("a_test.star"),
        "def test_z():\n    pass\ndef test_a():\n    skip()\n",
    )
    .unwrap();
    let mut out = Vec::new();
    let totals = super::run(&options(vec![dir.clone()]), &mut out).unwrap();
    let text = String::from_utf8(out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        lines[0].starts_with("PASS ") && lines[0].ends_with("a_test.star::test_z"),
        "{text}"
    );
    assert!(
        lines[1].starts_with("SKIP ") && lines[1].ends_with("a_test.star::test_a"),
        "{text}"
    );
    assert!(lines[2].ends_with("b_test.star::test_b"), "{text}");
    assert_eq!(lines.last(), Some(&"2 passed, 0 failed, 1 skipped"));
    assert_eq!(totals.failed, 0);

    let mut opts = options(vec![dir.clone()]);
    opts.filter = Some("nothing".to_owned());
    let err = super::run(&opts, &mut Vec::new()).unwrap_err();
    assert_eq!(err.exit_code(), 2);
    assert!(err.to_string().contains("matching -k \"nothing\""), "{err}");
    let empty = scratch("empty");
    let err = super::run(&options(vec![empty.clone()]), &mut Vec::new()).unwrap_err();
    assert!(
        err.to_string().contains(&empty.display().to_string()),
        "{err}"
    );
    for d in [dir, empty] {
        let _ = std::fs::remove_dir_all(d);
    }
}

#[test]
fn kite_run_does_not_see_the_assertions() {
    let has = |globals: &starlark::environment::Globals, name: &str| {
        globals.names().any(|n| n.as_str() == name)
    };
    assert!(!has(crate::library::library().globals(), "assert_equal"));
    assert!(has(super::library().globals(), "assert_equal"));
    assert!(has(super::library().globals(), "test"));
    assert!(has(super::library().globals(), "k8s"));
}
