//! The `k8s` Starlark namespace as a value: `k8s`, `k8s.config(...)`, `k8s.obj`, `try_*`,
//! and what every call shares (session, limits, dry run). The calls are in
//! `calls`.
//!
//! `k8s` itself is a client value with the default session; `k8s.config(...)` returns
//! another client value whose methods are the same functions.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use allocative::Allocative;
use serde_json::Value as Json;
use starlark::any::ProvidesStaticType;
use starlark::docs::DocMember;
use starlark::environment::{GlobalsBuilder, Methods, MethodsBuilder, Module};
use starlark::eval::Evaluator;
use starlark::values::none::NoneOr;
use starlark::values::{
    FrozenValue, Heap, NoSerialize, StarlarkValue, Value, ValueLike, starlark_value,
};

use super::calls;
use super::ops::{self};
use super::session::{KubeOptions, Session, SessionCell, SessionKey};
use super::try_call::TryCall;
use super::write_log::WriteLog;
use crate::script::host::Host;
use crate::script::lint::Signature;
use crate::script::permissions::Access;

/// The default deadline of one API call when the script gives no `timeout=`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// A cluster client as scripts see it: `k8s` (default settings) or `k8s.config(...)`.
#[derive(Debug, Clone, ProvidesStaticType, NoSerialize, Allocative)]
pub struct K8sClient {
    #[allocative(skip)]
    pub(super) key: SessionKey,
    /// True for the predeclared `k8s` module, which also carries `obj`.
    pub(super) is_module: bool,
    /// The deadline of each call that gives no `timeout=`: `k8s.config(timeout=)`.
    #[allocative(skip)]
    pub(super) timeout: Option<Duration>,
}

starlark::starlark_simple_value!(K8sClient);

impl fmt::Display for K8sClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_module {
            write!(f, "<module k8s>")
        } else {
            write!(f, "<k8s client {:?}>", self.key)
        }
    }
}

/// Every client function: the core calls and the pod I/O calls (`logs`, `exec`, ...).
fn client_methods(builder: &mut MethodsBuilder) {
    calls::client_methods(builder);
    super::pod_calls::pod_methods(builder);
    super::workload_calls::workload_methods(builder);
    super::node_calls::node_methods(builder);
}

starlark::methods_static!(CLIENT_METHODS = client_methods);

/// The client's methods with what the layers above add (`k8s.control`), fixed by the
/// first [`extend_methods`] or the first use.
static METHODS: OnceLock<Methods> = OnceLock::new();

/// Adds methods to every client value (the control layer adds `control`). The top of
/// the crate calls it once, before any script runs; later calls change nothing.
pub fn extend_methods(extra: fn(&mut MethodsBuilder)) {
    METHODS.get_or_init(|| {
        let mut builder = MethodsBuilder::new();
        client_methods(&mut builder);
        extra(&mut builder);
        builder.build()
    });
}

/// Namespaces of the `k8s` module that the layers above add (`k8s.testing`).
type ModuleAttrs = Vec<(&'static str, fn() -> FrozenValue)>;
static MODULE_ATTRS: OnceLock<ModuleAttrs> = OnceLock::new();

/// Adds namespaces to the `k8s` module value (`k8s.testing`). The top of the crate calls
/// it once, before any script runs; later calls change nothing.
pub fn extend_module(attrs: ModuleAttrs) {
    let _ = MODULE_ATTRS.set(attrs);
}

fn module_attr(name: &str) -> Option<FrozenValue> {
    MODULE_ATTRS
        .get()?
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, f)| f())
}

