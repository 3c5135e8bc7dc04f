//! The command-line interface: argument types only, parsed by clap.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// Kubernetes controllers written as Starlark scripts.
#[derive(Debug, Parser)]
#[command(name = "kite", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run a Starlark script.
    Run(RunArgs),
    /// Run a controller and restart it in place whenever the script or a file it loads
    /// changes, showing each reconcile and what it wrote.
    #[command(alias = "watch")]
    Dev(DevArgs),
    /// Run the `test_*` functions of `*_test.star` files.
    Test(TestArgs),
    /// Parse and lint a script without running it.
    Check {
        /// The script to check.
        file: PathBuf,
        /// Check it as `kite operator` hosts it: only the operator's allowlist of
        /// capabilities exists (no files, processes, environment, network, `k8s.fake`,
        /// `k8s.testing` or `k8s.webhook`).
        #[arg(long)]
        hosted: bool,
    },
    /// Kubernetes tooling: deployment manifests and RBAC for a controller script.
    Kube {
        #[command(subcommand)]
        command: KubeCommand,
    },
    /// Run StarlarkController resources as in-process controllers (the meta-operator).
    Operator(OperatorArgs),
    /// Print the StarlarkController CustomResourceDefinition (YAML).
    Crd,
    /// Print a hosted controller's log: its print() and log lines and its reconciles'
    /// outcomes, read through `kite operator`'s logs API with your own rights.
    Logs(LogsArgs),
    /// Serve the Language Server Protocol on stdin/stdout, for editors (docs/lsp.md).
    Lsp {
        /// Accepted and ignored: editors pass it; stdio is the only transport.
        #[arg(long)]
        stdio: bool,
    },
    /// Print the version of kite.
    Version,
}

