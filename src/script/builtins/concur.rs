//! `concur`: upstream Starkite's `map`, `each` and `exec` (and `try_` variants), each call
//! made in turn on the script's own thread, with upstream's results, order and errors.
//!
//! # Caveats
//! Upstream runs the calls on parallel goroutines. A Starlark value of kite's interpreter
//! lives on one thread's heap and cannot be shared with another (the callables are
//! closures over the caller's unfrozen values, such as a list a handler appends to), so
//! kite makes the calls one after another: `workers` is checked and otherwise has no
//! effect. The results are the same, in the same order, and every call runs under the
//! caller's time and memory budget. In the default `on_error="abort"` mode the calls after
//! a failed one are not made (upstream makes them all, then reports the first failure).
//! `timeout` ends the whole batch: a call still running is cancelled, and calls not yet
//! made fail with "timeout exceeded".

use std::time::{Duration, Instant};

use starlark::environment::GlobalsBuilder;
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::Value;
use starlark::values::list::AllocList;
use starlark::values::tuple::{AllocTuple, UnpackTuple};

use crate::script::budget;
use crate::script::outcome::result;

/// What happens after a call fails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OnError {
    /// Stop and fail with that call's error.
    Abort,
    /// Make every call; each outcome is a result (`.ok`, `.value`, `.error`).
    Continue,
}

/// A batch's options, checked.
struct Options {
    timeout: Option<Duration>,
    on_error: OnError,
}

fn options(workers: i32, timeout: &str, on_error: &str) -> Result<Options, String> {
    let on_error = match on_error {
        "" | "abort" => OnError::Abort,
        "continue" => OnError::Continue,
        other => {
            return Err(format!(
                "on_error must be \"abort\" or \"continue\", got {other:?}"
            ));
        }
    };
    if workers < 0 {
        return Err(format!("workers must be non-negative, got {workers}"));
    }
    let timeout = match timeout {
        "" => None,
        t => match crate::duration::parse(t) {
            Ok(d) if d.is_zero() => {
                return Err(format!(
                    "timeout {t:?} must be more than zero (leave it out for none)"
                ));
            }
            Ok(d) => Some(d),
            Err(e) => return Err(format!("invalid timeout: {e}")),
        },
    };
    Ok(Options { timeout, on_error })
}

/// The message of an error a script raised, without its traceback (`fail("x")` is "x").
pub(crate) fn raised(e: &starlark::Error) -> String {
    match e.kind() {
        starlark::ErrorKind::Fail(inner) => inner.to_string().trim_start().to_owned(),
        _ => e.without_diagnostic().to_string(),
    }
}

/// Whether the caller itself must stop (its own budget or memory ran out, or its
/// controller is stopping): then a call's error is not the call's own, and is not
/// collected but passed on.
fn caller_must_stop() -> bool {
    crate::script::memory::exhausted() || budget::check().is_err()
}

/// One batch: `name` for errors (`concur.map`), `what` each call is (`item`,
/// `function`), and each call's function and argument.
struct Batch<'v> {
    name: &'static str,
    what: &'static str,
    calls: Vec<(Value<'v>, Option<Value<'v>>)>,
}

impl<'v> Batch<'v> {
    /// Makes the calls in order. In abort mode the first failure is the error; in
    /// continue mode each call's outcome is returned.
    fn run(
        self,
        opts: &Options,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Vec<Result<Value<'v>, String>>> {
        let deadline = opts.timeout.map(|t| Instant::now() + t);
        let mut out = Vec::with_capacity(self.calls.len());
        for (i, (func, arg)) in self.calls.into_iter().enumerate() {
            let outcome = if deadline.is_some_and(|d| Instant::now() >= d) {
                Err("timeout exceeded".to_owned())
            } else {
                let args: Vec<Value<'v>> = arg.into_iter().collect();
                let mut call = || eval.eval_function(func, &args, &[]);
                let called = match opts.timeout {
                    // The batch's timeout cancels a call in progress, through the
                    // evaluator's check and any wait the call is in.
                    Some(t) => budget::within(
                        deadline.map_or(t, |d| d.saturating_duration_since(Instant::now())),
                        call,
                    ),
                    None => call(),
                };
                match called {
                    Ok(v) => Ok(v),
                    Err(e) if caller_must_stop() => return Err(e.into_anyhow()),
                    Err(_) if deadline.is_some_and(|d| Instant::now() >= d) => {
                        Err("timeout exceeded".to_owned())
                    }
                    Err(e) => Err(raised(&e)),
                }
            };
            if let (OnError::Abort, Err(e)) = (opts.on_error, &outcome) {
                anyhow::bail!("{}: {} {i}: {e}", self.name, self.what);
            }
            out.push(outcome);
        }
        Ok(out)
    }
}

