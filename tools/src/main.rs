//! `kreplay`: record one GPU kernel dispatch out of a running application, inspect it, and
//! replay it. The logic lives in the library crates; this binary parses flags and prints.

#![deny(clippy::undocumented_unsafe_blocks)]

mod cli;
mod cmd;
mod output;
use kreplay_protocol::progress;

use kreplay_player::describe;

use std::process::ExitCode;

use clap::Parser;

/// Writes generated text (completions, the man page) to stdout. Generated in memory first:
/// the generators panic on a failed write, and a closed pipe is not an error.
fn generated(
    write: impl FnOnce(&mut dyn std::io::Write) -> std::io::Result<()>,
) -> anyhow::Result<ExitCode> {
    let mut text = Vec::new();
    write(&mut text)?;
    let stdout = std::io::stdout();
    let mut w = stdout.lock();
    std::io::Write::write_all(&mut w, &text)?;
    std::io::Write::flush(&mut w)?;
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    let args = cli::Cli::parse();
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
        cli::Command::Pack(a) => cmd::pack::run(a),
        cli::Command::Completions(a) => generated(|w| {
            let mut c = <cli::Cli as clap::CommandFactory>::command();
            clap_complete::generate(a.shell, &mut c, "kreplay", w);
            Ok(())
        }),
        cli::Command::Man => generated(|w| {
            clap_mangen::Man::new(<cli::Cli as clap::CommandFactory>::command()).render(w)
        }),
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
