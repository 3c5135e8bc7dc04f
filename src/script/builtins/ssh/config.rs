//! `ssh.config(...)` and `ssh.try_config(...)`: the keywords checked into [`Settings`].
#![expect(
    clippy::too_many_arguments,
    reason = "keyword arguments map one-to-one onto parameters"
)]

use std::collections::BTreeMap;
use std::time::Duration;

use starlark::environment::GlobalsBuilder;
use starlark::eval::Evaluator;
use starlark::starlark_module;
use starlark::values::Value;
use starlark::values::dict::DictRef;
use starlark::values::list::ListRef;
use starlark::values::tuple::TupleRef;

use super::client::Client;
use super::command::Wrap;
use super::{DryRun, Settings};
use crate::script::host::Host;
use crate::script::outcome::result;

/// A duration keyword such as "30s"; "0s" gives zero.
fn duration(name: &str, text: &str) -> Result<Duration, String> {
    crate::duration::parse(text).map_err(|e| format!("{name}: {e}"))
}

/// The strings of a list or tuple.
fn strings(name: &str, v: Value) -> Result<Vec<String>, String> {
    let items = if let Some(l) = ListRef::from_value(v) {
        l.content().to_vec()
    } else if let Some(t) = TupleRef::from_value(v) {
        t.content().to_vec()
    } else {
        return Err(format!(
            "{name} must be a list of strings, got {}",
            v.get_type()
        ));
    };
    items
        .iter()
        .enumerate()
        .map(|(i, item)| {
            item.unpack_str()
                .map(str::to_owned)
                .ok_or_else(|| format!("{name}[{i}] is {}, not a string", item.get_type()))
        })
        .collect()
}

/// An `env` dict: string names, values written as text (numbers and booleans too).
pub(super) fn env_dict(v: Value) -> Result<BTreeMap<String, String>, String> {
    let dict = DictRef::from_value(v)
        .ok_or_else(|| format!("env must be a dict, got {}", v.get_type()))?;
    let mut out = BTreeMap::new();
    for (k, val) in dict.iter() {
        let k = k
            .unpack_str()
            .ok_or_else(|| format!("env: name {} is not a string", k.to_repr()))?;
        let val = match val.unpack_str() {
            Some(s) => s.to_owned(),
            None if matches!(val.get_type(), "int" | "bool" | "float") => val.to_str(),
            None => {
                return Err(format!(
                    "env: the value of {k} is {}, not a string",
                    val.get_type()
                ));
            }
        };
        out.insert(k.to_owned(), val);
    }
    Ok(out)
}

/// A host name as given: not empty, no spaces or control characters.
fn check_host(h: &str) -> Result<(), String> {
    if h.is_empty() || h.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!("hosts: {h:?} is not a host name or address"));
    }
    Ok(())
}

/// The user kite runs as, upstream's default for `user`.
fn current_user() -> String {
    let uid = crate::script::builtins::os::current_uid();
    crate::script::builtins::os::user_entry(uid).map_or_else(|| uid.to_string(), |u| u.name)
}

/// Whether the command line asked for a dry run (`--dry-run`).
fn forced_dry_run(eval: &Evaluator<'_, '_, '_>) -> anyhow::Result<bool> {
    Ok(Host::of(eval)?.ext::<DryRun>().0)
}

/// The keywords of `ssh.config`, before they are checked.
struct Given<'v> {
    hosts: Option<Value<'v>>,
    user: &'v str,
    key: &'v str,
    key_passphrase: &'v str,
    password: &'v str,
    port: i32,
    timeout: &'v str,
    max_retries: i32,
    exec_policy: &'v str,
    jump_host: &'v str,
    known_hosts_file: &'v str,
    host_key_check: Option<bool>,
    keep_alive_interval: &'v str,
    keep_alive_max: i32,
    sudo: bool,
    as_user: &'v str,
    cwd: &'v str,
    env: Option<Value<'v>>,
    dry_run: bool,
}

fn text(s: &str) -> Option<String> {
    (!s.is_empty()).then(|| s.to_owned())
}

impl Given<'_> {
    fn settings(self) -> Result<Settings, String> {
        let hosts = match self.hosts {
            Some(v) => strings("hosts", v)?,
            None => Vec::new(),
        };
        for h in &hosts {
            check_host(h)?;
        }
        let port = match self.port {
            0 => 22,
            p => u16::try_from(p)
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| format!("port {p} is not a TCP port (1-65535)"))?,
        };
        let max_retries = u32::try_from(self.max_retries)
            .map_err(|_| format!("max_retries {} must not be negative", self.max_retries))?;
        let linear = match self.exec_policy {
            "" | "concurrent" => false,
            "linear" => true,
            other => {
                return Err(format!(
                    "exec_policy {other:?} is neither \"concurrent\" nor \"linear\""
                ));
            }
        };
        let keep_alive = duration("keep_alive_interval", self.keep_alive_interval)?;
        let keep_alive_max = usize::try_from(self.keep_alive_max)
            .ok()
            .filter(|m| *m > 0)
            .ok_or_else(|| format!("keep_alive_max {} must be at least 1", self.keep_alive_max))?;
        let env = match self.env {
            Some(v) => env_dict(v)?,
            None => BTreeMap::new(),
        };
        Ok(Settings {
            hosts,
            user: text(self.user).unwrap_or_else(current_user),
            key: text(self.key),
            key_passphrase: text(self.key_passphrase),
            password: text(self.password),
            port,
            timeout: duration("timeout", self.timeout)?,
            max_retries,
            linear,
            jump_host: text(self.jump_host),
            known_hosts_file: text(self.known_hosts_file),
            // Upstream checks only when asked; naming a known_hosts file asks too.
            host_key_check: self
                .host_key_check
                .unwrap_or(!self.known_hosts_file.is_empty()),
            keep_alive_interval: (!keep_alive.is_zero()).then_some(keep_alive),
            keep_alive_max,
            wrap: Wrap {
                sudo: self.sudo,
                as_user: self.as_user.to_owned(),
                cwd: self.cwd.to_owned(),
                env,
            },
            dry_run: self.dry_run,
        })
    }
}

