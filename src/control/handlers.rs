//! The script's handler functions, frozen, and how one call of them runs on a worker
//! thread: a fresh temporary heap and evaluator per call, a time budget enforced by the
//! evaluator's cancel hook, and the return value decoded.

#![expect(
    unsafe_code,
    reason = "a frozen value kept alive by a heap reference (unchecked_frozen_value)"
)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value as Json;
use starlark::environment::{FrozenModule, Module};
use starlark::eval::Evaluator;
use starlark::values::dict::{AllocDict, DictRef};
use starlark::values::list::{AllocList, ListRef};
use starlark::values::{Heap, OwnedFrozenValue, Value};

use super::option::ControlOption as O;
use super::spec::HandlerValues;
use crate::script::budget::{self, Budget, Cancel};
use crate::script::host::Host;
use crate::script::json::{from_starlark, to_starlark};

/// Why a handler call failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The handler raised an error; the message is the rendered traceback.
    #[error("{0}")]
    Raised(String),
    /// The handler ran past its time budget and was cancelled (`at` is where it was).
    #[error("{}handler cancelled after exceeding its time budget of {budget}", at.as_deref().map(|a| format!("{a}: ")).unwrap_or_default())]
    OverBudget { budget: String, at: Option<String> },
    /// The handler returned something kite cannot use.
    #[error("{0}")]
    BadReturn(String),
    /// One of the reconcile's own writes (finalizer, children) failed; the source keeps
    /// the API server's status, so a conflict can be told from a refusal.
    #[error("error: {what}: {source}")]
    Write {
        what: &'static str,
        source: Box<WriteError>,
    },
    /// The handler was cancelled because its controller is stopping.
    #[error("handler cancelled: the controller is stopping, or lost its leader-election lease")]
    Stopped,
    /// The handler allocated more than its memory limit in one step (`at` is the
    /// handler's definition: the allocation itself has no position to report).
    #[error("{}handler stopped: {exceeded}", at.as_deref().map(|a| format!("{a}: ")).unwrap_or_default())]
    OverMemory {
        exceeded: crate::script::memory::Exceeded,
        at: Option<String>,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why one of the reconcile's own writes did not happen.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error(transparent)]
    Api(#[from] crate::k8s::ops::Error),
    #[error(transparent)]
    Children(#[from] super::children::Error),
    #[error(transparent)]
    Interrupted(#[from] crate::script::budget::Interrupted),
}

impl WriteError {
    /// The API server's status code, when it answered with an error.
    pub fn code(&self) -> Option<u16> {
        match self {
            WriteError::Api(e) => e.code(),
            WriteError::Children(
                super::children::Error::Apply { source, .. }
                | super::children::Error::Prune { source, .. }
                | super::children::Error::Parent(source),
            ) => source.code(),
            _ => None,
        }
    }
}

/// What a reconcile-style handler asked for.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// `None`: done.
    Done,
    /// A duration string: call again after it.
    RequeueAfter(Duration),
    /// A list of objects: the desired children.
    Children(Vec<Json>),
}

/// The frozen handlers of one controller. Cheap to share between worker threads.
pub struct Handlers {
    pub reconcile: Option<OwnedFrozenValue>,
    pub on_create: Option<OwnedFrozenValue>,
    pub on_update: Option<OwnedFrozenValue>,
    pub on_delete: Option<OwnedFrozenValue>,
    pub finalize: Option<OwnedFrozenValue>,
    pub predicate: Option<OwnedFrozenValue>,
    pub related: Vec<OwnedFrozenValue>,
    /// Where each function of the script is defined, for errors about return values.
    pub positions: std::collections::HashMap<String, String>,
    /// Keeps the script's frozen heap (and so every global it refers to) alive.
    _module: FrozenModule,
}

/// The options whose functions are stashed, each under its keyword.
const NAMES: [O; 6] = [
    O::Reconcile,
    O::OnCreate,
    O::OnUpdate,
    O::OnDelete,
    O::Finalize,
    O::Predicate,
];

/// Stores the handlers in the module's extra value, so that freezing the module keeps
/// them (and everything they close over) alive for the worker threads.
pub fn stash<'v>(module: &Module<'v>, heap: Heap<'v>, h: &HandlerValues<'v>) {
    let fields = [
        h.reconcile,
        h.on_create,
        h.on_update,
        h.on_delete,
        h.finalize,
        h.predicate,
    ];
    let mut entries: Vec<(Value<'v>, Value<'v>)> = NAMES
        .iter()
        .zip(fields)
        .filter_map(|(option, f)| Some((heap.alloc(option.name()), f?)))
        .collect();
    entries.push((
        heap.alloc("related"),
        heap.alloc(AllocList(h.related.iter().copied())),
    ));
    stash_entries(module, heap, entries);
}

/// Adds `entries` to the module's extra dict, keeping what other builtins stashed there
/// (`k8s.webhook` keeps its handlers beside the controller's).
pub fn stash_entries<'v>(
    module: &Module<'v>,
    heap: Heap<'v>,
    entries: Vec<(Value<'v>, Value<'v>)>,
) {
    let mut all: Vec<(Value<'v>, Value<'v>)> = module
        .extra_value()
        .and_then(DictRef::from_value)
        .map(|d| d.iter().collect())
        .unwrap_or_default();
    for (k, v) in entries {
        all.retain(|(old, _)| old.unpack_str() != k.unpack_str());
        all.push((k, v));
    }
    module.set_extra_value(heap.alloc(AllocDict(all)));
}

