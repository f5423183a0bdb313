//! `kreplay`: record one GPU kernel dispatch out of a running application, inspect it, and
//! replay it. The logic lives in the library crates; this binary parses flags and prints.

#![deny(clippy::undocumented_unsafe_blocks)]

mod cli;
mod cmd;
mod output;
use kreplay_protocol::progress;

use kreplay_player::describe;

use std::process::ExitCode;

use clap::FromArgMatches;

/// The parsed command line. `--version` is answered here, with what this machine has (clap's
/// own answer is a fixed string).
fn parse() -> Result<cli::Cli, ExitCode> {
    let mut command = cli::command();
    let mut matches = match command.try_get_matches_from_mut(std::env::args_os()) {
        Ok(m) => m,
        Err(e) if e.kind() == clap::error::ErrorKind::DisplayVersion => {
            return Err(cmd::version::print())
        }
        Err(e) => e.exit(),
    };
    match cli::Cli::from_arg_matches_mut(&mut matches) {
        Ok(cli) => Ok(cli),
        Err(e) => e.format(&mut command).exit(),
    }
}

fn main() -> ExitCode {
    let args = match parse() {
        Ok(a) => a,
        Err(code) => return code,
    };
    output::init_color(args.color);
    let result = match args.command {
        cli::Command::Info(a) => cmd::info::run(a),
        cli::Command::Verify(a) => cmd::verify::run(a),
        cli::Command::Extract(a) => cmd::extract::run(a),
        cli::Command::Play(a) => cmd::play::run(a),
        cli::Command::Record(a) => cmd::record::run_record(a),
        cli::Command::List(a) => cmd::record::run_list(a),
        cli::Command::Profile(a) => cmd::profile::run(a),
        cli::Command::Diff(a) => cmd::diff::run(a),
        cli::Command::Compare(a) => cmd::compare_runs::run(a),
        cli::Command::Pack(a) => cmd::pack::run(a),
        cli::Command::Completions(a) => cmd::completions::run(a, cli::command()),
        cli::Command::Man(a) => cmd::man::run(a.dir.as_deref(), cli::command()),
        cli::Command::VerifyTrace(a) => cmd::verify_trace::run(a),
    };
    match result {
        Ok(code) => code,
        Err(e) => {
            if output::is_broken_pipe(&e) {
                return ExitCode::SUCCESS;
            }
            // Messages quote names and paths from captures: keep control characters inert.
            crate::warn!("kreplay: error: {}", output::error_text(&e));
            ExitCode::from(2)
        }
    }
}