#[starlark_module]
pub fn ssh_namespace(builder: &mut GlobalsBuilder) {
    /// An SSH client for `hosts` (nothing connects until a call): `user` (default: the
    /// user kite runs as), `key` (a private key file; `key_passphrase`), `password`,
    /// `port` (22), `timeout` to connect ("30s"), `max_retries` (3, backing off from
    /// 1 s), `exec_policy` ("concurrent" or "linear"), `jump_host`, host key checking
    /// (`host_key_check`, `known_hosts_file`; off unless asked, as upstream),
    /// `keep_alive_interval` ("30s"; "0s" off) and `keep_alive_max` (3), defaults for
    /// `exec` (`sudo`, `as_user`, `cwd`, `env`), and `dry_run`.
    fn config<'v>(
        #[starlark(require = named)] hosts: Option<Value<'v>>,
        #[starlark(require = named, default = "")] user: &'v str,
        #[starlark(require = named, default = "")] key: &'v str,
        #[starlark(require = named, default = "")] key_passphrase: &'v str,
        #[starlark(require = named, default = "")] password: &'v str,
        #[starlark(require = named, default = 22)] port: i32,
        #[starlark(require = named, default = "30s")] timeout: &'v str,
        #[starlark(require = named, default = 3)] max_retries: i32,
        #[starlark(require = named, default = "concurrent")] exec_policy: &'v str,
        #[starlark(require = named, default = "")] jump_host: &'v str,
        #[starlark(require = named, default = "")] known_hosts_file: &'v str,
        #[starlark(require = named)] host_key_check: Option<bool>,
        #[starlark(require = named, default = "30s")] keep_alive_interval: &'v str,
        #[starlark(require = named, default = 3)] keep_alive_max: i32,
        #[starlark(require = named, default = false)] sudo: bool,
        #[starlark(require = named, default = "")] as_user: &'v str,
        #[starlark(require = named, default = "")] cwd: &'v str,
        #[starlark(require = named)] env: Option<Value<'v>>,
        #[starlark(require = named, default = false)] dry_run: bool,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Client> {
        let given = Given {
            hosts,
            user,
            key,
            key_passphrase,
            password,
            port,
            timeout,
            max_retries,
            exec_policy,
            jump_host,
            known_hosts_file,
            host_key_check,
            keep_alive_interval,
            keep_alive_max,
            sudo,
            as_user,
            cwd,
            env,
            dry_run: dry_run || forced_dry_run(eval)?,
        };
        let settings = given
            .settings()
            .map_err(|e| anyhow::anyhow!("ssh.config: {e}"))?;
        Ok(Client::new(settings))
    }

    /// `config()` as a result (`.ok`, `.value`, `.error`).
    fn try_config<'v>(
        #[starlark(require = named)] hosts: Option<Value<'v>>,
        #[starlark(require = named, default = "")] user: &'v str,
        #[starlark(require = named, default = "")] key: &'v str,
        #[starlark(require = named, default = "")] key_passphrase: &'v str,
        #[starlark(require = named, default = "")] password: &'v str,
        #[starlark(require = named, default = 22)] port: i32,
        #[starlark(require = named, default = "30s")] timeout: &'v str,
        #[starlark(require = named, default = 3)] max_retries: i32,
        #[starlark(require = named, default = "concurrent")] exec_policy: &'v str,
        #[starlark(require = named, default = "")] jump_host: &'v str,
        #[starlark(require = named, default = "")] known_hosts_file: &'v str,
        #[starlark(require = named)] host_key_check: Option<bool>,
        #[starlark(require = named, default = "30s")] keep_alive_interval: &'v str,
        #[starlark(require = named, default = 3)] keep_alive_max: i32,
        #[starlark(require = named, default = false)] sudo: bool,
        #[starlark(require = named, default = "")] as_user: &'v str,
        #[starlark(require = named, default = "")] cwd: &'v str,
        #[starlark(require = named)] env: Option<Value<'v>>,
        #[starlark(require = named, default = false)] dry_run: bool,
        eval: &mut Evaluator<'v, '_, '_>,
    ) -> anyhow::Result<Value<'v>> {
        let given = Given {
            hosts,
            user,
            key,
            key_passphrase,
            password,
            port,
            timeout,
            max_retries,
            exec_policy,
            jump_host,
            known_hosts_file,
            host_key_check,
            keep_alive_interval,
            keep_alive_max,
            sudo,
            as_user,
            cwd,
            env,
            dry_run: dry_run || forced_dry_run(eval)?,
        };
        let heap = eval.heap();
        let out = given
            .settings()
            .map(|s| heap.alloc(Client::new(s)))
            .map_err(|e| format!("ssh.config: {e}"));
        Ok(result(heap, out))
    }
}
