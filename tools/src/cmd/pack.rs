//! `kreplay pack`.

use std::process::ExitCode;

use anyhow::Context;
use kreplay_format::file::pack_to_file;
use kreplay_format::{PackOptions, Reference};

use crate::cli::PackArgs;
use crate::describe::bytes;

pub fn run(a: PackArgs) -> anyhow::Result<ExitCode> {
    let file = super::open(&a.file)?;
    if file.is_same_file(&a.output) {
        anyhow::bail!(
            "-o {}: that is the capture itself; pack into another file",
            a.output.display()
        );
    }
    let opts = PackOptions {
        level: a.level,
        drop_post: a.drop_post,
        redact: a.redact,
    };
    let report = pack_to_file(file.bytes(), &a.output, a.force, opts)
        .with_context(|| format!("cannot pack {}", a.file.display()))?;
    let size = std::fs::metadata(&a.output).map(|m| m.len()).unwrap_or(0);
    let mut what = Vec::new();
    if a.redact {
        what.push(format!(
            "{} of data replaced by pseudo-random bytes ({} of pointer and handle words and {} module global region(s) kept)",
            bytes(report.redacted_bytes),
            bytes(report.kept_bytes),
            report.kept_regions
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
        a.level,
        if what.is_empty() { "" } else { ": " },
        what.join("; ")
    );
    Ok(ExitCode::SUCCESS)
}
