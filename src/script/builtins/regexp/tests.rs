//! Tests of the `regexp` module: upstream's documented behaviour, budgets and caches.

use crate::script::builtins::snippets::eval;

/// Issue 26: searching with a kept pattern leaves nothing behind: its search caches
/// go with the call, where they used to grow inside the pattern for good.
#[test]
fn a_kept_pattern_keeps_no_search_cache() {
    use super::{Pattern, compile, pattern_of};
    use crate::script::memory::{guard, used};
    // As a frozen module keeps it.
    let heap = starlark::values::FrozenHeap::new();
    let kept = heap
        .alloc_simple(Pattern(
            compile("regexp.compile", "(a|b)*a(a|b){14}c", "").unwrap(),
        ))
        .to_value();
    // Pseudo-random a/b text: a lazy DFA fills its cache on it.
    let mut x: u32 = 7;
    let text: String = (0..200_000)
        .map(|_| {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            if x >> 16 & 1 == 0 { 'a' } else { 'b' }
        })
        .collect();
    let left_behind = |search: &dyn Fn() -> usize| {
        guard(1 << 30, || {
            assert_eq!(search(), 0);
            used()
        })
        .unwrap()
    };
    let per_call = left_behind(&|| pattern_of(kept).unwrap().find_iter(&text).count());
    assert!(per_call < 64 << 10, "{per_call} bytes left behind");
    // Searching the pattern itself leaves its cache behind (what the test guards).
    let in_place = left_behind(&|| {
        starlark::values::ValueLike::downcast_ref::<Pattern>(kept)
            .unwrap()
            .0
            .find_iter(&text)
            .count()
    });
    assert!(in_place > 256 << 10, "{in_place} bytes left behind");
}

