//! `log.logger(...)` values: a level of their own, plus attributes (optionally under
//! nested groups) bound to every line they write.
//!
//! Bound attributes and a call's own merge into one JSON object, the later winning
//! where a key repeats (upstream's slog would print the key twice). Attributes added
//! after `.group(name)` nest under `name`; a group that never receives an attribute
//! does not appear, as with slog.

#![expect(
    unsafe_code,
    reason = "derive(ProvidesStaticType) writes starlark's unsafe impl; no unsafe code of ours"
)]

use std::fmt;

use allocative::Allocative;
use serde_json::{Map, Value as Json};
use starlark::any::ProvidesStaticType;
use starlark::environment::{Methods, MethodsBuilder};
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::none::{NoneOr, NoneType};
use starlark::values::{NoSerialize, StarlarkValue, Value, ValueLike, starlark_value};

use super::{LEVELS, attrs_of, write};

/// A logger made by `log.logger(...)` or derived from one.
#[derive(Debug, Clone, ProvidesStaticType, NoSerialize, Allocative)]
pub struct Logger {
    /// The lowest level written, an index into [`LEVELS`].
    threshold: u8,
    /// The level as the script gave it (lower case), for `.level`.
    level: String,
    format: String,
    output: String,
    #[allocative(skip)]
    bound: Map<String, Json>,
    /// The groups later attributes nest under, outermost first.
    group: Vec<String>,
}

starlark::starlark_simple_value!(Logger);

impl fmt::Display for Logger {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "logger(level={}, format={}, output={})",
            self.level, self.format, self.output
        )
    }
}

impl Logger {
    pub(super) fn new(threshold: u8, level: String, format: String, output: String) -> Self {
        Logger {
            threshold,
            level,
            format,
            output,
            bound: Map::new(),
            group: Vec::new(),
        }
    }

    /// The attributes one line carries: the bound ones with `attrs` merged in.
    fn fields(&self, attrs: Map<String, Json>) -> Map<String, Json> {
        let mut fields = self.bound.clone();
        bind(&mut fields, &self.group, attrs);
        fields
    }

    fn log(
        &self,
        eval: &Evaluator<'_, '_, '_>,
        level: u8,
        msg: &str,
        attrs: NoneOr<Value>,
    ) -> anyhow::Result<NoneType> {
        let call = format!("logger.{}", LEVELS[usize::from(level)]);
        // Bad attrs fail at any level, so the mistake shows without -v.
        let attrs = match attrs.into_option() {
            None => Map::new(),
            Some(v) => attrs_of(&call, v)?,
        };
        if level >= self.threshold {
            write(eval, level, msg, &self.fields(attrs));
        }
        Ok(NoneType)
    }
}

/// Merges `attrs` into `into` under the group path `group`; a key given again replaces
/// the earlier value, and a non-dict value in the way of a group gives way to it.
fn bind(into: &mut Map<String, Json>, group: &[String], attrs: Map<String, Json>) {
    if attrs.is_empty() {
        return;
    }
    match group.split_first() {
        None => into.extend(attrs),
        Some((name, rest)) => {
            let slot = into.entry(name.clone()).or_insert(Json::Null);
            if let Json::Object(inner) = slot {
                bind(inner, rest, attrs);
            } else {
                let mut inner = Map::new();
                bind(&mut inner, rest, attrs);
                *slot = Json::Object(inner);
            }
        }
    }
}

fn logger_of(v: Value<'_>) -> anyhow::Result<&Logger> {
    v.downcast_ref::<Logger>()
        .ok_or_else(|| anyhow::anyhow!("not a logger"))
}

