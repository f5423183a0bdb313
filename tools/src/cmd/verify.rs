//! `kreplay verify`.

use std::fs::File;
use std::io::{BufWriter, Write};
use std::process::ExitCode;

use anyhow::Context;
use serde_json::json;

use crate::cli::VerifyArgs;
use crate::out;

pub fn run(a: VerifyArgs) -> anyhow::Result<ExitCode> {
    let file = super::open(&a.file)?;
    let data = file.bytes();
    let name = a.file.display().to_string();
    let stdout = std::io::stdout();
    let mut w = stdout.lock();
    match kreplay_format::verify(data) {
        Ok(r) => {
            if a.json {
                out!(
                    w,
                    "{}",
                    json!({"file": name, "intact": true, "events": r.events, "chunks": r.chunks,
                    "raw_bytes": r.raw_bytes, "stored_bytes": r.stored_bytes})
                );
            } else {
                out!(
                    w,
                    "{name}: intact: {} events, {} memory chunks, {} raw bytes stored in {}",
                    r.events,
                    r.chunks,
                    r.raw_bytes,
                    r.stored_bytes
                );
            }
            if a.salvage.is_some() {
                eprintln!("kreplay: {name} is intact; nothing to salvage");
            }
            Ok(ExitCode::SUCCESS)
        }
        Err(e) => {
            if a.json {
                out!(
                    w,
                    "{}",
                    json!({"file": name, "intact": false, "error": e.kind(),
                    "offset": e.offset(), "message": e.to_string()})
                );
            } else {
                eprintln!("{name}: {e}");
            }
            if let Some(out_path) = &a.salvage {
                let f = File::create(out_path)
                    .with_context(|| format!("cannot create {}", out_path.display()))?;
                let (_, report) = kreplay_format::salvage(data, BufWriter::new(f))
                    .with_context(|| format!("cannot salvage {name}"))?;
                eprintln!(
                    "kreplay: salvaged {} of {} intact events into {}{}",
                    report.kept_events,
                    report.intact_events,
                    out_path.display(),
                    if report.dropped_regions.is_empty() {
                        String::new()
                    } else {
                        format!(
                            "; dropped regions {:?} whose memory was cut off",
                            report.dropped_regions
                        )
                    }
                );
            }
            Ok(ExitCode::from(1))
        }
    }
}
