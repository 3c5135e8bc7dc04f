//! `k8s.control(...)` options: parsed and validated before anything starts.

use std::time::Duration;

use starlark::collections::SmallMap;
use starlark::docs::{DocItem, DocMember};
use starlark::values::Value;
use starlark::values::dict::DictRef;
use starlark::values::list::ListRef;
use starlark::values::tuple::TupleRef;

use crate::script::attrdict::AttrDict;

/// Every keyword `k8s.control` accepts, in the order error messages list them.
pub const KEYWORDS: &[&str] = &[
    "kind",
    "reconcile",
    "on_create",
    "on_update",
    "on_delete",
    "finalize",
    "finalizer",
    "namespace",
    "labels",
    "field_selector",
    "poll",
    "resync",
    "health_port",
    "generation_changed",
    "watch_owned",
    "watch_related",
    "workers",
    "max_retries",
    "backoff",
    "predicate",
    "leader_election",
    "leader_election_id",
    "leader_election_namespace",
    "identity",
];

/// The default finalizer when `finalize` is given without `finalizer`.
pub const DEFAULT_FINALIZER: &str = "starkite.io/finalizer";

/// The validated options of one controller (handlers are kept apart, as Starlark values).
#[derive(Debug, Clone, PartialEq)]
pub struct ControlSpec {
    pub kind: String,
    pub namespace: Option<String>,
    pub labels: Option<String>,
    pub field_selector: Option<String>,
    pub poll: Option<Duration>,
    /// None disables resync ("0").
    pub resync: Option<Duration>,
    /// None (absent or 0): no health server.
    pub health_port: Option<u16>,
    pub generation_changed: bool,
    pub watch_owned: Vec<String>,
    /// The kinds of `watch_related`, in the order of their map functions.
    pub watch_related: Vec<String>,
    pub workers: usize,
    pub max_retries: u32,
    pub backoff: Duration,
    pub leader_election: bool,
    pub leader_election_id: Option<String>,
    pub leader_election_namespace: Option<String>,
    pub identity: Option<String>,
    /// Set when `finalize` is given (default [`DEFAULT_FINALIZER`]).
    pub finalizer: Option<String>,
    /// `reconcile(obj)` (1) or `reconcile(event, obj)` (2); None without reconcile.
    pub reconcile_arity: Option<usize>,
}

/// The handler functions of one `control()` call, still on the script's heap.
#[derive(Default)]
pub struct HandlerValues<'v> {
    pub reconcile: Option<Value<'v>>,
    pub on_create: Option<Value<'v>>,
    pub on_update: Option<Value<'v>>,
    pub on_delete: Option<Value<'v>>,
    pub finalize: Option<Value<'v>>,
    pub predicate: Option<Value<'v>>,
    pub related: Vec<Value<'v>>,
}

fn err(msg: impl std::fmt::Display) -> anyhow::Error {
    anyhow::anyhow!("k8s.control: {msg}")
}

/// The number of positional parameters a function takes, when it can be told.
pub fn arity(f: Value) -> Option<usize> {
    match f.documentation() {
        DocItem::Member(DocMember::Function(doc)) => {
            let p = &doc.params;
            if p.args.is_some() {
                return None;
            }
            Some(p.pos_only.len() + p.pos_or_named.len())
        }
        _ => None,
    }
}

fn function<'v>(name: &str, v: Value<'v>, arities: &[usize]) -> anyhow::Result<Value<'v>> {
    if v.get_type() != "function" {
        return Err(err(format!(
            "{name} must be a function, not {}",
            v.get_type()
        )));
    }
    if let Some(n) = arity(v)
        && !arities.contains(&n)
    {
        let want: Vec<String> = arities.iter().map(usize::to_string).collect();
        return Err(err(format!(
            "{name} must take {} argument(s), but it takes {n}",
            want.join(" or ")
        )));
    }
    Ok(v)
}

fn string(name: &str, v: Value) -> anyhow::Result<String> {
    v.unpack_str()
        .map(str::to_owned)
        .ok_or_else(|| err(format!("{name} must be a string, not {}", v.get_type())))
}

/// Secondary watches one `k8s.control` may ask for (`watch_owned` and `watch_related`
/// each).
const MAX_WATCHES: usize = 64;

/// A kind name: a string no longer than any resource name can be.
fn kind_name(name: &str, v: Value) -> anyhow::Result<String> {
    let kind = v
        .unpack_str()
        .ok_or_else(|| err(format!("{name} must be a string, not {}", v.get_type())))?;
    if kind.len() > 253 {
        return Err(err(format!(
            "{name} is {} characters long; a kind name has at most 253",
            kind.len()
        )));
    }
    Ok(kind.to_owned())
}

fn boolean(name: &str, v: Value) -> anyhow::Result<bool> {
    v.unpack_bool().ok_or_else(|| {
        err(format!(
            "{name} must be True or False, not {}",
            v.get_type()
        ))
    })
}

