//! The `ssh.client` value: `hosts`, and `exec`/`upload`/`download` with their `try_`
//! variants, each returning one result per host (upstream's `SSHResult` and
//! `SSHTransferResult` fields, plus `dry_run`).

#![expect(
    unsafe_code,
    reason = "derive(ProvidesStaticType) writes starlark's unsafe impl; no unsafe code of ours"
)]

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use allocative::Allocative;
use starlark::any::ProvidesStaticType;
use starlark::environment::{Methods, MethodsBuilder};
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::structs::AllocStruct;
use starlark::values::{Heap, NoSerialize, StarlarkValue, Value, ValueLike, starlark_value};

use super::command::{self, Wrap};
use super::config::env_dict;
use super::dial::Dialer;
use super::remote::{self, Done, Job};
use super::{Settings, pump};
use crate::script::builtins::os::{Overlay, home_dir};
use crate::script::host::Host;
use crate::script::outcome::result;
use crate::script::permissions::Access;

/// The largest private key file read.
const MAX_KEY_FILE: u64 = 1 << 20;

#[derive(Debug, ProvidesStaticType, NoSerialize, Allocative)]
pub struct Client {
    #[allocative(skip)]
    settings: Arc<Settings>,
}

starlark::starlark_simple_value!(Client);

impl Client {
    pub fn new(settings: Settings) -> Self {
        Client {
            settings: Arc::new(settings),
        }
    }
}

impl fmt::Display for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<ssh.client hosts=[{}]>", self.settings.hosts.join(" "))
    }
}

fn this(v: Value<'_>) -> anyhow::Result<&Client> {
    v.downcast_ref::<Client>()
        .ok_or_else(|| anyhow::anyhow!("not an ssh.client"))
}

/// `~` and `~/...` against the home directory; relative paths against the script's
/// working directory.
fn local_path(overlay: &Overlay, path: &str) -> PathBuf {
    let expanded = match path.strip_prefix('~') {
        Some(rest) if rest.is_empty() || rest.starts_with('/') => match home_dir(overlay) {
            Some(home) => format!("{home}{rest}"),
            None => path.to_owned(),
        },
        _ => path.to_owned(),
    };
    overlay.resolve(Path::new(&expanded))
}

/// Reads what connecting needs on the script's thread: the key, where host keys are
/// checked, the agent's socket.
fn dialer(host: &Host, name: &str, settings: &Arc<Settings>) -> anyhow::Result<Dialer> {
    let overlay = host.ext::<Overlay>();
    let key = match &settings.key {
        None => None,
        Some(k) => {
            host.allow(name, Access::Fs)?;
            let path = local_path(&overlay, k);
            let fail = |e: String| anyhow::anyhow!("{name}: private key {}: {e}", path.display());
            let meta = std::fs::metadata(&path).map_err(|e| fail(e.to_string()))?;
            if meta.len() > MAX_KEY_FILE {
                return Err(fail("larger than 1 MiB, not a key".into()));
            }
            let text = std::fs::read_to_string(&path).map_err(|e| fail(e.to_string()))?;
            let key = russh::keys::decode_secret_key(&text, settings.key_passphrase.as_deref())
                .map_err(|e| fail(e.to_string()))?;
            Some(Arc::new(key))
        }
    };
    let known_hosts = if settings.host_key_check {
        host.allow(name, Access::Fs)?;
        let path = match &settings.known_hosts_file {
            Some(f) => local_path(&overlay, f),
            None => local_path(&overlay, "~/.ssh/known_hosts"),
        };
        if let Err(e) = std::fs::File::open(&path) {
            anyhow::bail!(
                "{name}: known_hosts file {}: {e} (host_key_check=False skips the check)",
                path.display()
            );
        }
        Some(path)
    } else {
        None
    };
    // The agent is the script's only if it may read its environment.
    let agent = host
        .allow(name, Access::Env)
        .ok()
        .and_then(|()| overlay.var("SSH_AUTH_SOCK"))
        .filter(|s| !s.is_empty())
        .map(PathBuf::from);
    Ok(Dialer {
        settings: settings.clone(),
        key,
        known_hosts,
        agent,
    })
}

/// Runs `job` on every host and waits, answering test servers' handlers meanwhile.
fn run(
    eval: &mut Evaluator<'_, '_, '_>,
    name: &str,
    settings: &Arc<Settings>,
    job: Job,
) -> anyhow::Result<Vec<Done>> {
    let host = Host::of(eval)?;
    let dialer = Arc::new(dialer(host, name, settings)?);
    pump::wait(eval, name, remote::on_all(dialer, job))?.map_err(|e| anyhow::anyhow!("{name}: {e}"))
}

