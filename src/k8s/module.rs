//! The `k8s` Starlark namespace as a value: `k8s`, `k8s.config(...)`, `k8s.obj`, `try_*`,
//! and what every call shares (session, limits, dry run). The calls are in
//! `calls`.
//!
//! `k8s` itself is a client value with the default session; `k8s.config(...)` returns
//! another client value whose methods are the same functions.

#![expect(
    unsafe_code,
    reason = "ProvidesStaticType for a generic and a borrowed type, which the derive cannot write; and the derive's own unsafe impl"
)]

use std::collections::BTreeMap;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use allocative::Allocative;
use serde_json::Value as Json;
use starlark::any::ProvidesStaticType;
use starlark::docs::DocMember;
use starlark::environment::{GlobalsBuilder, Methods, MethodsBuilder, Module};
use starlark::eval::Evaluator;
use starlark::values::none::NoneOr;
use starlark::values::{
    AllocFrozenValue, AllocValue, FrozenHeap, FrozenValue, Heap, NoSerialize, StarlarkValue, Value,
    starlark_value,
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

/// The fields every client value has, whatever its edition.
#[derive(Debug, Clone, Default)]
pub struct Client {
    pub(super) key: SessionKey,
    /// True for the predeclared `k8s` module, which also carries `obj`.
    pub(super) is_module: bool,
    /// The deadline of each call that gives no `timeout=`: `k8s.config(timeout=)`.
    pub(super) timeout: Option<Duration>,
}

/// A namespace of the `k8s` module value: its name and its (static) value.
pub type ModuleAttr = (&'static str, fn() -> FrozenValue);

/// Which functions a client value carries. Each edition is its own type, composed at
/// the top of the crate (`crate::library`): `kite run`'s has every function, the
/// operator's only its allowlist. The method table is fixed by the type, so no order
/// of first uses can change what a script sees.
pub trait Edition: 'static + Send + Sync {
    /// Every method of this edition's clients (calls, `control`, ...).
    fn methods() -> &'static Methods;
    /// Namespaces of the `k8s` module value beyond `obj` (`k8s.testing`).
    fn module_attrs() -> &'static [ModuleAttr];
}

/// A cluster client as scripts see it: `k8s` (default settings) or `k8s.config(...)`,
/// with the methods of its edition `E`.
#[derive(NoSerialize)]
pub struct K8sClient<E: Edition> {
    client: Client,
    edition: PhantomData<E>,
}

impl<E: Edition> Allocative for K8sClient<E> {
    fn visit<'a, 'b: 'a>(&self, visitor: &'a mut allocative::Visitor<'b>) {
        visitor.enter_self_sized::<Self>().exit();
    }
}

// SAFETY: `K8sClient<E>` holds no references (`E: 'static`), so it is its own static type.
unsafe impl<E: Edition> ProvidesStaticType<'_> for K8sClient<E> {
    type StaticType = K8sClient<E>;
}

/// What the calls need of a client value of any edition.
pub trait ClientValue {
    fn client(&self) -> &Client;
    /// A client of the same edition with other settings (`k8s.config`, `k8s.fake`).
    fn alloc_like<'v>(&self, client: Client, heap: Heap<'v>) -> Value<'v>;
}

// SAFETY: a `&dyn ClientValue` borrowed for 'v is the static trait object's reference.
unsafe impl<'v> ProvidesStaticType<'v> for &'v dyn ClientValue {
    type StaticType = &'static dyn ClientValue;
}

impl<E: Edition> ClientValue for K8sClient<E> {
    fn client(&self) -> &Client {
        &self.client
    }

    fn alloc_like<'v>(&self, client: Client, heap: Heap<'v>) -> Value<'v> {
        heap.alloc(K8sClient::<E>::new(client))
    }
}

impl<E: Edition> K8sClient<E> {
    pub fn new(client: Client) -> Self {
        K8sClient {
            client,
            edition: PhantomData,
        }
    }

    /// The predeclared `k8s` module value.
    pub fn module() -> Self {
        K8sClient::new(Client {
            is_module: true,
            ..Client::default()
        })
    }
}

