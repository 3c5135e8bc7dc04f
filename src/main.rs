//! The `kite` binary: parses the command line and wires the library together.

use std::process::ExitCode;

use std::sync::Arc;

use clap::Parser;
use kite::cli::{
    Cli, Command, InferArgs, KubeCommand, LogFormat, OperatorArgs, OutputFormat, RunArgs, TestArgs,
};
use kite::{ControlRequest, Finished, Handlers, Host, KubeOptions, Vars, library};

/// Counts what each thread allocates, so a script over its memory limit fails alone.
#[global_allocator]
static ALLOCATOR: kite::Counting = kite::Counting;

fn main() -> ExitCode {
    kite::quiet_refusals();
    kite::return_large_blocks();
    let cli = Cli::parse();
    match cli.command {
        Command::Version => {
            println!("{}", kite::version_line());
            ExitCode::SUCCESS
        }
        Command::Lsp { stdio: _ } => match kite::serve_lsp() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("{e}");
                ExitCode::FAILURE
            }
        },
        Command::Check { file, hosted } => match if hosted {
            kite::check_hosted(&file)
        } else {
            kite::check_file(&file)
        } {
            Ok(report) => {
                print!("{report}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("{e}");
                ExitCode::from(e.exit_code())
            }
        },
        Command::Run(args) => run(args),
        Command::Dev(args) => dev(args),
        Command::Test(args) => test(args),
        Command::Operator(args) => operator(args),
        Command::Logs(args) => logs(args),
        Command::Crd => match kite::crd_yaml() {
            Ok(yaml) => {
                print!("{yaml}");
                ExitCode::SUCCESS
            }
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::FAILURE
            }
        },
        Command::Kube { command } => match kube(command) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("error: {e:#}");
                ExitCode::from(2)
            }
        },
    }
}