fn exec_result<'v>(heap: Heap<'v>, host: &str, ran: remote::Ran, dry: bool) -> Value<'v> {
    heap.alloc(AllocStruct([
        ("host", heap.alloc(host)),
        ("stdout", heap.alloc(ran.stdout)),
        ("stderr", heap.alloc(ran.stderr)),
        ("code", heap.alloc(ran.code)),
        ("ok", Value::new_bool(ran.code == 0)),
        ("dry_run", Value::new_bool(dry)),
    ]))
}

fn transfer_result<'v>(
    heap: Heap<'v>,
    host: &str,
    bytes: u64,
    (src, dst): (&str, &str),
    dry: bool,
) -> Value<'v> {
    heap.alloc(AllocStruct([
        ("host", heap.alloc(host)),
        ("ok", Value::new_bool(true)),
        ("bytes", heap.alloc(bytes)),
        ("src", heap.alloc(src)),
        ("dst", heap.alloc(dst)),
        ("dry_run", Value::new_bool(dry)),
    ]))
}

/// What `exec` was given beyond the command.
struct ExecArgs<'v> {
    cmd: &'v str,
    sudo: Option<bool>,
    as_user: &'v str,
    cwd: &'v str,
    env: Option<Value<'v>>,
}

fn run_exec<'v>(
    this: Value<'v>,
    args: ExecArgs<'v>,
    name: &str,
    eval: &mut Evaluator<'v, '_, '_>,
) -> anyhow::Result<Value<'v>> {
    let settings = self::this(this)?.settings.clone();
    let fail = |e: String| anyhow::anyhow!("{name}: {e}");
    let defaults = &settings.wrap;
    let mut env = defaults.env.clone();
    if let Some(v) = args.env {
        env.extend(env_dict(v).map_err(fail)?);
    }
    let pick =
        |given: &str, default: &str| if given.is_empty() { default } else { given }.to_owned();
    let wrap = Wrap {
        sudo: args.sudo.unwrap_or(defaults.sudo),
        as_user: pick(args.as_user, &defaults.as_user),
        cwd: pick(args.cwd, &defaults.cwd),
        env,
    };
    let line = command::build(args.cmd, &wrap).map_err(fail)?;
    let heap = eval.heap();
    if settings.dry_run {
        let results = settings.hosts.iter().map(|h| {
            let ran = remote::Ran {
                stdout: format!("[DRY RUN] Would execute on {h}: {line}"),
                stderr: String::new(),
                code: 0,
            };
            exec_result(heap, h, ran, true)
        });
        return Ok(heap.alloc(results.collect::<Vec<_>>()));
    }
    if settings.hosts.is_empty() {
        return Ok(heap.alloc(Vec::<Value>::new()));
    }
    Host::of(eval)?.allow(name, Access::Net)?;
    let done = run(eval, name, &settings, Job::Exec(line))?;
    let heap = eval.heap();
    let results = settings
        .hosts
        .iter()
        .zip(done)
        .filter_map(|(h, d)| match d {
            Done::Ran(ran) => Some(exec_result(heap, h, ran, false)),
            Done::Moved(_) => None,
        });
    Ok(heap.alloc(results.collect::<Vec<_>>()))
}

/// An upload or a download.
struct Transfer<'v> {
    upload: bool,
    src: &'v str,
    dst: &'v str,
    mode: &'v str,
}

fn run_transfer<'v>(
    this: Value<'v>,
    t: &Transfer<'v>,
    name: &str,
    eval: &mut Evaluator<'v, '_, '_>,
) -> anyhow::Result<Value<'v>> {
    let settings = self::this(this)?.settings.clone();
    let fail = |e: String| anyhow::anyhow!("{name}: {e}");
    let mode = command::scp_mode(t.mode).map_err(fail)?;
    let heap = eval.heap();
    if settings.dry_run {
        let results = settings
            .hosts
            .iter()
            .map(|h| transfer_result(heap, h, 0, (t.src, t.dst), true));
        return Ok(heap.alloc(results.collect::<Vec<_>>()));
    }
    if settings.hosts.is_empty() {
        return Ok(heap.alloc(Vec::<Value>::new()));
    }
    let host = Host::of(eval)?;
    host.allow(name, Access::Net)?;
    host.allow(name, Access::Fs)?;
    let overlay = host.ext::<Overlay>();
    let job = if t.upload {
        Job::Upload {
            src: local_path(&overlay, t.src),
            dst: t.dst.to_owned(),
            mode,
        }
    } else {
        Job::Download {
            src: t.src.to_owned(),
            dst: local_path(&overlay, t.dst),
        }
    };
    let done = run(eval, name, &settings, job)?;
    let heap = eval.heap();
    let many = settings.hosts.len() > 1;
    let results = settings.hosts.iter().zip(done).filter_map(|(h, d)| {
        let Done::Moved(bytes) = d else { return None };
        // Downloads from several hosts go to `<dst>.<host>` each, as upstream.
        let dst = if !t.upload && many {
            format!("{}.{h}", t.dst)
        } else {
            t.dst.to_owned()
        };
        Some(transfer_result(heap, h, bytes, (t.src, &dst), false))
    });
    Ok(heap.alloc(results.collect::<Vec<_>>()))
}

