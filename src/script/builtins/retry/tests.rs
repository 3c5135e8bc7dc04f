//! Scripts using `retry` as upstream documents it.

use crate::script::builtins::snippets::eval;

fn ok(code: &str) -> String {
    eval(code).unwrap_or_else(|e| panic!("{code}: {e}"))
}

/// A function that fails until its third call.
const FLAKY: &str = r#"calls = []
def flaky():
    calls.append(1)
    if len(calls) < 3:
        fail("not yet " + str(len(calls)))
    return "done"
"#;

#[test]
fn succeeds_after_failures() {
    let code = format!(
        r#"{FLAKY}r = retry.do(flaky, max_attempts = 5, delay = "1ms")
(r.ok, r.value, r.attempts, r.error, r.errors, bool(r), type(r), time.duration(r.elapsed) > time.duration("1ms"))"#
    );
    assert_eq!(
        ok(&code),
        r#"(True, "done", 3, "", ["not yet 1", "not yet 2"], True, "RetryResult", True)"#
    );
}

#[test]
fn exhausting_attempts_reports_every_error() {
    let code = format!(
        r#"{FLAKY}r = retry.do(flaky, max_attempts = 2, delay = "1ms")
(r.ok, r.value, r.attempts, r.error, r.errors, bool(r), len(calls))"#
    );
    assert_eq!(
        ok(&code),
        r#"(False, None, 2, "not yet 2", ["not yet 1", "not yet 2"], False, 2)"#
    );
    let code = format!("{FLAKY}str(retry.do(flaky, max_attempts = 1, delay = \"0s\"))");
    let repr = ok(&code);
    assert!(
        repr.contains("ok=False, attempts=1") && repr.contains(r#"error=\"not yet 1\""#),
        "{repr}"
    );
}

#[test]
fn backoff_with_results_and_callbacks() {
    let code = r#"seen = []
n = []
def check():
    n.append(1)
    if len(n) < 3:
        return struct(ok = False, value = None, error = "unhealthy")
    return struct(ok = True, value = "healthy", error = None)
def note(attempt, err):
    seen.append((attempt, err))
r = retry.with_backoff(check, delay = "1ms", max_delay = "2ms", on_retry = note)
(r.ok, r.value, r.attempts, seen)"#;
    assert_eq!(
        ok(code),
        r#"(True, "healthy", 3, [(1, "unhealthy"), (2, "unhealthy")])"#
    );
    let code = r#"r = retry.do(lambda: False, max_attempts = 2, delay = "0s")
(r.ok, r.errors)"#;
    assert_eq!(ok(code), r#"(False, ["returned False", "returned False"])"#);
    assert_eq!(ok("retry.do(lambda: None).ok"), "True");
    assert_eq!(ok("retry.do(lambda: 7).value"), "7");
}

#[test]
fn retry_on_stops_on_permanent_errors() {
    let code = format!(
        r#"{FLAKY}r = retry.do(flaky, max_attempts = 5, delay = "1ms", retry_on = lambda e: "timeout" in e)
(r.ok, r.attempts, len(calls))"#
    );
    assert_eq!(ok(&code), "(False, 1, 1)");
}

#[test]
fn retry_on_sees_successes_that_are_results() {
    let code = r#"n = []
def poll():
    n.append(1)
    return Result(ok = True, value = "ready" if len(n) > 2 else "not ready")
r = retry.do(poll, max_attempts = 5, delay = "1ms", retry_on = lambda v: v.value == "not ready")
s = retry.do(lambda: "plain", delay = "1ms", retry_on = lambda v: fail("not called"))
(r.value, r.attempts, r.errors, s.value)"#;
    assert_eq!(
        ok(code),
        r#"("ready", 3, ["retry_on predicate triggered", "retry_on predicate triggered"], "plain")"#
    );
}

#[test]
fn timeout_bounds_all_attempts() {
    let code = r#"def down():
    fail("down")
r = retry.do(down, max_attempts = 100, delay = "20ms", timeout = "50ms")
(r.ok, r.error, r.attempts < 10, r.errors[0])"#;
    assert_eq!(ok(code), r#"(False, "timeout exceeded", True, "down")"#);
}

#[test]
fn bad_arguments_fail_with_the_call_named() {
    let e = eval("retry.do(lambda: 1, max_attempts = 0)").unwrap_err();
    assert!(
        e.contains("retry.do: max_attempts must be at least 1, got 0"),
        "{e}"
    );
    let e = eval(r#"retry.with_backoff(lambda: 1, delay = "soon")"#).unwrap_err();
    assert!(
        e.contains("retry.with_backoff: delay: invalid duration"),
        "{e}"
    );
    let e = eval(r#"retry.do(lambda: 1, delay = "-1s")"#).unwrap_err();
    assert!(e.contains("delay: must not be negative"), "{e}");
    let e = eval("retry.do(lambda: 1, timeout = 5)").unwrap_err();
    assert!(e.contains("timeout: expected a duration string"), "{e}");
    let e = eval(r#"retry.do("not a function")"#).unwrap_err();
    assert!(e.contains("func"), "{e}");
    let e = eval(
        r#"def boom(attempt, err):
    fail("callback broke")
retry.do(lambda: False, max_attempts = 2, delay = "0s", on_retry = boom)"#,
    )
    .unwrap_err();
    assert!(e.contains("retry.do: on_retry: callback broke"), "{e}");
}

#[test]
fn try_variants_wrap_the_retry_result() {
    assert_eq!(
        ok(r#"r = retry.try_do(lambda: 1, max_attempts = 0)
(r.ok, "max_attempts" in r.error)"#),
        "(False, True)"
    );
    assert_eq!(
        ok(r#"r = retry.try_with_backoff(lambda: "x", delay = "1ms")
(r.ok, r.value.ok, r.value.value, r.value.attempts)"#),
        r#"(True, True, "x", 1)"#
    );
}

#[test]
fn scripts_using_time_and_retry_pass_check() {
    use crate::script::check::check_text;
    use crate::script::library::Library;
    let script = r#"
def connect():
    return True

def on_retry(attempt, err):
    print("retrying", attempt, err)

start = time.now()
r = retry.do(connect, max_attempts = 5, delay = "2s", on_retry = on_retry)
b = retry.with_backoff(connect, max_attempts = 10, delay = "1s", max_delay = "30s", timeout = "2m", jitter = True)
t = time.parse(time.RFC3339, "2025-06-15T10:00:00Z")
print(time.format(t, "date"), t.string("%Y/%m/%d"), time.since(start), time.until(t + time.duration("1h")))
time.sleep("10ms")
print(r.ok, r.attempts, b.elapsed, time.try_parse(time.DateOnly, "x").ok, retry.try_do(connect).ok)
"#;
    let report = check_text(Library::standard(), "uses.star", script);
    assert!(report.is_ok(), "{report:?}");
    let bad = check_text(
        Library::standard(),
        "bad.star",
        "retry.do(max_attempts = 2)\ntime.parse(\"x\")\n",
    )
    .unwrap_err()
    .to_string();
    assert!(
        bad.contains("retry.do(): missing required argument \"func\""),
        "{bad}"
    );
    assert!(
        bad.contains("time.parse(): missing required argument \"value\""),
        "{bad}"
    );
}

#[test]
fn waits_end_with_the_budget() {
    use crate::script::budget::{Budget, scope};
    use std::time::{Duration, Instant};
    let started = Instant::now();
    let budget = Budget {
        deadline: started + Duration::from_millis(50),
        stop: None,
    };
    let code = r#"retry.do(lambda: False, max_attempts = 3, delay = "10s")"#;
    let e = scope(budget, || eval(code)).unwrap_err();
    assert!(
        e.contains("retry.do: the handler ran out of its time budget"),
        "{e}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}
