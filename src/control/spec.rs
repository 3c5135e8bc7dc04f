//! `k8s.control(...)` options: parsed and validated before anything starts.

use std::time::Duration;

use starlark::collections::SmallMap;
use starlark::docs::{DocItem, DocMember};
use starlark::values::Value;
use starlark::values::dict::DictRef;
use starlark::values::list::ListRef;
use starlark::values::tuple::TupleRef;

use super::option::ControlOption as O;
use crate::script::attrdict::AttrDict;

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

#[cfg(test)]
impl ControlSpec {
    /// A spec that watches `kind` with a one-argument reconcile and no other option
    /// (one worker, five retries, a 5 s backoff): for the tests of the layers above
    /// that need a spec without evaluating a script.
    pub fn for_tests(kind: &str) -> Self {
        ControlSpec {
            kind: kind.into(),
            namespace: None,
            labels: None,
            field_selector: None,
            poll: None,
            resync: None,
            health_port: None,
            generation_changed: false,
            watch_owned: vec![],
            watch_related: vec![],
            workers: 1,
            max_retries: 5,
            backoff: Duration::from_secs(5),
            leader_election: false,
            leader_election_id: None,
            leader_election_namespace: None,
            identity: None,
            finalizer: None,
            reconcile_arity: Some(1),
        }
    }
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

/// The keyword arguments of one call, read one option at a time (a None value is as if
/// the option were not given).
struct Given<'a, 'v>(&'a SmallMap<String, Value<'v>>);

impl<'v> Given<'_, 'v> {
    fn get(&self, option: O) -> Option<Value<'v>> {
        self.0.get(option.name()).copied().filter(|v| !v.is_none())
    }

    /// The option's value checked by `parse`, which is given the keyword to name in its
    /// errors: taking the option once keeps the value read and the name said together.
    fn read<T>(
        &self,
        option: O,
        parse: impl FnOnce(&str, Value<'v>) -> anyhow::Result<T>,
    ) -> anyhow::Result<Option<T>> {
        self.get(option)
            .map(|v| parse(option.name(), v))
            .transpose()
    }
}

/// `watch_owned`: a list of at most [`MAX_WATCHES`] kinds.
fn owned_kinds(name: &str, v: Value) -> anyhow::Result<Vec<String>> {
    let kinds = items(v).ok_or_else(|| err(format!("{name} must be a list of kinds")))?;
    if kinds.len() > MAX_WATCHES {
        return Err(err(format!(
            "{name} names {} kinds; at most {MAX_WATCHES}",
            kinds.len()
        )));
    }
    kinds
        .into_iter()
        .map(|item| kind_name(&format!("{name} item"), item))
        .collect()
}

