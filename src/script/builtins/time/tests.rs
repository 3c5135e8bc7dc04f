//! Scripts using `time` as upstream documents it.

use crate::script::builtins::snippets::eval;

fn ok(code: &str) -> String {
    eval(code).unwrap_or_else(|e| panic!("{code}: {e}"))
}

fn err(code: &str) -> String {
    eval(code).expect_err(code)
}

const T: &str = r#"t = time.parse(time.RFC3339, "2025-01-15T14:30:05Z")
"#;

#[test]
fn now_gives_the_current_time() {
    assert_eq!(ok("time.now().year >= 2025"), "True");
    assert_eq!(
        ok("t = time.now()\ntime.since(t) >= time.duration('0s')"),
        "True"
    );
    assert_eq!(ok("type(time.now())"), r#""time""#);
}

#[test]
fn fields_and_unix_times() {
    let code = format!(
        "{T}(t.year, t.month, t.day, t.hour, t.minute, t.second, t.weekday, t.unix, t.unix_nano)"
    );
    assert_eq!(
        ok(&code),
        "(2025, 1, 15, 14, 30, 5, 3, 1736951405, 1736951405000000000)"
    );
}

#[test]
fn formats_presets_strftime_and_layouts() {
    let cases = [
        ("t.string()", "2025-01-15T14:30:05Z"),
        ("str(t)", "2025-01-15T14:30:05Z"),
        (r#"t.string("kitchen")"#, "2:30PM"),
        (r#"t.string("DateTime")"#, "2025-01-15 14:30:05"),
        (r#"time.format(t, "date")"#, "2025-01-15"),
        (r#"t.string("time")"#, "14:30:05"),
        (r#"t.string("stamp")"#, "Jan 15 14:30:05"),
        (r#"t.string("rfc822")"#, "15 Jan 25 14:30 UTC"),
        (r#"t.string("rfc1123")"#, "Wed, 15 Jan 2025 14:30:05 UTC"),
        (r#"t.string("%Y/%m/%d %H:%M")"#, "2025/01/15 14:30"),
        (
            r#"t.string("Monday 2 January 2006")"#,
            "Wednesday 15 January 2025",
        ),
        (
            "time.format(t, time.RFC1123Z)",
            "Wed, 15 Jan 2025 14:30:05 +0000",
        ),
    ];
    for (expr, want) in cases {
        assert_eq!(ok(&format!("{T}{expr}")), format!("{want:?}"), "{expr}");
    }
}

#[test]
fn parses_offsets_and_fractions() {
    let code = r#"t = time.parse(time.RFC3339Nano, "2025-06-15T10:00:00.5+02:00")
(t.hour, t.unix, t.string(), t.string(time.RFC3339Nano))"#;
    assert_eq!(
        ok(code),
        r#"(10, 1749974400, "2025-06-15T10:00:00+02:00", "2025-06-15T10:00:00.5+02:00")"#
    );
    assert_eq!(
        ok(r#"time.parse("date", "2025-06-15").string()"#),
        r#""2025-06-15T00:00:00Z""#
    );
    assert_eq!(
        ok(r#"time.parse(time.Kitchen, "3:04PM").string("datetime")"#),
        r#""0000-01-01 15:04:00""#
    );
}

#[test]
fn arithmetic_and_comparison() {
    let cases = [
        (
            r#"(t + time.duration("1h30m")).string()"#,
            r#""2025-01-15T16:00:05Z""#,
        ),
        (r#"(time.duration("1h") + t).hour"#, "15"),
        (
            r#"(t - time.duration("30s")).string("time")"#,
            r#""14:29:35""#,
        ),
        (r#"t.add("24h").day"#, "16"),
        (r#"t.add(time.duration("-1h")).hour"#, "13"),
        (r#"str(t.add("90s") - t)"#, r#""1m30s""#),
        (r#"str(t.sub(t.add("2h")))"#, r#""-2h0m0s""#),
        (
            r#"t < t.add("1ns") and t == time.parse(time.RFC3339, "2025-01-15T16:30:05+02:00")"#,
            "True",
        ),
        (r#"len(dict([(t, 1), (t.add("0s"), 2)]))"#, "1"),
    ];
    for (expr, want) in cases {
        assert_eq!(ok(&format!("{T}{expr}")), want, "{expr}");
    }
}

#[test]
fn durations() {
    let cases = [
        (r#"str(time.duration("1h30m"))"#, r#""1h30m0s""#),
        (r#"time.duration("1.5s").seconds"#, "1.5"),
        (r#"time.duration("90s").minutes"#, "1.5"),
        (r#"time.duration("2h").hours"#, "2.0"),
        (r#"time.duration("1.5s").milliseconds"#, "1500"),
        (r#"time.duration("2us").nanoseconds"#, "2000"),
        (r#"time.duration("250ms").string()"#, r#""250ms""#),
        (r#"str(time.duration("1s") * 3)"#, r#""3s""#),
        (r#"str(2 * time.duration("1m"))"#, r#""2m0s""#),
        (
            r#"str(time.duration("1m") - time.duration("90s"))"#,
            r#""-30s""#,
        ),
        (r#"time.duration("1m") > time.duration("59s")"#, "True"),
        (r#"bool(time.duration("0s"))"#, "False"),
        (
            r#"time.until(time.now().add("1h")) > time.duration("59m")"#,
            "True",
        ),
    ];
    for (expr, want) in cases {
        assert_eq!(ok(expr), want, "{expr}");
    }
}

#[test]
fn sleep_waits_and_returns_none() {
    let code = r#"t = time.now()
r = time.sleep("20ms")
(r, time.since(t) >= time.duration("20ms"), time.sleep(time.duration("-1s")))"#;
    assert_eq!(ok(code), "(None, True, None)");
}

#[test]
fn constants_are_go_layouts() {
    assert_eq!(
        ok("(time.RFC3339, time.Kitchen, time.DateOnly, time.TimeOnly, time.DateTime)"),
        r#"("2006-01-02T15:04:05Z07:00", "3:04PM", "2006-01-02", "15:04:05", "2006-01-02 15:04:05")"#
    );
}

#[test]
fn errors_name_the_call_and_the_problem() {
    let e = err(r#"time.parse(time.RFC3339, "2025-13-01T00:00:00Z")"#);
    assert!(
        e.contains("time.parse: cannot parse") && e.contains("month out of range"),
        "{e}"
    );
    let e = err(r#"time.parse("2006-01-02", "15/01/2025")"#);
    assert!(e.contains("time.parse:"), "{e}");
    let e = err(r#"time.duration("soon")"#);
    assert!(
        e.contains("time.duration: invalid duration \"soon\""),
        "{e}"
    );
    let e = err("time.duration(5)");
    assert!(
        e.contains("time.duration: expected a duration string"),
        "{e}"
    );
    let e = err(r#"time.sleep("forever")"#);
    assert!(e.contains("time.sleep: invalid duration"), "{e}");
    let e = err(r#"time.format("2025", "date")"#);
    assert!(
        e.contains("time.format: expected a time, got string"),
        "{e}"
    );
    let e = err(r#"time.since("yesterday")"#);
    assert!(e.contains("time.since: expected a time"), "{e}");
    let e = err(r#"time.now().add("1x")"#);
    assert!(e.contains("add: invalid duration"), "{e}");
    let e = err(r#"time.now() < time.duration("1s")"#);
    assert!(e.contains("compare"), "{e}");
    let e = err("time.now() + 5");
    assert!(e.contains('+'), "{e}");
}

#[test]
fn try_variants_return_results() {
    assert_eq!(
        ok(r#"r = time.try_parse("date", "2025-02-30")
(r.ok, r.value, "day 30 out of range" in r.error)"#),
        "(False, None, True)"
    );
    assert_eq!(
        ok(r#"r = time.try_duration("2m")
(r.ok, str(r.value))"#),
        r#"(True, "2m0s")"#
    );
    assert_eq!(
        ok(
            r#"(time.try_sleep("x").ok, time.try_format(1, "date").ok, time.try_since(time.now()).ok, time.try_until(1).ok)"#
        ),
        "(False, False, True, False)"
    );
}

#[test]
fn sleep_ends_with_the_budget() {
    use crate::script::budget::{Budget, scope};
    use std::time::{Duration, Instant};
    let started = Instant::now();
    let budget = Budget {
        deadline: started + Duration::from_millis(50),
        stop: None,
    };
    let e = scope(budget, || eval(r#"time.sleep("10s")"#)).unwrap_err();
    assert!(
        e.contains("time.sleep: the handler ran out of its time budget"),
        "{e}"
    );
    assert!(started.elapsed() < Duration::from_secs(5));
}