#[derive(Debug, Args)]
pub struct LogsArgs {
    /// slc/NAME or cslc/NAME.
    pub target: String,
    /// The StarlarkController's namespace (default: the kubeconfig context's).
    #[arg(short, long, value_name = "NS")]
    pub namespace: Option<String>,
    /// Keep streaming new lines until the controller is gone or you stop it.
    #[arg(short, long)]
    pub follow: bool,
    /// Only lines newer than this (e.g. 5m, 1h).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub since: Option<std::time::Duration>,
    /// Only the last N lines (before following).
    #[arg(long, value_name = "N")]
    pub tail: Option<usize>,
    /// Prefix each line with its time (RFC 3339).
    #[arg(long)]
    pub timestamps: bool,
    /// Act as this user (as kubectl --as).
    #[arg(long = "as", value_name = "USER")]
    pub as_user: Option<String>,
    /// Act as this group (as kubectl --as-group; repeatable).
    #[arg(long = "as-group", value_name = "GROUP")]
    pub as_groups: Vec<String>,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

#[derive(Debug, Args)]
pub struct OperatorArgs {
    /// Watch StarlarkControllers in this namespace only (default: all namespaces); such
    /// an operator hosts no ClusterStarlarkControllers.
    #[arg(long, value_name = "NS")]
    pub namespace: Option<String>,
    /// Host only StarlarkControllers and ClusterStarlarkControllers with these labels,
    /// e.g. `team=payments` (several operators can split the work this way).
    #[arg(long, value_name = "LABELS")]
    pub selector: Option<String>,
    /// The operator's own namespace, where ClusterStarlarkControllers' ServiceAccounts
    /// and scripts live (default: the pod's namespace, else "default").
    #[arg(long, value_name = "NS")]
    pub operator_namespace: Option<String>,
    /// Serve /healthz, /readyz and /metrics on this port.
    #[arg(long, value_name = "PORT")]
    pub health_port: Option<u16>,
    /// The address the health server binds; 0.0.0.0 inside a pod.
    #[arg(long, value_name = "IP", default_value = "127.0.0.1")]
    pub health_bind: std::net::IpAddr,
    /// Put /metrics behind TokenReview and SubjectAccessReview (`get` on the
    /// non-resource URL /metrics) even on loopback; off loopback it always is.
    #[arg(long)]
    pub secure_metrics: bool,
    /// The admission webhook's port (0: any free port).
    #[arg(long, value_name = "PORT", default_value_t = 9443)]
    pub webhook_port: u16,
    /// The address the admission webhook binds; 0.0.0.0 inside a pod.
    #[arg(long, value_name = "IP", default_value = "127.0.0.1")]
    pub webhook_bind: std::net::IpAddr,
    /// Register the webhook through this Service in the operator's namespace (inside a
    /// pod, as config/ does); without it, the operator registers its own address,
    /// which the API server must be able to reach (e.g. both on one machine).
    #[arg(long, value_name = "NAME")]
    pub webhook_service: Option<String>,
    /// Serve the logs API (`kite logs`) on this port, at the webhook's address, and
    /// register it as the APIService v1alpha1.logs.starkite.io (0: any free port).
    /// Needs the API server's aggregation layer. With --webhook-service, through the
    /// Service kite-operator-logs (port 443); without it, a local run points an
    /// ExternalName Service at localhost, and withdraws both when it exits.
    #[arg(long, value_name = "PORT")]
    pub logs_port: Option<u16>,
    /// The MutatingWebhookConfiguration the operator keeps (default: `kite-operator`,
    /// or one per --namespace/--selector scope).
    #[arg(long, value_name = "NAME")]
    pub webhook_configuration: Option<String>,
    /// Run only while holding the `kite-operator` Lease (for several replicas).
    #[arg(long)]
    pub leader_election: bool,
    /// The namespace of the Lease (default: the pod's namespace, else "default").
    #[arg(long, value_name = "NS")]
    pub leader_election_namespace: Option<String>,
    /// `auto`: spread the StarlarkControllers over every replica running with it
    /// (membership Leases in the operator's namespace, a consistent hash of each uid);
    /// `off`: this replica runs them all (with --leader-election, while it leads).
    #[arg(long, value_name = "MODE", default_value = "off", value_parser = ["off", "auto"], conflicts_with = "leader_election")]
    pub shards: String,
    /// The ClusterRole bounding what a StarlarkController may be granted.
    #[arg(
        long,
        value_name = "NAME",
        default_value = crate::operator::DEFAULT_CEILING
    )]
    pub ceiling: String,
    /// A handler running longer than this is cancelled.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    pub handler_timeout: std::time::Duration,
    /// Approvals older than this stop their controller until someone reviews them again
    /// (`kubectl annotate slc NAME starkite.io/approval=review --overwrite`): a bound on
    /// what the operator cannot see, such as a group removed at the identity provider.
    /// Unset: approvals do not expire.
    #[arg(long, value_name = "DURATION", value_parser = parse_duration)]
    pub approval_max_age: Option<std::time::Duration>,
    /// At most one status write per StarlarkController this often. A change to its
    /// counts alone (reconciles, errors) waits longer when the operator hosts more than
    /// 100: such writes are spread to 50 a second in all.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_period)]
    pub status_period: std::time::Duration,
    /// How often a running controller's author is checked again (deleted, or refused by
    /// a SubjectAccessReview now), as are its approval's age and its read access.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_period)]
    pub recheck_period: std::time::Duration,
    /// The shortest poll, resync, backoff or requeue a hosted controller may use.
    #[arg(long, value_name = "DURATION", default_value = "1s", value_parser = parse_duration)]
    pub min_period: std::time::Duration,
    /// The most workers one hosted controller may run.
    #[arg(long, value_name = "N", default_value_t = 8, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub max_workers: u16,
    /// The most children one hosted reconcile may return.
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub max_children: usize,
    /// The memory one hosted script evaluation (its top level, or one handler call) may
    /// use, in MiB.
    #[arg(long, value_name = "MIB", default_value_t = 256, value_parser = clap::value_parser!(u32).range(16..=65536))]
    pub script_memory: u32,
    /// The memory one namespace's hosted controllers may keep between reconciles (the
    /// values their scripts' top levels left, and 256 KiB of kite's own each), in MiB.
    #[arg(long, value_name = "MIB", default_value_t = 512, value_parser = clap::value_parser!(u32).range(1..=1048576))]
    pub namespace_memory: u32,
    /// The distinct watches (kind, namespace, selectors) one namespace's hosted
    /// controllers may make the operator run: each is a watch on the API server and a
    /// cache. Watches shared with other namespaces' controllers are not counted.
    #[arg(long, value_name = "N", default_value_t = 256, value_parser = clap::value_parser!(u16).range(1..))]
    pub namespace_watches: u16,
    /// The reconciles of StarlarkControllers (and, apart, of ClusterStarlarkControllers)
    /// under way at once, like controller-runtime's MaxConcurrentReconciles. Each holds
    /// a connection to the API server; more than the API server answers at once only
    /// costs memory.
    #[arg(long, value_name = "N", default_value_t = 128, value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrent_reconciles: u16,
    /// On SIGTERM/SIGINT, how long in-flight handlers may take to finish.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub grace_period: std::time::Duration,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    #[command(flatten)]
    pub log: LogArgs,
}