#[starlark_value(type = "k8s.client")]
impl<'v> StarlarkValue<'v> for K8sClient {
    fn get_methods() -> Option<&'static Methods> {
        Some(METHODS.get_or_init(|| {
            let mut builder = MethodsBuilder::new();
            client_methods(&mut builder);
            builder.build()
        }))
    }

    fn get_attr(&self, attribute: &str, heap: Heap<'v>) -> Option<Value<'v>> {
        if self.is_module && attribute == "obj" {
            return Some(super::obj::obj_namespace().to_value());
        }
        if self.is_module
            && let Some(v) = module_attr(attribute)
        {
            return Some(v.to_value());
        }
        let inner = attribute.strip_prefix("try_")?;
        if !method_names().iter().any(|n| n == inner) {
            return None;
        }
        // Binding through the value's own attribute lookup finds the method table.
        let bound = heap
            .alloc(self.clone())
            .get_attr(inner, heap)
            .ok()
            .flatten()?;
        Some(TryCall::alloc(heap, inner, bound))
    }

    fn dir_attr(&self) -> Vec<String> {
        let mut names: Vec<String> = method_names().iter().map(|n| format!("try_{n}")).collect();
        if self.is_module {
            names.push("obj".into());
            names.extend(
                MODULE_ATTRS
                    .get()
                    .into_iter()
                    .flatten()
                    .map(|(n, _)| (*n).to_owned()),
            );
        }
        names
    }
}

/// Adds the signatures of the client's own functions and of the `k8s.obj` builders,
/// for `kite check`.
pub fn signatures(known: &mut BTreeMap<String, Signature>) {
    let docs = CLIENT_METHODS
        .methods()
        .documentation(starlark::typing::Ty::any());
    for (name, member) in docs.members {
        if let DocMember::Function(f) = member {
            known.insert(format!("k8s.{name}"), Signature::from_docs(&f.params));
        }
    }
    for (name, positional, keywords) in super::obj::signatures() {
        known.insert(
            format!("k8s.obj.{name}"),
            Signature {
                positional: positional
                    .map(|p| (p.to_owned(), false))
                    .into_iter()
                    .collect(),
                kwargs: true,
                kwarg_names: Some(keywords.iter().map(|k| (*k).to_owned()).collect()),
                ..Default::default()
            },
        );
    }
}

/// The client's own functions, each also callable as `try_<name>`: read once from the
/// method table so a new function gets its `try_` form without a second list. Methods
/// the layers above add have no `try_` form.
fn method_names() -> &'static [String] {
    static NAMES: std::sync::OnceLock<Vec<String>> = std::sync::OnceLock::new();
    NAMES.get_or_init(|| {
        let doc = CLIENT_METHODS
            .methods()
            .documentation(starlark::typing::Ty::any());
        doc.members.into_iter().map(|(name, _)| name).collect()
    })
}

/// Registers the predeclared `k8s` global.
pub fn register(builder: &mut GlobalsBuilder) {
    builder.set(
        "k8s",
        K8sClient {
            key: SessionKey::default(),
            is_module: true,
            timeout: None,
        },
    );
}

/// Sets `k8s` in a module, for `load("k8s", "k8s")`.
pub fn loadable(module: &Module) {
    let value = K8sClient {
        key: SessionKey::default(),
        is_module: true,
        timeout: None,
    };
    module.set("k8s", module.heap().alloc(value));
}

/// A client value for a session registered under `key` (`k8s.fake(...)`'s clients).
pub fn client_value(key: SessionKey) -> K8sClient {
    K8sClient {
        key,
        is_module: false,
        timeout: None,
    }
}

/// The session a client value stands for: `k8s`'s default, or a `k8s.config(...)`'s.
pub fn session_key(client: Value) -> SessionKey {
    client
        .downcast_ref::<K8sClient>()
        .map(|c| c.key.clone())
        .unwrap_or_default()
}

/// Everything one call needs: the session, the host, and the call's name for messages.
pub(super) struct Call<'a> {
    pub(super) name: &'static str,
    pub(super) host: &'a Host,
    pub(super) session: Arc<Session>,
    pub(super) timeout: Duration,
}

