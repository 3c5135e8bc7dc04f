//! `ssh`: upstream Starkite's SSH client. `ssh.config(hosts=, user=, ...)` returns an
//! `ssh.client` whose `exec`, `upload` and `download` (and `try_` variants) work on
//! every host, at once or one by one; `dry_run=True` only says what would be done.
//! `kite test` adds `ssh.test_server` and `ssh.test_key` ([`test_server`]).
//!
//! Connecting needs `--allow-net`; keys, known_hosts and the local side of transfers
//! `--allow-fs`. Host keys are checked only when `host_key_check=True` or a
//! `known_hosts_file` is given: upstream's effective default is not to check.

mod client;
mod command;
mod config;
mod dial;
mod incoming;
mod pump;
mod remote;
mod server;
mod test_server;
#[cfg(test)]
mod tests;

use std::time::Duration;

use starlark::environment::GlobalsBuilder;

use self::command::Wrap;
pub use self::config::ssh_namespace;

/// What `ssh.config(...)` was given, checked.
#[derive(Debug, Clone)]
pub struct Settings {
    pub hosts: Vec<String>,
    pub user: String,
    pub key: Option<String>,
    pub key_passphrase: Option<String>,
    pub password: Option<String>,
    pub port: u16,
    /// How long connecting to one host may take (zero: no limit but the call's).
    pub timeout: Duration,
    pub max_retries: u32,
    /// `exec_policy="linear"`: one host after another, stopping at the first failure.
    pub linear: bool,
    pub jump_host: Option<String>,
    pub known_hosts_file: Option<String>,
    pub host_key_check: bool,
    pub keep_alive_interval: Option<Duration>,
    pub keep_alive_max: usize,
    /// The defaults of `exec`'s `sudo`, `as_user`, `cwd` and `env`.
    pub wrap: Wrap,
    pub dry_run: bool,
}

/// Set by `kite run --dry-run` and `kite dev --dry-run` (a [`crate::script::host::Host`]
/// extension): every client is then a dry run, as upstream's global flag makes it.
#[derive(Debug, Default, Clone, Copy)]
pub struct DryRun(pub bool);

/// `kite test`'s `ssh` module: [`ssh_namespace`] plus the test server and key.
pub fn test_namespace(builder: &mut GlobalsBuilder) {
    builder.namespace("ssh", |b| {
        ssh_namespace(b);
        test_server::test_helpers(b);
    });
}