#[derive(Debug, Subcommand)]
pub enum KubeCommand {
    /// Print the manifests that deploy a controller script, with least-privilege RBAC
    /// inferred from the script.
    GenControllerArtifacts(GenArgs),
    /// Print the manifests that deploy a `k8s.webhook()` script: Deployment, Service,
    /// serving certificate and webhook configurations.
    GenWebhookArtifacts(GenWebhookArgs),
    /// Print the RBAC rules a script needs, each with the script lines that need it.
    Rbac(RbacArgs),
}

/// What RBAC inference may use besides the script.
#[derive(Debug, Args)]
pub struct InferArgs {
    /// A script variable, as for `kite run` (repeatable); it can decide a namespace or port.
    #[arg(long = "var", value_name = "NAME=VALUE")]
    pub vars: Vec<String>,
    /// A CustomResourceDefinition manifest (YAML) naming a kind the script uses (repeatable).
    #[arg(long = "crd", value_name = "FILE")]
    pub crds: Vec<PathBuf>,
    /// An extra cluster-wide permission, GROUP/RESOURCE:VERB,VERB (repeatable), for what
    /// inference cannot see (e.g. a kind held in a variable).
    #[arg(long = "rule", value_name = "GROUP/RESOURCE:VERBS")]
    pub rules: Vec<String>,
    /// Never contact a cluster (otherwise its discovery resolves kinds nothing else knows).
    #[arg(long)]
    pub offline: bool,
    /// The cluster whose discovery resolves kinds.
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// Output formats for generated manifests.
#[derive(Debug, Clone, Copy, Default, ValueEnum)]
pub enum OutputFormat {
    #[default]
    Yaml,
    Json,
}

#[derive(Debug, Args)]
pub struct GenArgs {
    /// The controller script.
    #[arg(long, value_name = "FILE")]
    pub controller: PathBuf,
    /// The image that runs the script (see --dockerfile).
    #[arg(long, value_name = "IMG", required_unless_present = "dockerfile")]
    pub image: Option<String>,
    /// The namespace the controller runs in (created by the manifests).
    #[arg(long, value_name = "NS", required_unless_present = "dockerfile")]
    pub namespace: Option<String>,
    /// The name of the ServiceAccount, roles and Deployment (default: from the file name).
    #[arg(long)]
    pub name: Option<String>,
    /// Deployment replicas; more than one needs leader_election=True in the script.
    #[arg(long, default_value_t = 1)]
    pub replicas: u32,
    #[arg(long, short, value_enum, default_value_t)]
    pub output: OutputFormat,
    /// Print a Dockerfile that bakes the script into an image instead of the manifests.
    #[arg(long)]
    pub dockerfile: bool,
    /// The kite base image the Dockerfile starts FROM.
    #[arg(long, value_name = "IMG")]
    pub base_image: Option<String>,
    #[command(flatten)]
    pub infer: InferArgs,
}

#[derive(Debug, Args)]
pub struct GenWebhookArgs {
    /// The webhook script.
    #[arg(long, value_name = "FILE", default_value = "webhook.star")]
    pub webhook: PathBuf,
    /// The name of the ServiceAccount, Deployment, Service and configurations (default:
    /// from the file name).
    #[arg(long)]
    pub name: Option<String>,
    /// The image that runs the script.
    #[arg(long, value_name = "IMG")]
    pub image: String,
    /// The namespace the webhook runs in.
    #[arg(long, value_name = "NS", default_value = "default")]
    pub namespace: String,
    /// Deployment replicas.
    #[arg(long, default_value_t = 1)]
    pub replicas: u32,
    /// What the API server sends to the webhook, e.g. "group=apps resource=deployments
    /// operations=CREATE,UPDATE" (repeatable; default: the kind the script's controller watches).
    #[arg(long = "rule", value_name = "RULE")]
    pub rules: Vec<String>,
    /// Let cert-manager issue the serving certificate and inject its CA, instead of a
    /// certificate made now and kept in a Secret.
    #[arg(long)]
    pub cert_manager: bool,
    #[arg(long, short, value_enum, default_value_t)]
    pub output: OutputFormat,
    /// A script variable, as for `kite run` (repeatable).
    #[arg(long = "var", value_name = "NAME=VALUE")]
    pub vars: Vec<String>,
    /// A CustomResourceDefinition manifest (YAML) naming a kind the script uses (repeatable).
    #[arg(long = "crd", value_name = "FILE")]
    pub crds: Vec<PathBuf>,
    /// Never contact a cluster (otherwise its discovery resolves kinds nothing else knows).
    #[arg(long)]
    pub offline: bool,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

#[derive(Debug, Args)]
pub struct RbacArgs {
    /// The script to analyse.
    pub file: PathBuf,
    #[command(flatten)]
    pub infer: InferArgs,
}

/// How log lines are written to stderr.
#[derive(Debug, Clone, Copy, Default, ValueEnum)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

#[derive(Debug, Args)]
pub struct RunArgs {
    /// The script to run.
    pub file: PathBuf,
    /// A script variable, read with var_str/var_int/var_bool/var_float (repeatable).
    #[arg(long = "var", value_name = "NAME=VALUE")]
    pub vars: Vec<String>,
    /// A YAML file of script variables; --var values override it (repeatable).
    #[arg(long = "var-file", value_name = "FILE")]
    pub var_files: Vec<PathBuf>,
    #[command(flatten)]
    pub permissions: PermissionArgs,
    /// Send every write with dryRun=All and print what would change.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub cluster: ClusterArgs,
    /// A handler running longer than this is cancelled (controllers only).
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration)]
    pub handler_timeout: std::time::Duration,
    /// The memory one evaluation (the top level, or one handler call) may use, in MiB.
    #[arg(long, value_name = "MIB", default_value_t = 2048, value_parser = clap::value_parser!(u32).range(16..=1048576))]
    pub script_memory: u32,
    /// On SIGTERM/SIGINT, how long in-flight handlers may take to finish.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub grace_period: std::time::Duration,
    /// The address the health server (health_port) and k8s.webhook bind; 0.0.0.0
    /// inside a pod.
    #[arg(long, value_name = "IP", default_value = "127.0.0.1")]
    pub health_bind: std::net::IpAddr,
    #[command(flatten)]
    pub log: LogArgs,
}

