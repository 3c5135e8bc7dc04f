//! The `k8s` client's workload functions, with upstream's names and arguments: `deploy`,
//! `run`, `expose`, `scale`, `autoscale`, `rollout`, `set_image`, `set_env`,
//! `set_resources` and `describe`.
#![expect(
    clippy::too_many_arguments,
    reason = "keyword arguments map one-to-one onto parameters"
)]

use std::time::Duration;

use serde_json::{Map, Value as Json, json};
use starlark::environment::MethodsBuilder;
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::Value;
use starlark::values::none::NoneOr;

use super::module::{Call, opt};
use super::ops;
use super::rollout::{self, Action};
use super::template;
use super::workload::{self, DeploySpec, RunSpec};
use crate::script::json::{from_starlark, to_starlark};

/// Extra time the outer guard of a call that waits by itself (`run`, `drain`) allows
/// beyond the wait, for the requests before and after it.
pub(super) const WAIT_SLACK: Duration = Duration::from_secs(30);

/// Runs a call whose operation owns its deadline (`call.timeout`), guarded by a looser
/// outer one against a hang.
pub(super) fn run_waiting<T>(
    call: &Call<'_>,
    fut: impl Future<Output = ops::Result<T>>,
) -> anyhow::Result<T> {
    let name = call.name;
    crate::script::budget::block_on(
        &call.host.runtime,
        ops::with_timeout(call.timeout + WAIT_SLACK, fut),
    )
    .map_err(|e| anyhow::anyhow!("k8s.{name}: {e}"))?
    .map_err(|e| anyhow::anyhow!("k8s.{name}: {e}"))
}

fn json_arg(v: NoneOr<Value>, fname: &str) -> anyhow::Result<Json> {
    match v.into_option() {
        Some(v) => from_starlark(v).map_err(|e| anyhow::anyhow!("k8s.{fname}: {e}")),
        None => Ok(Json::Null),
    }
}

fn string_map(v: &Json, fname: &str, arg: &str) -> anyhow::Result<Map<String, Json>> {
    match v {
        Json::Null => Ok(Map::new()),
        Json::Object(m) => {
            if let Some((k, bad)) = m.iter().find(|(_, v)| !v.is_string()) {
                anyhow::bail!("k8s.{fname}: {arg}[{k:?}] must be a string, not {bad}");
            }
            Ok(m.clone())
        }
        other => anyhow::bail!("k8s.{fname}: {arg} must be a dict of strings, not {other}"),
    }
}

