//! The bodies of the `k8s` client's functions: `get`, `list`, `apply`, `patch`, `delete`,
//! `wait_for`, `watch`, `control`, and the rest. The client value is [`super::module`].
#![expect(
    clippy::too_many_arguments,
    reason = "keyword arguments map one-to-one onto parameters"
)]

use serde_json::{Value as Json, json};
use starlark::environment::MethodsBuilder;
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::none::NoneOr;
use starlark::values::{Heap, Value, list::AllocList};

use super::module::{Call, Client, ClientValue, opt};
use super::ops::{self, Target};
use super::session::SessionKey;
use super::{event, manifest, wait, watch};
use crate::script::json::{from_starlark, to_starlark};

#[starlark_module]
pub(super) fn client_methods(builder: &mut MethodsBuilder) {
    /// GET one object: `k8s.get("deploy", "web", namespace="default")`.
    fn get<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = pos)] kind: &str,
        #[starlark(require = pos)] name: &str,
        #[starlark(require = named, default = NoneOr::None)] namespace: NoneOr<&str>,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let call = Call::new(eval, this, "get", timeout)?;
        let obj = call.run(ops::get(&call.session, kind, name, opt(namespace)))?;
        Ok(to_starlark(eval.heap(), &obj))
    }

    /// LIST objects: `k8s.list("pods", namespace="x", labels="app=web", fields=...)`.
    /// `namespace="*"` lists across all namespaces.
    fn list<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = pos)] kind: &str,
        #[starlark(require = named, default = NoneOr::None)] namespace: NoneOr<&str>,
        #[starlark(require = named, default = NoneOr::None)] labels: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] fields: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let call = Call::new(eval, this, "list", timeout)?;
        let labels = selector(labels.into_option(), "labels")?;
        let fields = selector(fields.into_option(), "fields")?;
        let items = call.run(ops::list(
            &call.session,
            kind,
            opt(namespace),
            labels.as_deref(),
            fields.as_deref(),
        ))?;
        let heap = eval.heap();
        Ok(heap.alloc(AllocList(items.iter().map(|o| to_starlark(heap, o)))))
    }

    /// POST a manifest (dict, AttrDict, builder result or YAML); returns the created object.
    fn create<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = pos)] manifest: Value<'v>,
        #[starlark(require = named, default = NoneOr::None)] namespace: NoneOr<&str>,
        #[starlark(require = named, default = false)] dry_run: bool,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let call = Call::new(eval, this, "create", timeout)?;
        let docs = manifest::manifests(manifest).map_err(|e| anyhow::anyhow!("k8s.create: {e}"))?;
        let mut out = Vec::with_capacity(docs.len());
        for doc in &docs {
            let created = call.run(ops::create(&call.session, doc, opt(namespace), dry_run))?;
            call.dry_run_note("created", &created);
            call.wrote(&created);
            out.push(created);
        }
        Ok(one_or_list(
            eval.heap(),
            &out,
            docs.len() == 1 && !is_list(manifest),
        ))
    }

    /// Server-side apply of one manifest or many; returns the applied object(s).
    fn apply<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = pos)] manifest: Value<'v>,
        #[starlark(require = named, default = "starkite")] field_manager: &str,
        #[starlark(require = named, default = false)] force: bool,
        #[starlark(require = named, default = false)] dry_run: bool,
        #[starlark(require = named, default = NoneOr::None)] namespace: NoneOr<&str>,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let call = Call::new(eval, this, "apply", timeout)?;
        let docs = manifest::manifests(manifest).map_err(|e| anyhow::anyhow!("k8s.apply: {e}"))?;
        let mut out = Vec::with_capacity(docs.len());
        for doc in &docs {
            let applied = call.run(ops::apply(
                &call.session,
                doc,
                opt(namespace),
                field_manager,
                force,
                dry_run,
            ))?;
            call.dry_run_note("serverside-applied", &applied);
            call.wrote(&applied);
            out.push(applied);
        }
        Ok(one_or_list(
            eval.heap(),
            &out,
            docs.len() == 1 && !is_list(manifest),
        ))
    }

    /// DELETE one object. `propagation` is Background, Foreground or Orphan.
    fn delete<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = pos)] kind: &str,
        #[starlark(require = pos)] name: &str,
        #[starlark(require = named, default = NoneOr::None)] namespace: NoneOr<&str>,
        #[starlark(require = named, default = "Background")] propagation: &str,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<NoneOr<bool>> {
        let call = Call::new(eval, this, "delete", timeout)?;
        call.run(ops::delete(
            &call.session,
            kind,
            name,
            opt(namespace),
            propagation,
        ))?;
        if call.session.dry_run {
            println!("{kind}/{name} deleted (server dry run)");
        }
        Ok(NoneOr::None)
    }

    /// PATCH one object; `type` is merge, strategic or json.
    fn patch<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = pos)] kind: &str,
        #[starlark(require = pos)] name: &str,
        #[starlark(require = pos)] patch: Value<'v>,
        #[starlark(require = named, default = NoneOr::None)] namespace: NoneOr<&str>,
        #[starlark(require = named, default = "merge")] r#type: &str,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let call = Call::new(eval, this, "patch", timeout)?;
        let body = ops::patch_body(r#type, from_starlark(patch)?)
            .map_err(|e| anyhow::anyhow!("k8s.patch: {e}"))?;
        let out = call.run(async {
            let target = Target::resolve(&call.session, kind, opt(namespace)).await?;
            ops::patch(&call.session, &target, name, &body, false).await
        })?;
        call.dry_run_note("patched", &out);
        call.wrote(&out);
        Ok(to_starlark(eval.heap(), &out))
    }

    /// Sets labels on an object; a None value removes the label.
    fn label<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = pos)] kind: &str,
        #[starlark(require = pos)] name: &str,
        #[starlark(require = pos)] labels: Value<'v>,
        #[starlark(require = named, default = NoneOr::None)] namespace: NoneOr<&str>,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        meta_patch(
            eval, this, "label", "labels", kind, name, labels, namespace, timeout,
        )
    }

    /// Sets annotations on an object; a None value removes the annotation.
    fn annotate<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = pos)] kind: &str,
        #[starlark(require = pos)] name: &str,
        #[starlark(require = pos)] annotations: Value<'v>,
        #[starlark(require = named, default = NoneOr::None)] namespace: NoneOr<&str>,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        meta_patch(
            eval,
            this,
            "annotate",
            "annotations",
            kind,
            name,
            annotations,
            namespace,
            timeout,
        )
    }

    /// Merges `status` into the object's status subresource.
    fn status<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = pos)] obj: Value<'v>,
        #[starlark(require = pos)] status: Value<'v>,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let call = Call::new(eval, this, "status", timeout)?;
        let obj = from_starlark(obj)?;
        let body = json!({"status": from_starlark(status)?});
        let out = call.run(async {
            let (target, name) = ops::manifest_target(&call.session, &obj, None).await?;
            ops::patch(
                &call.session,
                &target,
                &name,
                &kube::api::Patch::Merge(body),
                true,
            )
            .await
        })?;
        call.wrote(&out);
        Ok(to_starlark(eval.heap(), &out))
    }

    /// Records an Event on `obj`; identical events are aggregated (count goes up).
    ///
    /// Returns at once with the Event as it is sent: it is written in the background,
    /// as client-go's recorder does, so a reconcile never waits for it. `wait = True`
    /// waits for the write and returns the Event the API server stored.
    ///
    /// # Errors
    /// A bad type, an empty reason or an object without kind or name, at once; with
    /// `wait = True`, also the API server's error.
    ///
    /// # Caveats
    /// Without `wait`, a write that fails is logged and counted
    /// (`kite_events_failed_total`), and a full queue drops the event
    /// (`kite_events_dropped_total`); the script does not see either.
    fn event<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = pos)] obj: Value<'v>,
        #[starlark(require = named)] reason: &str,
        #[starlark(require = named, default = "")] message: &str,
        #[starlark(require = named, default = "Normal")] r#type: &str,
        #[starlark(require = named, default = NoneOr::None)] namespace: NoneOr<&str>,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&str>,
        #[starlark(require = named, default = false)] wait: bool,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let call = Call::new(eval, this, "event", timeout)?;
        let obj = from_starlark(obj)?;
        let spec = event::EventSpec {
            reason,
            message,
            type_: r#type,
            namespace: opt(namespace),
        };
        let prepared = event::prepare(&call.session, &obj, &spec)
            .map_err(|e| anyhow::anyhow!("k8s.event: {e}"))?;
        // A fake cluster is in memory: written at once, so a test sees it right after.
        if wait || call.offline || call.session.immediate_events {
            let out = call.run(event::write(&call.session, &prepared, 1))?;
            return Ok(to_starlark(eval.heap(), &out));
        }
        let shown = prepared.body.clone();
        call.session.recorder(&call.host.runtime).record(prepared);
        Ok(to_starlark(eval.heap(), &shown))
    }

    /// Waits until `condition` holds: a status condition type such as "Available",
    /// "Ready", "Established" or "Complete"; "deleted"; or None (the object exists).
    /// Returns `{"ready": bool, "resource": obj or None, "message": str}`, as upstream;
    /// running out of `timeout` gives `ready` False rather than an error.
    fn wait_for<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = pos)] kind: &str,
        #[starlark(require = pos)] name: &str,
        #[starlark(require = named, default = NoneOr::None)] condition: NoneOr<&str>,
        #[starlark(require = named, default = NoneOr::None)] namespace: NoneOr<&str>,
        #[starlark(require = named, default = "60s")] timeout: &str,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let call = Call::new(eval, this, "wait_for", NoneOr::Other(timeout))?;
        let condition = wait::Condition::parse(opt(condition));
        // The wait itself owns the deadline; the outer one only guards against a hang.
        let inner = call.timeout;
        let out = crate::script::budget::block_on(&call.host.runtime, async {
            let target = Target::resolve(&call.session, kind, opt(namespace)).await?;
            wait::wait_for(&call.session, &target, name, &condition, inner).await
        });
        let out = out
            .map_err(|e| anyhow::anyhow!("k8s.wait_for: {e}"))?
            .map_err(|e| anyhow::anyhow!("k8s.wait_for: {e}"))?;
        Ok(to_starlark(eval.heap(), &out.to_json()))
    }

    /// Watches a kind. With `handler`, calls `handler(event, obj)` for each event until
    /// it returns False or `timeout` passes; without, returns the events seen within
    /// `timeout` as a list of `{"type": ..., "object": ...}`.
    fn watch<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = pos)] kind: &str,
        #[starlark(require = named, default = NoneOr::None)] namespace: NoneOr<&str>,
        #[starlark(require = named, default = NoneOr::None)] labels: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&str>,
        #[starlark(require = named, default = NoneOr::None)] handler: NoneOr<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let handler = handler.into_option();
        if handler.is_none() && timeout.is_none() {
            anyhow::bail!("k8s.watch: give timeout= or handler=, or it would never return");
        }
        let limit = match timeout.into_option() {
            Some(t) => Some(
                crate::duration::parse(t)
                    .map_err(|e| anyhow::anyhow!("k8s.watch: timeout: {e}"))?,
            ),
            None => None,
        };
        let call = Call::new(eval, this, "watch", NoneOr::None)?;
        let labels = selector(labels.into_option(), "labels")?;
        let target = call.run(Target::resolve(&call.session, kind, opt(namespace)))?;
        let runtime = call.host.runtime.clone();
        let mut watch = watch::Watch::new(&call.session, target, labels);
        let deadline = limit.map(|l| tokio::time::Instant::now() + l);
        let mut seen = Vec::new();
        // The lists and events are read on this thread (a page at a time), inside the
        // script's budgets; what is kept for the result is bounded here by the memory
        // budget too, with a message that says what to do instead.
        let mut kept = 0usize;
        let most = call.host.limits.memory;
        loop {
            let next = crate::script::budget::block_on(&runtime, async {
                match deadline {
                    Some(d) => tokio::time::timeout_at(d, watch.next()).await.ok(),
                    None => Some(watch.next().await),
                }
            })
            .map_err(|e| anyhow::anyhow!("k8s.watch: {e}"))?;
            let Some(event) = next else { break };
            let (kind, obj) = event.map_err(|e| anyhow::anyhow!("k8s.watch: {e}"))?;
            let Some(h) = handler else {
                kept = kept.saturating_add(obj.to_string().len());
                if kept > most {
                    anyhow::bail!(
                        "k8s.watch: the events seen so far pass the script's memory limit of {} MiB; pass handler= to look at each as it comes, or a shorter timeout",
                        most >> 20
                    );
                }
                seen.push(json!({"type": kind, "object": obj}));
                continue;
            };
            let heap = eval.heap();
            let args = [heap.alloc(kind), to_starlark(heap, &obj)];
            let ret = eval
                .eval_function(h, &args, &[])
                .map_err(starlark::Error::into_anyhow)?;
            if ret.unpack_bool() == Some(false) {
                break;
            }
        }
        let heap = eval.heap();
        Ok(heap.alloc(AllocList(seen.iter().map(|e| to_starlark(heap, e)))))
    }

    /// Renders an object or a list of objects as YAML (no cluster access).
    fn yaml<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = pos)] obj: Value<'v>,
    ) -> anyhow::Result<String> {
        let _ = this;
        let docs = manifest::manifests(obj).map_err(|e| anyhow::anyhow!("k8s.yaml: {e}"))?;
        crate::script::yaml::to_yaml(&docs)
    }

    /// The API server's version: major, minor, platform, git_version (also under the
    /// API's camelCase names, e.g. `gitVersion`).
    fn version<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let call = Call::new(eval, this, "version", timeout)?;
        let v = call.run(ops::version(&call.session))?;
        Ok(to_starlark(eval.heap(), &v))
    }

    /// The kubeconfig context in use.
    fn context<'v>(
        #[starlark(this)] this: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<String> {
        Ok(Call::new(eval, this, "context", NoneOr::None)?
            .session
            .context
            .clone())
    }

    /// The default namespace of this client.
    fn namespace_name<'v>(
        #[starlark(this)] this: Value<'v>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<String> {
        Ok(Call::new(eval, this, "namespace_name", NoneOr::None)?
            .session
            .namespace
            .clone())
    }

    /// Every resource type the cluster serves: name, kind, group, version, namespaced,
    /// short_names, verbs.
    fn api_resources<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let call = Call::new(eval, this, "api_resources", timeout)?;
        let all = call.run(async { Ok(call.session.discovery.all().await?) })?;
        let rows: Vec<Json> = all
            .iter()
            .map(|r| {
                json!({
                    "name": r.api_resource.plural, "kind": r.api_resource.kind,
                    "group": r.api_resource.group, "version": r.api_resource.version,
                    "api_version": r.api_resource.api_version, "namespaced": r.namespaced,
                    "short_names": r.short_names, "verbs": r.verbs,
                })
            })
            .collect();
        let heap = eval.heap();
        Ok(heap.alloc(AllocList(rows.iter().map(|r| to_starlark(heap, r)))))
    }

    /// A client with other settings: `k8s.config(kubeconfig=, context=, namespace=,
    /// timeout=)`; `timeout` is the deadline of each call that gives none itself.
    fn config<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = named, default = NoneOr::None)] kubeconfig: NoneOr<&str>,
        #[starlark(require = named, default = NoneOr::None)] context: NoneOr<&str>,
        #[starlark(require = named, default = NoneOr::None)] namespace: NoneOr<&str>,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&str>,
        heap: Heap<'v>,
    ) -> anyhow::Result<Value<'v>> {
        let this = this
            .request_value::<&dyn ClientValue>()
            .ok_or_else(|| anyhow::anyhow!("k8s.config: not called on a k8s client"))?;
        let base = this.client();
        // Upstream treats an empty string as "not given".
        let timeout = match opt(timeout).filter(|t| !t.is_empty()) {
            Some(t) => Some(
                crate::duration::parse(t)
                    .map_err(|e| anyhow::anyhow!("k8s.config: timeout: {e}"))?,
            ),
            None => base.timeout,
        };
        if let Some(ns) = opt(namespace) {
            check_namespace("k8s.config", ns)?;
        }
        let client = Client {
            key: SessionKey {
                kubeconfig: opt(kubeconfig)
                    .map(str::to_owned)
                    .or_else(|| base.key.kubeconfig.clone()),
                context: opt(context)
                    .map(str::to_owned)
                    .or_else(|| base.key.context.clone()),
                namespace: opt(namespace)
                    .map(str::to_owned)
                    .or_else(|| base.key.namespace.clone()),
            },
            is_module: false,
            timeout,
        };
        Ok(this.alloc_like(client, heap))
    }
}

