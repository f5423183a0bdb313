//! `kreplay verify`.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use kreplay_format::SalvageRefused;

use crate::cli::VerifyArgs;
use crate::describe::bytes;
use crate::out;

/// Exit 0 when every file is intact, 1 when one is damaged, 2 when one cannot be read.
pub fn run(a: VerifyArgs) -> anyhow::Result<ExitCode> {
    if super::farm::verify_wants_many(&a) {
        return super::farm::verify(&a);
    }
    if a.salvage.is_some() && a.files.len() > 1 {
        anyhow::bail!("--salvage takes one capture at a time");
    }
    // Before any work: where the salvaged capture would go must be writable.
    if let (Some(out), [input]) = (&a.salvage, a.files.as_slice()) {
        use std::os::unix::fs::MetadataExt;
        let id = |p: &Path| std::fs::metadata(p).map(|m| (m.dev(), m.ino())).ok();
        // The capture itself is refused once it is known to be damaged (below).
        if id(out).is_none() || id(out) != id(input) {
            super::check_new_output(out, a.force, "--salvage")?;
        }
    }
    let stdout = std::io::stdout();
    let mut w = stdout.lock();
    let (mut damaged, mut unreadable) = (0, 0);
    for path in &a.files {
        match verify_one(path, &a, &mut w) {
            Ok(true) => {}
            Ok(false) => damaged += 1,
            Err(e) if a.files.len() > 1 && !crate::output::is_broken_pipe(&e) => {
                crate::warn!("kreplay: error: {}", crate::output::error_text(&e));
                unreadable += 1;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(if unreadable > 0 {
        ExitCode::from(2)
    } else if damaged > 0 {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// Verifies one file (and salvages it when asked); whether it is intact.
fn verify_one(path: &Path, a: &VerifyArgs, w: &mut impl Write) -> anyhow::Result<bool> {
    let file = super::open(path)?;
    let data = file.bytes();
    let name = crate::output::printable(&path.display().to_string()).into_owned();
    // Each stretch of the file is dropped from memory once checked: bounded whatever its size.
    let progress = crate::progress::Progress::bytes("verifying", data.len() as u64);
    let verified = kreplay_format::file::verify_mapped(&file, &mut |phase, done, total| {
        let what = match phase {
            kreplay_format::Phase::Scan => "checksums",
            kreplay_format::Phase::Chunks | kreplay_format::Phase::Pack => "decoding",
        };
        progress.set(what, done, total);
    });
    drop(progress);
    let verdict = kreplay_format::Verdict::of(&name, &verified);
    if a.json {
        serde_json::to_writer(&mut *w, &verdict)?;
        out!(w);
    }
    match (&verified, &a.salvage) {
        (Ok(r), salvage) => {
            if !a.json {
                out!(
                    w,
                    "{name}: {}: {} events, {} memory chunks, {} of memory stored in {}",
                    crate::output::verdict("intact", true),
                    r.events,
                    r.chunks,
                    bytes(r.raw_bytes),
                    bytes(r.stored_bytes)
                );
            }
            if salvage.is_some() {
                crate::warn!("kreplay: {name} is intact; nothing to salvage");
            }
            Ok(true)
        }
        (Err(e), salvage) => {
            if !a.json {
                crate::warn!("{name}: {}", crate::output::printable(&e.to_string()));
            }
            if let Some(out_path) = salvage {
                salvage_into(&file, out_path, &name, a.force)?;
            }
            Ok(false)
        }
    }
}

/// Salvages the damaged capture `file` (called `name` in messages) into `out_path`, and says
/// on stderr what it kept and whether the result can be replayed.
fn salvage_into(
    file: &kreplay_format::file::MappedFile,
    out_path: &Path,
    name: &str,
    force: bool,
) -> anyhow::Result<()> {
    let report = match kreplay_format::salvage_into(file, name, out_path, force) {
        Ok(report) => report,
        Err(e @ SalvageRefused::IntoItself(_)) => anyhow::bail!("--salvage {e}"),
        Err(e) => return Err(e.into()),
    };
    let dropped = salvage_losses(&report);
    if report.replay_blockers.is_empty() {
        crate::warn!(
            "kreplay: salvaged {} of {} intact events into {} (verified){}",
            report.kept_events,
            report.intact_events,
            out_path.display(),
            dropped
        );
    } else {
        crate::warn!(
            "kreplay: salvaged {} of {} intact events into {}{}; it {}: {}",
            report.kept_events,
            report.intact_events,
            out_path.display(),
            dropped,
            crate::output::verdict("cannot be replayed", false),
            report.replay_blockers.join("; ")
        );
    }
    Ok(())
}

/// What a salvage lost, as clauses to append to its summary ("" when it lost nothing).
fn salvage_losses(report: &kreplay_format::SalvageReport) -> String {
    let mut dropped = String::new();
    if !report.lost_events.is_empty() {
        dropped += &format!(
            "; skipped {} damaged event(s) and read on (first at byte {})",
            report.lost_events.len(),
            report.lost_events[0].0
        );
    }
    if !report.dropped_regions.is_empty() {
        dropped += &format!(
            "; dropped regions {:?} whose memory was lost",
            report.dropped_regions
        );
    }
    if !report.dropped_events.is_empty() {
        dropped += &format!(
            "; dropped {} event(s) that broke the format's rules (first at byte {})",
            report.dropped_events.len(),
            report.dropped_events[0].0
        );
    }
    if report.unknown_output_chunks > 0 {
        dropped += &format!(
            "; the recorded output of {} chunk(s) is unknown (the kernel may have written them after byte {}): play --verify checks them for determinism only",
            report.unknown_output_chunks,
            report
                .lost_from
                .or(report.lost_events.first().map(|l| l.0))
                .unwrap_or(0)
        );
    }
    dropped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_salvage_that_lost_nothing_adds_no_clause() {
        assert_eq!(
            salvage_losses(&kreplay_format::SalvageReport::default()),
            ""
        );
    }

    #[test]
    fn each_loss_of_a_salvage_is_one_clause_in_order() {
        let report = kreplay_format::SalvageReport {
            lost_events: vec![(4096, 7)],
            dropped_regions: vec![2, 5],
            unknown_output_chunks: 3,
            ..Default::default()
        };
        assert_eq!(
            salvage_losses(&report),
            "; skipped 1 damaged event(s) and read on (first at byte 4096)\
             ; dropped regions [2, 5] whose memory was lost\
             ; the recorded output of 3 chunk(s) is unknown (the kernel may have written them \
             after byte 4096): play --verify checks them for determinism only"
        );
    }
}
