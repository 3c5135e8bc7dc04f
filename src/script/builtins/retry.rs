//! `retry`: upstream Starkite's retry module: call a function until it succeeds, with
//! a fixed delay (`retry.do`) or exponential backoff (`retry.with_backoff`).
//!
//! An attempt fails when the function raises an error, returns False, or returns a
//! failed `Result`; any other return is a success. Sleeps between attempts run under
//! the script's time budget: when it runs out the call fails instead of returning.
//!
//! # Caveats
//! `retry_on(error)` is called with each error message and stops retrying when it
//! returns False, as upstream documents it; as upstream's code does, it is also called
//! with a success that is a `Result`, a bool or None, and True retries that. Errors
//! raised by `retry_on` or `on_retry` themselves fail the call instead of being ignored.

mod outcome;
mod policy;

use std::time::Instant;

use starlark::environment::GlobalsBuilder;
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::Value;
use starlark::values::none::NoneOr;
use starlark::values::typing::StarlarkCallable;

pub use outcome::RetryResult;
pub use policy::Policy;

use crate::script::budget;
use crate::script::builtins::time;
use crate::script::host::Host;
use crate::script::outcome::result;

/// The arguments both retry functions share, before they are checked.
struct Request<'v> {
    func: StarlarkCallable<'v>,
    max_attempts: i32,
    delay: Value<'v>,
    max_delay: Option<Value<'v>>,
    retry_on: Option<Value<'v>>,
    on_retry: Option<Value<'v>>,
    timeout: Value<'v>,
    jitter: bool,
}

impl Request<'_> {
    fn policy(&self) -> policy::Result<Policy> {
        Ok(Policy {
            attempts: policy::attempts(self.max_attempts)?,
            delay: policy::duration("delay", self.delay)?,
            max_delay: match self.max_delay {
                Some(v) => Some(policy::duration("max_delay", v)?).filter(|d| !d.is_zero()),
                None => None,
            },
            jitter: self.jitter,
            timeout: policy::timeout(self.timeout)?,
        })
    }
}

/// How one attempt ended: its value, or why it failed.
enum Attempt<'v> {
    Success(Value<'v>),
    Failure(String),
}

/// The message of an error a script raised, without its traceback (`fail("x")` is "x").
fn message(e: &starlark::Error) -> String {
    match e.kind() {
        starlark::ErrorKind::Fail(inner) => inner.to_string().trim_start().to_owned(),
        _ => e.without_diagnostic().to_string(),
    }
}

/// Whether the script must stop now (out of time or memory, or its controller is
/// stopping): then an attempt's error is not the function's fault and is not retried.
fn must_stop() -> bool {
    if crate::script::memory::exhausted() {
        return true;
    }
    budget::current().is_some_and(|b| {
        Instant::now() >= b.deadline || b.stop.as_ref().is_some_and(budget::Cancel::is_set)
    })
}

/// Judges what the function returned, as upstream does: False and failed results are
/// failures, a result's value is unwrapped, anything else is a success.
fn judge<'v>(v: Value<'v>, eval: &Evaluator<'v, '_, '_>) -> Attempt<'v> {
    if let Some(b) = v.unpack_bool() {
        return if b {
            Attempt::Success(v)
        } else {
            Attempt::Failure("returned False".to_owned())
        };
    }
    let heap = eval.heap();
    let attr = |name: &str| v.get_attr(name, heap).ok().flatten();
    let is_result = matches!(v.get_type(), "struct" | "Result" | "RetryResult");
    if let (true, Some(ok), Some(value), Some(error)) = (
        is_result,
        attr("ok").and_then(Value::unpack_bool),
        attr("value"),
        attr("error"),
    ) {
        return if ok {
            Attempt::Success(value)
        } else {
            let error = error
                .unpack_str()
                .map_or_else(|| error.to_str(), str::to_owned);
            Attempt::Failure(error)
        };
    }
    Attempt::Success(v)
}

/// The error of an attempt whose success `retry_on` asked to retry (upstream's words).
const PREDICATE: &str = "retry_on predicate triggered";

/// Whether `retry_on` asks to retry a success: upstream calls it with what the function
/// returned when that was a `Result`, a bool or None (values that say whether they
/// succeeded), and retries when it returns True.
fn predicate_retries<'v>(
    call: &str,
    request: &Request<'v>,
    returned: Value<'v>,
    eval: &mut Evaluator<'v, '_, '_>,
) -> anyhow::Result<bool> {
    let Some(retry_on) = request.retry_on else {
        return Ok(false);
    };
    let judged = returned.is_none()
        || returned.unpack_bool().is_some()
        || matches!(returned.get_type(), "Result" | "RetryResult");
    if !judged {
        return Ok(false);
    }
    let again = eval
        .eval_function(retry_on, &[returned], &[])
        .map_err(|e| anyhow::anyhow!("{call}: retry_on: {}", message(&e)))?;
    Ok(again.unpack_bool() == Some(true))
}