#[derive(Debug, Args)]
pub struct DevArgs {
    #[command(flatten)]
    pub run: RunArgs,
    /// Do not clear the screen when a new version starts.
    #[arg(long)]
    pub no_clear: bool,
}

#[derive(Debug, Args)]
pub struct TestArgs {
    /// Test files, and directories searched recursively for `*_test.star` (default: .).
    pub paths: Vec<PathBuf>,
    /// Run only tests whose name contains PATTERN.
    #[arg(short = 'k', long = "run", value_name = "PATTERN")]
    pub filter: Option<String>,
    /// Print one JSON document with every test's result instead of lines.
    #[arg(long)]
    pub json: bool,
    /// Also write the results as JUnit XML to FILE.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Show each test's duration, and what passing tests printed.
    #[arg(short, long)]
    pub verbose: bool,
    /// Test files run at once (default: one per CPU).
    #[arg(short, long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..))]
    pub parallel: Option<u16>,
    /// A test running longer than this (top level, setup, test, teardown) fails.
    #[arg(long, value_name = "DURATION", default_value = "5m", value_parser = parse_duration)]
    pub timeout: std::time::Duration,
    /// The memory one test may use, in MiB.
    #[arg(long, value_name = "MIB", default_value_t = 2048, value_parser = clap::value_parser!(u32).range(16..=1048576))]
    pub script_memory: u32,
    /// A script variable, read with var_str/var_int/var_bool/var_float (repeatable).
    #[arg(long = "var", value_name = "NAME=VALUE")]
    pub vars: Vec<String>,
    /// A YAML file of script variables; --var values override it (repeatable).
    #[arg(long = "var-file", value_name = "FILE")]
    pub var_files: Vec<PathBuf>,
    #[command(flatten)]
    pub permissions: PermissionArgs,
    #[command(flatten)]
    pub cluster: ClusterArgs,
}

