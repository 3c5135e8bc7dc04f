//! The value a `try_` function returns instead of failing: `.ok`, `.value`, `.error`,
//! as upstream Starkite's `Result`, and the `Result(ok, value, error)` global that makes
//! one (what `retry.do` judges a function by).

#![expect(
    unsafe_code,
    reason = "derive(ProvidesStaticType) writes starlark's unsafe impl; no unsafe code of ours"
)]

use std::fmt;

use allocative::Allocative;
use starlark::any::ProvidesStaticType;
use starlark::coerce::Coerce;
use starlark::environment::GlobalsBuilder;
use starlark::starlark_complex_value;
use starlark::starlark_module;
use starlark::values::none::NoneOr;
use starlark::values::{
    Freeze, Heap, NoSerialize, StarlarkValue, Trace, Value, ValueLifetimeless, ValueLike,
    starlark_value,
};

/// `ok=True, value=v, error=""` on success; `ok=False, value=None, error=message`.
pub fn result<'v>(heap: Heap<'v>, outcome: Result<Value<'v>, String>) -> Value<'v> {
    heap.alloc_complex(match outcome {
        Ok(value) => Outcome {
            ok: true,
            value,
            error: String::new(),
        },
        Err(error) => Outcome {
            ok: false,
            value: Value::new_none(),
            error,
        },
    })
}

/// Upstream's `Result`: true in `if` exactly when `ok`.
#[derive(Debug, Trace, Coerce, Freeze, ProvidesStaticType, NoSerialize, Allocative)]
#[repr(C)]
pub struct OutcomeGen<V: ValueLifetimeless> {
    ok: bool,
    value: V,
    /// The failure's message ("" on success).
    error: String,
}

starlark_complex_value!(pub Outcome);

impl<'v, V: ValueLike<'v>> fmt::Display for OutcomeGen<V> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.ok {
            write!(f, "Result(ok=True, value={})", self.value.to_value())
        } else {
            write!(f, "Result(ok=False, error={:?})", self.error)
        }
    }
}

const ATTRS: [&str; 3] = ["error", "ok", "value"];

#[starlark_value(type = "Result")]
impl<'v, V: ValueLike<'v>> StarlarkValue<'v> for OutcomeGen<V>
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
            _ => return None,
        })
    }

    fn has_attr(&self, attribute: &str, _heap: Heap<'v>) -> bool {
        ATTRS.contains(&attribute)
    }

    fn dir_attr(&self) -> Vec<String> {
        ATTRS.iter().map(|a| (*a).to_owned()).collect()
    }
}

#[starlark_module]
pub fn result_global(builder: &mut GlobalsBuilder) {
    /// A Result: `Result(ok=True, value=v)` or `Result(ok=False, error="why")`, as a
    /// `try_` call returns one (`retry.do` judges a function by it).
    fn Result<'v>(
        ok: bool,
        #[starlark(default = NoneOr::None)] value: NoneOr<Value<'v>>,
        #[starlark(default = "")] error: &str,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        let value = value.into_option().unwrap_or_else(Value::new_none);
        Ok(heap.alloc_complex(Outcome {
            ok,
            value: if ok { value } else { Value::new_none() },
            error: if ok { String::new() } else { error.to_owned() },
        }))
    }
}

#[cfg(test)]
mod tests {
    use crate::script::builtins::snippets::eval;

    #[test]
    fn results_read_like_upstreams() {
        assert_eq!(
            eval(
                "r = Result(ok=True, value=[1])\n(type(r), r.ok, r.value, r.error, bool(r), str(r))"
            )
            .unwrap(),
            r#"("Result", True, [1], "", True, "Result(ok=True, value=[1])")"#
        );
        assert_eq!(
            eval("r = Result(ok=False, error='no')\n(r.ok, r.value, r.error, bool(r), str(r))")
                .unwrap(),
            r#"(False, None, "no", False, "Result(ok=False, error=\"no\")")"#
        );
        assert_eq!(
            eval("dir(Result(ok=True))").unwrap(),
            r#"["error", "ok", "value"]"#
        );
        assert!(eval("Result()").is_err());
    }
}