/// Issue 26: iterating the matches of a long text looks at the call's budget (the
/// evaluator's own check does not run inside a builtin).
#[test]
fn many_matches_end_at_the_budget() {
    use crate::script::budget::{Budget, scope};
    use std::time::{Duration, Instant};
    for code in [
        r#"regexp.replace("a", "a" * 4000000, "b")"#,
        r#"regexp.find_all("a", "a" * 4000000)"#,
        r#"regexp.split("a", "a" * 4000000)"#,
        r#"regexp.compile("a").replace("a" * 4000000, "$0$0")"#,
    ] {
        let budget = Budget {
            deadline: Instant::now(),
            stop: None,
        };
        let e = scope(budget, || eval(code)).unwrap_err();
        assert!(e.contains("ran out of its time budget"), "{code}: {e}");
    }
    // Within the budget, the same calls work, `$0` expanded as replace_all does.
    let budget = Budget {
        deadline: Instant::now() + Duration::from_hours(1),
        stop: None,
    };
    let out = scope(budget, || {
        eval(r#"regexp.replace("(a)(b)?", "xaab", "<$1$2>")"#)
    });
    assert_eq!(out.unwrap(), r#""x<a><ab>""#);
}

#[test]
fn functions_as_upstream_documents_them() {
    assert_eq!(eval(r#"regexp.match(r"\d+", "order-42")"#).unwrap(), "True");
    assert_eq!(
        eval(
            r#"m = regexp.find(r"(\w+)@(\w+\.\w+)", "user@example.com")
(m.text, m.group(1), m.group(2), m.groups, m.start, m.end)"#
        )
        .unwrap(),
        r#"("user@example.com", "user", "example.com", ("user@example.com", "user", "example.com"), 0, 16)"#
    );
    assert_eq!(eval(r#"regexp.find("x", "abc")"#).unwrap(), "None");
    assert_eq!(
        eval(r#"[m.text for m in regexp.find_all(r"\b\w{5}\b", "the quick brown fox")]"#).unwrap(),
        r#"["quick", "brown"]"#
    );
    assert_eq!(
        eval(r#"len(regexp.find_all("o", "foo boo", 3))"#).unwrap(),
        "3"
    );
    assert_eq!(
        eval(r#"regexp.replace(r"\d+", "item-42-v3", "X")"#).unwrap(),
        r#""item-X-vX""#
    );
    assert_eq!(
        eval(r#"regexp.replace(r"(\w+)=(\w+)", "a=b", "$2=$1")"#).unwrap(),
        r#""b=a""#
    );
    assert_eq!(
        eval(r#"regexp.split(r"[,;\s]+", "a, b; c  d")"#).unwrap(),
        r#"["a", "b", "c", "d"]"#
    );
    assert_eq!(
        eval(r#"regexp.split(",", "a,b,c", 2)"#).unwrap(),
        r#"["a", "b,c"]"#
    );
}

#[test]
fn flags_and_compiled_patterns() {
    assert_eq!(
        eval(r#"regexp.match("hello", "HELLO WORLD", flags = "i")"#).unwrap(),
        "True"
    );
    assert_eq!(
        eval(
            r#"p = regexp.compile(r"error:\s*(?P<why>.+)", flags = "i")
m = p.find("ERROR: disk full")
(m.group(1), m.group(name = "why"), p.match("ok"))"#
        )
        .unwrap(),
        r#"("disk full", "disk full", False)"#
    );
    assert_eq!(
        eval(r#"regexp.match("^b$", "a\nb", flags = "m")"#).unwrap(),
        "True"
    );
    assert_eq!(
        eval(r#"regexp.match("a.b", "a\nb", flags = "s")"#).unwrap(),
        "True"
    );
}

#[test]
fn errors_and_try() {
    let e = eval(r#"regexp.match("(", "x")"#).unwrap_err();
    assert!(
        e.contains("regexp.match: error parsing regexp \"(\""),
        "{e}"
    );
    let e = eval(r#"regexp.compile("a", flags = "z")"#).unwrap_err();
    assert!(
        e.contains("regexp.compile: unknown flag 'z' (flags are i, m, s, U)"),
        "{e}"
    );
    let e = eval(r#"regexp.find("(a)", "a").group(2)"#).unwrap_err();
    assert!(e.contains("group(2): the pattern has 1 group(s)"), "{e}");
    assert_eq!(
        eval(
            r#"r = regexp.try_compile("(")
(r.ok, r.value, "error parsing regexp" in r.error)"#
        )
        .unwrap(),
        "(False, None, True)"
    );
    assert_eq!(
        eval(
            r#"r = regexp.try_replace("a", "banana", "o")
(r.ok, r.value)"#
        )
        .unwrap(),
        r#"(True, "bonono")"#
    );
    // A pattern too large to compile within the limit fails, it does not exhaust memory.
    let e = eval(r#"regexp.match("(((a{1000}){1000}){1000})", "a")"#).unwrap_err();
    assert!(e.contains("regexp.match: invalid pattern"), "{e}");
}

#[test]
fn patterns_and_matches_as_upstream_has_them() {
    assert_eq!(
        eval(
            r#"p = regexp.compile(r"(?P<y>\d{4})-(\d{2})-(?P<d>\d{2})", flags = "i")
(p.pattern, p.group_count, p.group_names)"#
        )
        .unwrap(),
        r#"("(?P<y>\\d{4})-(\\d{2})-(?P<d>\\d{2})", 3, ["y", "d"])"#
    );
    assert_eq!(
        eval(
            r#"m = regexp.find("a(b)?c", "xac")
(m.group(1), m.groups, str(m), repr(m))"#
        )
        .unwrap(),
        r#"(None, ("ac", None), "ac", "<regexp.match \"ac\" [1:3]>")"#
    );
    assert_eq!(
        eval(r#"p = regexp.compile(",")
[p.try_split("a,b").value, p.try_find_all("a,b").ok, p.try_replace("a,b", ";").value, p.try_match("x").value, p.try_find("x").value]"#)
        .unwrap(),
        r#"[["a", "b"], True, "a;b", False, None]"#
    );
    assert_eq!(
        eval(r#"[regexp.try_split(",", "a,b").value, regexp.try_find_all("(", "a").ok]"#).unwrap(),
        r#"[["a", "b"], False]"#
    );
}
