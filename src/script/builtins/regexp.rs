//! `regexp`: RE2-syntax regular expressions (Rust's `regex`, linear time, as Go's
//! engine) with upstream Starkite's functions, flags, `Pattern` and `Match` values.
//!
//! # Caveats
//! Offsets (`start`, `end`) are byte offsets, as upstream's. A pattern's compiled size
//! is limited (1 MiB) so that an untrusted script cannot exhaust memory with one.

#![expect(
    unsafe_code,
    reason = "derive(ProvidesStaticType) writes starlark's unsafe impl; no unsafe code of ours"
)]

use std::fmt;

use allocative::Allocative;
use regex::{Regex, RegexBuilder};
use starlark::any::ProvidesStaticType;
use starlark::environment::{GlobalsBuilder, Methods, MethodsBuilder};
use starlark::starlark_module;
use starlark::values::list::AllocList;
use starlark::values::none::NoneOr;
use starlark::values::{Heap, NoSerialize, StarlarkValue, Value, ValueLike, starlark_value};

use crate::script::outcome::result;

mod matched;

use matched::Match;

const SIZE_LIMIT: usize = 1 << 20;

/// Compiles `pattern` with upstream's flags: `i`, `m`, `s`, `U`.
///
/// # Errors
/// An unknown flag or an invalid pattern, naming `call`.
fn compile(call: &str, pattern: &str, flags: &str) -> Result<Regex, String> {
    let mut b = RegexBuilder::new(pattern);
    b.size_limit(SIZE_LIMIT).dfa_size_limit(SIZE_LIMIT);
    for f in flags.chars() {
        match f {
            'i' => b.case_insensitive(true),
            'm' => b.multi_line(true),
            's' => b.dot_matches_new_line(true),
            'U' => b.swap_greed(true),
            other => {
                return Err(format!(
                    "{call}: unknown flag {other:?} (flags are i, m, s, U)"
                ));
            }
        };
    }
    b.build().map_err(|e| match e {
        // As Go words it: scripts written for upstream look for "error parsing regexp".
        regex::Error::Syntax(why) => format!("{call}: error parsing regexp {pattern:?}: {why}"),
        other => format!("{call}: invalid pattern {pattern:?}: {other}"),
    })
}

/// A limit as upstream gives it: negative for none.
fn limit(n: i32) -> Option<usize> {
    usize::try_from(n).ok()
}

/// The operations, shared by the module functions and `Pattern` methods.
fn is_match(re: &Regex, s: &str) -> bool {
    re.is_match(s)
}

fn find<'v>(heap: Heap<'v>, re: &Regex, s: &str) -> Value<'v> {
    re.captures(s)
        .map_or(Value::new_none(), |c| heap.alloc(Match::of(re, &c)))
}

/// Counts `bytes` of work against the call's budgets (`budget::walk_step`): each
/// search is linear in the text, but the matches of a long text can be as many as its
/// characters, each copying its groups, and the evaluator's own checks do not run
/// inside a builtin.
fn step(bytes: usize) -> anyhow::Result<()> {
    match crate::script::budget::walk_step(bytes) {
        Some(why) => anyhow::bail!("regexp: stopped: {why}"),
        None => Ok(()),
    }
}

/// Collects `items`, counting each one's `weight` in bytes (see [`step`]).
fn collect_in_budget<T>(
    items: impl Iterator<Item = T>,
    weight: impl Fn(&T) -> usize,
) -> anyhow::Result<Vec<T>> {
    let mut out = Vec::new();
    for item in items {
        step(weight(&item))?;
        out.push(item);
    }
    Ok(out)
}

fn find_all<'v>(heap: Heap<'v>, re: &Regex, s: &str, n: i32) -> anyhow::Result<Value<'v>> {
    let all = re.captures_iter(s).map(|c| {
        let copied: usize = c.iter().flatten().map(|m| m.len()).sum();
        (Match::of(re, &c), copied)
    });
    let found = collect_in_budget(all.take(limit(n).unwrap_or(usize::MAX)), |m| m.1)?;
    Ok(heap.alloc(AllocList(found.into_iter().map(|m| m.0))))
}