/// What a script may reach outside the process; nothing unless allowed.
#[derive(Debug, Clone, Args)]
#[expect(clippy::struct_excessive_bools, reason = "one switch per flag")]
pub struct PermissionArgs {
    /// Allow everything below.
    #[arg(long)]
    pub allow_all: bool,
    /// Allow access to the Kubernetes API.
    #[arg(long)]
    pub allow_k8s: bool,
    /// Allow network access (implies --allow-k8s).
    #[arg(long)]
    pub allow_net: bool,
    /// Allow filesystem access.
    #[arg(long)]
    pub allow_fs: bool,
    /// Allow reading and setting environment variables.
    #[arg(long)]
    pub allow_env: bool,
    /// Allow running other programs (os.exec, exec).
    #[arg(long)]
    pub allow_exec: bool,
    /// An upstream Starkite permission profile: deny-all, strict, allow-fs, allow-net,
    /// allow-local, allow-all, or inline rules (allow:fs.*,os.exec;deny:...); combined
    /// with the flags above.
    #[arg(long, value_name = "PROFILE", value_parser = parse_profile)]
    pub permissions: Option<crate::script::profile::Profile>,
}

impl PermissionArgs {
    /// What the flags and the profile allow together.
    pub fn resolve(&self) -> crate::script::permissions::Permissions {
        use crate::script::permissions::Permissions;
        let flags = if self.allow_all {
            Permissions::all()
        } else {
            // Upstream scripts are run with --allow-net; the cluster is network access.
            Permissions {
                k8s: self.allow_k8s || self.allow_net,
                net: self.allow_net,
                fs: self.allow_fs,
                env: self.allow_env,
                exec: self.allow_exec,
            }
        };
        let profile = self
            .permissions
            .as_ref()
            .map_or_else(Permissions::none, |p| p.permissions);
        flags.union(profile)
    }

    /// What kite could not enforce as finely as the profile asked, one line each.
    pub fn warnings(&self) -> Vec<String> {
        self.permissions.as_ref().map_or_else(Vec::new, |p| {
            p.warnings
                .iter()
                .map(|w| format!("warning: --permissions {}: {w}", p.spec))
                .collect()
        })
    }
}

fn parse_profile(s: &str) -> Result<crate::script::profile::Profile, String> {
    crate::script::profile::parse(s).map_err(|e| e.to_string())
}

/// Which cluster to talk to; shared by every command that does.
#[derive(Debug, Clone, Args)]
pub struct ClusterArgs {
    /// The kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster).
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use.
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
}

/// What the long-running commands log.
#[derive(Debug, Clone, Copy, Args)]
pub struct LogArgs {
    /// Log format on stderr.
    #[arg(long, value_enum, default_value_t)]
    pub log_format: LogFormat,
    /// More logging (-v: debug, -vv: trace).
    #[arg(short, long, action = clap::ArgAction::Count)]
    pub verbose: u8,
}

fn parse_duration(s: &str) -> Result<std::time::Duration, String> {
    crate::duration::parse(s).map_err(|e| e.to_string())
}

/// A period something is done every: a duration, and not zero.
fn parse_period(s: &str) -> Result<std::time::Duration, String> {
    match parse_duration(s)? {
        d if d.is_zero() => Err("a period must be longer than zero".into()),
        d => Ok(d),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A zero period would be a timer that never waits (tokio refuses one outright).
    #[test]
    fn a_period_of_zero_is_refused_with_its_reason() {
        assert_eq!(
            parse_period("0s").unwrap_err(),
            "a period must be longer than zero"
        );
        assert_eq!(parse_period("2s"), Ok(std::time::Duration::from_secs(2)));
        assert!(parse_period("soon").is_err());
    }
}