#[expect(
    clippy::too_many_arguments,
    reason = "keyword arguments map one-to-one onto parameters"
)]
fn meta_patch<'v>(
    eval: &mut Evaluator<'v, '_, '_>,
    this: Value<'v>,
    name_of_call: &'static str,
    field: &str,
    kind: &str,
    name: &str,
    values: Value<'v>,
    namespace: NoneOr<&str>,
    timeout: NoneOr<&str>,
) -> anyhow::Result<Value<'v>> {
    let call = Call::new(eval, this, name_of_call, timeout)?;
    let values = from_starlark(values)?;
    let Some(map) = values.as_object() else {
        anyhow::bail!("k8s.{name_of_call}: {field} must be a dict of strings");
    };
    if let Some((k, v)) = map.iter().find(|(_, v)| !(v.is_string() || v.is_null())) {
        anyhow::bail!("k8s.{name_of_call}: {field}[{k:?}] must be a string or None, not {v}");
    }
    // A JSON merge patch removes keys whose value is null, which is what None means.
    let body = kube::api::Patch::Merge(json!({"metadata": {field: values}}));
    let out = call.run(async {
        let target = Target::resolve(&call.session, kind, opt(namespace)).await?;
        ops::patch(&call.session, &target, name, &body, false).await
    })?;
    call.dry_run_note("patched", &out);
    call.wrote(&out);
    Ok(to_starlark(eval.heap(), &out))
}

