//! `k8s.testing.controller(script, vars = {}, cluster = fake)`: a controller script
//! loaded without its loop, and the value a test drives it with: `reconcile`, `delete`,
//! `run_until_idle` and `advance`.

#![expect(
    unsafe_code,
    reason = "derive(ProvidesStaticType) writes starlark's unsafe impl; no unsafe code of ours"
)]

use std::fmt;
use std::sync::Arc;

use allocative::Allocative;
use serde_json::Value as Json;
use starlark::any::ProvidesStaticType;
use starlark::collections::SmallMap;
use starlark::environment::{GlobalsBuilder, Methods, MethodsBuilder};
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::none::NoneOr;
use starlark::values::{Heap, NoSerialize, StarlarkValue, Value, starlark_value};

use super::driver::{Driver, locate};
use super::report::report;
use crate::script::host::Host;

/// The default cap of `run_until_idle`: far beyond what a level-based controller needs
/// to settle, so hitting it means a loop.
const MAX_STEPS: i32 = 1000;

/// A loaded controller, as a test holds it.
#[derive(ProvidesStaticType, NoSerialize, Allocative)]
pub struct TestController {
    #[allocative(skip)]
    driver: Arc<Driver>,
}

impl fmt::Debug for TestController {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TestController({})", self.driver.script)
    }
}

impl fmt::Display for TestController {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "<k8s.testing.controller {} for {}>",
            self.driver.script,
            self.driver.manual.kind()
        )
    }
}

starlark::starlark_simple_value!(TestController);

starlark::methods_static!(CONTROLLER_METHODS = controller_methods);

#[expect(
    clippy::elidable_lifetime_names,
    reason = "the starlark_value macro names the lifetime"
)]
#[starlark_value(type = "k8s.testing.controller")]
impl<'v> StarlarkValue<'v> for TestController {
    fn get_methods() -> Option<&'static Methods> {
        Some(CONTROLLER_METHODS.methods())
    }
}

/// The `k8s.testing` namespace.
#[starlark_module]
pub(super) fn testing_functions(builder: &mut GlobalsBuilder) {
    /// Loads a controller script against a fake cluster (`k8s.fake(...)`) without
    /// running its loop: its top level runs with `vars`, `k8s.control(...)` is
    /// recorded, and the informers list the fake cluster. Drive it with
    /// `reconcile`, `delete`, `run_until_idle` and `advance`. A relative `script` is
    /// found beside the test file first.
    fn controller<'v>(
        #[starlark(require = pos)] script: &str,
        #[starlark(require = named)] cluster: Value<'v>,
        #[starlark(require = named, default = NoneOr::None)] vars: NoneOr<
            SmallMap<String, Value<'v>>,
        >,
        #[starlark(require = named, default = NoneOr::None)] namespace: NoneOr<&str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<TestController> {
        let host = Host::of(eval)?;
        let name = "k8s.testing.controller";
        let fake = crate::fake_cluster::builtin::cluster_of(host, cluster).ok_or_else(|| {
            anyhow::anyhow!(
                "{name}: cluster must be a fake cluster from k8s.fake(...), got {cluster}"
            )
        })?;
        let caller = eval
            .call_stack_top_location()
            .map(|l| l.file.filename().to_owned());
        let path = locate(script, caller.as_deref()).map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
        let vars = vars
            .into_option()
            .unwrap_or_default()
            .into_iter()
            .map(|(k, v)| {
                let text = v.unpack_str().map_or_else(|| v.to_str(), str::to_owned);
                (k, text)
            })
            .collect();
        let ns = namespace.into_option().unwrap_or("default");
        let driver = Driver::load(&path, vars, fake, ns, host)
            .map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
        Ok(TestController {
            driver: Arc::new(driver),
        })
    }
}