/// `f` as a result value (`.ok`, `.value`, `.error`) instead of failing.
fn try_<'v>(
    eval: &mut Evaluator<'v, '_, '_>,
    f: impl FnOnce(&mut Evaluator<'v, '_, '_>) -> anyhow::Result<Value<'v>>,
) -> Value<'v> {
    let out = f(eval).map_err(|e| format!("{e:#}"));
    result(eval.heap(), out)
}

#[starlark_module]
fn client_methods(builder: &mut MethodsBuilder) {
    /// Runs `cmd` on every host (needs `--allow-net`); one result per host with
    /// `host`, `stdout`, `stderr`, `code`, `ok`, `dry_run`. `sudo`, `as_user`, `cwd`
    /// and `env` override the client's defaults.
    fn exec<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = pos)] cmd: &'v str,
        #[starlark(require = named)] sudo: Option<bool>,
        #[starlark(require = named, default = "")] as_user: &'v str,
        #[starlark(require = named, default = "")] cwd: &'v str,
        #[starlark(require = named)] env: Option<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let args = ExecArgs {
            cmd,
            sudo,
            as_user,
            cwd,
            env,
        };
        run_exec(this, args, "ssh.client.exec", eval)
    }

    /// `exec` as a result (`.ok`, `.value`: the list, `.error`).
    fn try_exec<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = pos)] cmd: &'v str,
        #[starlark(require = named)] sudo: Option<bool>,
        #[starlark(require = named, default = "")] as_user: &'v str,
        #[starlark(require = named, default = "")] cwd: &'v str,
        #[starlark(require = named)] env: Option<Value<'v>>,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let args = ExecArgs {
            cmd,
            sudo,
            as_user,
            cwd,
            env,
        };
        Ok(try_(eval, |eval| {
            run_exec(this, args, "ssh.client.try_exec", eval)
        }))
    }

    /// Copies the local file `src` to `dst` on every host over SCP, with `mode`
    /// (needs `--allow-net` and `--allow-fs`); results have `host`, `ok`, `bytes`,
    /// `src`, `dst`, `dry_run`.
    fn upload<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = pos)] src: &'v str,
        #[starlark(require = pos)] dst: &'v str,
        #[starlark(require = named, default = "0644")] mode: &'v str,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let t = Transfer {
            upload: true,
            src,
            dst,
            mode,
        };
        run_transfer(this, &t, "ssh.client.upload", eval)
    }

    /// `upload` as a result.
    fn try_upload<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = pos)] src: &'v str,
        #[starlark(require = pos)] dst: &'v str,
        #[starlark(require = named, default = "0644")] mode: &'v str,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let t = Transfer {
            upload: true,
            src,
            dst,
            mode,
        };
        Ok(try_(eval, |eval| {
            run_transfer(this, &t, "ssh.client.try_upload", eval)
        }))
    }

    /// Copies the remote file `src` from every host to the local `dst` over SCP (with
    /// several hosts, to `<dst>.<host>` each; needs `--allow-net` and `--allow-fs`).
    fn download<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = pos)] src: &'v str,
        #[starlark(require = pos)] dst: &'v str,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let t = Transfer {
            upload: false,
            src,
            dst,
            mode: "0644",
        };
        run_transfer(this, &t, "ssh.client.download", eval)
    }

    /// `download` as a result.
    fn try_download<'v>(
        #[starlark(this)] this: Value<'v>,
        #[starlark(require = pos)] src: &'v str,
        #[starlark(require = pos)] dst: &'v str,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let t = Transfer {
            upload: false,
            src,
            dst,
            mode: "0644",
        };
        Ok(try_(eval, |eval| {
            run_transfer(this, &t, "ssh.client.try_download", eval)
        }))
    }
}

starlark::methods_static!(CLIENT_METHODS = client_methods);

#[starlark_value(type = "ssh.client")]
impl<'v> StarlarkValue<'v> for Client {
    fn get_methods() -> Option<&'static Methods> {
        Some(CLIENT_METHODS.methods())
    }

    fn to_bool(&self) -> bool {
        !self.settings.hosts.is_empty()
    }

    fn get_attr(&self, attribute: &str, heap: Heap<'v>) -> Option<Value<'v>> {
        (attribute == "hosts").then(|| heap.alloc(self.settings.hosts.clone()))
    }

    fn has_attr(&self, attribute: &str, _heap: Heap<'v>) -> bool {
        attribute == "hosts"
    }

    fn dir_attr(&self) -> Vec<String> {
        vec!["hosts".into()]
    }
}