#[starlark_module]
fn logger_methods(builder: &mut MethodsBuilder) {
    /// The level given to `log.logger(...)`.
    #[starlark(attribute)]
    fn level(#[starlark(this)] this: Value) -> anyhow::Result<String> {
        Ok(logger_of(this)?.level.clone())
    }

    /// The format given to `log.logger(...)` (kite's `--log-format` is what applies).
    #[starlark(attribute)]
    fn format(#[starlark(this)] this: Value) -> anyhow::Result<String> {
        Ok(logger_of(this)?.format.clone())
    }

    /// The output given to `log.logger(...)` (kite writes to stderr).
    #[starlark(attribute)]
    fn output(#[starlark(this)] this: Value) -> anyhow::Result<String> {
        Ok(logger_of(this)?.output.clone())
    }

    /// Logs `msg` at debug level, with `attrs` (a dict).
    fn debug(
        #[starlark(this)] this: Value,
        #[starlark(require = pos)] msg: &str,
        #[starlark(default = NoneOr::None)] attrs: NoneOr<Value>,
        eval: &mut Evaluator<'_, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        logger_of(this)?.log(eval, 0, msg, attrs)
    }

    /// Logs `msg` at info level, with `attrs` (a dict).
    fn info(
        #[starlark(this)] this: Value,
        #[starlark(require = pos)] msg: &str,
        #[starlark(default = NoneOr::None)] attrs: NoneOr<Value>,
        eval: &mut Evaluator<'_, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        logger_of(this)?.log(eval, 1, msg, attrs)
    }

    /// Logs `msg` at warn level, with `attrs` (a dict).
    fn warn(
        #[starlark(this)] this: Value,
        #[starlark(require = pos)] msg: &str,
        #[starlark(default = NoneOr::None)] attrs: NoneOr<Value>,
        eval: &mut Evaluator<'_, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        logger_of(this)?.log(eval, 2, msg, attrs)
    }

    /// Logs `msg` at error level, with `attrs` (a dict).
    fn error(
        #[starlark(this)] this: Value,
        #[starlark(require = pos)] msg: &str,
        #[starlark(default = NoneOr::None)] attrs: NoneOr<Value>,
        eval: &mut Evaluator<'_, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        logger_of(this)?.log(eval, 3, msg, attrs)
    }

    /// A logger like this one that adds `attrs` (a dict) to every line.
    fn attrs(
        #[starlark(this)] this: Value,
        #[starlark(require = pos)] attrs: Value,
    ) -> anyhow::Result<Logger> {
        let this = logger_of(this)?;
        let mut derived = this.clone();
        bind(
            &mut derived.bound,
            &this.group,
            attrs_of("logger.attrs", attrs)?,
        );
        Ok(derived)
    }

    /// A logger like this one whose later attributes nest under `name`.
    fn group(
        #[starlark(this)] this: Value,
        #[starlark(require = pos)] name: &str,
    ) -> anyhow::Result<Logger> {
        let mut derived = logger_of(this)?.clone();
        // slog ignores an empty group name; so does kite.
        if !name.is_empty() {
            derived.group.push(name.to_owned());
        }
        Ok(derived)
    }
}

starlark::methods_static!(LOGGER_METHODS = logger_methods);

#[expect(
    clippy::elidable_lifetime_names,
    reason = "the starlark_value macro names the lifetime"
)]
#[starlark_value(type = "logger")]
impl<'v> StarlarkValue<'v> for Logger {
    fn get_methods() -> Option<&'static Methods> {
        Some(LOGGER_METHODS.methods())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::script::builtins::log::tests::logged;
    use crate::script::builtins::snippets::eval;

    fn map(v: Json) -> Map<String, Json> {
        match v {
            Json::Object(m) => m,
            _ => Map::new(),
        }
    }

    #[test]
    fn bind_merges_later_wins_and_nests_groups() {
        let mut into = map(json!({"app": "a", "db": 1}));
        bind(&mut into, &[], map(json!({"app": "b", "v": 2})));
        assert_eq!(
            Json::Object(into.clone()),
            json!({"app": "b", "db": 1, "v": 2})
        );
        let group = ["db".to_owned(), "pool".to_owned()];
        bind(&mut into, &group, map(json!({"size": 5})));
        bind(&mut into, &group, map(json!({"idle": 1})));
        assert_eq!(
            Json::Object(into.clone()),
            json!({"app": "b", "db": {"pool": {"size": 5, "idle": 1}}, "v": 2})
        );
        // An empty group never appears.
        bind(&mut into, &["empty".to_owned()], Map::new());
        assert!(!into.contains_key("empty"));
    }