fn selector(v: Option<Value>, what: &str) -> anyhow::Result<Option<String>> {
    let Some(v) = v else { return Ok(None) };
    match super::selector::selector(v) {
        Some(s) => Ok(Some(s)),
        None => anyhow::bail!("{what} must be a selector string or a dict"),
    }
}

fn is_list(v: Value) -> bool {
    matches!(v.get_type(), "list" | "tuple")
}

fn one_or_list<'v>(heap: Heap<'v>, items: &[Json], single: bool) -> Value<'v> {
    match items {
        [one] if single => to_starlark(heap, one),
        _ => heap.alloc(AllocList(items.iter().map(|o| to_starlark(heap, o)))),
    }
}

/// A namespace as the API server accepts one (a DNS-1123 label of at most 63
/// characters), `*` (every namespace) or empty (not given).
///
/// # Errors
/// Anything else, named (cut to 80 characters) with `call`.
fn check_namespace(call: &str, ns: &str) -> anyhow::Result<()> {
    let label = ns.len() <= 63
        && ns
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !ns.starts_with('-')
        && !ns.ends_with('-');
    if ns.is_empty() || ns == "*" || label {
        return Ok(());
    }
    let shown: String = ns.chars().take(80).collect();
    let more = if shown.len() < ns.len() { "..." } else { "" };
    anyhow::bail!(
        "{call}: namespace {shown:?}{more} is not a namespace name (lower-case letters, digits and '-', at most 63 characters)"
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_namespace_must_be_one_the_api_server_accepts() {
        for ok in ["", "*", "team-a", "a", &"x".repeat(63)] {
            assert!(super::check_namespace("k8s.config", ok).is_ok(), "{ok}");
        }
        let long = "x".repeat(16 << 20);
        for bad in [
            "Team",
            "a_b",
            "-a",
            "a-",
            "x".repeat(64).as_str(),
            long.as_str(),
        ] {
            let e = super::check_namespace("k8s.config", bad)
                .unwrap_err()
                .to_string();
            assert!(
                e.starts_with("k8s.config: namespace ") && e.contains("is not a namespace name"),
                "{e}"
            );
            assert!(e.len() < 300, "the name is cut: {}", e.len());
        }
    }
}
