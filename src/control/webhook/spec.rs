//! `k8s.webhook(...)` options: parsed and validated when the script calls it, before
//! anything listens.

use std::path::PathBuf;
use std::time::Duration;

use starlark::collections::SmallMap;
use starlark::values::Value;

use super::option::WebhookOption as O;

/// Upstream's port.
pub const DEFAULT_PORT: u16 = 9443;
/// Half of the API server's default webhook timeout (10 s), so a slow handler is
/// answered for before the API server gives up on the call.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// What a review gets when a handler fails (raises, returns a bad shape, runs over its
/// budget): the same words as a webhook configuration's `failurePolicy`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailurePolicy {
    /// Refuse the request, naming the failure.
    Fail,
    /// Admit the request unchanged, with a warning naming the failure.
    Ignore,
}

impl FailurePolicy {
    /// The word used in webhook configurations.
    pub fn as_str(self) -> &'static str {
        match self {
            FailurePolicy::Fail => "Fail",
            FailurePolicy::Ignore => "Ignore",
        }
    }
}

/// The validated options of one webhook (its handlers are kept apart, as values).
#[derive(Debug, Clone, PartialEq)]
pub struct WebhookSpec {
    pub path: String,
    pub port: u16,
    /// The PEM files to serve; None: a self-made certificate for 127.0.0.1/localhost.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// The time both handlers of one review may take together.
    pub timeout: Duration,
    pub failure_policy: FailurePolicy,
    pub validates: bool,
    pub mutates: bool,
    /// `validate(obj, req)` rather than `validate(obj)`; likewise for mutate.
    pub validate_wants_request: bool,
    pub mutate_wants_request: bool,
}

/// The handler functions of one `webhook()` call, still on the script's heap.
pub struct HandlerValues<'v> {
    pub validate: Option<Value<'v>>,
    pub mutate: Option<Value<'v>>,
}

fn err(msg: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("k8s.webhook: {msg}")
}

/// Parses the call's arguments.
///
/// # Errors
/// An unknown keyword, a missing path or handler, a value of the wrong type, a port out
/// of range, a bad duration or policy, or only one of `tls_cert`/`tls_key`.
pub fn parse<'v>(
    args: &[Value<'v>],
    kwargs: &SmallMap<String, Value<'v>>,
) -> anyhow::Result<(WebhookSpec, HandlerValues<'v>)> {
    if let Some(key) = kwargs.keys().find(|k| O::parse(k).is_none()) {
        let accepted: Vec<&str> = O::ALL.iter().map(|o| o.name()).collect();
        return Err(err(format!(
            "unknown keyword argument {key:?}; expected one of {}",
            accepted.join(", ")
        )));
    }
    if args.len() > 1 {
        return Err(err(format!(
            "takes 1 positional argument (path), got {}",
            args.len()
        )));
    }
    let path = match (args.first(), given(kwargs, O::Path)) {
        (Some(_), Some(_)) => return Err(err("path given both by position and by keyword")),
        (Some(v), None) | (None, Some(v)) => v,
        (None, None) => {
            return Err(err(
                "missing the path, e.g. k8s.webhook(\"/validate\", ...)",
            ));
        }
    };
    let path = path
        .unpack_str()
        .ok_or_else(|| err(format!("path must be a string, not {}", path.get_type())))?;
    if !path.starts_with('/') {
        return Err(err(format!("path {path:?} must start with \"/\"")));
    }
    let validate = handler(kwargs, O::Validate)?;
    let mutate = handler(kwargs, O::Mutate)?;
    if validate.is_none() && mutate.is_none() {
        return Err(err("give validate=, mutate= or both"));
    }
    let port = match given(kwargs, O::Port) {
        None => DEFAULT_PORT,
        Some(v) => v
            .unpack_i32()
            .and_then(|p| u16::try_from(p).ok())
            .filter(|p| *p > 0)
            .ok_or_else(|| err(format!("port must be a number from 1 to 65535, not {v}")))?,
    };
    let tls = match (file(kwargs, O::TlsCert)?, file(kwargs, O::TlsKey)?) {
        (Some(c), Some(k)) => Some((c, k)),
        (None, None) => None,
        (Some(_), None) => return Err(err("tls_cert is given without tls_key")),
        (None, Some(_)) => return Err(err("tls_key is given without tls_cert")),
    };
    let timeout = match given(kwargs, O::Timeout) {
        None => DEFAULT_TIMEOUT,
        Some(v) => {
            let s = v.unpack_str().ok_or_else(|| {
                err(format!(
                    "timeout must be a duration string like \"5s\", not {v}"
                ))
            })?;
            let d = crate::duration::parse(s).map_err(|e| err(format!("timeout: {e}")))?;
            if d.is_zero() || d > Duration::from_secs(29) {
                return Err(err(format!(
                    "timeout {s:?} must be above 0 and below 30s (the API server waits at most 30s)"
                )));
            }
            d
        }
    };
    let failure_policy = match given(kwargs, O::FailurePolicy).map(|v| (v, v.unpack_str())) {
        None | Some((_, Some("Fail"))) => FailurePolicy::Fail,
        Some((_, Some("Ignore"))) => FailurePolicy::Ignore,
        Some((v, _)) => {
            return Err(err(format!(
                "failure_policy must be \"Fail\" or \"Ignore\", not {v}"
            )));
        }
    };
    let spec = WebhookSpec {
        path: path.to_owned(),
        port,
        tls,
        timeout,
        failure_policy,
        validates: validate.is_some(),
        mutates: mutate.is_some(),
        validate_wants_request: validate.is_some_and(|(_, r)| r),
        mutate_wants_request: mutate.is_some_and(|(_, r)| r),
    };
    Ok((
        spec,
        HandlerValues {
            validate: validate.map(|(v, _)| v),
            mutate: mutate.map(|(v, _)| v),
        },
    ))
}

