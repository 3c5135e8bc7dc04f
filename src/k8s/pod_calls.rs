//! The `k8s` client's pod I/O functions: `logs`, `logs_follow`, `exec`, `port_forward`
//! and `cp`, with upstream's names, arguments and results.
#![expect(
    clippy::too_many_arguments,
    reason = "keyword arguments map one-to-one onto parameters"
)]

use std::fmt::Display;
use std::time::Duration;

use serde_json::json;
use starlark::environment::MethodsBuilder;
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::none::{NoneOr, NoneType};
use starlark::values::{Heap, Value};

use super::cp::{self, Direction};
use super::exec::{self, MAX_OUTPUT};
use super::logs::{self, LogOptions, follow::Follow};
use super::module::{Call, opt};
use super::pods::PodRef;
use super::portforward::{self, Forwards, Handle};
use crate::script::json::to_starlark;
use crate::script::permissions::Access;

/// How long `k8s.cp` may take when the script gives no `timeout=`: an archive can be big.
const CP_TIMEOUT: Duration = Duration::from_mins(5);

#[starlark_module]
pub(super) fn pod_methods(builder: &mut MethodsBuilder) {
    /// A container's log as one string: `k8s.logs("web-1", tail=100, since="10m")`.
    fn logs<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = pos)] name: &str,
        #[starlark(require = named, default = NoneOr::None)] namespace: NoneOr<&str>,
        #[starlark(require = named, default = NoneOr::None)] container: NoneOr<&str>,
        #[starlark(require = named, default = 0)] tail: i64,
        #[starlark(require = named, default = NoneOr::None)] since: NoneOr<&str>,
        #[starlark(require = named, default = false)] previous: bool,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<String> {
        let call = Call::new(eval, this, "logs", timeout)?;
        let opts = log_options("logs", tail, since, previous)?;
        run(&call, async {
            let pod = resolve(&call, name, namespace, container).await?;
            logs::fetch(&pod, &opts).await
        })
    }

    /// Streams a container's log, calling `handler(line)` per line until the container
    /// ends, `timeout` passes, `max_lines` lines were handled, or the handler returns False.
    fn logs_follow<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = pos)] name: &str,
        #[starlark(default = NoneOr::None)] handler: NoneOr<Value<'v>>,
        #[starlark(require = named, default = NoneOr::None)] namespace: NoneOr<&str>,
        #[starlark(require = named, default = NoneOr::None)] container: NoneOr<&str>,
        #[starlark(require = named, default = 0)] tail: i64,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&str>,
        #[starlark(require = named, default = 0)] max_lines: i64,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        let Some(handler) = handler.into_option() else {
            anyhow::bail!("k8s.logs_follow: handler is required (a function taking a line)");
        };
        let limit = match opt(timeout) {
            Some(t) => Some(
                crate::duration::parse(t)
                    .map_err(|e| anyhow::anyhow!("k8s.logs_follow: timeout: {e}"))?,
            ),
            None => None,
        };
        // The call's own deadline covers finding the pod; the stream has `limit`.
        let call = Call::new(eval, this, "logs_follow", NoneOr::None)?;
        let opts = log_options("logs_follow", tail, NoneOr::None, false)?;
        let pod = run(&call, resolve(&call, name, namespace, container))?;
        let runtime = call.host.runtime.clone();
        let mut follow = Follow::start(&runtime, pod, opts);
        let deadline = limit.map(|l| tokio::time::Instant::now() + l);
        let mut handled = 0i64;
        while max_lines <= 0 || handled < max_lines {
            let next = crate::script::budget::block_on(&runtime, async {
                match deadline {
                    Some(d) => tokio::time::timeout_at(d, follow.next())
                        .await
                        .ok()
                        .flatten(),
                    None => follow.next().await,
                }
            })
            .map_err(|e| anyhow::anyhow!("k8s.logs_follow: {e}"))?;
            let Some(line) = next else { break };
            let line = line.map_err(|e| anyhow::anyhow!("k8s.logs_follow: {e}"))?;
            let arg = eval.heap().alloc(line);
            let ret = eval
                .eval_function(handler, &[arg], &[])
                .map_err(starlark::Error::into_anyhow)?;
            handled += 1;
            if ret.unpack_bool() == Some(false) {
                break;
            }
        }
        Ok(NoneType)
    }

    /// Runs a command in a container: a string runs under `/bin/sh -c`, a list is the
    /// argv. Returns `{"stdout", "stderr", "exit_code"}` (and `code`, as upstream's
    /// implementation names it); a non-zero exit is a result, not an error.
    fn exec<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = pos)] name: &str,
        #[starlark(require = pos)] command: Value<'v>,
        #[starlark(require = named, default = NoneOr::None)] namespace: NoneOr<&str>,
        #[starlark(require = named, default = NoneOr::None)] container: NoneOr<&str>,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let argv = argv(command, eval.heap()).map_err(|e| anyhow::anyhow!("k8s.exec: {e}"))?;
        let call = Call::new(eval, this, "exec", timeout)?;
        let out = run(&call, async {
            let pod = resolve(&call, name, namespace, container).await?;
            exec::run(&pod, &argv, None, MAX_OUTPUT).await
        })?;
        let result = json!({
            "stdout": String::from_utf8_lossy(&out.stdout),
            "stderr": String::from_utf8_lossy(&out.stderr),
            "exit_code": out.exit_code,
            "code": out.exit_code,
        });
        Ok(to_starlark(eval.heap(), &result))
    }
}

