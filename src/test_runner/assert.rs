//! The assertions `kite test` adds to the library (`assert`, `assert_equal`, `skip`,
//! `fail`, ...), both as globals and as the `test` namespace, as upstream has them.
//!
//! A failing assertion records its verdict on the host before it unwinds the test with
//! an error, so the runner can tell a failed assertion (shown with both values and a
//! diff) and a skip from any other error.

use std::sync::Mutex;

use starlark::environment::GlobalsBuilder;
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::Value;
use starlark::values::none::NoneType;
use starlark::values::tuple::UnpackTuple;

use crate::script::builtins::fmt::sprintf;
use crate::script::host::{Host, call_site};

/// The longest value shown in a failure; longer ones are cut.
const MAX_REPR: usize = 2000;

/// How a builtin ended the test it runs in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// An assertion failed at `at` (`file:line:col`); `message` may span lines.
    Failed { at: String, message: String },
    /// `skip(reason)` was called.
    Skipped { reason: String },
}

/// The verdict of the test running on a host, kept as a host extension.
#[derive(Debug, Default)]
pub struct Record(Mutex<Option<Verdict>>);

impl Record {
    /// Takes the verdict, leaving none.
    pub fn take(&self) -> Option<Verdict> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }

    fn set(&self, verdict: Verdict) {
        *self
            .0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(verdict);
    }
}

/// Adds the assertions as globals and as the `test` namespace.
pub fn register(builder: &mut GlobalsBuilder) {
    assertions(builder);
    builder.namespace("test", assertions);
}

/// A value for a failure message, cut when long.
fn show(v: Value) -> String {
    let repr = v.to_repr();
    if repr.chars().count() <= MAX_REPR {
        return repr;
    }
    let cut: String = repr.chars().take(MAX_REPR).collect();
    format!("{cut}... ({} characters)", repr.chars().count())
}

/// The caller's message: `msg` formatted printf-style with the rest of `args`.
fn custom(args: &[Value]) -> Option<String> {
    let (first, rest) = args.split_first()?;
    let msg = first
        .unpack_str()
        .map_or_else(|| first.to_str(), str::to_owned);
    Some(if rest.is_empty() {
        msg
    } else {
        sprintf(&msg, rest).unwrap_or_else(|e| e)
    })
}

/// Records a failed assertion and returns the error that ends the test.
fn failed(
    eval: &Evaluator,
    func: &str,
    what: &str,
    args: &[Value],
    detail: &[String],
) -> anyhow::Error {
    let mut message = format!(
        "{func}: {}",
        custom(args).unwrap_or_else(|| what.to_owned())
    );
    for line in detail {
        message.push_str("\n  ");
        message.push_str(line);
    }
    let at = call_site(eval);
    if let Ok(host) = Host::of(eval) {
        host.ext::<Record>().set(Verdict::Failed {
            at: at.clone(),
            message: message.clone(),
        });
    }
    anyhow::anyhow!("{message}\n  at {at}")
}

#[starlark_module]
fn assertions(builder: &mut GlobalsBuilder) {
    /// `assert(cond, msg?, *args)`, under the name the test's source is rewritten to
    /// (see `super::source`): fails the test unless `cond` is true (truthy); `msg` is
    /// printf-style, with `args`.
    fn Assert<'v>(
        #[starlark(require = pos)] cond: Value<'v>,
        #[starlark(args)] args: UnpackTuple<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        if cond.to_bool() {
            return Ok(NoneType);
        }
        let got = format!("got: {}", show(cond));
        Err(failed(
            eval,
            "assert",
            "assertion failed",
            &args.items,
            &[got],
        ))
    }

    /// Fails the test unless `actual == expected`, showing both and where they differ.
    fn assert_equal<'v>(
        #[starlark(require = pos)] actual: Value<'v>,
        #[starlark(require = pos)] expected: Value<'v>,
        #[starlark(args)] args: UnpackTuple<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        if actual.equals(expected).unwrap_or(false) {
            return Ok(NoneType);
        }
        let mut detail = vec![
            format!("actual:   {}", show(actual)),
            format!("expected: {}", show(expected)),
        ];
        let diff = super::diff::diff(actual, expected);
        if !diff.is_empty() {
            detail.push("diff:".to_owned());
            detail.extend(diff.into_iter().map(|l| format!("  {l}")));
        }
        Err(failed(
            eval,
            "assert_equal",
            "values differ",
            &args.items,
            &detail,
        ))
    }

    /// Fails the test if `actual == unexpected`.
    fn assert_not_equal<'v>(
        #[starlark(require = pos)] actual: Value<'v>,
        #[starlark(require = pos)] unexpected: Value<'v>,
        #[starlark(args)] args: UnpackTuple<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        if !actual.equals(unexpected).unwrap_or(false) {
            return Ok(NoneType);
        }
        let both = format!("both:     {}", show(actual));
        Err(failed(
            eval,
            "assert_not_equal",
            "values are equal",
            &args.items,
            &[both],
        ))
    }

    /// Fails the test unless `needle in haystack` (a substring, a list element, a dict key).
    fn assert_contains<'v>(
        #[starlark(require = pos)] haystack: Value<'v>,
        #[starlark(require = pos)] needle: Value<'v>,
        #[starlark(args)] args: UnpackTuple<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        let what = match haystack.is_in(needle) {
            Ok(true) => return Ok(NoneType),
            Ok(false) => "needle not found".to_owned(),
            Err(e) => format!("cannot look inside a {}: {e}", haystack.get_type()),
        };
        let detail = [
            format!("haystack: {}", show(haystack)),
            format!("needle:   {}", show(needle)),
        ];
        Err(failed(eval, "assert_contains", &what, &args.items, &detail))
    }

    /// Fails the test unless `value` is true (truthy).
    fn assert_true<'v>(
        #[starlark(require = pos)] value: Value<'v>,
        #[starlark(args)] args: UnpackTuple<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        if value.to_bool() {
            return Ok(NoneType);
        }
        let got = format!("got: {}", show(value));
        Err(failed(
            eval,
            "assert_true",
            "expected a true value",
            &args.items,
            &[got],
        ))
    }

    /// Fails the test unless `value` is false (falsy).
    fn assert_false<'v>(
        #[starlark(require = pos)] value: Value<'v>,
        #[starlark(args)] args: UnpackTuple<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        if !value.to_bool() {
            return Ok(NoneType);
        }
        let got = format!("got: {}", show(value));
        Err(failed(
            eval,
            "assert_false",
            "expected a false value",
            &args.items,
            &[got],
        ))
    }

    /// Fails the test now with `msg` (printf-style, with `args`).
    fn fail<'v>(
        #[starlark(args)] args: UnpackTuple<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        Err(failed(eval, "fail", "failed", &args.items, &[]))
    }

    /// Skips the rest of the test, saying why.
    fn skip<'v>(
        #[starlark(require = pos, default = "")] reason: &str,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        let host = Host::of(eval)?;
        host.ext::<Record>().set(Verdict::Skipped {
            reason: reason.to_owned(),
        });
        Err(anyhow::anyhow!("skip: {reason}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn printf_style_messages() {
        assert_eq!(custom(&[]), None);
        let heap = starlark::values::Heap::temp(|heap| {
            let args = [
                heap.alloc("kubectl failed: %s (%d)"),
                heap.alloc("boom"),
                heap.alloc(3),
            ];
            custom(&args)
        });
        assert_eq!(heap.as_deref(), Some("kubectl failed: boom (3)"));
    }
}