impl Handlers {
    /// The handlers of a script whose top level called `k8s.control(...)`, with where
    /// each of its functions is defined.
    ///
    /// # Errors
    /// The module holds no handlers (the message, rendered as a script error, says that
    /// `k8s.control()` cannot start a controller from where it was called).
    pub fn of_script(
        module: FrozenModule,
        positions: std::collections::HashMap<String, String>,
    ) -> std::result::Result<Self, String> {
        let mut handlers = Self::from_module(module)
            .ok_or_else(|| format!("error: {}", super::request::CONTROL_STARTED))?;
        handlers.positions = positions;
        Ok(handlers)
    }

    /// Takes the handlers back out of a frozen module that [`stash`] prepared.
    pub fn from_module(module: FrozenModule) -> Option<Self> {
        let extra = module.owned_extra_value()?;
        let field = |name: &str| stashed(&extra, name);
        let related_list = field("related");
        let mut related = Vec::new();
        if let Some(list) = &related_list {
            let n = ListRef::from_value(list.value()).map_or(0, |l| l.len());
            for i in 0..n {
                let item = list.try_map(|v| {
                    ListRef::from_value(v.to_value())
                        .and_then(|l| l.content().get(i).copied())
                        .and_then(starlark::values::Value::unpack_frozen)
                        .ok_or(())
                });
                related.extend(item.ok());
            }
        }
        Some(Self {
            reconcile: field(O::Reconcile.name()),
            on_create: field(O::OnCreate.name()),
            on_update: field(O::OnUpdate.name()),
            on_delete: field(O::OnDelete.name()),
            finalize: field(O::Finalize.name()),
            predicate: field(O::Predicate.name()),
            related,
            positions: std::collections::HashMap::default(),
            _module: module,
        })
    }

    /// Points an error about what `f` returned at `f`'s definition (a returned value
    /// has no line of its own).
    pub fn locate(&self, f: &OwnedFrozenValue, e: Error) -> Error {
        let name = function_name(f);
        let Some(at) = self.positions.get(&name) else {
            return e;
        };
        match e {
            Error::BadReturn(message) => Error::BadReturn(format!("{at}: in {name}: {message}")),
            Error::OverMemory { exceeded, at: None } => Error::OverMemory {
                exceeded,
                at: Some(format!("{at}: in {name}")),
            },
            Error::OverBudget { budget, at: None } => Error::OverBudget {
                budget,
                at: Some(format!("{at}: in {name}")),
            },
            other => other,
        }
    }

