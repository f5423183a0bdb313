//! `kreplay completions SHELL`: a completion script from the same definitions as `--help`.

use std::process::ExitCode;

pub fn run(args: crate::cli::CompletionsArgs, mut cmd: clap::Command) -> anyhow::Result<ExitCode> {
    super::print_generated(|w| {
        clap_complete::generate(args.shell, &mut cmd, "kreplay", w);
        Ok(())
    })
}
