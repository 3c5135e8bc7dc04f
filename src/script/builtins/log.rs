//! `log`: upstream Starkite's structured logging, written through kite's own logger, so
//! `--log-format json` and `KITE_LOG` cover script logs too.
//!
//! # Caveats
//! The format and the output belong to the process (a hosted script shares them with
//! every other controller): `log.set_format` and `log.set_output` leave them as they
//! are and say so in a warning. `log.set_level` applies to the calling script only,
//! within kite's own filter (`-v` or `KITE_LOG=script=debug` lets debug lines through).
//! `log.logger(...)` values ([`Logger`]) keep their own level, and record the format and
//! output they were given without honouring them (one warning per script says so).
//! Attributes travel in one field, `attrs`, as JSON; values with no JSON form are
//! logged as their `str()`, as upstream does.

mod logger;

use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use serde_json::{Map, Value as Json};
use starlark::environment::GlobalsBuilder;
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::dict::DictRef;
use starlark::values::none::{NoneOr, NoneType};
use starlark::values::{Heap, Value};

pub use self::logger::Logger;
use crate::script::attrdict::AttrDict;
use crate::script::host::{Host, call_site};
use crate::script::json::from_starlark;
use crate::script::outcome::result;

/// Upstream's levels, lowest first.
const LEVELS: [&str; 4] = ["debug", "info", "warn", "error"];

/// The calling script's threshold (an index into [`LEVELS`]); upstream's default is info.
pub struct Threshold(AtomicU8);

impl Default for Threshold {
    fn default() -> Self {
        Threshold(AtomicU8::new(1))
    }
}

/// Whether this script has already been told that a setting is ignored, per
/// [`Setting`]: said once per script, so that a loop of them cannot flood the log.
#[derive(Default)]
struct Noted([AtomicBool; 3]);

/// The settings of `log` that kite does not honour.
#[derive(Clone, Copy)]
enum Setting {
    Format = 0,
    Output = 1,
    Logger = 2,
}

/// The index into [`LEVELS`] of `level` (any case; `warning` as upstream accepts it).
///
/// # Errors
/// An unknown level, naming `call` and the levels there are.
fn level_index(call: &str, level: &str) -> Result<u8, String> {
    let level_lower = level.to_ascii_lowercase();
    let wanted = if level_lower == "warning" {
        "warn"
    } else {
        &level_lower
    };
    LEVELS
        .iter()
        .position(|l| *l == wanted)
        .and_then(|i| u8::try_from(i).ok())
        .ok_or_else(|| {
            format!(
                "{call}: unknown level {level:?} (levels: {})",
                LEVELS.join(", ")
            )
        })
}

fn check_format(call: &str, format: &str) -> Result<(), String> {
    if matches!(format, "text" | "json") {
        Ok(())
    } else {
        Err(format!("{call}: unknown format {format:?} (text or json)"))
    }
}

fn check_output(call: &str, output: &str) -> Result<(), String> {
    if output.eq_ignore_ascii_case("stderr") || output.eq_ignore_ascii_case("stdout") {
        Ok(())
    } else {
        Err(format!(
            "{call}: unknown output {output:?} (stderr or stdout)"
        ))
    }
}

/// A script's attributes dict as JSON fields.
///
/// Values with no JSON form (a function, a struct) are logged as their `str()`, as
/// upstream does, rather than failing the log call.
///
/// # Errors
/// `attrs` is not a dict, or one of its keys is not a string.
fn attrs_of(call: &str, attrs: Value) -> anyhow::Result<Map<String, Json>> {
    let dict = AttrDict::dict_of(attrs).unwrap_or(attrs);
    let Some(dict) = DictRef::from_value(dict) else {
        anyhow::bail!("{call}: attrs must be a dict, not {}", attrs.get_type());
    };
    let mut fields = Map::new();
    for (k, v) in dict.iter() {
        let Some(key) = k.unpack_str() else {
            anyhow::bail!(
                "{call}: attrs keys must be strings, not {} ({})",
                k.get_type(),
                k.to_repr()
            );
        };
        // A value with no JSON form is logged as its text; one the budgets stopped is
        // an error (writing its text would do the same work again, unchecked).
        let value = match from_starlark(v) {
            Ok(value) => value,
            Err(e @ crate::script::json::Error::Stopped { .. }) => {
                anyhow::bail!("{call}: attrs[{key:?}]: {e}")
            }
            Err(_) => Json::String(v.to_str()),
        };
        fields.insert(key.to_owned(), value);
    }
    Ok(fields)
}