/// `port_forward` (a listener on this machine, behind `--allow-net`) and `cp` (this
/// machine's files, behind `--allow-fs`): pod I/O that reaches more than the cluster, so
/// never in a hosted script's library.
#[starlark_module]
pub(super) fn local_methods(builder: &mut MethodsBuilder) {
    /// Forwards 127.0.0.1:`local_port` (0: a free port) to `port` of the pod until
    /// `h.stop()` or the end of the run; returns the handle (`h.local_port`).
    fn port_forward<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = pos)] name: &str,
        #[starlark(require = pos)] port: i32,
        #[starlark(require = named, default = 0)] local_port: i32,
        #[starlark(require = named, default = NoneOr::None)] namespace: NoneOr<&str>,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Handle> {
        let port = port_number("port", port, false)?;
        let local_port = port_number("local_port", local_port, true)?;
        let call = Call::new(eval, this, "port_forward", timeout)?;
        // The listener is on this machine: network access beyond the cluster's API.
        call.host.allow("k8s.port_forward", Access::Net)?;
        let forwards = call.host.ext::<Forwards>();
        run(&call, async {
            let pod = resolve(&call, name, namespace, NoneOr::None).await?;
            portforward::start(pod, port, local_port, &forwards).await
        })
    }

    /// Copies files to or from a container: `src` or `dst` is `pod:path`. Needs
    /// `--allow-fs` as well. Returns `{"files": n, "direction": "from_pod" | "to_pod"}`.
    fn cp<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = pos)] pod: &str,
        #[starlark(require = pos)] src: &str,
        #[starlark(require = pos)] dst: &str,
        #[starlark(require = named, default = NoneOr::None)] namespace: NoneOr<&str>,
        #[starlark(require = named, default = NoneOr::None)] container: NoneOr<&str>,
        #[starlark(require = named, default = NoneOr::None)] timeout: NoneOr<&str>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let mut call = Call::new(eval, this, "cp", timeout)?;
        call.host.allow("k8s.cp", Access::Fs)?;
        if timeout.is_none() {
            call.timeout = CP_TIMEOUT;
        }
        let direction = cp::direction(pod, src, dst).map_err(|e| anyhow::anyhow!("k8s.cp: {e}"))?;
        let (files, way) = run(&call, async {
            let pod = resolve(&call, pod, namespace, container).await?;
            match &direction {
                Direction::FromPod { remote, local } => {
                    Ok::<_, cp::Error>((cp::download(&pod, remote, local).await?, "from_pod"))
                }
                Direction::ToPod { local, remote } => {
                    Ok((cp::upload(&pod, local, remote).await?, "to_pod"))
                }
            }
        })?;
        Ok(to_starlark(
            eval.heap(),
            &json!({"files": files, "direction": way}),
        ))
    }
}

/// Runs `fut` on the runtime under the call's deadline and the script's budget; errors
/// read `k8s.<fn>: <what failed>`.
fn run<T, E: Display>(
    call: &Call<'_>,
    fut: impl Future<Output = Result<T, E>>,
) -> anyhow::Result<T> {
    let timeout = call.timeout;
    let name = call.name;
    crate::script::budget::block_on(&call.host.runtime, async {
        tokio::time::timeout(timeout, fut).await
    })
    .map_err(|e| anyhow::anyhow!("k8s.{name}: {e}"))?
    .map_err(|_| anyhow::anyhow!("k8s.{name}: timed out after {timeout:?}"))?
    .map_err(|e| anyhow::anyhow!("k8s.{name}: {e}"))
}

async fn resolve(
    call: &Call<'_>,
    name: &str,
    namespace: NoneOr<&str>,
    container: NoneOr<&str>,
) -> super::pods::Result<PodRef> {
    PodRef::resolve(&call.session, name, opt(namespace), opt(container)).await
}

fn log_options(
    name: &str,
    tail: i64,
    since: NoneOr<&str>,
    previous: bool,
) -> anyhow::Result<LogOptions> {
    if tail < 0 {
        anyhow::bail!("k8s.{name}: tail must be 0 (all) or more, not {tail}");
    }
    let since = match opt(since).filter(|s| !s.is_empty()) {
        Some(s) => {
            Some(crate::duration::parse(s).map_err(|e| anyhow::anyhow!("k8s.{name}: since: {e}"))?)
        }
        None => None,
    };
    Ok(LogOptions {
        tail,
        since,
        previous,
    })
}

/// The argv of `k8s.exec`'s `command`: a string for the shell, or a list of strings.
fn argv<'v>(command: Value<'v>, heap: Heap<'v>) -> anyhow::Result<Vec<String>> {
    if let Some(s) = command.unpack_str() {
        return Ok(vec!["/bin/sh".into(), "-c".into(), s.into()]);
    }
    if !matches!(command.get_type(), "list" | "tuple") {
        anyhow::bail!(
            "command must be a string or a list of strings, not {}",
            command.get_type()
        );
    }
    let argv = command
        .iterate(heap)
        .map_err(starlark::Error::into_anyhow)?
        .enumerate()
        .map(|(i, v)| {
            let arg = v.unpack_str().ok_or_else(|| {
                anyhow::anyhow!("command[{i}] must be a string, not {}", v.get_type())
            })?;
            if let Some(why) = crate::script::budget::walk_step(arg.len()) {
                anyhow::bail!("command: stopped: {why}");
            }
            Ok(arg.to_owned())
        })
        .collect::<anyhow::Result<Vec<_>>>()?;
    if argv.is_empty() {
        anyhow::bail!("command is empty");
    }
    Ok(argv)
}

fn port_number(what: &str, n: i32, zero_ok: bool) -> anyhow::Result<u16> {
    u16::try_from(n)
        .ok()
        .filter(|&p| p > 0 || zero_ok)
        .ok_or_else(|| anyhow::anyhow!("k8s.port_forward: {what} must be 1-65535, not {n}"))
}