fn command_arg(v: Option<Value>) -> anyhow::Result<Option<Vec<String>>> {
    let Some(v) = v else { return Ok(None) };
    if let Some(s) = v.unpack_str() {
        // A string runs under a shell, as upstream does.
        return Ok(Some(vec!["/bin/sh".into(), "-c".into(), s.to_owned()]));
    }
    match from_starlark(v)? {
        Json::Array(items) => items
            .iter()
            .map(|i| {
                i.as_str().map(str::to_owned).ok_or_else(|| {
                    anyhow::anyhow!("k8s.run: command items must be strings, not {i}")
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()
            .map(Some),
        other => anyhow::bail!("k8s.run: command must be a string or a list, not {other}"),
    }
}

fn non_negative(v: i64, fname: &str, arg: &str) -> anyhow::Result<i64> {
    if v < 0 {
        anyhow::bail!("k8s.{fname}: {arg} must not be negative, got {v}");
    }
    Ok(v)
}

fn finish_write<'v>(call: &Call<'_>, eval: &Evaluator<'v, '_, '_>, obj: &Json) -> Value<'v> {
    call.dry_run_note("patched", obj);
    call.wrote(obj);
    to_starlark(eval.heap(), obj)
}

#[starlark_module]
pub(super) fn workload_methods(builder: &mut MethodsBuilder) {
    /// Creates (server-side applies) a Deployment labelled `app=<name>`, and with `port`
    /// a Service of the same name; returns `{"deployment": name, "service": name}`.
    fn deploy<'v>(
        #[starlark(this)] this: Value<'v>,
        name: &str,
        image: &str,
        #[starlark(require = named, default = 1)] replicas: i64,
        #[starlark(require = named, default = 0)] port: i64,
        #[starlark(require = named, default = NoneOr::None)] namespace: NoneOr<&str>,
        #[starlark(require = named, default = NoneOr::None)] labels: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] env: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let labels = string_map(&json_arg(labels, "deploy")?, "deploy", "labels")?;
        let env = json_arg(env, "deploy")?;
        let env = if env.is_null() {
            Vec::new()
        } else {
            template::env_entries(&env).map_err(|e| anyhow::anyhow!("k8s.deploy: {e}"))?
        };
        let call = Call::new(eval, this, "deploy", timeout)?;
        let spec = DeploySpec {
            name,
            image,
            replicas: non_negative(replicas, "deploy", "replicas")?,
            port: non_negative(port, "deploy", "port")?,
            namespace: opt(namespace)
                .filter(|n| !n.is_empty())
                .unwrap_or(&call.session.namespace)
                .to_owned(),
            labels,
            env,
        };
        let out = call.run(workload::deploy(&call.session, &spec))?;
        Ok(to_starlark(eval.heap(), &out))
    }

    /// Runs a one-off Pod; with `restart="Never"` waits (up to `timeout`, default 3m)
    /// for it to finish. Returns `{"name", "namespace", "phase", "logs"}`.
    fn run<'v>(
        #[starlark(this)] this: Value<'v>,
        name: &str,
        image: &str,
        #[starlark(default = NoneOr::None)] command: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] namespace: NoneOr<&str>,
        #[starlark(require = named, default = "Never")] restart: &str,
        #[starlark(require = named, default = false)] rm: bool,
        #[starlark(require = named, default = "3m")] timeout: &str,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        if !matches!(restart, "Never" | "OnFailure" | "Always") {
            anyhow::bail!("k8s.run: restart must be Never, OnFailure or Always, not {restart:?}");
        }
        let command = command_arg(command.into_option())?;
        let call = Call::new(eval, this, "run", NoneOr::Other(timeout))?;
        let spec = RunSpec {
            name,
            image,
            command,
            restart,
            rm,
        };
        let out = run_waiting(
            &call,
            workload::run(&call.session, &spec, opt(namespace), call.timeout),
        )?;
        Ok(to_starlark(eval.heap(), &out))
    }

    /// Creates a Service selecting the pods of `kind/name`; returns the Service.
    fn expose<'v>(
        #[starlark(this)] this: Value<'v>,
        kind: &str,
        name: &str,
        port: i64,
        #[starlark(require = named, default = 0)] target_port: i64,
        #[starlark(require = named, default = "ClusterIP")] r#type: &str,
        #[starlark(require = named, default = NoneOr::None)] namespace: NoneOr<&str>,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        if !(1..=65535).contains(&port) {
            anyhow::bail!("k8s.expose: port must be 1-65535, got {port}");
        }
        let call = Call::new(eval, this, "expose", timeout)?;
        let target_port = non_negative(target_port, "expose", "target_port")?;
        let out = call.run(workload::expose(
            &call.session,
            kind,
            name,
            opt(namespace),
            port,
            target_port,
            r#type,
        ))?;
        call.dry_run_note("exposed", &out);
        Ok(to_starlark(eval.heap(), &out))
    }

    /// Sets the replica count through the `/scale` subresource; returns the object.
    fn scale<'v>(
        #[starlark(this)] this: Value<'v>,
        kind: &str,
        name: &str,
        replicas: i64,
        #[starlark(require = named, default = NoneOr::None)] namespace: NoneOr<&str>,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let replicas = non_negative(replicas, "scale", "replicas")?;
        let call = Call::new(eval, this, "scale", timeout)?;
        let out = call.run(workload::scale(
            &call.session,
            kind,
            name,
            opt(namespace),
            replicas,
        ))?;
        Ok(finish_write(&call, eval, &out))
    }

    /// Creates a HorizontalPodAutoscaler `<name>-hpa` on CPU use; returns it.
    fn autoscale<'v>(
        #[starlark(this)] this: Value<'v>,
        kind: &str,
        name: &str,
        #[starlark(require = named, default = 1)] min: i64,
        #[starlark(require = named, default = 10)] max: i64,
        #[starlark(require = named, default = 80)] cpu_percent: i64,
        #[starlark(require = named, default = NoneOr::None)] namespace: NoneOr<&str>,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        if !(1..=100).contains(&cpu_percent) {
            anyhow::bail!("k8s.autoscale: cpu_percent must be 1-100, got {cpu_percent}");
        }
        let call = Call::new(eval, this, "autoscale", timeout)?;
        let out = call.run(workload::autoscale(
            &call.session,
            kind,
            name,
            opt(namespace),
            min,
            max,
            cpu_percent,
        ))?;
        call.dry_run_note("autoscaled", &out);
        Ok(to_starlark(eval.heap(), &out))
    }

    /// `action`: "status" (replicas, ready, updated, available, complete), "restart",
    /// "pause", "resume", "undo" (to `revision`, default the previous one) or "history".
    fn rollout<'v>(
        #[starlark(this)] this: Value<'v>,
        kind: &str,
        name: &str,
        #[starlark(default = "status")] action: &str,
        #[starlark(require = named, default = NoneOr::None)] namespace: NoneOr<&str>,
        #[starlark(require = named, default = 0)] revision: i64,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let act = Action::parse(action).map_err(|e| anyhow::anyhow!("k8s.rollout: {e}"))?;
        let revision = u64::try_from(revision)
            .map_err(|_| anyhow::anyhow!("k8s.rollout: revision must not be negative"))?;
        let call = Call::new(eval, this, "rollout", timeout)?;
        let out = call.run(rollout::rollout(
            &call.session,
            kind,
            name,
            opt(namespace),
            act,
            revision,
        ))?;
        if act.writes() {
            return Ok(finish_write(&call, eval, &out));
        }
        Ok(to_starlark(eval.heap(), &out))
    }

    /// Sets `container`'s image ("*": every container); returns the object.
    fn set_image<'v>(
        #[starlark(this)] this: Value<'v>,
        kind: &str,
        name: &str,
        container: &str,
        image: &str,
        #[starlark(require = named, default = NoneOr::None)] namespace: NoneOr<&str>,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        if image.trim().is_empty() {
            anyhow::bail!("k8s.set_image: image is empty");
        }
        let container = if container.is_empty() { "*" } else { container };
        let call = Call::new(eval, this, "set_image", timeout)?;
        let out = call.run(template::patch_containers(
            &call.session,
            kind,
            name,
            opt(namespace),
            container,
            |c| json!({"name": c, "image": image}),
        ))?;
        Ok(finish_write(&call, eval, &out))
    }

    /// Sets environment variables (a None value removes one) on `container`, or on
    /// every container when it is empty; returns the object.
    fn set_env<'v>(
        #[starlark(this)] this: Value<'v>,
        kind: &str,
        name: &str,
        env: Value<'v>,
        #[starlark(require = named, default = NoneOr::None)] namespace: NoneOr<&str>,
        #[starlark(require = named, default = "")] container: &str,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let entries = template::env_entries(&from_starlark(env)?)
            .map_err(|e| anyhow::anyhow!("k8s.set_env: {e}"))?;
        let call = Call::new(eval, this, "set_env", timeout)?;
        let out = call.run(template::patch_containers(
            &call.session,
            kind,
            name,
            opt(namespace),
            container,
            |c| json!({"name": c, "env": entries}),
        ))?;
        Ok(finish_write(&call, eval, &out))
    }

    /// Sets resource requests and/or limits on `container` (every container when
    /// empty); returns the object.
    fn set_resources<'v>(
        #[starlark(this)] this: Value<'v>,
        kind: &str,
        name: &str,
        #[starlark(require = named, default = NoneOr::None)] requests: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] limits: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] namespace: NoneOr<&str>,
        #[starlark(require = named, default = "")] container: &str,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let fail = |e: ops::Error| anyhow::anyhow!("k8s.set_resources: {e}");
        let requests = template::quantities("requests", &json_arg(requests, "set_resources")?)
            .map_err(fail)?;
        let limits =
            template::quantities("limits", &json_arg(limits, "set_resources")?).map_err(fail)?;
        let mut resources = Map::new();
        if let Some(r) = requests {
            resources.insert("requests".into(), r);
        }
        if let Some(l) = limits {
            resources.insert("limits".into(), l);
        }
        if resources.is_empty() {
            anyhow::bail!("k8s.set_resources: give requests= and/or limits=");
        }
        let call = Call::new(eval, this, "set_resources", timeout)?;
        let out = call.run(template::patch_containers(
            &call.session,
            kind,
            name,
            opt(namespace),
            container,
            |c| json!({"name": c, "resources": resources}),
        ))?;
        Ok(finish_write(&call, eval, &out))
    }

    /// One object as upstream describes it: `resource`, `conditions` and `events`, plus
    /// `text`, a kubectl-describe-like rendering of them.
    fn describe<'v>(
        #[starlark(this)] this: Value<'v>,
        kind: &str,
        name: &str,
        #[starlark(require = named, default = NoneOr::None)] namespace: NoneOr<&str>,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let call = Call::new(eval, this, "describe", timeout)?;
        let out = call.run(super::describe::describe(
            &call.session,
            kind,
            name,
            opt(namespace),
        ))?;
        Ok(to_starlark(eval.heap(), &out))
    }
}