/// Writes one script line through kite's logger; `level` indexes [`LEVELS`]. A hosted
/// script's records share its `print()` rate, are one line each, and name their
/// controller (`controller=namespace/name`).
fn write(eval: &Evaluator<'_, '_, '_>, level: u8, msg: &str, fields: &Map<String, Json>) {
    let at = call_site(eval);
    let host = Host::of(eval).ok();
    // A record names its controller: a top level that writes one is its own.
    host.inspect(|h| h.mark_reached());
    let printer = host.map(|h| &h.printer);
    if printer.is_some_and(|p| !p.admit_record(std::time::Instant::now())) {
        return;
    }
    let controller = printer.and_then(crate::script::printer::Printer::name);
    let msg = printer.map_or_else(|| msg.to_owned(), |p| p.contain(msg));
    let attrs = if fields.is_empty() {
        String::new()
    } else {
        let text = Json::Object(fields.clone()).to_string();
        printer.map_or(text.clone(), |p| p.contain(&text))
    };
    if let Some(journal) = printer.and_then(crate::script::printer::Printer::journal) {
        let name = LEVELS[usize::from(level)].to_uppercase();
        let sep = if attrs.is_empty() { "" } else { " " };
        journal.push(&format!("{name} {msg}{sep}{attrs}"));
    }
    match level {
        0 => tracing::debug!(target: "script", at, controller, attrs, "{msg}"),
        1 => tracing::info!(target: "script", at, controller, attrs, "{msg}"),
        2 => tracing::warn!(target: "script", at, controller, attrs, "{msg}"),
        _ => tracing::error!(target: "script", at, controller, attrs, "{msg}"),
    }
}

fn emit(
    eval: &Evaluator<'_, '_, '_>,
    level: u8,
    msg: &str,
    attrs: NoneOr<Value>,
) -> anyhow::Result<NoneType> {
    let name = LEVELS[usize::from(level)];
    // Bad attrs fail whatever the level, so a script's mistake shows without -v.
    let fields = match attrs.into_option() {
        None => Map::new(),
        Some(v) => attrs_of(&format!("log.{name}"), v)?,
    };
    let host = Host::of(eval)?;
    if level >= host.ext::<Threshold>().0.load(Ordering::Relaxed) {
        write(eval, level, msg, &fields);
    }
    Ok(NoneType)
}

fn set_level(eval: &Evaluator<'_, '_, '_>, call: &str, level: &str) -> anyhow::Result<()> {
    let index = level_index(call, level).map_err(anyhow::Error::msg)?;
    let host = Host::of(eval)?;
    // The level is this controller's: a top level that set it is not another's.
    host.mark_reached();
    host.ext::<Threshold>().0.store(index, Ordering::Relaxed);
    Ok(())
}

fn set_format(eval: &Evaluator<'_, '_, '_>, call: &str, format: &str) -> Result<(), String> {
    check_format(call, format)?;
    if first_note(eval, Setting::Format) {
        let at = call_site(eval);
        tracing::warn!(target: "script", at, "log.set_format({format:?}) is ignored: kite's --log-format decides the format");
    }
    Ok(())
}

fn set_output(eval: &Evaluator<'_, '_, '_>, call: &str, output: &str) -> Result<(), String> {
    check_output(call, output)?;
    if first_note(eval, Setting::Output) {
        let at = call_site(eval);
        tracing::warn!(target: "script", at, "log.set_output({output:?}) is ignored: kite logs to stderr");
    }
    Ok(())
}

/// True the first time a script is told that `setting` is not honoured.
fn first_note(eval: &Evaluator<'_, '_, '_>, setting: Setting) -> bool {
    Host::of(eval)
        .is_ok_and(|h| !h.ext::<Noted>().0[setting as usize].swap(true, Ordering::Relaxed))
}

/// `log.logger(...)`: checks the settings; says once per script that format and
/// output other than kite's own are not honoured.
fn new_logger(
    eval: &Evaluator<'_, '_, '_>,
    call: &str,
    level: &str,
    format: &str,
    output: &str,
) -> anyhow::Result<Logger> {
    let index = level_index(call, level).map_err(anyhow::Error::msg)?;
    check_format(call, format).map_err(anyhow::Error::msg)?;
    check_output(call, output).map_err(anyhow::Error::msg)?;
    let own = format == "text" && output.eq_ignore_ascii_case("stderr");
    if !own && first_note(eval, Setting::Logger) {
        let at = call_site(eval);
        tracing::warn!(target: "script", at, "log.logger(format={format:?}, output={output:?}): kite's --log-format decides the format and logs go to stderr");
    }
    Ok(Logger::new(
        index,
        level.to_ascii_lowercase(),
        format.to_owned(),
        output.to_owned(),
    ))
}