fn elapsed(start: Instant) -> i64 {
    i64::try_from(start.elapsed().as_nanos()).unwrap_or(i64::MAX)
}

/// The retry loop.
fn run<'v>(
    call: &str,
    request: &Request<'v>,
    eval: &mut Evaluator<'v, '_, '_>,
) -> anyhow::Result<RetryResult<'v>> {
    let policy = request
        .policy()
        .map_err(|e| anyhow::anyhow!("{call}: {e}"))?;
    let host = Host::of(eval)?;
    // It reads the clock (its timeout, `.elapsed`) and draws jitter: a top level that
    // retried is its own controller's.
    host.mark_reached();
    let start = Instant::now();
    let deadline = policy.timeout.map(|t| start + t);
    let mut errors: Vec<String> = Vec::new();
    for attempt in 1..=policy.attempts {
        if deadline.is_some_and(|d| Instant::now() >= d) {
            if errors.is_empty() {
                errors.push("timeout exceeded".to_owned());
            }
            let e = "timeout exceeded".to_owned();
            return Ok(RetryResult::failure(e, attempt - 1, elapsed(start), errors));
        }
        let error = match eval.eval_function(request.func.0, &[], &[]) {
            Err(e) if must_stop() => return Err(e.into_anyhow()),
            Err(e) => message(&e),
            Ok(v) => match judge(v, eval) {
                Attempt::Success(value) if !predicate_retries(call, request, v, eval)? => {
                    let r = RetryResult::success(value, attempt, elapsed(start), errors);
                    return Ok(r);
                }
                Attempt::Success(_) => PREDICATE.to_owned(),
                Attempt::Failure(error) => error,
            },
        };
        errors.push(error.clone());
        if attempt == policy.attempts {
            break;
        }
        let heap = eval.heap();
        if let Some(retry_on) = request.retry_on.filter(|_| error != PREDICATE) {
            let again = eval
                .eval_function(retry_on, &[heap.alloc(error.as_str())], &[])
                .map_err(|e| anyhow::anyhow!("{call}: retry_on: {}", message(&e)))?;
            if !again.to_bool() {
                return Ok(RetryResult::failure(error, attempt, elapsed(start), errors));
            }
        }
        if let Some(on_retry) = request.on_retry {
            let args = [heap.alloc(attempt), heap.alloc(error.as_str())];
            eval.eval_function(on_retry, &args, &[])
                .map_err(|e| anyhow::anyhow!("{call}: on_retry: {}", message(&e)))?;
        }
        let mut wait = policy.delay_before(attempt - 1);
        if let Some(d) = deadline {
            wait = wait.min(d.saturating_duration_since(Instant::now()));
        }
        let nanos = i64::try_from(wait.as_nanos()).unwrap_or(i64::MAX);
        time::sleep(call, host, nanos).map_err(anyhow::Error::msg)?;
    }
    let last = errors
        .last()
        .cloned()
        .unwrap_or_else(|| "all attempts failed".to_owned());
    Ok(RetryResult::failure(
        last,
        policy.attempts,
        elapsed(start),
        errors,
    ))
}

fn alloc<'v>(eval: &Evaluator<'v, '_, '_>, r: RetryResult<'v>) -> Value<'v> {
    eval.heap().alloc_complex(r)
}

/// `run` as a `Result`: its failure to start (a bad argument) as `ok=False`.
fn attempt<'v>(call: &str, request: &Request<'v>, eval: &mut Evaluator<'v, '_, '_>) -> Value<'v> {
    let outcome = run(call, request, eval).map(|r| alloc(eval, r));
    result(eval.heap(), outcome.map_err(|e| e.to_string()))
}