    #[test]
    fn properties_repr_and_type() {
        assert_eq!(
            eval("l = log.logger()\n(l.level, l.format, l.output, type(l), str(l))").unwrap(),
            r#"("info", "text", "stderr", "logger", "logger(level=info, format=text, output=stderr)")"#
        );
        assert_eq!(
            eval("l = log.logger('WARNING', output = 'stdout', format = 'json')\n(l.level, l.format, l.output)")
                .unwrap(),
            r#"("warning", "json", "stdout")"#
        );
        // Derived loggers keep the settings.
        assert_eq!(
            eval("log.logger(level = 'debug').attrs({'a': 1}).group('g').level").unwrap(),
            r#""debug""#
        );
        let e = eval("{log.logger(): 1}").unwrap_err();
        assert!(e.contains("logger"), "{e}");
    }

    #[test]
    fn methods_log_with_bound_and_grouped_attrs() {
        let (out, lines) = logged(
            "l = log.logger().attrs({'app': 'svc', 'v': '1'})\n\
             l.info('started')\n\
             l.attrs({'v': '2'}).warn('upgraded', {'n': 3})\n\
             l.group('db').attrs({'host': 'pg'}).error('down', attrs = {'code': 7})\n\
             l.group('empty').info('plain')\n\
             l.debug('hidden')\n\
             log.logger(level = 'debug').debug('shown', {'f': len})",
        );
        assert_eq!(out.unwrap(), "None");
        let got: Vec<(String, String, Json)> = lines
            .iter()
            .map(|l| {
                let attrs = l["fields"]["attrs"].as_str().unwrap_or_default();
                let attrs = serde_json::from_str(attrs).unwrap_or(Json::Null);
                (
                    l["level"].as_str().unwrap_or_default().to_owned(),
                    l["fields"]["message"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    attrs,
                )
            })
            .collect();
        let want = vec![
            ("INFO", "started", json!({"app": "svc", "v": "1"})),
            ("WARN", "upgraded", json!({"app": "svc", "v": "2", "n": 3})),
            (
                "ERROR",
                "down",
                json!({"app": "svc", "v": "1", "db": {"host": "pg", "code": 7}}),
            ),
            ("INFO", "plain", json!({"app": "svc", "v": "1"})),
            ("DEBUG", "shown", json!({"f": "len"})),
        ];
        let want: Vec<(String, String, Json)> = want
            .into_iter()
            .map(|(l, m, a)| (l.to_owned(), m.to_owned(), a))
            .collect();
        assert_eq!(got, want);
        assert_eq!(lines[0]["fields"]["at"], "test.star:2:1");
    }

    #[test]
    fn method_errors() {
        let e = eval("log.logger().attrs([1])").unwrap_err();
        assert!(
            e.contains("logger.attrs: attrs must be a dict, not list"),
            "{e}"
        );
        let e = eval("log.logger().info('x', {1: 2})").unwrap_err();
        assert!(
            e.contains("logger.info: attrs keys must be strings, not int (1)"),
            "{e}"
        );
        // Below the logger's level, bad attrs still fail.
        let e = eval("log.logger().debug('x', 'a')").unwrap_err();
        assert!(
            e.contains("logger.debug: attrs must be a dict, not string"),
            "{e}"
        );
        for (call, what) in [("warn", "'x', 1"), ("error", "'x', [1]")] {
            let e = eval(&format!("log.logger().{call}({what})")).unwrap_err();
            assert!(
                e.contains(&format!("logger.{call}: attrs must be a dict")),
                "{e}"
            );
        }
        let e = eval("log.logger().group(1)").unwrap_err();
        assert!(e.contains("group"), "{e}");
    }
}
