//! `kreplay pack`.

use std::process::ExitCode;

use anyhow::Context;
use kreplay_format::file::pack_to_file;
use kreplay_format::{PackOptions, Reference};

use crate::cli::PackArgs;
use crate::describe::bytes;

/// The zstd level when none is asked: the smallest files while that takes seconds (zstd's
/// levels are not monotonic below 19 on every kind of data: 9 can be larger than 1).
fn default_level(memory_bytes: u64) -> i32 {
    if memory_bytes <= 1 << 30 {
        19
    } else {
        3
    }
}

pub fn run(a: PackArgs) -> anyhow::Result<ExitCode> {
    let file = super::open(&a.file)?;
    if file.is_same_file(&a.output) {
        anyhow::bail!(
            "-o {}: that is the capture itself; pack into another file",
            a.output.display()
        );
    }
    super::check_new_output(&a.output, a.force, "-o")?;
    let parsed = kreplay_format::Capture::parse(file.bytes()).ok();
    if let Some(c) = &parsed {
        kreplay_format::range::refuse_range(c, "pack").map_err(anyhow::Error::msg)?;
    }
    let memory: u64 = parsed
        .as_ref()
        .map(|c| c.regions.iter().map(|r| r.size).sum())
        .unwrap_or(0);
    // Parameter types from the signature (what redaction replaces an argument by, and the
    // element type of the memory it points to).
    let param_types = parsed
        .as_ref()
        .map(|c| kreplay_player::params::param_types(&c.dispatch))
        .unwrap_or_default();
    drop(parsed);
    let opts = PackOptions {
        level: a.level.unwrap_or(default_level(memory)),
        drop_post: a.drop_post,
        redact: a.redact,
        param_types,
    };
    let progress = crate::progress::Progress::bytes("packing", memory);
    let report = pack_to_file(
        &file,
        &a.output,
        a.force,
        opts,
        &mut |phase, done, total| {
            let what = match phase {
                kreplay_format::Phase::Pack => "packing",
                kreplay_format::Phase::Scan => "checksums",
                kreplay_format::Phase::Chunks => "verifying",
            };
            progress.set(what, done, total)
        },
    )
    .with_context(|| format!("cannot pack {}", a.file.display()))?;
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