impl<'a> Call<'a> {
    pub(super) fn new(
        eval: &Evaluator<'_, 'a, '_>,
        this: Value,
        name: &'static str,
        timeout: NoneOr<&str>,
    ) -> anyhow::Result<Self> {
        let host = Host::of(eval)?;
        let full = format!("k8s.{name}");
        let client = this
            .downcast_ref::<K8sClient>()
            .ok_or_else(|| anyhow::anyhow!("{full}: not called on a k8s client"))?;
        // A fake cluster (`k8s.fake`) is in memory: using it reaches nothing.
        if !host.ext::<SessionCell>().is_offline(&client.key) {
            host.allow(&full, Access::K8s)?;
        }
        let timeout = match timeout.into_option() {
            Some(t) => {
                crate::duration::parse(t).map_err(|e| anyhow::anyhow!("{full}: timeout: {e}"))?
            }
            None => client.timeout.unwrap_or(DEFAULT_TIMEOUT),
        };
        let session = host
            .ext::<SessionCell>()
            .get(&client.key, &host.ext::<KubeOptions>(), &host.runtime)
            .map_err(|e| anyhow::anyhow!("{full}: {e}"))?;
        Ok(Self {
            name,
            host,
            session,
            timeout,
        })
    }

    /// Runs an operation on the async runtime with this call's deadline; errors are
    /// prefixed with the call's name, e.g. `k8s.get: pods "x" not found (404)`.
    pub(super) fn run<T>(&self, fut: impl Future<Output = ops::Result<T>>) -> anyhow::Result<T> {
        crate::script::budget::block_on(&self.host.runtime, ops::with_timeout(self.timeout, fut))
            .map_err(|e| anyhow::anyhow!("k8s.{}: {e}", self.name))?
            .map_err(|e| anyhow::anyhow!("k8s.{}: {e}", self.name))
    }

    /// Remembers a write's result for self-echo suppression.
    pub(super) fn wrote(&self, obj: &Json) {
        if !self.session.dry_run {
            self.host.ext::<WriteLog>().record(obj);
        }
    }

    pub(super) fn dry_run_note(&self, verb: &str, obj: &Json) {
        if self.session.dry_run {
            let kind = obj["kind"].as_str().unwrap_or("object").to_lowercase();
            let name = obj["metadata"]["name"].as_str().unwrap_or("?");
            println!("{kind}/{name} {verb} (server dry run)");
        }
    }
}

pub(super) fn opt(v: NoneOr<&str>) -> Option<&str> {
    v.into_option()
}

#[cfg(test)]
mod tests {
    use starlark::environment::{GlobalsBuilder, Module};
    use starlark::eval::Evaluator;
    use starlark::syntax::{AstModule, Dialect};

    use super::*;

    /// The deadline a `k8s.config(...)` snippet's client carries, or the error.
    fn config_timeout(code: &str) -> Result<Option<Duration>, String> {
        let globals = GlobalsBuilder::standard().with(register).build();
        let ast = AstModule::parse("t.star", code.to_owned(), &Dialect::Extended)
            .map_err(|e| e.to_string())?;
        Module::with_temp_heap(|module| {
            let mut eval = Evaluator::new(&module);
            let v = eval.eval_module(ast, &globals).map_err(|e| e.to_string())?;
            Ok(v.downcast_ref::<K8sClient>().and_then(|c| c.timeout))
        })
    }

    #[test]
    fn config_timeout_is_kept_and_inherited() {
        assert_eq!(config_timeout("k8s.config()"), Ok(None));
        assert_eq!(config_timeout("k8s.config(timeout='')"), Ok(None));
        assert_eq!(
            config_timeout("k8s.config(timeout='30s').config(namespace='x')"),
            Ok(Some(Duration::from_secs(30)))
        );
        let e = config_timeout("k8s.config(timeout='soon')").unwrap_err();
        assert!(e.contains("k8s.config: timeout:"), "{e}");
    }
}