/// `k8s.testing.ready(cluster, kind, name)`, beside `controller` in the namespace.
#[starlark_module]
pub(super) fn testing_ready(builder: &mut GlobalsBuilder) {
    /// Writes, in a fake cluster, the status the cluster's own controllers would
    /// report once a workload is up (a Deployment's replicas all available, a Pod
    /// Running and Ready, a Job complete, otherwise a Ready condition): no controllers
    /// run in a fake cluster. Returns the object as written.
    fn ready<'v>(
        #[starlark(require = pos)] cluster: Value<'v>,
        #[starlark(require = pos)] kind: &str,
        #[starlark(require = pos)] name: &str,
        #[starlark(require = named, default = NoneOr::None)] namespace: NoneOr<&str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let host = Host::of(eval)?;
        let fake = crate::fake_cluster::builtin::cluster_of(host, cluster).ok_or_else(|| {
            anyhow::anyhow!("k8s.testing.ready: cluster must be a fake cluster from k8s.fake(...), got {cluster}")
        })?;
        let ns = namespace.into_option().unwrap_or("default");
        let written = crate::script::budget::block_on(
            &host.runtime,
            super::rollout::ready(&fake, kind, name, ns),
        )
        .map_err(|e| anyhow::anyhow!("k8s.testing.ready: {e}"))?
        .map_err(|e| anyhow::anyhow!("k8s.testing.ready: {e}"))?;
        Ok(crate::script::json::to_starlark(eval.heap(), &written))
    }
}

#[starlark_module]
fn controller_methods(builder: &mut MethodsBuilder) {
    /// Reconciles one object now, through the runtime's own path (finalizer,
    /// handler, children by server-side apply, pruning, the Ready condition, events),
    /// and returns what happened: `key`, `trigger`, `requeue_after`, `error`,
    /// `traceback`, `retry_in`, `writes` and `events`. `obj` is a name,
    /// `namespace/name`, or a manifest (created in the fake cluster when missing).
    fn reconcile<'v>(
        this: &TestController,
        #[starlark(require = pos)] obj: Value<'v>,
        #[starlark(require = named, default = NoneOr::None)] namespace: NoneOr<&str>,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        let d = &this.driver;
        let (ns, name) = target(d, obj, namespace.into_option(), "reconcile")?;
        let seq = d.fake.write_seq();
        d.host.printer.take();
        let step = d
            .reconcile(&ns, &name)
            .map_err(|e| anyhow::anyhow!("reconcile: {e}"))?
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "reconcile: no {} {} in the fake cluster",
                    d.manual.kind(),
                    shown(&ns, &name)
                )
            })?;
        let writes = d.fake.writes_since(seq);
        let output = d.host.printer.take();
        Ok(crate::script::json::to_starlark(
            heap,
            &report(&step, &writes, output),
        ))
    }

    /// Deletes an object in the fake cluster and runs what the runtime runs for
    /// that: `finalize` and the finalizer's removal, or the delete handlers. Returns
    /// the reports of the reconciles it caused, in order.
    fn delete<'v>(
        this: &TestController,
        #[starlark(require = pos)] obj: Value<'v>,
        #[starlark(require = named, default = NoneOr::None)] namespace: NoneOr<&str>,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        let d = &this.driver;
        let (ns, name) = target(d, obj, namespace.into_option(), "delete")?;
        d.delete(&ns, &name)
            .map_err(|e| anyhow::anyhow!("delete: {e}"))?;
        drain(d, MAX_STEPS, heap).map_err(|e| anyhow::anyhow!("delete: {e}"))
    }

    /// Processes every key that is ready, and the work their writes cause through
    /// the watches, until nothing is left; requeues due later wait for `advance`.
    /// Returns the reports, in order.
    fn run_until_idle<'v>(
        this: &TestController,
        #[starlark(require = named, default = MAX_STEPS)] max_reconciles: i32,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        drain(&this.driver, max_reconciles, heap)
            .map_err(|e| anyhow::anyhow!("run_until_idle: {e}"))
    }

    /// Moves the virtual clock forward by a duration (`"30s"`, `"5m"`): requeues,
    /// retries, polls and resyncs that come due run, then everything they cause.
    /// Returns the reports, in order.
    fn advance<'v>(
        this: &TestController,
        #[starlark(require = pos)] duration: &str,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        let by = crate::duration::parse(duration).map_err(|e| anyhow::anyhow!("advance: {e}"))?;
        this.driver.manual.advance(by);
        drain(&this.driver, MAX_STEPS, heap).map_err(|e| anyhow::anyhow!("advance: {e}"))
    }

    /// How long until the next requeue or retry is due, as a duration string, or
    /// None when nothing waits.
    fn next_requeue<'v>(this: &TestController) -> anyhow::Result<NoneOr<String>> {
        // Whole seconds: the real time spent since the requeue is not the test's business.
        Ok(match this.driver.manual.next_due_in() {
            Some(d) => NoneOr::Other(crate::duration::format(std::time::Duration::from_secs(
                d.as_millis().div_ceil(1000).try_into().unwrap_or(u64::MAX),
            ))),
            None => NoneOr::None,
        })
    }
}

