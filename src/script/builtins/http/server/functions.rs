//! `http.server(...)` and `http.serve(...)`, the namespace's functions.
#![expect(
    clippy::too_many_arguments,
    reason = "keyword arguments map one-to-one onto parameters"
)]

use starlark::environment::GlobalsBuilder;
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::Value;
use starlark::values::dict::DictRef;
use starlark::values::none::NoneType;

use super::methods::{Overrides, handle, none, serve};
use super::{Args, Config, Server, callable};
use crate::script::host::Host;
use crate::script::permissions::Access;

/// A new server, after the permission check.
fn make<'v>(name: &str, args: &Args, eval: &Evaluator<'v, '_, '_>) -> anyhow::Result<Server<'v>> {
    Host::of(eval)?.allow(name, Access::Net)?;
    let config = Config::from_args(args).map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
    Ok(Server::new(config))
}

/// `http.serve`'s first argument: one handler for every path, or a dict of routes.
fn routes<'v>(name: &str, this: Value<'v>, handler: Value<'v>) -> anyhow::Result<()> {
    match DictRef::from_value(handler) {
        Some(dict) => {
            for (pattern, h) in dict.iter() {
                let pattern = pattern.unpack_str().ok_or_else(|| {
                    anyhow::anyhow!(
                        "{name}: route pattern must be a string, got {}",
                        pattern.get_type()
                    )
                })?;
                handle(this, pattern, h).map_err(|e| anyhow::anyhow!("{name}: {e}"))?;
            }
            Ok(())
        }
        None if callable(handler) => handle(this, "/", handler),
        None => anyhow::bail!(
            "{name}: the first argument must be a handler or a dict of routes, got {}",
            handler.get_type()
        ),
    }
}

#[starlark_module]
pub fn server_functions(builder: &mut GlobalsBuilder) {
    /// A new HTTP server (not yet listening); needs `--allow-net`. It listens on
    /// 127.0.0.1 unless `host` says otherwise.
    fn server<'v>(
        #[starlark(require = named, default = 0)] port: i32,
        #[starlark(require = named, default = "")] host: &str,
        #[starlark(require = named, default = "")] tls_cert: &str,
        #[starlark(require = named, default = "")] tls_key: &str,
        #[starlark(require = named, default = "")] read_timeout: &str,
        #[starlark(require = named, default = "")] write_timeout: &str,
        #[starlark(require = named, default = "")] idle_timeout: &str,
        #[starlark(require = named, default = "")] shutdown_timeout: &str,
        #[starlark(require = named, default = 0)] max_header_bytes: i32,
        #[starlark(require = named, default = 0)] max_body_bytes: i32,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let args = Args {
            port,
            host,
            tls_cert,
            tls_key,
            read_timeout,
            write_timeout,
            idle_timeout,
            shutdown_timeout,
            max_header_bytes,
            max_body_bytes,
        };
        let server = make("http.server", &args, eval)?;
        Ok(eval.heap().alloc(server))
    }

    /// Serves `handler` (every path) or a dict of routes until a handler shuts the
    /// server down; takes `http.server`'s settings.
    fn serve<'v>(
        #[starlark(require = pos)] handler: Value<'v>,
        #[starlark(require = named, default = 0)] port: i32,
        #[starlark(require = named, default = "")] host: &str,
        #[starlark(require = named, default = "")] tls_cert: &str,
        #[starlark(require = named, default = "")] tls_key: &str,
        #[starlark(require = named, default = "")] read_timeout: &str,
        #[starlark(require = named, default = "")] write_timeout: &str,
        #[starlark(require = named, default = "")] idle_timeout: &str,
        #[starlark(require = named, default = "")] shutdown_timeout: &str,
        #[starlark(require = named, default = 0)] max_header_bytes: i32,
        #[starlark(require = named, default = 0)] max_body_bytes: i32,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<NoneType> {
        let name = "http.serve";
        let args = Args {
            port,
            host,
            tls_cert,
            tls_key,
            read_timeout,
            write_timeout,
            idle_timeout,
            shutdown_timeout,
            max_header_bytes,
            max_body_bytes,
        };
        let server = eval.heap().alloc(make(name, &args, eval)?);
        routes(name, server, handler)?;
        none(serve(name, server, &Overrides::default(), eval))
    }
}