/// An integer argument in `min..=max`, as the type the spec keeps it in (the range
/// fits that type, so the conversion cannot fail once the range holds).
fn integer<T: TryFrom<i64>>(name: &str, v: Value, min: i64, max: i64) -> anyhow::Result<T> {
    match v.unpack_i32() {
        Some(i) if (min..=max).contains(&i64::from(i)) => {
            T::try_from(i64::from(i)).map_err(|_| err(format!("{name} {i} does not fit its type")))
        }
        Some(i) => Err(err(format!(
            "{name} must be between {min} and {max}, not {i}"
        ))),
        None => Err(err(format!(
            "{name} must be an integer, not {}",
            v.get_type()
        ))),
    }
}

fn duration(name: &str, v: Value) -> anyhow::Result<Duration> {
    let s = string(name, v)?;
    crate::duration::parse(&s).map_err(|e| err(format!("{name}: {e}")))
}

fn selector(name: &str, v: Value) -> anyhow::Result<String> {
    crate::k8s::selector::selector(v).ok_or_else(|| {
        err(format!(
            "{name} must be a selector string like \"app=web\" or a dict"
        ))
    })
}

/// `{"kind": k, "map_func": f}` as a dict or AttrDict, with no other keys.
fn dict_pair(v: Value) -> Option<(Value, Value)> {
    let dict = AttrDict::dict_of(v).unwrap_or(v);
    let d = DictRef::from_value(dict)?;
    if d.len() != 2 {
        return None;
    }
    Some((d.get_str("kind")?, d.get_str("map_func")?))
}

fn items(v: Value) -> Option<Vec<Value>> {
    ListRef::from_value(v)
        .map(|l| l.content().to_vec())
        .or_else(|| TupleRef::from_value(v).map(|t| t.content().to_vec()))
}

/// Parses `k8s.control(kind, **options)`.
///
/// # Errors
/// An unknown keyword (the message lists the accepted ones), a wrong type, a missing
/// kind or handler, or a handler with the wrong number of parameters.
#[expect(
    clippy::too_many_lines,
    reason = "one check per keyword of k8s.control(), a closed set (KEYWORDS)"
)]
pub fn parse<'v>(
    positional: &[Value<'v>],
    kwargs: &SmallMap<String, Value<'v>>,
) -> anyhow::Result<(ControlSpec, HandlerValues<'v>)> {
    if positional.len() > 1 {
        return Err(err(
            "takes the kind as its only positional argument; give the rest by keyword",
        ));
    }
    if let Some(unknown) = kwargs.keys().find(|k| !KEYWORDS.contains(&k.as_str())) {
        return Err(err(format!(
            "unknown keyword argument {unknown:?} (accepted: {})",
            KEYWORDS.join(", ")
        )));
    }
    let get = |k: &str| kwargs.get(k).copied().filter(|v| !v.is_none());
    let kind = match (positional.first(), get("kind")) {
        (Some(_), Some(_)) => return Err(err("kind is given both by position and by keyword")),
        (Some(v), None) => string("kind", *v)?,
        (None, Some(v)) => string("kind", v)?,
        (None, None) => {
            return Err(err(
                "missing the kind to watch, e.g. k8s.control(\"deployments\", ...)",
            ));
        }
    };
    if kind.trim().is_empty() {
        return Err(err("kind must not be empty"));
    }
    let mut h = HandlerValues::default();
    let mut reconcile_arity = None;
    if let Some(v) = get("reconcile") {
        let f = function("reconcile", v, &[1, 2])?;
        reconcile_arity = Some(arity(f).unwrap_or(1));
        h.reconcile = Some(f);
    }
    h.on_create = get("on_create")
        .map(|v| function("on_create", v, &[1]))
        .transpose()?;
    h.on_update = get("on_update")
        .map(|v| function("on_update", v, &[2]))
        .transpose()?;
    h.on_delete = get("on_delete")
        .map(|v| function("on_delete", v, &[1]))
        .transpose()?;
    h.finalize = get("finalize")
        .map(|v| function("finalize", v, &[1]))
        .transpose()?;
    h.predicate = get("predicate")
        .map(|v| function("predicate", v, &[1]))
        .transpose()?;
    if h.reconcile.is_none()
        && h.on_create.is_none()
        && h.on_update.is_none()
        && h.on_delete.is_none()
        && h.finalize.is_none()
    {
        return Err(err(
            "needs at least one handler: reconcile, on_create, on_update, on_delete or finalize",
        ));
    }
    let finalizer = match (get("finalizer"), &h.finalize) {
        (Some(v), _) => Some(string("finalizer", v)?),
        (None, Some(_)) => Some(DEFAULT_FINALIZER.to_owned()),
        (None, None) => None,
    };
    if let Some(f) = &finalizer
        && !f.contains('/')
    {
        return Err(err(format!(
            "finalizer {f:?} must be qualified, like \"example.com/cleanup\""
        )));
    }
    let mut watch_owned = Vec::new();
    if let Some(v) = get("watch_owned") {
        let kinds = items(v).ok_or_else(|| err("watch_owned must be a list of kinds"))?;
        if kinds.len() > MAX_WATCHES {
            return Err(err(format!(
                "watch_owned names {} kinds; at most {MAX_WATCHES}",
                kinds.len()
            )));
        }
        for item in kinds {
            watch_owned.push(kind_name("watch_owned item", item)?);
        }
    }
    let mut watch_related = Vec::new();
    if let Some(v) = get("watch_related") {
        let related = items(v).ok_or_else(|| err("watch_related must be a list"))?;
        if related.len() > MAX_WATCHES {
            return Err(err(format!(
                "watch_related has {} items; at most {MAX_WATCHES}",
                related.len()
            )));
        }
        for item in related {
            let (kind, map_func) = if let Some(pair) = items(item).filter(|p| p.len() == 2) {
                (pair[0], pair[1])
            } else if let Some((k, f)) = dict_pair(item) {
                (k, f)
            } else {
                return Err(err(
                    "each watch_related item must be {\"kind\": ..., \"map_func\": fn} or (kind, fn)",
                ));
            };
            watch_related.push(kind_name("watch_related kind", kind)?);
            h.related
                .push(function("watch_related map_func", map_func, &[1])?);
        }
    }
    let opt_str = |k: &str| get(k).map(|v| string(k, v)).transpose();
    let spec = ControlSpec {
        kind,
        namespace: opt_str("namespace")?.filter(|n| !n.is_empty()),
        labels: get("labels").map(|v| selector("labels", v)).transpose()?,
        field_selector: get("field_selector")
            .map(|v| selector("field_selector", v))
            .transpose()?,
        poll: get("poll").map(|v| duration("poll", v)).transpose()?,
        resync: match get("resync") {
            Some(v) => Some(duration("resync", v)?).filter(|d| !d.is_zero()),
            None => Some(Duration::from_mins(10)),
        },
        // 0 means no health server, as upstream's zero port does.
        health_port: get("health_port")
            .map(|v| integer::<u16>("health_port", v, 0, 65535))
            .transpose()?
            .filter(|p| *p != 0),
        generation_changed: get("generation_changed")
            .map(|v| boolean("generation_changed", v))
            .transpose()?
            .unwrap_or(true),
        watch_owned,
        watch_related,
        workers: get("workers")
            .map(|v| integer::<usize>("workers", v, 1, 64))
            .transpose()?
            .unwrap_or(1),
        max_retries: get("max_retries")
            .map(|v| integer::<u32>("max_retries", v, 0, 1_000_000))
            .transpose()?
            .unwrap_or(5),
        backoff: get("backoff")
            .map(|v| duration("backoff", v))
            .transpose()?
            .unwrap_or(Duration::from_secs(5)),
        leader_election: get("leader_election")
            .map(|v| boolean("leader_election", v))
            .transpose()?
            .unwrap_or(false),
        leader_election_id: opt_str("leader_election_id")?,
        leader_election_namespace: opt_str("leader_election_namespace")?,
        identity: opt_str("identity")?,
        finalizer,
        reconcile_arity,
    };
    if spec.poll.is_some_and(|p| p < Duration::from_millis(100)) {
        return Err(err("poll must be at least 100ms"));
    }
    if spec.backoff.is_zero() {
        return Err(err("backoff must be greater than zero"));
    }
    Ok((spec, h))
}

