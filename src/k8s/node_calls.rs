//! The `k8s` client's node and metrics functions, with upstream's names and arguments:
//! `drain`, `cordon`, `uncordon`, `taint`, `untaint`, `top_nodes` and `top_pods`.

use serde_json::Value as Json;
use starlark::environment::MethodsBuilder;
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::list::AllocList;
use starlark::values::none::NoneOr;
use starlark::values::{Heap, Value};

use super::drain::{self, DrainOptions};
use super::module::{Call, opt};
use super::node::{self, Taint, TaintMatch};
use super::top;
use super::workload_calls::run_waiting;
use crate::script::json::to_starlark;

fn node_result<'v>(call: &Call<'_>, heap: Heap<'v>, obj: &Json) -> Value<'v> {
    call.dry_run_note("patched", obj);
    call.wrote(obj);
    to_starlark(heap, obj)
}

fn rows<'v>(heap: Heap<'v>, rows: &[Json]) -> Value<'v> {
    heap.alloc(AllocList(rows.iter().map(|r| to_starlark(heap, r))))
}

#[starlark_module]
pub(super) fn node_methods(builder: &mut MethodsBuilder) {
    /// Cordons `node` and evicts its pods (through the eviction API, so
    /// PodDisruptionBudgets hold), waiting up to `timeout` (default 3m) for them to go.
    /// Returns `{"node", "evicted", "skipped", "errors"}`.
    fn drain<'v>(
        #[starlark(this)] this: Value<'v>,
        node: &str,
        #[starlark(require = named, default = false)] force: bool,
        #[starlark(require = named, default = false)] ignore_daemonsets: bool,
        #[starlark(require = named, default = NoneOr::None)] grace_period: NoneOr<i32>,
        #[starlark(require = named, default = "3m")] timeout: &str,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let grace_period = match grace_period.into_option() {
            Some(g) => Some(u32::try_from(g).map_err(|_| {
                anyhow::anyhow!("k8s.drain: grace_period must not be negative, got {g}")
            })?),
            None => None,
        };
        let call = Call::new(eval, this, "drain", NoneOr::Other(timeout))?;
        let options = DrainOptions {
            force,
            ignore_daemonsets,
            grace_period,
        };
        let out = run_waiting(
            &call,
            drain::drain(&call.session, node, options, call.timeout),
        )?;
        Ok(to_starlark(eval.heap(), &out))
    }

    /// Marks `node` unschedulable; returns the node.
    fn cordon<'v>(
        #[starlark(this)] this: Value<'v>,
        node: &str,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let call = Call::new(eval, this, "cordon", timeout)?;
        let out = call.run(node::set_unschedulable(&call.session, node, true))?;
        Ok(node_result(&call, eval.heap(), &out))
    }

    /// Makes `node` schedulable again; returns the node.
    fn uncordon<'v>(
        #[starlark(this)] this: Value<'v>,
        node: &str,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let call = Call::new(eval, this, "uncordon", timeout)?;
        let out = call.run(node::set_unschedulable(&call.session, node, false))?;
        Ok(node_result(&call, eval.heap(), &out))
    }

    /// Adds a taint (`effect` defaults to NoSchedule; `key` may be `key=value:Effect`);
    /// one with the same key and effect is replaced. Returns the node.
    fn taint<'v>(
        #[starlark(this)] this: Value<'v>,
        node: &str,
        key: &str,
        #[starlark(require = named, default = "")] value: &str,
        #[starlark(require = named, default = "")] effect: &str,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let t = Taint::parse(key, value, effect).map_err(|e| anyhow::anyhow!("k8s.taint: {e}"))?;
        let call = Call::new(eval, this, "taint", timeout)?;
        let out = call.run(node::taint(&call.session, node, &t))?;
        Ok(node_result(&call, eval.heap(), &out))
    }

    /// Removes the taints with `key` (`key:Effect` for one effect); returns the node.
    fn untaint<'v>(
        #[starlark(this)] this: Value<'v>,
        node: &str,
        key: &str,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let m = TaintMatch::parse(key).map_err(|e| anyhow::anyhow!("k8s.untaint: {e}"))?;
        let call = Call::new(eval, this, "untaint", timeout)?;
        let out = call.run(node::untaint(&call.session, node, &m))?;
        Ok(node_result(&call, eval.heap(), &out))
    }

    /// Per node: name, capacity, allocatable; with metrics-server also cpu, memory,
    /// cpu_millicores, memory_bytes, cpu_percent, memory_percent.
    fn top_nodes<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let call = Call::new(eval, this, "top_nodes", timeout)?;
        let out = call.run(top::nodes(&call.session))?;
        Ok(rows(eval.heap(), &out))
    }

    /// Per pod in `namespace` ("*": all): name, namespace, status, cpu_request,
    /// memory_request; with metrics-server also cpu, memory, cpu_millicores,
    /// memory_bytes. `sort_by` "cpu" or "memory".
    fn top_pods<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = named, default = NoneOr::None)] namespace: NoneOr<&str>,
        #[starlark(require = named, default = "")] sort_by: &str,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let call = Call::new(eval, this, "top_pods", timeout)?;
        let ns = opt(namespace)
            .filter(|n| !n.is_empty())
            .unwrap_or(&call.session.namespace)
            .to_owned();
        let out = call.run(top::pods(&call.session, &ns, sort_by))?;
        Ok(rows(eval.heap(), &out))
    }
}