/// Every match replaced, `$1` and `${name}` expanded (as `Regex::replace_all`), within
/// the call's budget.
fn replace(re: &Regex, s: &str, repl: &str) -> anyhow::Result<String> {
    let mut out = String::with_capacity(s.len());
    let mut last = 0;
    for caps in re.captures_iter(s) {
        // Group 0 is the whole match, always present.
        let Some(m) = caps.get(0) else { continue };
        step(m.start() - last + repl.len())?;
        out.push_str(&s[last..m.start()]);
        caps.expand(repl, &mut out);
        last = m.end();
    }
    out.push_str(&s[last..]);
    Ok(out)
}

fn split<'v>(heap: Heap<'v>, re: &Regex, s: &str, n: i32) -> anyhow::Result<Value<'v>> {
    let parts: Vec<&str> = match limit(n) {
        Some(0) => Vec::new(),
        Some(n) => collect_in_budget(re.splitn(s, n), |p| p.len())?,
        None => collect_in_budget(re.split(s), |p| p.len())?,
    };
    Ok(heap.alloc(AllocList(parts)))
}

/// `regexp.compile(...)`: a pattern for repeated use.
#[derive(Debug, ProvidesStaticType, NoSerialize, Allocative)]
pub struct Pattern(#[allocative(skip)] Regex);

starlark::starlark_simple_value!(Pattern);

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<regexp.pattern {:?}>", self.0.as_str())
    }
}

/// The pattern of `v`, for one call: a clone, which shares the compiled program but has
/// its own search caches, dropped with it. A compiled pattern kept in a frozen module
/// would otherwise grow caches (up to the DFA size limit, per thread) with every
/// search, and keep them as long as the module lives, counted by no budget.
fn pattern_of(v: Value<'_>) -> anyhow::Result<Regex> {
    v.downcast_ref::<Pattern>()
        .map(|p| p.0.clone())
        .ok_or_else(|| anyhow::anyhow!("not a regexp pattern"))
}

/// A successful result of `v` (a `try_` form whose only failures are running out of
/// the call's budget, which is not the script's to catch).
fn ok<'v>(heap: Heap<'v>, v: Value<'v>) -> Value<'v> {
    result(heap, Ok(v))
}

#[starlark_module]
fn pattern_methods(builder: &mut MethodsBuilder) {
    /// The pattern's text, as given (without its flags).
    #[starlark(attribute)]
    fn pattern(#[starlark(this)] this: Value) -> anyhow::Result<String> {
        Ok(pattern_of(this)?.as_str().to_owned())
    }

    /// How many capturing groups the pattern has.
    #[starlark(attribute)]
    fn group_count(#[starlark(this)] this: Value) -> anyhow::Result<i64> {
        Ok(i64::try_from(
            pattern_of(this)?.captures_len().saturating_sub(1),
        )?)
    }

    /// The names of the named groups, in order.
    #[starlark(attribute)]
    fn group_names<'v>(
        #[starlark(this)] this: Value<'v>,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        let re = pattern_of(this)?;
        let names: Vec<String> = re.capture_names().flatten().map(str::to_owned).collect();
        Ok(heap.alloc(AllocList(names)))
    }

    /// `match(s)` as a result (`.ok`, `.value`, `.error`).
    fn try_match<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = pos)] s: &str,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        let found = is_match(&pattern_of(this)?, s);
        Ok(ok(heap, Value::new_bool(found)))
    }

    /// `find(s)` as a result.
    fn try_find<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = pos)] s: &str,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        Ok(ok(heap, find(heap, &pattern_of(this)?, s)))
    }

    /// `find_all(s, n)` as a result.
    fn try_find_all<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = pos)] s: &str,
        #[starlark(default = -1)] n: i32,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        Ok(ok(heap, find_all(heap, &pattern_of(this)?, s, n)?))
    }

    /// `replace(s, repl)` as a result.
    fn try_replace<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = pos)] s: &str,
        #[starlark(require = pos)] repl: &str,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        let out = replace(&pattern_of(this)?, s, repl)?;
        Ok(ok(heap, heap.alloc(out)))
    }

    /// `split(s, n)` as a result.
    fn try_split<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = pos)] s: &str,
        #[starlark(default = -1)] n: i32,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        Ok(ok(heap, split(heap, &pattern_of(this)?, s, n)?))
    }

    /// Whether the pattern matches anywhere in `s`.
    #[starlark(speculative_exec_safe)]
    fn r#match(
        #[starlark(this)] this: Value,
        #[starlark(require = pos)] s: &str,
    ) -> anyhow::Result<bool> {
        Ok(is_match(&pattern_of(this)?, s))
    }

    /// The first match in `s`, or None.
    fn find<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = pos)] s: &str,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        Ok(find(heap, &pattern_of(this)?, s))
    }

    /// Every match in `s`; `n` limits how many (-1: all).
    fn find_all<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = pos)] s: &str,
        #[starlark(default = -1)] n: i32,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        find_all(heap, &pattern_of(this)?, s, n)
    }

    /// `s` with every match replaced by `repl` (`$1`, `${name}` expand groups).
    fn replace(
        #[starlark(this)] this: Value,
        #[starlark(require = pos)] s: &str,
        #[starlark(require = pos)] repl: &str,
    ) -> anyhow::Result<String> {
        replace(&pattern_of(this)?, s, repl)
    }

    /// `s` split around the matches; `n` limits the parts (-1: all).
    fn split<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = pos)] s: &str,
        #[starlark(default = -1)] n: i32,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        split(heap, &pattern_of(this)?, s, n)
    }
}