/// `kite logs`: exit 1 with the API server's message when it refuses.
fn logs(args: kite::cli::LogsArgs) -> ExitCode {
    let Some(runtime) = runtime() else {
        return ExitCode::FAILURE;
    };
    let result = runtime.block_on(async {
        let kube_opts = kube_options(&args.cluster, false);
        let mut config = kite::kube_config(&kube_opts).await?;
        // A followed log may be quiet for long: no read timeout.
        config.read_timeout = None;
        if args.as_user.is_some() {
            config.auth_info.impersonate.clone_from(&args.as_user);
            config.auth_info.impersonate_groups =
                (!args.as_groups.is_empty()).then(|| args.as_groups.clone());
        }
        let client = kube::Client::try_from(config)?;
        let request = kite::LogsRequest {
            target: args.target.clone(),
            namespace: args.namespace.clone(),
            follow: args.follow,
            since: args.since,
            tail: args.tail,
            timestamps: args.timestamps,
        };
        let stop = kite::shutdown_signal()?;
        tokio::select! {
            r = kite::read_logs(client, &request) => r.map_err(anyhow::Error::from),
            () = stop => Ok(()),
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The cluster a command talks to, from its `--kubeconfig` and `--context`.
fn kube_options(cluster: &kite::cli::ClusterArgs, dry_run: bool) -> KubeOptions {
    KubeOptions {
        kubeconfig: cluster.kubeconfig.clone(),
        context: cluster.context.clone(),
        dry_run,
    }
}

fn operator(args: OperatorArgs) -> ExitCode {
    // Each hosted reconcile is in its controller's journal (`kite logs`); a line per
    // reconcile in the operator's own log too was hundreds of lines a second at
    // thousands of controllers. Their failures still show (warnings).
    init_logging_with(
        args.log.log_format,
        args.log.verbose,
        "info,kite::control::worker=warn",
    );
    let Some(runtime) = runtime() else {
        return ExitCode::FAILURE;
    };
    let result = runtime.block_on(async {
        let kube_opts = kube_options(&args.cluster, false);
        let (client, config) = kite::connect_config(&kube_opts).await?;
        let lease_namespace = args.leader_election.then(|| {
            args.leader_election_namespace
                .clone()
                .or_else(kite::own_namespace)
                .unwrap_or_else(|| "default".to_owned())
        });
        let operator_namespace = args
            .operator_namespace
            .clone()
            .or_else(kite::own_namespace)
            .unwrap_or_else(|| "default".to_owned());
        let opts = kite::OperatorOptions {
            namespace: args.namespace.clone(),
            selector: args.selector.clone(),
            operator_namespace,
            health: args
                .health_port
                .map(|p| std::net::SocketAddr::new(args.health_bind, p)),
            leader_election: lease_namespace,
            shards: args.shards == "auto",
            identity: kite::default_identity(),
            ceiling: args.ceiling.clone(),
            handler_budget: args.handler_timeout,
            limits: kite::Limits {
                min_period: args.min_period,
                max_workers: args.max_workers.into(),
                memory: (args.script_memory as usize) << 20,
                max_children: args.max_children,
                source: "the operator's",
                overrun: kite::Overrun::Park,
            },
            status_period: args.status_period,
            recheck_period: args.recheck_period,
            namespace_memory: (args.namespace_memory as usize) << 20,
            namespace_watches: args.namespace_watches.into(),
            concurrent_reconciles: args.concurrent_reconciles,
            grace: args.grace_period,
            webhook_bind: std::net::SocketAddr::new(args.webhook_bind, args.webhook_port),
            logs_bind: args
                .logs_port
                .map(|port| std::net::SocketAddr::new(args.webhook_bind, port)),
            // Where the other replicas reach this one: its pod IP (config/manager sets
            // POD_IP), else the address it binds.
            logs_host: std::env::var("POD_IP").unwrap_or_else(|_| {
                if args.webhook_bind.is_unspecified() {
                    "127.0.0.1".to_owned()
                } else {
                    args.webhook_bind.to_string()
                }
            }),
            webhook_service: args.webhook_service.clone(),
            webhook_configuration: args.webhook_configuration.clone(),
            approval_max_age: args.approval_max_age,
            secure_metrics: args.secure_metrics,
        };
        let signalled = kite::shutdown_signal()?;
        kite::run_operator((client, config), opts, signalled).await?;
        anyhow::Ok(())
    });
    runtime.shutdown_timeout(std::time::Duration::from_secs(5));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}

/// The multi-threaded runtime `kite run` and `kite operator` block on; None (after saying
/// why) when it cannot start.
fn runtime() -> Option<tokio::runtime::Runtime> {
    match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => Some(rt),
        Err(e) => {
            eprintln!("error: starting the async runtime: {e}");
            None
        }
    }
}

fn kube(command: KubeCommand) -> anyhow::Result<()> {
    match command {
        KubeCommand::Rbac(args) => {
            let inference = infer(&args.file, &args.infer)?;
            for w in &inference.warnings {
                eprintln!("warning: {w}");
            }
            print!("{}", inference.rules.table());
        }
        KubeCommand::GenWebhookArtifacts(args) => gen_webhook_artifacts(args)?,
        KubeCommand::GenControllerArtifacts(args) => {
            let inference = infer(&args.controller, &args.infer)?;
            for w in &inference.warnings {
                eprintln!("warning: {w}");
            }
            if args.dockerfile {
                let base = args
                    .base_image
                    .as_deref()
                    .unwrap_or(kite::DEFAULT_BASE_IMAGE);
                print!("{}", kite::dockerfile(&inference, base));
                return Ok(());
            }
            let vars = args.infer.vars.iter().map(|v| {
                let (k, v) = v.split_once('=').unwrap_or((v, ""));
                (k.to_owned(), v.to_owned())
            });
            let opts = kite::ArtifactOptions {
                name: args
                    .name
                    .unwrap_or_else(|| kite::artifact_name(&args.controller)),
                namespace: args.namespace.unwrap_or_default(),
                image: args.image.unwrap_or_default(),
                replicas: args.replicas,
                vars: vars.collect(),
                script: args.controller.clone(),
            };
            let rendered = kite::render_artifacts(&inference, &opts)?;
            for w in &rendered.warnings {
                eprintln!("warning: {w}");
            }
            let text = match args.output {
                OutputFormat::Yaml => kite::to_yaml(&rendered.objects)?,
                OutputFormat::Json => kite::to_json(&rendered.objects)?,
            };
            print!("{text}");
        }
    }
    Ok(())
}

/// RBAC inference with the kinds the user and, when reachable, the cluster know.
fn infer(script: &std::path::Path, args: &InferArgs) -> anyhow::Result<kite::Inference> {
    let vars = Vars::from_args(&args.vars, &[] as &[std::path::PathBuf])?;
    let mut catalog = kite::Catalog::builtin();
    for crd in &args.crds {
        catalog.add_crd_file(crd)?;
    }
    if !args.offline {
        let kube = kube_options(&args.cluster, false);
        catalog.add_discovered(kite::discover(&kube));
    }
    Ok(kite::infer(script, catalog, &vars, &args.rules)?)
}

fn init_logging(format: LogFormat, verbose: u8) {
    init_logging_with(format, verbose, "info");
}

/// As [`init_logging`], with `quiet` as the filter when not verbose.
fn init_logging_with(format: LogFormat, verbose: u8, quiet: &str) {
    use std::io::IsTerminal;
    let default = match verbose {
        0 => quiet,
        // -v is about kite: the HTTP/2 and TLS libraries' frame-by-frame lines only at -vv.
        1 => "debug,h2=info,rustls=info,hyper_util=info",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("KITE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal());
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}

fn run(args: RunArgs) -> ExitCode {
    init_logging(args.log.log_format, args.log.verbose);
    let vars = match Vars::from_args(&args.vars, &args.var_files) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    for warning in args.permissions.warnings() {
        eprintln!("{warning}");
    }
    let permissions = args.permissions.resolve();
    let Some(runtime) = runtime() else {
        return ExitCode::FAILURE;
    };
    let kube = kube_options(&args.cluster, args.dry_run);
    let mut host = Host::new(library(), vars, permissions, runtime.handle().clone())
        .with(kube)
        // --dry-run also makes every ssh client a dry run, as upstream's flag does.
        .with(kite::SshDryRun(args.dry_run));
    host.limits.memory = (args.script_memory as usize) << 20;
    // `on_signal` handlers get the signals of a `kite run` (not of `kite test`).
    host.ext::<kite::Signals>().deliver();
    let host = Arc::new(host);
    // The script runs on this thread, which is not a runtime worker, so builtins may
    // block on the runtime.
    let code = match kite::run_script(&args.file, &host) {
        Ok(Finished::Done) => ExitCode::SUCCESS,
        // os.exit(code): the script ended on purpose.
        Ok(Finished::HandedOff { mut handoff, .. }) if handoff.holds::<kite::ScriptExit>() => {
            ExitCode::from(handoff.take::<kite::ScriptExit>().map_or(0, |e| e.0))
        }
        Ok(Finished::HandedOff {
            handoff,
            module,
            positions,
            ..
        }) if kite::WebhookRequest::in_handoff(&handoff) => {
            let opts = kite::StandaloneOptions {
                handler_budget: args.handler_timeout,
                grace: args.grace_period,
                health_bind: args.health_bind,
                script: args.file.clone(),
            };
            let script = module.clone();
            let code = serve_webhook(host.clone(), handoff, module, positions, opts);
            run_deferred(&script, &host);
            code
        }
        Ok(Finished::HandedOff {
            handoff,
            module,
            positions,
            ..
        }) => match ControlRequest::from_handoff(handoff)
            .and_then(|request| Ok((request, Handlers::of_script(module.clone(), positions)?)))
        {
            // Rendered like a script error, with its exit code.
            Err(rendered) => {
                eprintln!("{rendered}");
                ExitCode::from(1)
            }
            Ok((request, handlers)) => {
                let opts = kite::StandaloneOptions {
                    handler_budget: args.handler_timeout,
                    grace: args.grace_period,
                    health_bind: args.health_bind,
                    script: args.file.clone(),
                };
                let ran = kite::run_standalone(host.clone(), request, handlers, opts);
                run_deferred(&module, &host);
                match ran {
                    Ok(()) => ExitCode::SUCCESS,
                    Err(e) => {
                        eprintln!("error: {e}");
                        ExitCode::FAILURE
                    }
                }
            }
        },
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(e.exit_code())
        }
    };
    // Events the script recorded are written in the background: wait for them.
    runtime.block_on(kite::flush_events(std::time::Duration::from_secs(10)));
    drop(host);
    runtime.shutdown_timeout(std::time::Duration::from_secs(5));
    code
}

/// The `defer`red functions of a script whose controller or webhook has stopped.
fn run_deferred(module: &kite::FrozenModule, host: &Host) {
    for e in kite::run_deferred_frozen(module, host) {
        eprintln!("warning: a deferred function failed: {e}");
    }
}

/// `kite dev` (alias `kite watch`): the reload loop, until SIGINT or SIGTERM.
fn dev(args: kite::cli::DevArgs) -> ExitCode {
    let run = args.run;
    for warning in run.permissions.warnings() {
        eprintln!("{warning}");
    }
    let opts = kite::DevOptions {
        file: run.file,
        vars: run.vars,
        var_files: run.var_files,
        permissions: run.permissions.resolve(),
        kube: kube_options(&run.cluster, run.dry_run),
        memory: (run.script_memory as usize) << 20,
        handler_budget: run.handler_timeout,
        grace: run.grace_period,
        clear: !args.no_clear,
        log_json: matches!(run.log.log_format, LogFormat::Json),
        verbose: run.log.verbose,
    };
    let Some(runtime) = runtime() else {
        return ExitCode::FAILURE;
    };
    let result = kite::run_dev(opts, runtime.handle().clone());
    runtime.shutdown_timeout(std::time::Duration::from_secs(5));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

/// `kite test`: exit code 1 when a test failed, 2 when the run could not be done.
fn test(args: TestArgs) -> ExitCode {
    for warning in args.permissions.warnings() {
        eprintln!("{warning}");
    }
    let options = kite::TestOptions {
        paths: args.paths,
        filter: args.filter,
        permissions: args.permissions.resolve(),
        vars: args.vars,
        var_files: args.var_files,
        kube: kube_options(&args.cluster, false),
        json: args.json,
        junit: args.junit,
        verbose: args.verbose,
        parallel: args.parallel.map(usize::from),
        timeout: args.timeout,
        memory: (args.script_memory as usize) << 20,
    };
    match kite::run_tests(&options, &mut std::io::stdout()) {
        Ok(totals) if totals.failed > 0 => ExitCode::FAILURE,
        Ok(_) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(e.exit_code())
        }
    }
}

/// `kite run` of a script that called `k8s.webhook(...)` (and maybe `k8s.control(...)`).
fn serve_webhook(
    host: Arc<Host>,
    handoff: kite::Handoff,
    module: kite::FrozenModule,
    positions: std::collections::HashMap<String, String>,
    opts: kite::StandaloneOptions,
) -> ExitCode {
    match kite::run_webhook(host, handoff, module, positions, opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// `kite kube gen-webhook-artifacts`.
fn gen_webhook_artifacts(args: kite::cli::GenWebhookArgs) -> anyhow::Result<()> {
    let infer_args = InferArgs {
        vars: args.vars.clone(),
        crds: args.crds.clone(),
        rules: Vec::new(),
        offline: args.offline,
        cluster: args.cluster.clone(),
    };
    let inference = infer(&args.webhook, &infer_args)?;
    let vars = args.vars.iter().map(|v| {
        let (k, v) = v.split_once('=').unwrap_or((v, ""));
        (k.to_owned(), v.to_owned())
    });
    let opts = kite::ArtifactOptions {
        name: args
            .name
            .unwrap_or_else(|| kite::artifact_name(&args.webhook)),
        namespace: args.namespace,
        image: args.image,
        replicas: args.replicas,
        vars: vars.collect(),
        script: args.webhook.clone(),
    };
    let web = kite::WebhookOptions {
        rules: args.rules,
        cert_manager: args.cert_manager,
    };
    let rendered = kite::render_webhook(&inference, &opts, &web)?;
    for w in inference.warnings.iter().chain(&rendered.warnings) {
        eprintln!("warning: {w}");
    }
    let text = match args.output {
        OutputFormat::Yaml => kite::to_yaml(&rendered.objects)?,
        OutputFormat::Json => kite::to_json(&rendered.objects)?,
    };
    print!("{text}");
    Ok(())
}
