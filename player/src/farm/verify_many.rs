//! `kreplay verify DIR`: every capture checked in this process (CPU work, nothing to isolate),
//! `jobs` at once. Records are handed out as captures finish.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::channel;
use std::time::Instant;

use crate::farm::checksum;
use crate::farm::Entry;
use crate::run_record::{RunRecord, Verdict};
use kreplay_format::file::{verify_mapped, MappedFile};
use kreplay_format::{FormatError, VerifyReport};

/// Verifies one capture: `verified`, `damaged` (with the damage and its byte offset, or the
/// manifest's checksum it fails), or `error` when it cannot be read at all. The file is read
/// once for both its checksum and its verification.
pub fn verify_one(e: &Entry) -> RunRecord {
    let started = Instant::now();
    let mut r = RunRecord::new(e.shown.clone(), Verdict::Error);
    r.key = Some(e.key.clone());
    r.sha256 = e.sha256.clone();
    match MappedFile::open(&e.path) {
        Err(err) => {
            // As the checksum worded it when it read the file first.
            let verb = if e.sha256.is_some() { "read" } else { "open" };
            r.error = Some(format!("cannot {verb} {}: {err}", e.shown));
        }
        Ok(file) => {
            // The checksum first, over the mapping the verification then reads: a capture
            // that fails it is `damaged` without a verification pass.
            let refused = e
                .sha256
                .as_deref()
                .and_then(|want| checksum::differs(&checksum::sha256_mapped(&file), want));
            r = match refused {
                Some(why) => checksum::damaged(e, why),
                None => with_verification(r, &file, verify_mapped(&file, &mut |_, _, _| {})),
            };
        }
    }
    r.wall_s = started.elapsed().as_secs_f64();
    r
}

/// `r` with what the verification found.
fn with_verification(
    mut r: RunRecord,
    file: &MappedFile,
    verified: Result<VerifyReport, FormatError>,
) -> RunRecord {
    match verified {
        Ok(_) => {
            r.verdict = Verdict::Verified;
            if let Ok(cap) = kreplay_format::Capture::parse(file.bytes()) {
                r = r.with_kernel(&cap.dispatch.kernel_name);
            }
        }
        Err(err) => {
            r.verdict = Verdict::Damaged;
            r.error = Some(damage_text(&err.to_string(), err.offset()));
        }
    }
    r
}

/// The damage as `verify` words it, with its byte offset when the words leave it out.
fn damage_text(message: &str, offset: Option<u64>) -> String {
    match offset {
        Some(o) if !message.contains(&o.to_string()) => format!("{message} (at byte {o})"),
        _ => message.to_string(),
    }
}

/// Verifies `entries` on `jobs` threads, handing each record to `report` as it finishes.
pub fn verify_many(
    entries: &[Entry],
    jobs: usize,
    report: &mut dyn FnMut(&RunRecord) -> std::io::Result<()>,
) -> std::io::Result<Vec<Verdict>> {
    let next = AtomicUsize::new(0);
    let (tx, rx) = channel();
    std::thread::scope(|s| {
        for _ in 0..jobs.clamp(1, entries.len().max(1)) {
            let tx = tx.clone();
            let next = &next;
            s.spawn(move || loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(e) = entries.get(i) else { break };
                if tx.send(verify_one(e)).is_err() {
                    break;
                }
            });
        }
        drop(tx);
        let mut verdicts = Vec::with_capacity(entries.len());
        for r in rx {
            // On a failed report the workers stop at their next send.
            report(&r)?;
            verdicts.push(r.verdict);
        }
        Ok(verdicts)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kreplay_protocol::corpus::sha256_file;
    use std::path::Path;

    fn entry(path: &Path, sha256: Option<String>) -> Entry {
        Entry {
            shown: "x.krr".into(),
            key: "x.krr".into(),
            path: path.to_path_buf(),
            sha256,
        }
    }

    // Catches: the one-read verification losing either half: a capture whose checksum
    // fails passing as verified, or a damaged one passing on its checksum alone.
    #[test]
    fn one_read_gives_both_the_checksum_and_the_verification() {
        let d = tempfile::tempdir().expect("tempdir");
        let good = d.path().join("good.krr");
        std::fs::write(&good, crate::testdata::bytes("cuda-saxpy")).expect("write");
        let sha = sha256_file(&good).expect("hash");
        let r = verify_one(&entry(&good, Some(sha.clone())));
        assert_eq!((r.verdict, r.error), (Verdict::Verified, None));
        assert_eq!(r.sha256.as_deref(), Some(sha.as_str()));
        let r = verify_one(&entry(&good, Some("00".into())));
        assert_eq!(r.verdict, Verdict::Damaged);
        assert!(
            r.error
                .as_deref()
                .is_some_and(|e| e.contains(&sha) && e.contains("the manifest's 00")),
            "{:?}",
            r.error
        );
        let mut cut = crate::testdata::bytes("cuda-saxpy");
        cut.truncate(cut.len() / 2);
        let cut_path = d.path().join("cut.krr");
        std::fs::write(&cut_path, &cut).expect("write");
        let cut_sha = sha256_file(&cut_path).expect("hash");
        let r = verify_one(&entry(&cut_path, Some(cut_sha)));
        assert_eq!(
            r.verdict,
            Verdict::Damaged,
            "its checksum holds, its log does not"
        );
        assert!(
            !r.error.as_deref().unwrap_or("").contains("SHA-256"),
            "{:?}",
            r.error
        );
        let gone = verify_one(&entry(&d.path().join("gone.krr"), Some(sha)));
        assert_eq!(gone.verdict, Verdict::Error);
        assert!(
            gone.error
                .as_deref()
                .is_some_and(|e| e.starts_with("cannot read x.krr: ")),
            "{:?}",
            gone.error
        );
        let gone = verify_one(&entry(&d.path().join("gone.krr"), None));
        assert!(
            gone.error
                .as_deref()
                .is_some_and(|e| e.starts_with("cannot open x.krr: ")),
            "{:?}",
            gone.error
        );
    }

    #[test]
    fn the_offset_is_added_only_when_the_message_lacks_it() {
        assert_eq!(damage_text("bad crc", Some(4096)), "bad crc (at byte 4096)");
        assert_eq!(
            damage_text("bad crc at byte 4096", Some(4096)),
            "bad crc at byte 4096"
        );
        assert_eq!(damage_text("truncated", None), "truncated");
    }
}
