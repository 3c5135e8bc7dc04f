//! `DurationValue`: a signed span of nanoseconds, as Go's `time.Duration` that upstream
//! scripts see (`time.duration("1h30m")`, `t2 - t1`, `retry`'s `elapsed`).

#![expect(
    unsafe_code,
    reason = "derive(ProvidesStaticType) writes starlark's unsafe impl; no unsafe code of ours"
)]

use std::fmt;

use allocative::Allocative;
use starlark::any::ProvidesStaticType;
use starlark::collections::StarlarkHasher;
use starlark::environment::{Methods, MethodsBuilder};
use starlark::starlark_module;
use starlark::values::{Heap, NoSerialize, StarlarkValue, Value, ValueLike, starlark_value};

use super::value::TimeValue;

const SECOND: i64 = 1_000_000_000;

/// A duration that could not be read or computed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Parse(#[from] crate::duration::Error),
    #[error("duration {0:?} is out of range (at most about 292 years either way)")]
    Range(String),
    #[error("expected a duration string such as \"30s\" or a duration, got {0}")]
    Type(String),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Parses a Go duration string, which may be negative (`"-1m30s"`), into nanoseconds.
///
/// # Errors
/// What [`crate::duration::parse`] rejects, or a span beyond `i64` nanoseconds.
pub fn parse(input: &str) -> Result<i64> {
    let trimmed = input.trim();
    let (negative, rest) = match trimmed.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, trimmed),
    };
    let magnitude = crate::duration::parse(rest).map_err(|e| crate::duration::Error {
        input: input.to_owned(),
        reason: e.reason,
    })?;
    let nanos = i64::try_from(magnitude.as_nanos()).map_err(|_| Error::Range(input.to_owned()))?;
    Ok(if negative { -nanos } else { nanos })
}

/// Nanoseconds from a script argument: a duration string or a `DurationValue`.
///
/// # Errors
/// Any other type, or a string [`parse`] rejects.
pub fn from_value(value: Value) -> Result<i64> {
    if let Some(s) = value.unpack_str() {
        return parse(s);
    }
    value
        .downcast_ref::<DurationValue>()
        .map(|d| d.0)
        .ok_or_else(|| Error::Type(value.get_type().to_owned()))
}

/// `n` with `scale` fractional digits, trailing zeros dropped (`1500, 3` is `1.5`).
fn decimal(n: u64, scale: u32) -> String {
    let unit = 10u64.pow(scale);
    let (whole, frac) = (n / unit, n % unit);
    if frac == 0 {
        return whole.to_string();
    }
    let digits = format!("{frac:0width$}", width = scale as usize);
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

/// Formats nanoseconds as Go prints a duration: `1h30m0s`, `1.5s`, `250ms`, `0s`.
pub fn go_string(nanos: i64) -> String {
    let sign = if nanos < 0 { "-" } else { "" };
    let n = nanos.unsigned_abs();
    let second = SECOND.unsigned_abs();
    let body = if n == 0 {
        "0s".to_owned()
    } else if n < 1_000 {
        format!("{n}ns")
    } else if n < 1_000_000 {
        format!("{}µs", decimal(n, 3))
    } else if n < second {
        format!("{}ms", decimal(n, 6))
    } else {
        let seconds = decimal(n % (60 * second), 9);
        let minutes = n / (60 * second) % 60;
        let hours = n / (3600 * second);
        if hours > 0 {
            format!("{hours}h{minutes}m{seconds}s")
        } else if minutes > 0 {
            format!("{minutes}m{seconds}s")
        } else {
            format!("{seconds}s")
        }
    };
    format!("{sign}{body}")
}

/// A signed duration in nanoseconds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ProvidesStaticType, NoSerialize, Allocative)]
pub struct DurationValue(pub i64);

starlark::starlark_simple_value!(DurationValue);

impl fmt::Display for DurationValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&go_string(self.0))
    }
}

impl DurationValue {
    /// The duration as a std one, or None when negative.
    pub fn to_std(self) -> Option<std::time::Duration> {
        u64::try_from(self.0)
            .ok()
            .map(std::time::Duration::from_nanos)
    }
}

/// The error for an arithmetic result beyond the range of a duration.
fn overflow(op: &str) -> starlark::Error {
    starlark::Error::new_other(anyhow::anyhow!(
        "duration {op}: the result is out of range (at most about 292 years either way)"
    ))
}

fn this(v: Value) -> anyhow::Result<i64> {
    v.downcast_ref::<DurationValue>()
        .map(|d| d.0)
        .ok_or_else(|| anyhow::anyhow!("not a duration"))
}

#[expect(
    clippy::cast_precision_loss,
    reason = "fractions of seconds, as Go's float accessors"
)]
fn ratio(nanos: i64, unit: i64) -> f64 {
    nanos as f64 / unit as f64
}

