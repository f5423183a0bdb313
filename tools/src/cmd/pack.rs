//! `kreplay pack`: the player packs (`kreplay_player::pack`); this checks the output first
//! and prints what the pack did.

use std::process::ExitCode;

use kreplay_format::Reference;
use kreplay_player::pack::{pack_file, PackPlan, PackRequest};

use crate::cli::PackArgs;
use crate::describe::bytes;

pub fn run(a: PackArgs) -> anyhow::Result<ExitCode> {
    let file = super::open(&a.file)?;
    // Before the output is checked: naming the capture itself is the clearer mistake.
    kreplay_player::pack::refuse_into_itself(&file, &a.output)
        .map_err(|e| anyhow::anyhow!("-o {e}"))?;
    super::check_new_output(&a.output, a.force, "-o")?;
    let request = PackRequest {
        level: a.level,
        redact: a.redact,
        drop_post: a.drop_post,
    };
    let plan = PackPlan::of(file.bytes(), request)?;
    let progress = crate::progress::Progress::bytes("packing", plan.memory_bytes);
    let name = a.file.display().to_string();
    let report = pack_file(
        &file,
        &name,
        &a.output,
        a.force,
        plan,
        &mut |phase, done, total| {
            let what = match phase {
                kreplay_format::Phase::Pack => "packing",
                kreplay_format::Phase::Scan => "checksums",
                kreplay_format::Phase::Chunks => "verifying",
            };
            progress.set(what, done, total)
        },
    )?;
    drop(progress);
    let size = std::fs::metadata(&a.output).map(|m| m.len()).unwrap_or(0);
    let mut what = Vec::new();
    if let Some(r) = &report.redaction {
        let replaced = r.fields.iter().filter(|f| !f.kept).count();
        what.push(format!(
            "{} of data replaced by generated values ({} of pointer and handle words and {} module global region(s) kept); {} field(s) replaced and {} kept, listed by kreplay info",
            bytes(report.redacted_bytes),
            bytes(report.kept_bytes),
            report.kept_regions,
            replaced,
            r.fields.len() - replaced
        ));
    }
    if report.dropped_post_bytes > 0 {
        what.push(format!(
            "{} of recorded output dropped (the write set kept)",
            bytes(report.dropped_post_bytes)
        ));
    }
    if report.reference.is_some_and(|r| r != Reference::Recorded) {
        what.push("play --verify will check determinism only".into());
    }
    crate::warn!(
        "kreplay: packed {} ({}) into {} ({}, zstd level {}, verified){}{}",
        a.file.display(),
        bytes(file.bytes().len() as u64),
        a.output.display(),
        bytes(size),
        report.level,
        if what.is_empty() { "" } else { ": " },
        what.join("; ")
    );
    Ok(ExitCode::SUCCESS)
}