/// The calls of `func` on each of `items`.
fn item_calls<'v>(
    name: &'static str,
    items: Value<'v>,
    func: Value<'v>,
    eval: &Evaluator<'v, '_, '_>,
) -> anyhow::Result<Batch<'v>> {
    let iter = items
        .iterate(eval.heap())
        .map_err(|_| anyhow::anyhow!("{name}: items must be iterable, got {}", items.get_type()))?;
    Ok(Batch {
        name,
        what: "item",
        calls: iter.map(|item| (func, Some(item))).collect(),
    })
}

fn concur_map<'v>(
    name: &'static str,
    items: Value<'v>,
    func: Value<'v>,
    opts: Result<Options, String>,
    eval: &mut Evaluator<'v, '_, '_>,
) -> anyhow::Result<Value<'v>> {
    let opts = opts.map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
    let outcomes = item_calls(name, items, func, eval)?.run(&opts, eval)?;
    let heap = eval.heap();
    Ok(match opts.on_error {
        OnError::Abort => heap.alloc(AllocList(outcomes.into_iter().flatten())),
        OnError::Continue => heap.alloc(AllocList(
            outcomes
                .into_iter()
                .map(|o| result(heap, o))
                .collect::<Vec<_>>(),
        )),
    })
}

fn concur_each<'v>(
    name: &'static str,
    items: Value<'v>,
    func: Value<'v>,
    opts: Result<Options, String>,
    eval: &mut Evaluator<'v, '_, '_>,
) -> anyhow::Result<Value<'v>> {
    let opts = opts.map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
    let outcomes = item_calls(name, items, func, eval)?.run(&opts, eval)?;
    let heap = eval.heap();
    Ok(match opts.on_error {
        OnError::Abort => Value::new_none(),
        // Upstream's results of `each` carry None, not the calls' values.
        OnError::Continue => heap.alloc(AllocList(
            outcomes
                .into_iter()
                .map(|o| result(heap, o.map(|_| Value::new_none())))
                .collect::<Vec<_>>(),
        )),
    })
}

fn concur_exec<'v>(
    name: &'static str,
    fns: &[Value<'v>],
    opts: Result<Options, String>,
    eval: &mut Evaluator<'v, '_, '_>,
) -> anyhow::Result<Value<'v>> {
    let opts = opts.map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
    let batch = Batch {
        name,
        what: "function",
        calls: fns.iter().map(|f| (*f, None)).collect(),
    };
    let outcomes = batch.run(&opts, eval)?;
    let heap = eval.heap();
    Ok(match opts.on_error {
        OnError::Abort => heap.alloc(AllocTuple(outcomes.into_iter().flatten())),
        OnError::Continue => heap.alloc(AllocTuple(
            outcomes
                .into_iter()
                .map(|o| result(heap, o))
                .collect::<Vec<_>>(),
        )),
    })
}

/// A `try_` variant's value: the call's value, or its failure, as a result.
fn tried<'v>(eval: &Evaluator<'v, '_, '_>, out: anyhow::Result<Value<'v>>) -> Value<'v> {
    result(eval.heap(), out.map_err(|e| e.to_string()))
}

#[starlark_module]
pub fn concur_namespace(builder: &mut GlobalsBuilder) {
    /// Calls `func` on each of `items` and returns the values in order. kite makes the
    /// calls one after another on the script's thread (see the README).
    fn map<'v>(
        items: Value<'v>,
        func: Value<'v>,
        #[starlark(require = named, default = 0)] workers: i32,
        #[starlark(require = named, default = "")] timeout: &str,
        #[starlark(require = named, default = "abort")] on_error: &str,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let opts = options(workers, timeout, on_error);
        concur_map("concur.map", items, func, opts, eval)
    }

    /// `map` returning a result (`.ok`, `.value`, `.error`) instead of failing.
    fn try_map<'v>(
        items: Value<'v>,
        func: Value<'v>,
        #[starlark(require = named, default = 0)] workers: i32,
        #[starlark(require = named, default = "")] timeout: &str,
        #[starlark(require = named, default = "abort")] on_error: &str,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let opts = options(workers, timeout, on_error);
        let out = concur_map("concur.try_map", items, func, opts, eval);
        Ok(tried(eval, out))
    }

    /// Calls `func` on each of `items` for its effects; returns None (a list of results
    /// with `on_error="continue"`).
    fn each<'v>(
        items: Value<'v>,
        func: Value<'v>,
        #[starlark(require = named, default = 0)] workers: i32,
        #[starlark(require = named, default = "")] timeout: &str,
        #[starlark(require = named, default = "abort")] on_error: &str,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let opts = options(workers, timeout, on_error);
        concur_each("concur.each", items, func, opts, eval)
    }

    /// `each` returning a result (`.ok`, `.value`, `.error`) instead of failing.
    fn try_each<'v>(
        items: Value<'v>,
        func: Value<'v>,
        #[starlark(require = named, default = 0)] workers: i32,
        #[starlark(require = named, default = "")] timeout: &str,
        #[starlark(require = named, default = "abort")] on_error: &str,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let opts = options(workers, timeout, on_error);
        let out = concur_each("concur.try_each", items, func, opts, eval);
        Ok(tried(eval, out))
    }

    /// Calls each function (no arguments) and returns their values as a tuple, in order.
    fn exec<'v>(
        #[starlark(args)] fns: UnpackTuple<Value<'v>>,
        #[starlark(require = named, default = "")] timeout: &str,
        #[starlark(require = named, default = "abort")] on_error: &str,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let opts = options(0, timeout, on_error);
        concur_exec("concur.exec", &fns.items, opts, eval)
    }

    /// `exec` returning a result (`.ok`, `.value`, `.error`) instead of failing.
    fn try_exec<'v>(
        #[starlark(args)] fns: UnpackTuple<Value<'v>>,
        #[starlark(require = named, default = "")] timeout: &str,
        #[starlark(require = named, default = "abort")] on_error: &str,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let opts = options(0, timeout, on_error);
        let out = concur_exec("concur.try_exec", &fns.items, opts, eval);
        Ok(tried(eval, out))
    }
}

