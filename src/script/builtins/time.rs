//! `time`: upstream Starkite's time module: `time.now()`, Go-layout parsing and
//! formatting, durations, arithmetic and `time.sleep`.
//!
//! # Caveats
//! Times are shown in UTC or in the fixed offset they were parsed with; named zones
//! (`America/New_York`) are not read, and a zone abbreviation other than UTC/GMT
//! (`PST`) reads as UTC, as Go does for a zone it does not know. `time.now()` is UTC.
//! Years run from -9999 to 9999.

mod duration;
mod layout;
mod parse;
mod value;

#[cfg(test)]
mod tests;

use starlark::environment::GlobalsBuilder;
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::Value;
use starlark::values::none::NoneType;

pub use duration::{DurationValue, from_value as duration_nanos, go_string};
pub use value::TimeValue;

use crate::script::host::Host;
use crate::script::outcome::result;

/// Go's layout constants, under the names upstream gives them.
const CONSTANTS: &[(&str, &str)] = &[
    ("RFC3339", layout::RFC3339),
    ("RFC3339Nano", layout::RFC3339_NANO),
    ("RFC1123", layout::RFC1123),
    ("RFC1123Z", layout::RFC1123Z),
    ("RFC822", layout::RFC822),
    ("RFC822Z", layout::RFC822Z),
    ("RFC850", layout::RFC850),
    ("Kitchen", layout::KITCHEN),
    ("Stamp", layout::STAMP),
    ("DateTime", layout::DATE_TIME),
    ("DateOnly", layout::DATE_ONLY),
    ("TimeOnly", layout::TIME_ONLY),
];

starlark::globals_static!(FUNCTIONS = time_functions);

/// The `time` namespace: its functions, the `try_` forms derived from them
/// ([`crate::script::try_form`]) and layout constants.
pub fn time_namespace(builder: &mut GlobalsBuilder) {
    let tries = ["parse", "format", "duration", "since", "until"];
    crate::script::try_form::with_tries(builder, FUNCTIONS.globals(), &tries);
    for (name, layout) in CONSTANTS {
        builder.set(name, *layout);
    }
}

fn parse(layout: &str, value: &str) -> Result<TimeValue, String> {
    let fields =
        parse::parse(&layout::resolve(layout), value).map_err(|e| format!("time.parse: {e}"))?;
    TimeValue::from_parsed(fields).map_err(|e| format!("time.parse: {value:?}: {e}"))
}

fn duration(value: Value) -> Result<DurationValue, String> {
    duration_nanos(value)
        .map(DurationValue)
        .map_err(|e| format!("time.duration: {e}"))
}

fn format(call: &str, time: Value, layout: &str) -> Result<String, String> {
    Ok(value::arg(call, time)
        .map_err(|e| e.to_string())?
        .format(layout))
}

fn elapsed(call: &str, time: Value, until: bool) -> Result<DurationValue, String> {
    let t = value::arg(call, time).map_err(|e| e.to_string())?;
    let now = TimeValue::now();
    Ok(DurationValue(if until {
        t.since(&now)
    } else {
        now.since(t)
    }))
}

/// Sleeps `duration` under the script's time budget, off the async workers.
///
/// # Errors
/// A bad duration, a missing host, or the budget running out (or the controller
/// stopping) before the sleep ends.
pub fn sleep(call: &str, host: &Host, nanos: i64) -> Result<(), String> {
    let Some(d) = DurationValue(nanos).to_std() else {
        return Ok(());
    };
    crate::script::budget::block_on(&host.runtime, async move { tokio::time::sleep(d).await })
        .map_err(|e| format!("{call}: {e}"))
}

fn sleep_value(duration: Value, eval: &Evaluator) -> Result<(), String> {
    let nanos = duration_nanos(duration).map_err(|e| format!("time.sleep: {e}"))?;
    let host = Host::of(eval).map_err(|e| e.to_string())?;
    sleep("time.sleep", host, nanos)
}

fn or_fail<T>(r: Result<T, String>) -> anyhow::Result<T> {
    r.map_err(anyhow::Error::msg)
}

#[starlark_module]
fn time_functions(builder: &mut GlobalsBuilder) {
    /// The current time (UTC).
    fn now(eval: &mut Evaluator) -> anyhow::Result<TimeValue> {
        // The clock: a top level that read it is its own controller's.
        Host::mark_reached_by(eval);
        Ok(TimeValue::now())
    }

    /// Waits for `duration` ("5s", "100ms", or a duration); the wait ends early, with an
    /// error, when the handler runs out of its time budget.
    fn sleep(
        #[starlark(require = pos)] duration: Value,
        eval: &mut Evaluator,
    ) -> anyhow::Result<NoneType> {
        or_fail(sleep_value(duration, eval))?;
        Ok(NoneType)
    }

    /// `value` read with `layout`: a Go layout such as `time.RFC3339` or
    /// "2006-01-02", or a preset name ("date", "datetime", ...).
    fn parse(
        #[starlark(require = pos)] layout: &str,
        #[starlark(require = pos)] value: &str,
    ) -> anyhow::Result<TimeValue> {
        or_fail(parse(layout, value))
    }

    /// `time` written with `layout`: a preset name, a strftime pattern or a Go layout.
    fn format(
        #[starlark(require = pos)] time: Value,
        #[starlark(require = pos)] layout: &str,
    ) -> anyhow::Result<String> {
        or_fail(format("time.format", time, layout))
    }

    /// A duration from a string such as "1h30m" or "500ms" (negative allowed).
    fn duration(#[starlark(require = pos)] value: Value) -> anyhow::Result<DurationValue> {
        or_fail(duration(value))
    }

    /// How long ago `time` was.
    fn since(
        #[starlark(require = pos)] time: Value,
        eval: &mut Evaluator,
    ) -> anyhow::Result<DurationValue> {
        Host::mark_reached_by(eval);
        or_fail(elapsed("time.since", time, false))
    }

    /// How long until `time` (negative once it has passed).
    fn until(
        #[starlark(require = pos)] time: Value,
        eval: &mut Evaluator,
    ) -> anyhow::Result<DurationValue> {
        Host::mark_reached_by(eval);
        or_fail(elapsed("time.until", time, true))
    }

    /// `sleep(...)` as a result (`.ok`, `.value`, `.error`). Written by hand: a sleep
    /// cut short by the budget is a failed Result here, where a derived form would end
    /// the call.
    fn try_sleep<'v>(
        #[starlark(require = pos)] duration: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let outcome = sleep_value(duration, eval).map(|()| Value::new_none());
        Ok(result(eval.heap(), outcome))
    }
}