/// `watch_related`: at most [`MAX_WATCHES`] kinds, each with its map function.
fn related_pairs<'v>(name: &str, v: Value<'v>) -> anyhow::Result<Vec<(String, Value<'v>)>> {
    let related = items(v).ok_or_else(|| err(format!("{name} must be a list")))?;
    if related.len() > MAX_WATCHES {
        return Err(err(format!(
            "{name} has {} items; at most {MAX_WATCHES}",
            related.len()
        )));
    }
    let mut pairs = Vec::with_capacity(related.len());
    for item in related {
        let (kind, map_func) = if let Some(pair) = items(item).filter(|p| p.len() == 2) {
            (pair[0], pair[1])
        } else if let Some((k, f)) = dict_pair(item) {
            (k, f)
        } else {
            return Err(err(format!(
                "each {name} item must be {{\"kind\": ..., \"map_func\": fn}} or (kind, fn)"
            )));
        };
        pairs.push((
            kind_name(&format!("{name} kind"), kind)?,
            function(&format!("{name} map_func"), map_func, &[1])?,
        ));
    }
    Ok(pairs)
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
    if let Some(unknown) = kwargs.keys().find(|k| O::parse(k).is_none()) {
        let accepted: Vec<&str> = O::ALL.iter().map(|o| o.name()).collect();
        return Err(err(format!(
            "unknown keyword argument {unknown:?} (accepted: {})",
            accepted.join(", ")
        )));
    }
    let given = Given(kwargs);
    let kind = match (positional.first(), given.get(O::Kind)) {
        (Some(_), Some(_)) => return Err(err("kind is given both by position and by keyword")),
        (Some(v), None) => string(O::Kind.name(), *v)?,
        (None, Some(v)) => string(O::Kind.name(), v)?,
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
    if let Some(f) = given.read(O::Reconcile, |name, v| function(name, v, &[1, 2]))? {
        reconcile_arity = Some(arity(f).unwrap_or(1));
        h.reconcile = Some(f);
    }
    h.on_create = given.read(O::OnCreate, |name, v| function(name, v, &[1]))?;
    h.on_update = given.read(O::OnUpdate, |name, v| function(name, v, &[2]))?;
    h.on_delete = given.read(O::OnDelete, |name, v| function(name, v, &[1]))?;
    h.finalize = given.read(O::Finalize, |name, v| function(name, v, &[1]))?;
    h.predicate = given.read(O::Predicate, |name, v| function(name, v, &[1]))?;
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
    let finalizer = match (given.read(O::Finalizer, string)?, &h.finalize) {
        (Some(f), _) => Some(f),
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
    let watch_owned = given.read(O::WatchOwned, owned_kinds)?.unwrap_or_default();
    let watch_related;
    (watch_related, h.related) = given
        .read(O::WatchRelated, related_pairs)?
        .unwrap_or_default()
        .into_iter()
        .unzip();
    let spec = ControlSpec {
        kind,
        namespace: given.read(O::Namespace, string)?.filter(|n| !n.is_empty()),
        labels: given.read(O::Labels, selector)?,
        field_selector: given.read(O::FieldSelector, selector)?,
        poll: given.read(O::Poll, duration)?,
        resync: match given.read(O::Resync, duration)? {
            Some(d) => Some(d).filter(|d| !d.is_zero()),
            None => Some(Duration::from_mins(10)),
        },
        // 0 means no health server, as upstream's zero port does.
        health_port: given
            .read(O::HealthPort, |name, v| integer::<u16>(name, v, 0, 65535))?
            .filter(|p| *p != 0),
        generation_changed: given.read(O::GenerationChanged, boolean)?.unwrap_or(true),
        watch_owned,
        watch_related,
        workers: given
            .read(O::Workers, |name, v| integer::<usize>(name, v, 1, 64))?
            .unwrap_or(1),
        max_retries: given
            .read(O::MaxRetries, |name, v| {
                integer::<u32>(name, v, 0, 1_000_000)
            })?
            .unwrap_or(5),
        backoff: given
            .read(O::Backoff, duration)?
            .unwrap_or(Duration::from_secs(5)),
        leader_election: given.read(O::LeaderElection, boolean)?.unwrap_or(false),
        leader_election_id: given.read(O::LeaderElectionId, string)?,
        leader_election_namespace: given.read(O::LeaderElectionNamespace, string)?,
        identity: given.read(O::Identity, string)?,
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

    use super::{ControlSpec, O};

    /// Parses `control(*kind, **d)` where `d` is the dict the Starlark `code` leaves
    /// (`reconcile` is bound to a function taking one argument); returns the spec or
    /// the error text.
    fn parse(kind: Option<&str>, code: &str) -> Result<ControlSpec, String> {
        Module::with_temp_heap(|module| {
            let code = format!("def r(o):\n    pass\n{code}");
            let ast = AstModule::parse("t.star", code, &Dialect::Standard).unwrap();
            let mut eval = Evaluator::new(&module);
            let d = eval.eval_module(ast, &Globals::standard()).unwrap();
            let dict = starlark::values::dict::DictRef::from_value(d).unwrap();
            let kwargs: SmallMap<String, _> = dict
                .iter()
                .map(|(k, v)| (k.unpack_str().unwrap().to_owned(), v))
                .collect();
            let positional: Vec<_> = kind.map(|k| module.heap().alloc(k)).into_iter().collect();
            super::parse(&positional, &kwargs)
                .map(|(spec, _)| spec)
                .map_err(|e| e.to_string())
        })
    }

    /// Parses `control(kind, **kwargs)` where `kwargs` is Starlark dict source; returns
    /// the health port or the error text.
    fn health_port(kwargs: &str) -> Result<Option<u16>, String> {
        parse(
            Some("pods"),
            &format!("d = dict(reconcile = r, {kwargs})\nd"),
        )
        .map(|s| s.health_port)
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

    /// Every option is read and checked: a value none of them accepts (a float) given to
    /// any one is an error that names it. An option the parser forgot would pass the
    /// keyword check (it is one of [`O::ALL`]) and then be silently ignored.
    #[test]
    fn every_option_is_read_and_its_value_checked() {
        assert!(parse(None, "d = dict(kind = \"pods\", reconcile = r)\nd").is_ok());
        for option in O::ALL {
            let name = option.name();
            let code = format!("d = dict(kind = \"pods\", reconcile = r)\nd[{name:?}] = 1.5\nd");
            let e = parse(None, &code).expect_err(name);
            assert!(
                e.starts_with(&format!("k8s.control: {name} must ")),
                "{name} = 1.5: {e}"
            );
        }
    }

    #[test]
    fn an_unknown_keyword_lists_every_option_in_order() {
        let e = parse(Some("pods"), "d = dict(reconcile = r, port = 1)\nd").unwrap_err();
        let names: Vec<&str> = O::ALL.iter().map(|o| o.name()).collect();
        assert_eq!(
            e,
            format!(
                "k8s.control: unknown keyword argument \"port\" (accepted: {})",
                names.join(", ")
            )
        );
    }
}