    /// Where the reconcile handler is defined, if known.
    pub fn reconcile_position(&self) -> Option<&str> {
        let f = self.reconcile.as_ref()?;
        self.positions.get(&function_name(f)).map(String::as_str)
    }
}

/// A function's name: Starlark shows a `def` as `file.star.name`.
fn function_name(f: &OwnedFrozenValue) -> String {
    let shown = f.value().to_str();
    let plain = shown.split('(').next().unwrap_or_default();
    plain.rsplit('.').next().unwrap_or_default().to_owned()
}

/// An argument to a handler.
pub enum Arg<'a> {
    Str(&'a str),
    Obj(&'a Json),
}

/// Runs `f(args...)` on the calling (non-async) thread with a fresh heap.
///
/// `decode` turns the returned Starlark value into a Rust value while the heap is
/// still alive. The call is cancelled when `budget` runs out or `stop` is set.
///
/// # Errors
/// The handler's error (rendered with its traceback), a budget overrun, or whatever
/// `decode` rejects.
pub fn call<T>(
    host: &Host,
    f: &OwnedFrozenValue,
    args: &[Arg],
    budget: Duration,
    stop: &Cancel,
    decode: impl for<'v> FnOnce(Value<'v>) -> Result<T>,
) -> Result<T> {
    // A call made inside another (a `k8s.testing` reconcile inside a `kite test` test)
    // ends with the outer one's budget too, and stops when it is stopped.
    let outer = budget::current();
    let mut deadline = Instant::now() + budget;
    let mut stop = stop.clone();
    let mut budget = budget;
    if let Some(outer) = outer {
        if outer.deadline < deadline {
            deadline = outer.deadline;
            budget = deadline.saturating_duration_since(Instant::now());
        }
        if let Some(outer_stop) = outer.stop {
            let inner = stop;
            stop = Cancel::new(move || inner.is_set() || outer_stop.is_set());
        }
    }
    let stop = &stop;
    let over_budget = AtomicBool::new(false);
    let over_memory = AtomicBool::new(false);
    let scope = Budget {
        deadline,
        stop: Some(stop.clone()),
    };
    let run = || {
        Module::with_temp_heap(|module| {
            let heap = module.heap();
            let mut eval = Evaluator::new(&module);
            eval.extra = Some(host);
            eval.set_print_handler(&host.printer);
            // Only fails when already set, which it is not on a new evaluator.
            let _ = eval.set_max_heap_size(host.limits.memory);
            eval.set_check_cancelled(Box::new(|| {
                let late = Instant::now() >= deadline;
                if late {
                    over_budget.store(true, Ordering::Relaxed);
                }
                if crate::script::memory::exhausted() {
                    over_memory.store(true, Ordering::Relaxed);
                    return true;
                }
                // A builtin's narrower budget (`budget::within`) cancels too.
                late || stop.is_set() || budget::check().is_err()
            }));
            module.frozen_heap().add_reference(f.owner());
            // SAFETY: the module's frozen heap now references `f`'s heap, so the frozen
            // value stays alive for as long as this module can reach it.
            let func = unsafe { f.unchecked_frozen_value() }.to_value();
            let values: Vec<Value> = args
                .iter()
                .map(|a| match a {
                    Arg::Str(s) => heap.alloc(*s),
                    Arg::Obj(o) => to_starlark(heap, o),
                })
                .collect();
            match eval.eval_function(func, &values, &[]) {
                Ok(v) => decode(v),
                Err(e) if over_memory.load(Ordering::Relaxed) => Err(Error::OverMemory {
                    exceeded: crate::script::memory::Exceeded {
                        limit: host.limits.memory,
                    },
                    at: crate::script::run::position(&host.own_names(&e.to_string())),
                }),
                Err(e) if over_budget.load(Ordering::Relaxed) => Err(Error::OverBudget {
                    budget: crate::duration::format(budget),
                    at: crate::script::run::position(&host.own_names(&e.to_string())),
                }),
                Err(_) if stop.is_set() => Err(Error::Stopped),
                Err(e) => Err(Error::Raised(host.own_names(&e.to_string()).into_owned())),
            }
        })
    };
    crate::script::memory::guard_with(host.limits.memory, host.limits.overrun, || {
        budget::scope(scope, run)
    })
    .unwrap_or_else(|exceeded| {
        crate::script::memory::release();
        Err(Error::OverMemory { exceeded, at: None })
    })
}