starlark::methods_static!(PATTERN_METHODS = pattern_methods);

#[expect(
    clippy::elidable_lifetime_names,
    reason = "the starlark_value macro names the lifetime"
)]
#[starlark_value(type = "regexp.pattern")]
impl<'v> StarlarkValue<'v> for Pattern {
    fn get_methods() -> Option<&'static Methods> {
        Some(PATTERN_METHODS.methods())
    }
}

fn flags(f: NoneOr<&str>) -> &str {
    f.into_option().unwrap_or("")
}

fn or_fail<T>(r: Result<T, String>) -> anyhow::Result<T> {
    r.map_err(anyhow::Error::msg)
}

#[starlark_module]
pub fn regexp_namespace(builder: &mut GlobalsBuilder) {
    /// Whether `pattern` matches anywhere in `s`.
    fn r#match(
        #[starlark(require = pos)] pattern: &str,
        #[starlark(require = pos)] s: &str,
        #[starlark(require = named, default = NoneOr::None)] flags: NoneOr<&str>,
    ) -> anyhow::Result<bool> {
        Ok(is_match(
            &or_fail(compile("regexp.match", pattern, self::flags(flags)))?,
            s,
        ))
    }

    /// The first match of `pattern` in `s`, or None.
    fn find<'v>(
        #[starlark(require = pos)] pattern: &str,
        #[starlark(require = pos)] s: &str,
        #[starlark(require = named, default = NoneOr::None)] flags: NoneOr<&str>,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        let re = or_fail(compile("regexp.find", pattern, self::flags(flags)))?;
        Ok(find(heap, &re, s))
    }

    /// Every match of `pattern` in `s`; `n` limits how many (-1: all).
    fn find_all<'v>(
        #[starlark(require = pos)] pattern: &str,
        #[starlark(require = pos)] s: &str,
        #[starlark(default = -1)] n: i32,
        #[starlark(require = named, default = NoneOr::None)] flags: NoneOr<&str>,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        let re = or_fail(compile("regexp.find_all", pattern, self::flags(flags)))?;
        find_all(heap, &re, s, n)
    }

    /// `s` with every match of `pattern` replaced by `repl` (`$1`, `${name}` expand).
    fn replace(
        #[starlark(require = pos)] pattern: &str,
        #[starlark(require = pos)] s: &str,
        #[starlark(require = pos)] repl: &str,
        #[starlark(require = named, default = NoneOr::None)] flags: NoneOr<&str>,
    ) -> anyhow::Result<String> {
        let re = or_fail(compile("regexp.replace", pattern, self::flags(flags)))?;
        replace(&re, s, repl)
    }

    /// `s` split around the matches of `pattern`; `n` limits the parts (-1: all).
    fn split<'v>(
        #[starlark(require = pos)] pattern: &str,
        #[starlark(require = pos)] s: &str,
        #[starlark(default = -1)] n: i32,
        #[starlark(require = named, default = NoneOr::None)] flags: NoneOr<&str>,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        let re = or_fail(compile("regexp.split", pattern, self::flags(flags)))?;
        split(heap, &re, s, n)
    }

    /// `pattern` compiled for repeated use.
    fn compile(
        #[starlark(require = pos)] pattern: &str,
        #[starlark(default = "")] flags: &str,
    ) -> anyhow::Result<Pattern> {
        Ok(Pattern(or_fail(compile("regexp.compile", pattern, flags))?))
    }

    /// `compile(...)` as a result (`.ok`, `.value`, `.error`): the way to check a
    /// pattern that comes from outside the script.
    fn try_compile<'v>(
        #[starlark(require = pos)] pattern: &str,
        #[starlark(default = "")] flags: &str,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        let outcome = compile("regexp.compile", pattern, flags).map(|re| heap.alloc(Pattern(re)));
        Ok(result(heap, outcome))
    }

    /// `match(...)` as a result.
    fn try_match<'v>(
        #[starlark(require = pos)] pattern: &str,
        #[starlark(require = pos)] s: &str,
        #[starlark(require = named, default = NoneOr::None)] flags: NoneOr<&str>,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        let outcome = compile("regexp.match", pattern, self::flags(flags))
            .map(|re| Value::new_bool(is_match(&re, s)));
        Ok(result(heap, outcome))
    }

    /// `find(...)` as a result.
    fn try_find<'v>(
        #[starlark(require = pos)] pattern: &str,
        #[starlark(require = pos)] s: &str,
        #[starlark(require = named, default = NoneOr::None)] flags: NoneOr<&str>,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        let outcome =
            compile("regexp.find", pattern, self::flags(flags)).map(|re| find(heap, &re, s));
        Ok(result(heap, outcome))
    }

    /// `find_all(...)` as a result.
    fn try_find_all<'v>(
        #[starlark(require = pos)] pattern: &str,
        #[starlark(require = pos)] s: &str,
        #[starlark(default = -1)] n: i32,
        #[starlark(require = named, default = NoneOr::None)] flags: NoneOr<&str>,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        // Running out of time is not the script's to catch.
        let outcome = match compile("regexp.find_all", pattern, self::flags(flags)) {
            Ok(re) => Ok(find_all(heap, &re, s, n)?),
            Err(e) => Err(e),
        };
        Ok(result(heap, outcome))
    }

    /// `split(...)` as a result.
    fn try_split<'v>(
        #[starlark(require = pos)] pattern: &str,
        #[starlark(require = pos)] s: &str,
        #[starlark(default = -1)] n: i32,
        #[starlark(require = named, default = NoneOr::None)] flags: NoneOr<&str>,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        // Running out of time is not the script's to catch.
        let outcome = match compile("regexp.split", pattern, self::flags(flags)) {
            Ok(re) => Ok(split(heap, &re, s, n)?),
            Err(e) => Err(e),
        };
        Ok(result(heap, outcome))
    }

    /// `replace(...)` as a result.
    fn try_replace<'v>(
        #[starlark(require = pos)] pattern: &str,
        #[starlark(require = pos)] s: &str,
        #[starlark(require = pos)] repl: &str,
        #[starlark(require = named, default = NoneOr::None)] flags: NoneOr<&str>,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        // Running out of time is not the script's to catch.
        let outcome = match compile("regexp.replace", pattern, self::flags(flags)) {
            Ok(re) => Ok(heap.alloc(replace(&re, s, repl)?)),
            Err(e) => Err(e),
        };
        Ok(result(heap, outcome))
    }
}

#[cfg(test)]
mod tests;