impl<E: Edition> fmt::Debug for K8sClient<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.client.fmt(f)
    }
}

impl<E: Edition> fmt::Display for K8sClient<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.client.is_module {
            write!(f, "<module k8s>")
        } else {
            write!(f, "<k8s client {:?}>", self.client.key)
        }
    }
}

impl<'v, E: Edition> AllocValue<'v> for K8sClient<E> {
    fn alloc_value(self, heap: Heap<'v>) -> Value<'v> {
        heap.alloc_simple(self)
    }
}

impl<E: Edition> AllocFrozenValue for K8sClient<E> {
    fn alloc_frozen_value(self, heap: &FrozenHeap) -> FrozenValue {
        heap.alloc_simple(self)
    }
}

/// The client's own functions: the cluster calls that every edition may offer.
/// Pod I/O that reaches this machine (`port_forward`'s listener, `cp`'s files) is apart,
/// in [`local_methods`].
pub fn client_methods(builder: &mut MethodsBuilder) {
    calls::client_methods(builder);
    super::pod_calls::pod_methods(builder);
    super::workload_calls::workload_methods(builder);
    super::node_calls::node_methods(builder);
}

/// `port_forward` (a listener on this machine) and `cp` (this machine's files).
pub fn local_methods(builder: &mut MethodsBuilder) {
    super::pod_calls::local_methods(builder);
}

/// The calls every `try_` form is made from: the client's own and the local ones.
fn all_calls(builder: &mut MethodsBuilder) {
    client_methods(builder);
    local_methods(builder);
}

starlark::methods_static!(CALL_METHODS = all_calls);

#[starlark_value(type = "k8s.client")]
impl<'v, E: Edition> StarlarkValue<'v> for K8sClient<E> {
    type Canonical = Self;

    fn get_methods() -> Option<&'static Methods> {
        Some(E::methods())
    }

    fn provide(&'v self, demand: &mut starlark::values::Demand<'_, 'v>) {
        demand.provide_value::<&dyn ClientValue>(self);
    }

    fn get_attr(&self, attribute: &str, heap: Heap<'v>) -> Option<Value<'v>> {
        if self.client.is_module && attribute == "obj" {
            return Some(super::obj::obj_namespace().to_value());
        }
        if self.client.is_module
            && let Some((_, f)) = E::module_attrs().iter().find(|(n, _)| *n == attribute)
        {
            return Some(f().to_value());
        }
        let inner = attribute.strip_prefix("try_")?;
        // Only the calls this edition has, and only calls (not `control`), have a
        // `try_` form.
        if !method_names().iter().any(|n| n == inner) {
            return None;
        }
        // Binding through the value's own attribute lookup finds the method table, and
        // finds nothing for a call this edition does not have.
        let bound = heap
            .alloc(K8sClient::<E>::new(self.client.clone()))
            .get_attr(inner, heap)
            .ok()
            .flatten()?;
        Some(TryCall::alloc(heap, inner, bound))
    }

    fn dir_attr(&self) -> Vec<String> {
        let own: Vec<String> = E::methods()
            .documentation(starlark::typing::Ty::any())
            .members
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        let mut names: Vec<String> = method_names()
            .iter()
            .filter(|n| own.contains(n))
            .map(|n| format!("try_{n}"))
            .collect();
        if self.client.is_module {
            names.push("obj".into());
            names.extend(E::module_attrs().iter().map(|(n, _)| (*n).to_owned()));
        }
        names
    }
}

/// Adds the signatures of the client's own functions and of the `k8s.obj` builders,
/// for `kite check`.
pub fn signatures(known: &mut BTreeMap<String, Signature>) {
    let docs = CALL_METHODS
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
        let doc = CALL_METHODS
            .methods()
            .documentation(starlark::typing::Ty::any());
        doc.members.into_iter().map(|(name, _)| name).collect()
    })
}

/// Every function of `kite run`'s client, `control`, `webhook` and `fake` included
/// (for the inference coverage test; the layers above add those three).
#[cfg(test)]
pub fn all_method_names() -> Vec<String> {
    let mut names = method_names().to_vec();
    names.extend(["control", "webhook", "fake"].map(str::to_owned));
    names
}