#[cfg(test)]
mod tests {
    use crate::script::builtins::snippets::{eval, eval_cancellable};

    #[test]
    fn results_keep_their_order_and_shape() {
        assert_eq!(
            eval("concur.map([1, 2, 3], lambda x: x * 2, workers = 2)").unwrap(),
            "[2, 4, 6]"
        );
        assert_eq!(eval("concur.map((), lambda x: x)").unwrap(), "[]");
        assert_eq!(
            eval("concur.exec(lambda: 1, lambda: \"b\")").unwrap(),
            "(1, \"b\")"
        );
        assert_eq!(eval("concur.exec()").unwrap(), "()");
        assert_eq!(eval("concur.each([1], func = str)").unwrap(), "None");
    }

    #[test]
    fn calls_share_the_callers_values() {
        // The closures append to the caller's list: one heap, one thread.
        let code = "seen = []\ndef f(x):\n    seen.append(x)\nconcur.each([1, 2, 3], f)\nseen";
        assert_eq!(eval(code).unwrap(), "[1, 2, 3]");
    }

    #[test]
    fn failures_abort_or_are_collected() {
        let code = "def f(x):\n    if x == 2:\n        fail(\"bad\")\n    return x\n";
        let err = eval(&format!("{code}concur.map([1, 2, 3], f)")).unwrap_err();
        assert!(err.contains("concur.map: item 1: bad"), "{err}");
        let out = eval(&format!(
            "{code}[(r.ok, r.value, r.error) for r in concur.map([1, 2, 3], f, on_error = \"continue\")]"
        ))
        .unwrap();
        assert_eq!(
            out,
            "[(True, 1, \"\"), (False, None, \"bad\"), (True, 3, \"\")]"
        );
        let out = eval(&format!(
            "{code}[r.ok for r in concur.each([2, 1], f, on_error = \"continue\")]"
        ))
        .unwrap();
        assert_eq!(out, "[False, True]");
        let out = eval(&format!(
            "{code}r = concur.try_exec(lambda: f(2))\n(r.ok, r.error)"
        ))
        .unwrap();
        assert_eq!(out, "(False, \"concur.try_exec: function 0: bad\")");
    }

    #[test]
    fn bad_options_are_named() {
        for (call, want) in [
            (
                "concur.map([1], str, on_error = \"bogus\")",
                "on_error must be",
            ),
            (
                "concur.map([1], str, workers = -1)",
                "workers must be non-negative",
            ),
            (
                "concur.each([1], str, timeout = \"soon\")",
                "invalid timeout",
            ),
            (
                "concur.exec(str, timeout = \"0s\")",
                "must be more than zero",
            ),
            ("concur.map(1, str)", "items must be iterable, got int"),
        ] {
            let err = eval(call).unwrap_err();
            assert!(err.contains(want), "{call}: {err}");
        }
        assert_eq!(
            eval("concur.try_map([1], str, on_error = \"bogus\").ok").unwrap(),
            "False"
        );
    }

    #[test]
    fn a_timeout_cancels_the_batch() {
        // The first call loops until the batch's timeout cancels it; the second is not
        // made. The caller goes on.
        let code = "def spin(x):\n    if x == 1:\n        for _ in range(100000000):\n            pass\n    return x\n\
                    [r.error for r in concur.map([1, 2], spin, timeout = \"50ms\", on_error = \"continue\")]";
        let none = crate::script::permissions::Permissions::none();
        assert_eq!(
            eval_cancellable(none, code).unwrap(),
            "[\"timeout exceeded\", \"timeout exceeded\"]"
        );
    }
}