#[starlark_module]
pub fn retry_namespace(builder: &mut GlobalsBuilder) {
    /// Calls `func()` until it succeeds, at most `max_attempts` times, waiting `delay`
    /// between attempts; returns a RetryResult (`ok`, `value`, `error`, `attempts`,
    /// `elapsed`, `errors`). `retry_on(error)` returning False stops early;
    /// `on_retry(attempt, error)` runs before each retry; `timeout` bounds the whole.
    #[expect(
        clippy::too_many_arguments,
        reason = "upstream's signature, one argument each"
    )]
    fn r#do<'v>(
        #[starlark(require = pos)] func: StarlarkCallable<'v>,
        #[starlark(default = 3)] max_attempts: i32,
        #[starlark(default = "1s")] delay: Value<'v>,
        #[starlark(default = NoneOr::None)] retry_on: NoneOr<StarlarkCallable<'v>>,
        #[starlark(default = NoneOr::None)] on_retry: NoneOr<StarlarkCallable<'v>>,
        #[starlark(default = "")] timeout: Value<'v>,
        #[starlark(default = false)] jitter: bool,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let request = Request {
            func,
            max_attempts,
            delay,
            max_delay: None,
            retry_on: retry_on.into_option().map(|c| c.0),
            on_retry: on_retry.into_option().map(|c| c.0),
            timeout,
            jitter,
        };
        let r = run("retry.do", &request, eval)?;
        Ok(alloc(eval, r))
    }

    /// As `do`, but the delay doubles after each retry, up to `max_delay`, with jitter
    /// by default.
    #[expect(
        clippy::too_many_arguments,
        reason = "upstream's signature, one argument each"
    )]
    fn with_backoff<'v>(
        #[starlark(require = pos)] func: StarlarkCallable<'v>,
        #[starlark(default = 5)] max_attempts: i32,
        #[starlark(default = "500ms")] delay: Value<'v>,
        #[starlark(default = "30s")] max_delay: Value<'v>,
        #[starlark(default = NoneOr::None)] retry_on: NoneOr<StarlarkCallable<'v>>,
        #[starlark(default = NoneOr::None)] on_retry: NoneOr<StarlarkCallable<'v>>,
        #[starlark(default = "")] timeout: Value<'v>,
        #[starlark(default = true)] jitter: bool,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let request = Request {
            func,
            max_attempts,
            delay,
            max_delay: Some(max_delay),
            retry_on: retry_on.into_option().map(|c| c.0),
            on_retry: on_retry.into_option().map(|c| c.0),
            timeout,
            jitter,
        };
        let r = run("retry.with_backoff", &request, eval)?;
        Ok(alloc(eval, r))
    }

    /// `do(...)` as a result whose value is the RetryResult; a bad argument gives
    /// `ok=False` instead of an error.
    #[expect(
        clippy::too_many_arguments,
        reason = "upstream's signature, one argument each"
    )]
    fn try_do<'v>(
        #[starlark(require = pos)] func: StarlarkCallable<'v>,
        #[starlark(default = 3)] max_attempts: i32,
        #[starlark(default = "1s")] delay: Value<'v>,
        #[starlark(default = NoneOr::None)] retry_on: NoneOr<StarlarkCallable<'v>>,
        #[starlark(default = NoneOr::None)] on_retry: NoneOr<StarlarkCallable<'v>>,
        #[starlark(default = "")] timeout: Value<'v>,
        #[starlark(default = false)] jitter: bool,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let request = Request {
            func,
            max_attempts,
            delay,
            max_delay: None,
            retry_on: retry_on.into_option().map(|c| c.0),
            on_retry: on_retry.into_option().map(|c| c.0),
            timeout,
            jitter,
        };
        Ok(attempt("retry.do", &request, eval))
    }

    /// `with_backoff(...)` as a result whose value is the RetryResult.
    #[expect(
        clippy::too_many_arguments,
        reason = "upstream's signature, one argument each"
    )]
    fn try_with_backoff<'v>(
        #[starlark(require = pos)] func: StarlarkCallable<'v>,
        #[starlark(default = 5)] max_attempts: i32,
        #[starlark(default = "500ms")] delay: Value<'v>,
        #[starlark(default = "30s")] max_delay: Value<'v>,
        #[starlark(default = NoneOr::None)] retry_on: NoneOr<StarlarkCallable<'v>>,
        #[starlark(default = NoneOr::None)] on_retry: NoneOr<StarlarkCallable<'v>>,
        #[starlark(default = "")] timeout: Value<'v>,
        #[starlark(default = true)] jitter: bool,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let request = Request {
            func,
            max_attempts,
            delay,
            max_delay: Some(max_delay),
            retry_on: retry_on.into_option().map(|c| c.0),
            on_retry: on_retry.into_option().map(|c| c.0),
            timeout,
            jitter,
        };
        Ok(attempt("retry.with_backoff", &request, eval))
    }
}

#[cfg(test)]
mod tests;
