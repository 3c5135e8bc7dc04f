//! The `kite` binary: parses the command line and wires the library together.

use clap::Parser;
use kite::cli::{Cli, Command};

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Version => println!("{}", kite::version::version_line()),
    }
    Ok(())
}