/// `outcome` as a `try_` result holding None.
fn done(heap: Heap<'_>, outcome: Result<(), String>) -> Value<'_> {
    result(heap, outcome.map(|()| Value::new_none()))
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
        set_level(eval, "log.set_level", level)?;
        Ok(NoneType)
    }

    /// `set_level(...)` as a result.
    fn try_set_level<'v>(
        #[starlark(require = pos)] level: &str,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let outcome = set_level(eval, "log.set_level", level).map_err(|e| e.to_string());
        Ok(done(eval.heap(), outcome))
    }

    /// Accepted for upstream's scripts; kite's `--log-format` decides the format.
    fn set_format(
        #[starlark(require = pos)] format: &str,
        eval: &mut Evaluator<'_, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        set_format(eval, "log.set_format", format).map_err(anyhow::Error::msg)?;
        Ok(NoneType)
    }

    /// `set_format(...)` as a result.
    fn try_set_format<'v>(
        #[starlark(require = pos)] format: &str,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let outcome = set_format(eval, "log.set_format", format);
        Ok(done(eval.heap(), outcome))
    }

    /// Accepted for upstream's scripts; kite logs to stderr.
    fn set_output(
        #[starlark(require = pos)] output: &str,
        eval: &mut Evaluator<'_, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        set_output(eval, "log.set_output", output).map_err(anyhow::Error::msg)?;
        Ok(NoneType)
    }

    /// `set_output(...)` as a result.
    fn try_set_output<'v>(
        #[starlark(require = pos)] output: &str,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let outcome = set_output(eval, "log.set_output", output);
        Ok(done(eval.heap(), outcome))
    }

    /// A logger with its own level, independent of `log.set_level`; `.attrs(...)`
    /// and `.group(...)` derive loggers that add attributes to every line.
    fn logger(
        #[starlark(default = "info")] level: &str,
        #[starlark(default = "text")] format: &str,
        #[starlark(default = "stderr")] output: &str,
        eval: &mut Evaluator<'_, '_, '_>,
    ) -> anyhow::Result<Logger> {
        new_logger(eval, "log.logger", level, format, output)
    }

    /// `logger(...)` as a result.
    fn try_logger<'v>(
        #[starlark(default = "info")] level: &str,
        #[starlark(default = "text")] format: &str,
        #[starlark(default = "stderr")] output: &str,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let outcome = new_logger(eval, "log.logger", level, format, output)
            .map(|l| eval.heap().alloc(l))
            .map_err(|e| e.to_string());
        Ok(result(eval.heap(), outcome))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use std::io;
    use std::sync::{Arc, Mutex, PoisonError};

    use serde_json::{Value as Json, json};

    use super::level_index;
    use crate::script::builtins::snippets::eval;

    /// Collects what the JSON formatter writes.
    #[derive(Clone, Default)]
    struct Sink(Arc<Mutex<Vec<u8>>>);

    impl io::Write for Sink {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            self.0
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    /// Runs `code` and returns its result with the `script` lines it logged (as JSON).
    pub(crate) fn logged(code: &str) -> (Result<String, String>, Vec<Json>) {
        capture(|| eval(code))
    }

    fn capture(
        run: impl FnOnce() -> Result<String, String>,
    ) -> (Result<String, String>, Vec<Json>) {
        let sink = Sink::default();
        let writer = sink.clone();
        let subscriber = tracing_subscriber::fmt()
            .json()
            .with_max_level(tracing::Level::TRACE)
            .with_writer(move || writer.clone())
            .finish();
        let out = tracing::subscriber::with_default(subscriber, run);
        let bytes = sink
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone();
        let lines = String::from_utf8_lossy(&bytes)
            .lines()
            .filter_map(|l| serde_json::from_str::<Json>(l).ok())
            .filter(|l| l["target"] == "script")
            .collect();
        (out, lines)
    }

    fn summary(lines: &[Json]) -> Vec<(String, String, String)> {
        lines
            .iter()
            .map(|l| {
                let text = |v: &Json| v.as_str().unwrap_or_default().to_owned();
                (
                    text(&l["level"]),
                    text(&l["fields"]["message"]),
                    text(&l["fields"]["attrs"]),
                )
            })
            .collect()
    }

    /// A hosted script's records name their controller, are one line each, and share
    /// its print rate (a burst of 100).
    #[test]
    fn hosted_records_are_tagged_contained_and_limited() {
        let code =
            "log.info('a\\n[other/victim] forged')\nfor i in range(300):\n    log.info('x')\n";
        let (out, lines) =
            capture(|| crate::script::builtins::snippets::eval_hosted("team/c", code));
        assert!(out.is_ok(), "{out:?}");
        assert_eq!(lines[0]["fields"]["controller"], "team/c", "{:?}", lines[0]);
        assert_eq!(
            lines[0]["fields"]["message"], "a\\n[other/victim] forged",
            "{:?}",
            lines[0]
        );
        assert!(lines.len() <= 110, "{} records", lines.len());
    }

    #[test]
    fn levels() {
        assert_eq!(level_index("c", "debug"), Ok(0));
        assert_eq!(level_index("c", "INFO"), Ok(1));
        assert_eq!(level_index("c", "warning"), Ok(2));
        assert_eq!(level_index("c", "Error"), Ok(3));
        assert_eq!(
            level_index("c", "verbose"),
            Err("c: unknown level \"verbose\" (levels: debug, info, warn, error)".to_owned())
        );
    }

    #[test]
    fn module_functions_log_through_tracing() {
        let (out, lines) = logged(
            "log.debug('hidden')\n\
             log.info('started', {'port': 8080, 'f': len})\n\
             log.set_level('debug')\n\
             log.debug('x')\n\
             log.set_level('error')\n\
             log.warn('quiet', {})\n\
             log.error('boom', attrs = {'e': None})",
        );
        assert_eq!(out.unwrap(), "None");
        let want = [
            ("INFO", "started", r#"{"port":8080,"f":"len"}"#),
            ("DEBUG", "x", ""),
            ("ERROR", "boom", r#"{"e":null}"#),
        ];
        let want: Vec<_> = want
            .iter()
            .map(|(a, b, c)| ((*a).to_owned(), (*b).to_owned(), (*c).to_owned()))
            .collect();
        assert_eq!(summary(&lines), want);
        assert_eq!(lines[0]["fields"]["at"], json!("test.star:2:1"));
    }

    #[test]
    fn module_function_errors() {
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
        let e = eval("log.info('x', {('a',): 1})").unwrap_err();
        assert!(
            e.contains("log.info: attrs keys must be strings, not tuple"),
            "{e}"
        );
        // Below the threshold, bad attrs still fail.
        let e = eval("log.debug('x', 1)").unwrap_err();
        assert!(
            e.contains("log.debug: attrs must be a dict, not int"),
            "{e}"
        );
        let e = eval("log.error('x', 'a')").unwrap_err();
        assert!(e.contains("log.error: attrs must be a dict"), "{e}");
        let e = eval("log.set_format('xml')").unwrap_err();
        assert!(e.contains("log.set_format: unknown format \"xml\""), "{e}");
        let e = eval("log.set_output('file')").unwrap_err();
        assert!(e.contains("log.set_output: unknown output \"file\""), "{e}");
    }

    #[test]
    fn settings_are_accepted_with_a_warning() {
        let (out, lines) = logged(
            "log.set_format('json')\nlog.set_output('stdout')\n\
             log.set_format('json')\nlog.set_output('stdout')\n\
             log.logger(format = 'json')\nlog.logger(output = 'stdout')\nlog.logger()",
        );
        assert_eq!(
            out.unwrap(),
            "logger(level=info, format=text, output=stderr)"
        );
        let levels: Vec<_> = summary(&lines).into_iter().map(|l| (l.0, l.1)).collect();
        assert_eq!(levels.len(), 3, "{levels:?}");
        assert!(levels[0].1.contains("log.set_format(\"json\") is ignored"));
        assert!(
            levels[1]
                .1
                .contains("log.set_output(\"stdout\") is ignored")
        );
        // Said once per script.
        assert!(
            levels[2]
                .1
                .contains("log.logger(format=\"json\", output=\"stderr\")")
        );
    }

    #[test]
    fn logger_errors() {
        let e = eval("log.logger(level = 'trace')").unwrap_err();
        assert!(e.contains("log.logger: unknown level \"trace\""), "{e}");
        let e = eval("log.logger(format = 'xml')").unwrap_err();
        assert!(e.contains("log.logger: unknown format \"xml\""), "{e}");
        let e = eval("log.logger(output = '/tmp/x')").unwrap_err();
        assert!(e.contains("log.logger: unknown output \"/tmp/x\""), "{e}");
    }

    #[test]
    fn try_variants() {
        assert_eq!(
            eval("r = log.try_logger(level = 'debug')\n(r.ok, r.value.level, r.error)").unwrap(),
            r#"(True, "debug", "")"#
        );
        assert_eq!(
            eval("r = log.try_logger(format = 'xml')\n(r.ok, r.value, r.error)").unwrap(),
            r#"(False, None, "log.logger: unknown format \"xml\" (text or json)")"#
        );
        assert_eq!(
            eval("r = log.try_set_level('nope')\n(r.ok, r.error.startswith('log.set_level: unknown level'))")
                .unwrap(),
            "(False, True)"
        );
        assert_eq!(
            eval("[log.try_set_level('warn').ok, log.try_set_format('json').ok, log.try_set_output('stderr').ok]")
                .unwrap(),
            "[True, True, True]"
        );
        assert_eq!(
            eval("[log.try_set_format('x').error, log.try_set_output('x').error]").unwrap(),
            r#"["log.set_format: unknown format \"x\" (text or json)", "log.set_output: unknown output \"x\" (stderr or stdout)"]"#
        );
    }
}
