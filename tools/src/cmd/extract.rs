//! `kreplay extract`: the player extracts (`kreplay_player::extract`); this says what it
//! wrote.

use std::process::ExitCode;

use anyhow::Context;
use kreplay_format::Capture;
use kreplay_player::extract::Extraction;

use crate::cli::ExtractArgs;

pub fn run(a: ExtractArgs) -> anyhow::Result<ExitCode> {
    let file = super::open(&a.file)?;
    let cap = Capture::parse(file.bytes()).with_context(|| format!("{}", a.file.display()))?;
    let name = a.file.display().to_string();
    let extraction = Extraction::plan(&file, &cap, &name, a.force, a.repro.is_some())?;
    if let Some(dir) = &a.output {
        let done = extraction.write_files(dir)?;
        let arguments = if cap.is_range() {
            format!(
                "{} step file(s) (step-K-args.bin, -host.bin, -received.bin)",
                done.argument_files
            )
        } else {
            "args.bin".to_string()
        };
        crate::warn!(
            "kreplay: extracted {} module(s), {arguments} and {} region(s) into {}",
            done.modules,
            done.regions,
            dir.display()
        );
        for r in &cap.regions {
            let absent = r.size.saturating_sub(cap.present_bytes(r.region_id));
            if absent > 0 {
                crate::warn!(
                    "kreplay: region {}: {} of {} absent (captured by touched pages): zeros in its .bin files; capture.json lists the present ranges (`extents`)",
                    r.region_id,
                    kreplay_format::units::bytes(absent),
                    kreplay_format::units::bytes(r.size)
                );
            }
        }
    }
    if let Some(dir) = &a.repro {
        if let Some(files) = extraction.write_repro(dir)? {
            crate::warn!(
                "kreplay: wrote a reproducer into {} ({} files): make -C {} && {}/repro",
                dir.display(),
                files,
                dir.display(),
                dir.display()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