/// The value of `option`, if the call gives it: every option is read through here, by
/// its [`O`], so the keyword read is the one the unknown-keyword check accepts.
fn given<'a, 'v>(kwargs: &'a SmallMap<String, Value<'v>>, option: O) -> Option<&'a Value<'v>> {
    kwargs.get(option.name())
}

/// Handler `option`, if given, and whether it takes the request too.
fn handler<'v>(
    kwargs: &SmallMap<String, Value<'v>>,
    option: O,
) -> anyhow::Result<Option<(Value<'v>, bool)>> {
    let name = option.name();
    let Some(v) = given(kwargs, option).copied().filter(|v| !v.is_none()) else {
        return Ok(None);
    };
    if v.get_type() != "function" {
        return Err(err(format!(
            "{name} must be a function, not {}",
            v.get_type()
        )));
    }
    match crate::control::spec::arity(v) {
        Some(1) | None => Ok(Some((v, false))),
        Some(2) => Ok(Some((v, true))),
        Some(n) => Err(err(format!(
            "{name} must take 1 argument (obj) or 2 (obj, req), but it takes {n}"
        ))),
    }
}

/// File path `option`, if given (and not empty).
fn file(kwargs: &SmallMap<String, Value<'_>>, option: O) -> anyhow::Result<Option<PathBuf>> {
    let name = option.name();
    match given(kwargs, option) {
        None => Ok(None),
        Some(v) if v.is_none() => Ok(None),
        Some(v) => match v.unpack_str() {
            Some("") => Ok(None),
            Some(s) => Ok(Some(PathBuf::from(s))),
            None => Err(err(format!(
                "{name} must be a file path, not {}",
                v.get_type()
            ))),
        },
    }
}

#[cfg(test)]
mod tests {
    use starlark::collections::SmallMap;
    use starlark::environment::{Globals, Module};
    use starlark::eval::Evaluator;
    use starlark::syntax::{AstModule, Dialect};

    use super::O;

    /// Parses `webhook("/v", **kwargs)` where `kwargs` is Starlark dict source.
    fn parse(kwargs: &str) -> Result<super::WebhookSpec, String> {
        call(true, kwargs)
    }

    /// Parses `webhook(**kwargs)`, with the path `"/v"` first when `positional`.
    fn call(positional: bool, kwargs: &str) -> Result<super::WebhookSpec, String> {
        Module::with_temp_heap(|module| {
            let code = format!("def v(o, r):\n    pass\nd = dict({kwargs})\nd");
            let ast = AstModule::parse("t.star", code, &Dialect::Standard).unwrap();
            let mut eval = Evaluator::new(&module);
            let d = eval.eval_module(ast, &Globals::standard()).unwrap();
            let dict = starlark::values::dict::DictRef::from_value(d).unwrap();
            let kwargs: SmallMap<String, _> = dict
                .iter()
                .map(|(k, v)| (k.unpack_str().unwrap().to_owned(), v))
                .collect();
            let path = module.heap().alloc("/v");
            let args = if positional { vec![path] } else { Vec::new() };
            super::parse(&args, &kwargs)
                .map(|(spec, _)| spec)
                .map_err(|e| e.to_string())
        })
    }

    #[test]
    fn webhook_options_are_checked() {
        let spec = parse("validate = v, failure_policy = 'Ignore', timeout = '2s'").unwrap();
        assert_eq!(spec.port, 9443);
        assert!(spec.validate_wants_request && !spec.mutates);
        assert_eq!(spec.failure_policy, super::FailurePolicy::Ignore);
        assert_eq!(spec.timeout, std::time::Duration::from_secs(2));
        let bad = [
            ("", "give validate=, mutate= or both"),
            ("validate = 1", "validate must be a function"),
            ("validate = lambda a, b, c: 1", "takes 3"),
            ("mutate = v, port = 0", "port must be"),
            ("mutate = v, tls_cert = 'a'", "without tls_key"),
            ("mutate = v, timeout = '1m'", "below 30s"),
            ("mutate = v, failure_policy = 'x'", "\"Fail\" or \"Ignore\""),
            ("mutate = v, prot = 1", "unknown keyword argument \"prot\""),
        ];
        for (kwargs, want) in bad {
            let e = parse(kwargs).unwrap_err();
            assert!(
                e.starts_with("k8s.webhook: ") && e.contains(want),
                "{kwargs}: {e}"
            );
        }
    }

    /// A call whose one fault is a value of the wrong type for `option`. A `match`: a
    /// new option needs a case here, and the test below fails until the parser reads it.
    fn wrong_type(option: O) -> &'static str {
        match option {
            O::Path => "path = 1, mutate = v",
            O::Validate => "path = '/v', validate = 1",
            O::Mutate => "path = '/v', mutate = 1",
            O::Port => "path = '/v', mutate = v, port = 'x'",
            O::TlsCert => "path = '/v', mutate = v, tls_cert = 1, tls_key = 'k'",
            O::TlsKey => "path = '/v', mutate = v, tls_cert = 'c', tls_key = 1",
            O::Timeout => "path = '/v', mutate = v, timeout = 1",
            O::FailurePolicy => "path = '/v', mutate = v, failure_policy = 1",
        }
    }

    #[test]
    fn every_option_is_read_and_named_in_its_own_error() {
        for option in O::ALL {
            let e = call(false, wrong_type(*option)).unwrap_err();
            assert!(
                e.starts_with(&format!("k8s.webhook: {option} must be ")),
                "{option}: {e}"
            );
        }
    }
}