#[starlark_module]
fn duration_methods(builder: &mut MethodsBuilder) {
    /// The duration in seconds, with a fraction.
    #[starlark(attribute)]
    fn seconds(#[starlark(this)] this: Value) -> anyhow::Result<f64> {
        Ok(ratio(self::this(this)?, SECOND))
    }

    /// The duration in minutes, with a fraction.
    #[starlark(attribute)]
    fn minutes(#[starlark(this)] this: Value) -> anyhow::Result<f64> {
        Ok(ratio(self::this(this)?, 60 * SECOND))
    }

    /// The duration in hours, with a fraction.
    #[starlark(attribute)]
    fn hours(#[starlark(this)] this: Value) -> anyhow::Result<f64> {
        Ok(ratio(self::this(this)?, 3600 * SECOND))
    }

    /// Whole milliseconds.
    #[starlark(attribute)]
    fn milliseconds(#[starlark(this)] this: Value) -> anyhow::Result<i64> {
        Ok(self::this(this)? / 1_000_000)
    }

    /// Nanoseconds.
    #[starlark(attribute)]
    fn nanoseconds(#[starlark(this)] this: Value) -> anyhow::Result<i64> {
        self::this(this)
    }

    /// The duration as Go writes it, e.g. `1h30m0s`.
    fn string(#[starlark(this)] this: Value) -> anyhow::Result<String> {
        Ok(go_string(self::this(this)?))
    }
}

starlark::methods_static!(DURATION_METHODS = duration_methods);

#[starlark_value(type = "duration")]
impl<'v> StarlarkValue<'v> for DurationValue {
    fn get_methods() -> Option<&'static Methods> {
        Some(DURATION_METHODS.methods())
    }

    fn to_bool(&self) -> bool {
        self.0 != 0
    }

    fn equals(&self, other: Value<'v>) -> starlark::Result<bool> {
        Ok(other
            .downcast_ref::<DurationValue>()
            .is_some_and(|o| o.0 == self.0))
    }

    fn compare(&self, other: Value<'v>) -> starlark::Result<std::cmp::Ordering> {
        match other.downcast_ref::<DurationValue>() {
            Some(o) => Ok(self.0.cmp(&o.0)),
            None => starlark::values::ValueError::unsupported_with(self, "compare", other),
        }
    }

    fn write_hash(&self, hasher: &mut StarlarkHasher) -> starlark::Result<()> {
        std::hash::Hash::hash(&self.0, hasher);
        Ok(())
    }

    fn minus(&self, heap: Heap<'v>) -> starlark::Result<Value<'v>> {
        let n = self.0.checked_neg().ok_or_else(|| overflow("-"))?;
        Ok(heap.alloc(DurationValue(n)))
    }

    fn add(&self, rhs: Value<'v>, heap: Heap<'v>) -> Option<starlark::Result<Value<'v>>> {
        if let Some(o) = rhs.downcast_ref::<DurationValue>() {
            let sum = self.0.checked_add(o.0).ok_or_else(|| overflow("+"));
            return Some(sum.map(|n| heap.alloc(DurationValue(n))));
        }
        let t = rhs.downcast_ref::<TimeValue>()?;
        Some(
            t.plus(self.0)
                .map(|t| heap.alloc(t))
                .map_err(|e| starlark::Error::new_other(anyhow::anyhow!("{e}"))),
        )
    }

    fn sub(&self, other: Value<'v>, heap: Heap<'v>) -> starlark::Result<Value<'v>> {
        match other.downcast_ref::<DurationValue>() {
            Some(o) => {
                let n = self.0.checked_sub(o.0).ok_or_else(|| overflow("-"))?;
                Ok(heap.alloc(DurationValue(n)))
            }
            None => starlark::values::ValueError::unsupported_with(self, "-", other),
        }
    }

    fn mul(&self, rhs: Value<'v>, heap: Heap<'v>) -> Option<starlark::Result<Value<'v>>> {
        let k = i64::from(rhs.unpack_i32()?);
        let n = self.0.checked_mul(k).ok_or_else(|| overflow("*"));
        Some(n.map(|n| heap.alloc(DurationValue(n))))
    }

    fn rmul(&self, lhs: Value<'v>, heap: Heap<'v>) -> Option<starlark::Result<Value<'v>>> {
        self.mul(lhs, heap)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prints_as_go_does() {
        let cases = [
            (0, "0s"),
            (1, "1ns"),
            (1_500, "1.5µs"),
            (250_000_000, "250ms"),
            (1_500_000_000, "1.5s"),
            (90 * SECOND, "1m30s"),
            (5400 * SECOND, "1h30m0s"),
            (-90 * SECOND, "-1m30s"),
            (3600 * SECOND + 500_000_000, "1h0m0.5s"),
        ];
        for (n, s) in cases {
            assert_eq!(go_string(n), s);
        }
    }

    #[test]
    fn parses_signed_durations() {
        assert_eq!(parse("1h30m"), Ok(5400 * SECOND));
        assert_eq!(parse("-1.5s"), Ok(-1_500_000_000));
        assert_eq!(parse("500ms"), Ok(500_000_000));
        assert!(parse("soon").is_err());
        assert!(parse("1s-").is_err());
        assert!(matches!(parse("3000000h"), Err(Error::Range(_))));
    }
}
