//! `log`: upstream Starkite's structured logging, written through kite's own logger, so
//! `--log-format json` and `KITE_LOG` cover script logs too.
//!
//! # Caveats
//! The format and the output belong to the process (a hosted script shares them with
//! every other controller): `log.set_format` and `log.set_output` leave them as they
//! are and say so in a warning. `log.set_level` applies to the calling script only,
//! within kite's own filter (`-v` or `KITE_LOG=script=debug` lets debug lines through).
//! Attributes travel in one field, `attrs`, as JSON.

use std::sync::atomic::{AtomicU8, Ordering};

use starlark::environment::GlobalsBuilder;
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::Value;
use starlark::values::none::{NoneOr, NoneType};

use crate::script::host::{Host, call_site};
use crate::script::json::from_starlark;

/// Upstream's levels, lowest first.
const LEVELS: [&str; 4] = ["debug", "info", "warn", "error"];

/// The calling script's threshold (an index into [`LEVELS`]); upstream's default is info.
pub struct Threshold(AtomicU8);

impl Default for Threshold {
    fn default() -> Self {
        Threshold(AtomicU8::new(1))
    }
}

fn level_index(call: &str, level: &str) -> anyhow::Result<u8> {
    LEVELS
        .iter()
        .position(|l| l.eq_ignore_ascii_case(level))
        .and_then(|i| u8::try_from(i).ok())
        .ok_or_else(|| {
            anyhow::anyhow!(
                "{call}: unknown level {level:?} (levels: {})",
                LEVELS.join(", ")
            )
        })
}

fn emit(
    eval: &Evaluator<'_, '_, '_>,
    level: u8,
    msg: &str,
    attrs: NoneOr<Value>,
) -> anyhow::Result<NoneType> {
    let host = Host::of(eval)?;
    if level < host.ext::<Threshold>().0.load(Ordering::Relaxed) {
        return Ok(NoneType);
    }
    let name = LEVELS[usize::from(level)];
    let attrs = match attrs.into_option() {
        None => String::new(),
        Some(v) => match from_starlark(v)? {
            json @ serde_json::Value::Object(_) => json.to_string(),
            _ => anyhow::bail!("log.{name}: attrs must be a dict, not {}", v.get_type()),
        },
    };
    let at = call_site(eval);
    match level {
        0 => tracing::debug!(target: "script", at, attrs, "{msg}"),
        1 => tracing::info!(target: "script", at, attrs, "{msg}"),
        2 => tracing::warn!(target: "script", at, attrs, "{msg}"),
        _ => tracing::error!(target: "script", at, attrs, "{msg}"),
    }
    Ok(NoneType)
}

#[starlark_module]
pub fn log_namespace(builder: &mut GlobalsBuilder) {
    /// Logs `msg` at debug level, with `attrs` (a dict).
    fn debug(
        #[starlark(require = pos)] msg: &str,
        #[starlark(default = NoneOr::None)] attrs: NoneOr<Value>,
        eval: &mut Evaluator<'_, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        emit(eval, 0, msg, attrs)
    }

    /// Logs `msg` at info level, with `attrs` (a dict).
    fn info(
        #[starlark(require = pos)] msg: &str,
        #[starlark(default = NoneOr::None)] attrs: NoneOr<Value>,
        eval: &mut Evaluator<'_, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        emit(eval, 1, msg, attrs)
    }

    /// Logs `msg` at warn level, with `attrs` (a dict).
    fn warn(
        #[starlark(require = pos)] msg: &str,
        #[starlark(default = NoneOr::None)] attrs: NoneOr<Value>,
        eval: &mut Evaluator<'_, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        emit(eval, 2, msg, attrs)
    }

    /// Logs `msg` at error level, with `attrs` (a dict).
    fn error(
        #[starlark(require = pos)] msg: &str,
        #[starlark(default = NoneOr::None)] attrs: NoneOr<Value>,
        eval: &mut Evaluator<'_, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        emit(eval, 3, msg, attrs)
    }

    /// The lowest level this script logs: "debug", "info", "warn" or "error".
    fn set_level(
        #[starlark(require = pos)] level: &str,
        eval: &mut Evaluator<'_, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        let index = level_index("log.set_level", level)?;
        Host::of(eval)?
            .ext::<Threshold>()
            .0
            .store(index, Ordering::Relaxed);
        Ok(NoneType)
    }

    /// Accepted for upstream's scripts; kite's `--log-format` decides the format.
    fn set_format(
        #[starlark(require = pos)] format: &str,
        eval: &mut Evaluator<'_, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        if !matches!(format, "text" | "json") {
            anyhow::bail!("log.set_format: unknown format {format:?} (text or json)");
        }
        let at = call_site(eval);
        tracing::warn!(target: "script", at, "log.set_format({format:?}) is ignored: kite's --log-format decides the format");
        Ok(NoneType)
    }

    /// Accepted for upstream's scripts; kite logs to stderr.
    fn set_output(
        #[starlark(require = pos)] output: &str,
        eval: &mut Evaluator<'_, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        if !matches!(output, "stderr" | "stdout") {
            anyhow::bail!("log.set_output: unknown output {output:?} (stderr or stdout)");
        }
        let at = call_site(eval);
        tracing::warn!(target: "script", at, "log.set_output({output:?}) is ignored: kite logs to stderr");
        Ok(NoneType)
    }
}

#[cfg(test)]
mod tests {
    use crate::script::builtins::testing::eval;

    #[test]
    fn levels_and_attrs() {
        assert_eq!(eval("log.info('started', {'port': 8080})").unwrap(), "None");
        assert_eq!(
            eval("log.set_level('debug')\nlog.debug('x')").unwrap(),
            "None"
        );
        let e = eval("log.set_level('verbose')").unwrap_err();
        assert!(
            e.contains(
                "log.set_level: unknown level \"verbose\" (levels: debug, info, warn, error)"
            ),
            "{e}"
        );
        let e = eval("log.warn('x', [1])").unwrap_err();
        assert!(
            e.contains("log.warn: attrs must be a dict, not list"),
            "{e}"
        );
        let e = eval("log.set_format('xml')").unwrap_err();
        assert!(e.contains("log.set_format: unknown format"), "{e}");
        assert_eq!(eval("log.set_output('stdout')").unwrap(), "None");
    }
}
