//! The command-line interface: argument types only, parsed by clap.

use clap::{Parser, Subcommand};

/// Kubernetes controllers written as Starlark scripts.
#[derive(Debug, Parser)]
#[command(name = "kite", version, about)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print the version of kite.
    Version,
}
