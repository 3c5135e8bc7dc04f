//! `TimeValue`: an instant with the UTC offset it is shown in, as upstream's `time`
//! values (`time.now()`, `time.parse(...)`): fields, formatting, arithmetic.

#![expect(
    unsafe_code,
    reason = "derive(ProvidesStaticType) writes starlark's unsafe impl; no unsafe code of ours"
)]

use std::fmt;

use allocative::Allocative;
use k8s_openapi::jiff::tz::Offset;
use k8s_openapi::jiff::{SignedDuration, Timestamp, civil};
use starlark::any::ProvidesStaticType;
use starlark::collections::StarlarkHasher;
use starlark::environment::{Methods, MethodsBuilder};
use starlark::starlark_module;
use starlark::values::{Heap, NoSerialize, StarlarkValue, Value, ValueLike, starlark_value};

use super::duration::{self, DurationValue};
use super::layout::{self, Fields};
use super::parse::Parsed;

/// A time that could not be built or moved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    #[error("the time is out of range (years -9999 to 9999)")]
    Range,
    #[error("UTC offset of {0} seconds is out of range")]
    Offset(i32),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// An instant, and the offset (and zone name, if any) it is shown in.
#[derive(Debug, Clone, ProvidesStaticType, NoSerialize, Allocative)]
pub struct TimeValue {
    #[allocative(skip)]
    at: Timestamp,
    /// Seconds east of UTC.
    offset: i32,
    zone: Option<String>,
}

starlark::starlark_simple_value!(TimeValue);

impl TimeValue {
    /// The current time, in UTC.
    pub fn now() -> Self {
        TimeValue {
            at: Timestamp::now(),
            offset: 0,
            zone: Some("UTC".to_owned()),
        }
    }

    /// The time `p` describes; UTC when it named no offset.
    ///
    /// # Errors
    /// A year or offset out of range.
    pub fn from_parsed(p: Parsed) -> Result<Self> {
        let offset = p.offset.unwrap_or(0);
        let zone = match (p.zone, offset) {
            (Some(z), _) => Some(z),
            (None, 0) => Some("UTC".to_owned()),
            (None, _) => None,
        };
        let tz = Offset::from_seconds(offset).map_err(|_| Error::Offset(offset))?;
        let small = |n: u8| i8::try_from(n).map_err(|_| Error::Range);
        let date = civil::DateTime::new(
            i16::try_from(p.year).map_err(|_| Error::Range)?,
            small(p.month)?,
            small(p.day)?,
            small(p.hour)?,
            small(p.minute)?,
            small(p.second)?,
            i32::try_from(p.nanos).map_err(|_| Error::Range)?,
        )
        .map_err(|_| Error::Range)?;
        let at = tz.to_timestamp(date).map_err(|_| Error::Range)?;
        Ok(TimeValue { at, offset, zone })
    }

    /// This time moved by `nanos` (keeping its offset).
    ///
    /// # Errors
    /// A result out of range.
    pub fn plus(&self, nanos: i64) -> Result<Self> {
        let at = self
            .at
            .checked_add(SignedDuration::from_nanos(nanos))
            .map_err(|_| Error::Range)?;
        Ok(TimeValue { at, ..self.clone() })
    }

    /// Nanoseconds from `earlier` to this time, saturating as Go's `Sub` does.
    pub fn since(&self, earlier: &TimeValue) -> i64 {
        let d = self.at.as_nanosecond() - earlier.at.as_nanosecond();
        i64::try_from(d).unwrap_or(if d < 0 { i64::MIN } else { i64::MAX })
    }

    /// The calendar fields in this time's offset.
    pub fn fields(&self) -> Fields {
        // The offset was checked when the value was made.
        let tz = Offset::from_seconds(self.offset).unwrap_or(Offset::UTC);
        let dt = tz.to_datetime(self.at);
        let unsigned = |n: i8| u8::try_from(n).unwrap_or_default();
        Fields {
            year: i64::from(dt.year()),
            month: unsigned(dt.month()),
            day: unsigned(dt.day()),
            yday: u16::try_from(dt.day_of_year()).unwrap_or_default(),
            weekday: unsigned(dt.weekday().to_sunday_zero_offset()),
            hour: unsigned(dt.hour()),
            minute: unsigned(dt.minute()),
            second: unsigned(dt.second()),
            nanos: u32::try_from(dt.subsec_nanosecond()).unwrap_or_default(),
            offset: self.offset,
            zone: self.zone.clone(),
        }
    }

    /// This time written as `format` says (see [`layout::resolve`]).
    pub fn format(&self, format: &str) -> String {
        layout::format(&self.fields(), &layout::resolve(format))
    }
}

impl fmt::Display for TimeValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.format(""))
    }
}

fn this(v: Value<'_>) -> anyhow::Result<&TimeValue> {
    v.downcast_ref::<TimeValue>()
        .ok_or_else(|| anyhow::anyhow!("not a time"))
}

/// A time argument of `call`.
///
/// # Errors
/// Anything that is not a time, naming `call` and the type given.
pub fn arg<'v>(call: &str, v: Value<'v>) -> anyhow::Result<&'v TimeValue> {
    v.downcast_ref::<TimeValue>()
        .ok_or_else(|| anyhow::anyhow!("{call}: expected a time, got {}", v.get_type()))
}