fn drain<'v>(d: &Driver, max: i32, heap: Heap<'v>) -> anyhow::Result<Value<'v>> {
    let max = usize::try_from(max.max(1)).unwrap_or(1);
    let mut reports: Vec<Json> = Vec::new();
    d.run_until_idle(max, &mut |step, seq| {
        if !step.ran {
            return;
        }
        reports.push(report(
            &step,
            &d.fake.writes_since(seq),
            d.host.printer.take(),
        ));
    })?;
    Ok(crate::script::json::to_starlark(
        heap,
        &Json::Array(reports),
    ))
}

/// The namespace and name `obj` names; a manifest missing from the fake cluster is
/// created there first.
fn target(
    d: &Driver,
    obj: Value,
    namespace: Option<&str>,
    what: &str,
) -> anyhow::Result<(String, String)> {
    if let Some(name) = obj.unpack_str() {
        return Ok(d.key_of(namespace, name));
    }
    let json =
        crate::script::json::from_starlark(obj).map_err(|e| anyhow::anyhow!("{what}: {e}"))?;
    let Some(name) = json["metadata"]["name"].as_str() else {
        anyhow::bail!("{what}: expected a name or a manifest with metadata.name, got {obj}");
    };
    let ns = json["metadata"]["namespace"].as_str().or(namespace);
    let (ns, name) = d.key_of(ns, name);
    if d.manual.cached(&ns, &name).is_none() {
        let mut json = json.clone();
        if !ns.is_empty() {
            json["metadata"]["namespace"] = Json::from(ns.clone());
        }
        d.fake
            .seed(json)
            .map_err(|e| anyhow::anyhow!("{what}: creating {}: {e}", shown(&ns, &name)))?;
    }
    Ok((ns, name))
}

fn shown(ns: &str, name: &str) -> String {
    if ns.is_empty() {
        name.to_owned()
    } else {
        format!("{ns}/{name}")
    }
}

/// The signatures of `k8s.testing`'s functions, for `kite check`.
pub fn signatures(known: &mut std::collections::BTreeMap<String, crate::script::lint::Signature>) {
    known.insert(
        "k8s.testing.controller".to_owned(),
        crate::script::lint::Signature {
            positional: vec![("script".to_owned(), true)],
            named_only: vec![
                ("cluster".to_owned(), true),
                ("vars".to_owned(), false),
                ("namespace".to_owned(), false),
            ],
            ..Default::default()
        },
    );
    known.insert(
        "k8s.testing.ready".to_owned(),
        crate::script::lint::Signature {
            positional: ["cluster", "kind", "name"]
                .iter()
                .map(|p| ((*p).to_owned(), true))
                .collect(),
            named_only: vec![("namespace".to_owned(), false)],
            ..Default::default()
        },
    );
}
