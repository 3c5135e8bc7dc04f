//! The `kite` binary: parses the command line and wires the library together.

use std::process::ExitCode;

use std::sync::Arc;

use clap::Parser;
use kite::cli::{Cli, Command, LogFormat, RunArgs};
use kite::control::standalone;
use kite::script::host::{Host, KubeOptions};
use kite::script::permissions::Permissions;
use kite::script::run::Finished;
use kite::script::vars::Vars;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Version => {
            println!("{}", kite::version::version_line());
            ExitCode::SUCCESS
        }
        Command::Check { file } => match kite::script::check::check(&file) {
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
    }
}

fn init_logging(format: LogFormat, verbose: u8) {
    let default = match verbose {
        0 => "info",
        1 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("KITE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    use std::io::IsTerminal;
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
    init_logging(args.log_format, args.verbose);
    let vars = match Vars::from_args(&args.vars, &args.var_files) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let permissions = Permissions::from_flags(
        args.allow_all,
        args.allow_k8s,
        args.allow_net,
        args.allow_fs,
        args.allow_env,
    );
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: starting the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let kube = KubeOptions {
        kubeconfig: args.kubeconfig,
        context: args.context,
        dry_run: args.dry_run,
    };
    let host = Arc::new(Host::new(vars, permissions, runtime.handle().clone(), kube));
    // The script runs on this thread, which is not a runtime worker, so builtins may
    // block on the runtime.
    let code = match kite::script::run::run(&args.file, &host) {
        Ok(Finished::Done) => ExitCode::SUCCESS,
        Ok(Finished::Controller { request, handlers }) => {
            let opts = standalone::Options {
                handler_budget: args.handler_timeout,
                grace: args.grace_period,
                health_bind: args.health_bind,
                script: args.file.clone(),
            };
            match standalone::run(host.clone(), *request, handlers, opts) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::from(e.exit_code())
        }
    };
    drop(host);
    runtime.shutdown_timeout(std::time::Duration::from_secs(5));
    code
}
