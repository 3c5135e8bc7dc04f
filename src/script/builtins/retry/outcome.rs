//! `RetryResult`: what `retry.do` and `retry.with_backoff` return, a `Result` (`ok`,
//! `value`, `error`) with the attempts made, the time they took and every error.

#![expect(
    unsafe_code,
    reason = "derive(ProvidesStaticType) writes starlark's unsafe impl; no unsafe code of ours"
)]

use std::fmt;

use allocative::Allocative;
use starlark::any::ProvidesStaticType;
use starlark::coerce::Coerce;
use starlark::starlark_complex_value;
use starlark::values::list::AllocList;
use starlark::values::{
    Freeze, Heap, NoSerialize, StarlarkValue, Trace, Value, ValueLifetimeless, ValueLike,
    starlark_value,
};

use crate::script::builtins::time::go_string;

/// The outcome of a retried call.
#[derive(Debug, Trace, Coerce, Freeze, ProvidesStaticType, NoSerialize, Allocative)]
#[repr(C)]
pub struct RetryResultGen<V: ValueLifetimeless> {
    value: V,
    ok: bool,
    /// The last error ("" on success).
    error: String,
    attempts: i64,
    /// Nanoseconds all attempts took.
    elapsed: i64,
    errors: Vec<String>,
}

starlark_complex_value!(pub RetryResult);

impl<'v> RetryResult<'v> {
    /// A success with `value` after `attempts`.
    pub fn success(value: Value<'v>, attempts: u32, elapsed: i64, errors: Vec<String>) -> Self {
        RetryResult {
            value,
            ok: true,
            error: String::new(),
            attempts: attempts.into(),
            elapsed,
            errors,
        }
    }

    /// A failure after `attempts`, `error` being the last one.
    pub fn failure(error: String, attempts: u32, elapsed: i64, errors: Vec<String>) -> Self {
        RetryResult {
            value: Value::new_none(),
            ok: false,
            error,
            attempts: attempts.into(),
            elapsed,
            errors,
        }
    }
}

impl<V: ValueLifetimeless> fmt::Display for RetryResultGen<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let elapsed = go_string(self.elapsed);
        if self.ok {
            write!(
                f,
                "RetryResult(ok=True, attempts={}, elapsed={elapsed:?})",
                self.attempts
            )
        } else {
            write!(
                f,
                "RetryResult(ok=False, attempts={}, elapsed={elapsed:?}, error={:?})",
                self.attempts, self.error
            )
        }
    }
}

const ATTRS: [&str; 6] = ["attempts", "elapsed", "error", "errors", "ok", "value"];

#[starlark_value(type = "RetryResult")]
impl<'v, V: ValueLike<'v>> StarlarkValue<'v> for RetryResultGen<V>
where
    Self: ProvidesStaticType<'v>,
{
    fn to_bool(&self) -> bool {
        self.ok
    }

    fn get_attr(&self, attribute: &str, heap: Heap<'v>) -> Option<Value<'v>> {
        Some(match attribute {
            "ok" => Value::new_bool(self.ok),
            "value" => self.value.to_value(),
            "error" => heap.alloc(self.error.as_str()),
            "attempts" => heap.alloc(self.attempts),
            "elapsed" => heap.alloc(go_string(self.elapsed)),
            "errors" => heap.alloc(AllocList(self.errors.iter().map(String::as_str))),
            _ => return None,
        })
    }

    fn dir_attr(&self) -> Vec<String> {
        ATTRS.iter().map(|a| (*a).to_owned()).collect()
    }
}