/// Decodes what reconcile and finalize may return: None, a duration string, or a list
/// of objects.
///
/// # Errors
/// Any other value, a bad duration, or a child that is not an object.
pub fn decode_outcome(v: Value) -> Result<Outcome> {
    if v.is_none() {
        return Ok(Outcome::Done);
    }
    if let Some(s) = v.unpack_str() {
        return crate::duration::parse(s)
            .map(Outcome::RequeueAfter)
            .map_err(|e| Error::BadReturn(format!("handler returned {s:?}: {e}")));
    }
    if matches!(v.get_type(), "list" | "tuple") {
        let docs = crate::k8s::manifest::manifests(v).map_err(|e| {
            Error::BadReturn(format!(
                "handler returned a list that is not of objects: {e}"
            ))
        })?;
        return Ok(Outcome::Children(docs));
    }
    Err(Error::BadReturn(format!(
        "handler returned a {}; expected None, a duration string like \"30s\", or a list of objects",
        v.get_type()
    )))
}

/// Decodes a predicate's answer.
///
/// # Errors
/// Anything but True or False.
pub fn decode_bool(v: Value) -> Result<bool> {
    v.unpack_bool().ok_or_else(|| {
        Error::BadReturn(format!(
            "predicate returned a {}; expected True or False",
            v.get_type()
        ))
    })
}

/// Decodes what a watch_related map function returns: the primaries to requeue, as
/// AttrDicts/dicts with name (and namespace), "ns/name" or "name" strings, or None.
///
/// # Errors
/// An item that names no object.
pub fn decode_refs(v: Value) -> Result<Vec<(Option<String>, String)>> {
    if v.is_none() {
        return Ok(Vec::new());
    }
    let one = |item: Value| -> Result<(Option<String>, String)> {
        if crate::script::memory::exhausted() {
            return Err(Error::BadReturn(
                "map_func's result passed the script's memory limit".into(),
            ));
        }
        if let Some(s) = item.unpack_str() {
            // Longer than a namespace and a name can be: not copied (the caller
            // ignores an empty name as no object's).
            if s.len() > 63 + 1 + 253 {
                return Ok((None, String::new()));
            }
            return Ok(match s.split_once('/') {
                Some((ns, name)) => (Some(ns.to_owned()), name.to_owned()),
                None => (None, s.to_owned()),
            });
        }
        let json = from_starlark(item).map_err(|e| Error::BadReturn(e.to_string()))?;
        let meta = if json.get("metadata").is_some() {
            &json["metadata"]
        } else {
            &json
        };
        let name = meta["name"]
            .as_str()
            .ok_or_else(|| Error::BadReturn(format!("map_func returned {json} with no name")))?;
        Ok((
            meta["namespace"].as_str().map(str::to_owned),
            name.to_owned(),
        ))
    };
    match ListRef::from_value(v) {
        Some(list) => list.iter().map(one).collect(),
        None => Ok(vec![one(v)?]),
    }
}

/// The value kept under `name` in a frozen module's extra value (what [`stash`] and
/// `stash_entries` put there).
pub fn stashed(extra: &OwnedFrozenValue, name: &str) -> Option<OwnedFrozenValue> {
    extra
        .try_map(|v| {
            DictRef::from_value(v.to_value())
                .and_then(|d| d.get_str(name))
                .and_then(starlark::values::Value::unpack_frozen)
                .ok_or(())
        })
        .ok()
}