#[cfg(test)]
mod tests {
    use starlark::collections::SmallMap;
    use starlark::environment::{Globals, Module};
    use starlark::eval::Evaluator;
    use starlark::syntax::{AstModule, Dialect};

    /// Parses `control(kind, **kwargs)` where `kwargs` is Starlark dict source; returns
    /// the health port or the error text.
    fn health_port(kwargs: &str) -> Result<Option<u16>, String> {
        Module::with_temp_heap(|module| {
            let code = format!("def r(o):\n    pass\nd = dict(reconcile = r, {kwargs})\nd");
            let ast = AstModule::parse("t.star", code, &Dialect::Standard).unwrap();
            let mut eval = Evaluator::new(&module);
            let d = eval.eval_module(ast, &Globals::standard()).unwrap();
            let dict = starlark::values::dict::DictRef::from_value(d).unwrap();
            let kwargs: SmallMap<String, _> = dict
                .iter()
                .map(|(k, v)| (k.unpack_str().unwrap().to_owned(), v))
                .collect();
            let kind = module.heap().alloc("pods");
            super::parse(&[kind], &kwargs)
                .map(|(spec, _)| spec.health_port)
                .map_err(|e| e.to_string())
        })
    }

    #[test]
    fn health_port_zero_means_no_server() {
        assert_eq!(health_port("health_port = 8081"), Ok(Some(8081)));
        assert_eq!(health_port("health_port = 0"), Ok(None));
        assert_eq!(health_port("workers = 1"), Ok(None));
        let e = health_port("health_port = 70000").unwrap_err();
        assert!(e.contains("health_port must be between 0 and 65535"), "{e}");
        let e = health_port("health_port = -1").unwrap_err();
        assert!(e.contains("health_port"), "{e}");
    }
}
