//! The `k8s` Starlark namespace as a value: `k8s`, `k8s.config(...)`, `k8s.obj`, `try_*`,
//! and what every call shares (session, limits, dry run). The calls are in
//! `calls`.
//!
//! `k8s` itself is a client value with the default session; `k8s.config(...)` returns
//! another client value whose methods are the same functions.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use allocative::Allocative;
use serde_json::Value as Json;
use starlark::any::ProvidesStaticType;
use starlark::environment::{GlobalsBuilder, Methods};
use starlark::eval::Evaluator;
use starlark::values::none::NoneOr;
use starlark::values::{Heap, NoSerialize, StarlarkValue, Value, ValueLike, starlark_value};

use super::calls::client_methods;
use super::ops::{self};
use super::session::{Session, SessionKey};
use super::try_call::TryCall;
use crate::script::host::Host;
use crate::script::permissions::Access;

/// The message that unwinds a script after `k8s.control(...)`; never shown to users
/// unless control() was called where it cannot start a controller.
pub const CONTROL_STARTED: &str =
    "k8s.control() must be called from the script that `kite run` runs";

/// The default deadline of one API call when the script gives no `timeout=`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// A cluster client as scripts see it: `k8s` (default settings) or `k8s.config(...)`.
#[derive(Debug, Clone, ProvidesStaticType, NoSerialize, Allocative)]
pub struct K8sClient {
    #[allocative(skip)]
    pub(super) key: SessionKey,
    /// True for the predeclared `k8s` module, which also carries `obj` and `control`.
    pub(super) is_module: bool,
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

starlark::methods_static!(CLIENT_METHODS = client_methods);

#[starlark_value(type = "k8s.client")]
impl<'v> StarlarkValue<'v> for K8sClient {
    fn get_methods() -> Option<&'static Methods> {
        Some(CLIENT_METHODS.methods())
    }

    fn get_attr(&self, attribute: &str, heap: Heap<'v>) -> Option<Value<'v>> {
        if self.is_module && attribute == "obj" {
            return Some(super::obj::obj_namespace().to_value());
        }
        let inner = attribute.strip_prefix("try_").filter(|n| *n != "control")?;
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
        let mut names: Vec<String> = method_names()
            .iter()
            .filter(|n| *n != "control")
            .map(|n| format!("try_{n}"))
            .collect();
        if self.is_module {
            names.push("obj".into());
        }
        names
    }
}

/// The documentation of the client's functions (name, parameters), for `kite check`.
pub fn method_docs() -> starlark::docs::DocType {
    CLIENT_METHODS
        .methods()
        .documentation(starlark::typing::Ty::any())
}

/// The client's functions, each also callable as `try_<name>`: read once from the
/// method table so a new function gets its `try_` form without a second list.
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
        },
    );
}

/// The `k8s` module value, for `load("k8s", "k8s")`.
pub fn module_value() -> K8sClient {
    K8sClient {
        key: SessionKey::default(),
        is_module: true,
    }
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
        host.allow(&full, Access::K8s)?;
        let client = this
            .downcast_ref::<K8sClient>()
            .ok_or_else(|| anyhow::anyhow!("{full}: not called on a k8s client"))?;
        let timeout = match timeout.into_option() {
            Some(t) => {
                crate::duration::parse(t).map_err(|e| anyhow::anyhow!("{full}: timeout: {e}"))?
            }
            None => DEFAULT_TIMEOUT,
        };
        let session = host
            .k8s
            .get(&client.key, &host.kube, &host.runtime)
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
            self.host.writes.record(obj);
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

/// Refuses options beyond the host's limits (the operator's floors for hosted scripts).
pub(super) fn within_limits(
    spec: &crate::control::spec::ControlSpec,
    limits: &crate::script::host::Limits,
) -> anyhow::Result<()> {
    if spec.workers > limits.max_workers {
        anyhow::bail!(
            "workers = {} is more than {} limit of {}",
            spec.workers,
            limits.source,
            limits.max_workers
        );
    }
    for (what, period) in [
        ("poll", spec.poll),
        ("resync", spec.resync),
        ("backoff", Some(spec.backoff)),
    ] {
        if let Some(p) = period {
            limits.check_period(what, p)?;
        }
    }
    Ok(())
}

pub(super) fn opt(v: NoneOr<&str>) -> Option<&str> {
    v.into_option()
}
