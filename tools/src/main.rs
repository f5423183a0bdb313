//! `kreplay`: record one GPU kernel dispatch out of a running application, inspect it, and
//! replay it. The logic lives in the library crates; this binary parses flags and prints.

mod cli;
mod cmd;
mod describe;
mod output;
mod params;

use std::process::ExitCode;

use clap::Parser;

fn main() -> ExitCode {
    let args = cli::Cli::parse();
    let result = match args.command {
        cli::Command::Info(a) => cmd::info::run(a),
        cli::Command::Verify(a) => cmd::verify::run(a),
        cli::Command::Extract(a) => cmd::extract::run(a),
        cli::Command::Play(a) => cmd::play::run(a),
        cli::Command::Record(a) => cmd::record::run_record(a),
        cli::Command::List(a) => cmd::record::run_list(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            if output::is_broken_pipe(&e) {
                return ExitCode::SUCCESS;
            }
            // Messages quote names and paths from captures: keep control characters inert.
            crate::warn!("kreplay: error: {}", output::printable(&format!("{e:#}")));
            ExitCode::from(2)
        }
    }
}