#[starlark_module]
fn time_methods(builder: &mut MethodsBuilder) {
    /// The year.
    #[starlark(attribute)]
    fn year(#[starlark(this)] this: Value) -> anyhow::Result<i64> {
        Ok(self::this(this)?.fields().year)
    }

    /// The month, 1 to 12.
    #[starlark(attribute)]
    fn month(#[starlark(this)] this: Value) -> anyhow::Result<i32> {
        Ok(self::this(this)?.fields().month.into())
    }

    /// The day of the month.
    #[starlark(attribute)]
    fn day(#[starlark(this)] this: Value) -> anyhow::Result<i32> {
        Ok(self::this(this)?.fields().day.into())
    }

    /// The hour, 0 to 23.
    #[starlark(attribute)]
    fn hour(#[starlark(this)] this: Value) -> anyhow::Result<i32> {
        Ok(self::this(this)?.fields().hour.into())
    }

    /// The minute, 0 to 59.
    #[starlark(attribute)]
    fn minute(#[starlark(this)] this: Value) -> anyhow::Result<i32> {
        Ok(self::this(this)?.fields().minute.into())
    }

    /// The second, 0 to 59.
    #[starlark(attribute)]
    fn second(#[starlark(this)] this: Value) -> anyhow::Result<i32> {
        Ok(self::this(this)?.fields().second.into())
    }

    /// The day of the week, 0 for Sunday.
    #[starlark(attribute)]
    fn weekday(#[starlark(this)] this: Value) -> anyhow::Result<i32> {
        Ok(self::this(this)?.fields().weekday.into())
    }

    /// Seconds since the Unix epoch.
    #[starlark(attribute)]
    fn unix(#[starlark(this)] this: Value) -> anyhow::Result<i64> {
        Ok(self::this(this)?.at.as_second())
    }

    /// Nanoseconds since the Unix epoch.
    #[starlark(attribute)]
    fn unix_nano(#[starlark(this)] this: Value) -> anyhow::Result<i64> {
        i64::try_from(self::this(this)?.at.as_nanosecond()).map_err(|_| {
            anyhow::anyhow!("unix_nano: the time is too far from 1970 for nanoseconds")
        })
    }

    /// The time as text: RFC 3339 by default, or a preset name ("date", "kitchen",
    /// ...), a strftime pattern or a Go layout.
    fn string(
        #[starlark(this)] this: Value,
        #[starlark(default = "")] format: &str,
    ) -> anyhow::Result<String> {
        Ok(self::this(this)?.format(format))
    }

    /// The time moved by `duration` (a string such as "1h" or a duration).
    fn add(
        #[starlark(this)] this: Value,
        #[starlark(require = pos)] duration: Value,
    ) -> anyhow::Result<TimeValue> {
        let nanos = duration::from_value(duration).map_err(|e| anyhow::anyhow!("add: {e}"))?;
        self::this(this)?
            .plus(nanos)
            .map_err(|e| anyhow::anyhow!("add: {e}"))
    }

    /// The duration from `other` to this time.
    fn sub(
        #[starlark(this)] this: Value,
        #[starlark(require = pos)] other: Value,
    ) -> anyhow::Result<DurationValue> {
        Ok(DurationValue(self::this(this)?.since(arg("sub", other)?)))
    }
}

starlark::methods_static!(TIME_METHODS = time_methods);

fn other_error(e: impl fmt::Display) -> starlark::Error {
    starlark::Error::new_other(anyhow::anyhow!("{e}"))
}

#[starlark_value(type = "time")]
impl<'v> StarlarkValue<'v> for TimeValue {
    fn get_methods() -> Option<&'static Methods> {
        Some(TIME_METHODS.methods())
    }

    fn equals(&self, other: Value<'v>) -> starlark::Result<bool> {
        Ok(other
            .downcast_ref::<TimeValue>()
            .is_some_and(|o| o.at == self.at))
    }

    fn compare(&self, other: Value<'v>) -> starlark::Result<std::cmp::Ordering> {
        match other.downcast_ref::<TimeValue>() {
            Some(o) => Ok(self.at.cmp(&o.at)),
            None => starlark::values::ValueError::unsupported_with(self, "compare", other),
        }
    }

    fn write_hash(&self, hasher: &mut StarlarkHasher) -> starlark::Result<()> {
        std::hash::Hash::hash(&self.at.as_nanosecond(), hasher);
        Ok(())
    }

    fn add(&self, rhs: Value<'v>, heap: Heap<'v>) -> Option<starlark::Result<Value<'v>>> {
        let d = rhs.downcast_ref::<DurationValue>()?;
        Some(self.plus(d.0).map(|t| heap.alloc(t)).map_err(other_error))
    }

    fn sub(&self, other: Value<'v>, heap: Heap<'v>) -> starlark::Result<Value<'v>> {
        if let Some(d) = other.downcast_ref::<DurationValue>() {
            let back = d.0.checked_neg().ok_or_else(|| other_error(Error::Range))?;
            return self.plus(back).map(|t| heap.alloc(t)).map_err(other_error);
        }
        match other.downcast_ref::<TimeValue>() {
            Some(t) => Ok(heap.alloc(DurationValue(self.since(t)))),
            None => starlark::values::ValueError::unsupported_with(self, "-", other),
        }
    }
}
