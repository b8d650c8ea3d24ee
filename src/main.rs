//! The `quiverdb` binary: `serve` runs the Flight SQL server, `sql` is an
//! interactive SQL shell over Flight SQL, `load` bulk-loads a CSV or
//! Parquet file through Flight SQL ingest.

use std::process::ExitCode;

use clap::{Parser, Subcommand};

mod cli;

/// quiverdb: an in-memory columnar database served over Arrow Flight SQL.
#[derive(Debug, Parser)]
#[command(name = "quiverdb", version, about)]
struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Serve a quiverdb database over Arrow Flight SQL.
    Serve(cli::serve::ServeArgs),
    /// An interactive SQL shell (or one statement with -c) against a server.
    Sql(cli::shell::SqlArgs),
    /// Load a CSV or Parquet file into a table through Flight SQL ingest.
    Load(cli::load::LoadArgs),
}

fn main() -> ExitCode {
    let args = Args::parse();
    let result = match args.command {
        Command::Serve(args) => cli::serve::run(args),
        Command::Sql(args) => cli::shell::run(args),
        Command::Load(args) => cli::load::run(args),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