/// Registers the predeclared `k8s` global, a client of edition `E`.
pub fn register<E: Edition>(builder: &mut GlobalsBuilder) {
    builder.set("k8s", K8sClient::<E>::module());
}

/// Sets `k8s` in a module, for `load("k8s", "k8s")`.
pub fn loadable<E: Edition>(module: &Module) {
    module.set("k8s", module.heap().alloc(K8sClient::<E>::module()));
}

/// The client fields of a client value of any edition.
pub fn client_of(value: Value<'_>) -> Option<&Client> {
    value
        .request_value::<&dyn ClientValue>()
        .map(ClientValue::client)
}

/// A client of `like`'s edition for a session registered under `key` (`k8s.fake(...)`'s
/// clients).
pub fn client_like<'v>(
    like: Value<'v>,
    key: SessionKey,
    heap: Heap<'v>,
) -> anyhow::Result<Value<'v>> {
    let this = like
        .request_value::<&dyn ClientValue>()
        .ok_or_else(|| anyhow::anyhow!("not called on a k8s client"))?;
    Ok(this.alloc_like(
        Client {
            key,
            is_module: false,
            timeout: None,
        },
        heap,
    ))
}

/// The session a client value stands for: `k8s`'s default, or a `k8s.config(...)`'s.
pub fn session_key(client: Value) -> SessionKey {
    client_of(client).map(|c| c.key.clone()).unwrap_or_default()
}

/// Everything one call needs: the session, the host, and the call's name for messages.
pub(super) struct Call<'a> {
    pub(super) name: &'static str,
    pub(super) host: &'a Host,
    pub(super) session: Arc<Session>,
    pub(super) timeout: Duration,
    /// A fake cluster (`k8s.fake`), in memory.
    pub(super) offline: bool,
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
        // A call from a script already over its memory budget does not start: it would
        // only add a response to what must be given back.
        if crate::script::memory::exhausted() {
            anyhow::bail!("{full}: the script is over its memory limit");
        }
        let client =
            client_of(this).ok_or_else(|| anyhow::anyhow!("{full}: not called on a k8s client"))?;
        // A fake cluster (`k8s.fake`) is in memory: using it reaches nothing.
        let offline = host.ext::<SessionCell>().is_offline(&client.key);
        if !offline {
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
            offline,
        })
    }

    /// Runs an operation on the async runtime with this call's deadline; errors are
    /// prefixed with the call's name, e.g. `k8s.get: pods "x" not found (404)`.
    pub(super) fn run<T>(&self, fut: impl Future<Output = ops::Result<T>>) -> anyhow::Result<T> {
        let fut = ops::with_timeout(self.timeout, fut);
        // On a handler thread with a runtime of its own, the call runs there, on the
        // thread's own connection (`super::local`): no hand-off to the shared runtime.
        let own = self.session.own_config().and_then(super::local::prepare);
        let out = match own {
            Some(rt) => super::local::block_on(&rt, fut),
            None => crate::script::budget::block_on(&self.host.runtime, fut),
        };
        out.map_err(|e| anyhow::anyhow!("k8s.{}: {e}", self.name))?
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

    struct Bare;
    impl Edition for Bare {
        fn methods() -> &'static Methods {
            CALL_METHODS.methods()
        }
        fn module_attrs() -> &'static [ModuleAttr] {
            &[]
        }
    }

    /// The deadline a `k8s.config(...)` snippet's client carries, or the error.
    fn config_timeout(code: &str) -> Result<Option<Duration>, String> {
        let globals = GlobalsBuilder::standard().with(register::<Bare>).build();
        let ast = AstModule::parse("t.star", code.to_owned(), &Dialect::Extended)
            .map_err(|e| e.to_string())?;
        Module::with_temp_heap(|module| {
            let mut eval = Evaluator::new(&module);
            let v = eval.eval_module(ast, &globals).map_err(|e| e.to_string())?;
            Ok(client_of(v).and_then(|c| c.timeout))
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
