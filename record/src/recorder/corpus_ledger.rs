//! Owner of a corpus's shared state (`record --each-kernel`): the `--max-bytes` budget, the
//! slot of each match to be captured (its file name), and the kernels left out. Shared by the
//! kernels owner (which picks captures), the outputs (which name them) and the sink's writer
//! threads (which charge each finished file to the budget).
//!
//! The budget is the run's, not the process's: when a report directory is set (always, under
//! `kreplay record`), the bytes kept so far are in a file there, read and updated under an
//! exclusive `flock`, so the processes of a multi-process application share one bound.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use kreplay_protocol::corpus::LeftOut;
use kreplay_protocol::each_kernel::{CorpusSlot, EachKernel};

use super::locking::lock;

/// The folder inside the report directory for the files below (`kreplay record` reads every
/// plain file at the top of the report directory as a process report).
const CORPUS_DIR: &str = "corpus";
/// The file in the report directory's corpus folder holding the bytes the corpus keeps (a decimal number).
const LEDGER_FILE: &str = "corpus-bytes";
/// Present in the report directory's corpus folder once the budget refused a capture (every process stops).
const FULL_FILE: &str = "corpus-full";

/// The owner (see the module comment).
#[derive(Debug)]
pub(super) struct CorpusLedger {
    pub each: EachKernel,
    /// The report directory's corpus folder (`None`: none, or it cannot be made).
    report_dir: Option<PathBuf>,
    /// The budget refused a capture in this process, or another process's did.
    full: AtomicBool,
    /// Bytes kept, without a report directory.
    kept: Mutex<u64>,
    /// Match index → its slot, for the file name.
    slots: Mutex<HashMap<u64, CorpusSlot>>,
    left_out: Mutex<Vec<LeftOut>>,
}

/// Whether a capture of `bytes` fits beside `used` under `max`.
pub(super) fn fits(used: u64, bytes: u64, max: u64) -> bool {
    used.checked_add(bytes).is_some_and(|total| total <= max)
}

impl CorpusLedger {
    pub(super) fn new(each: EachKernel, report_dir: Option<&Path>) -> CorpusLedger {
        let report_dir = report_dir
            .map(|d| d.join(CORPUS_DIR))
            .filter(|d| std::fs::create_dir_all(d).is_ok());
        CorpusLedger {
            each,
            report_dir,
            full: AtomicBool::new(false),
            kept: Mutex::new(0),
            slots: Mutex::default(),
            left_out: Mutex::default(),
        }
    }

    /// Whether capturing has stopped (asked only when a capture would be taken: it may look
    /// at the report directory).
    pub(super) fn is_full(&self) -> bool {
        if self.each.max_bytes.is_none() {
            return false;
        }
        if self.full.load(Ordering::SeqCst) {
            return true;
        }
        let elsewhere = self
            .report_dir
            .as_ref()
            .is_some_and(|d| d.join(FULL_FILE).exists());
        if elsewhere {
            self.full.store(true, Ordering::SeqCst);
        }
        elsewhere
    }

    /// Charges a finished capture of `bytes` to the budget: false (and capturing stops) when
    /// it would pass `--max-bytes`, or when capturing had stopped already.
    pub(super) fn charge(&self, bytes: u64) -> bool {
        let Some(max) = self.each.max_bytes else {
            return true;
        };
        if self.is_full() {
            return false;
        }
        let kept = match &self.report_dir {
            Some(dir) => charge_file(&dir.join(LEDGER_FILE), bytes, max).unwrap_or_else(|e| {
                crate::diag!(
                    "kreplay: the corpus budget file is unusable ({e}); this process keeps its own"
                );
                charge_local(&mut lock(&self.kept), bytes, max)
            }),
            None => charge_local(&mut lock(&self.kept), bytes, max),
        };
        if !kept {
            self.full.store(true, Ordering::SeqCst);
            if let Some(dir) = &self.report_dir {
                let _ = std::fs::write(dir.join(FULL_FILE), b"");
            }
        }
        kept
    }

    pub(super) fn assign(&self, match_index: u64, slot: CorpusSlot) {
        lock(&self.slots).insert(match_index, slot);
    }

    pub(super) fn slot(&self, match_index: u64) -> Option<CorpusSlot> {
        lock(&self.slots).get(&match_index).copied()
    }

    /// Notes that kernel `mangled` is left out (once per kernel and reason).
    pub(super) fn leave_out(&self, kernel: String, mangled: &str, why: String) {
        let mut l = lock(&self.left_out);
        if !l.iter().any(|o| o.mangled == mangled && o.why == why) {
            l.push(LeftOut {
                kernel,
                mangled: mangled.to_string(),
                why,
            });
        }
    }

    pub(super) fn left_out(&self) -> Vec<LeftOut> {
        lock(&self.left_out).clone()
    }
}

fn charge_local(kept: &mut u64, bytes: u64, max: u64) -> bool {
    let ok = fits(*kept, bytes, max);
    if ok {
        *kept += bytes;
    }
    ok
}

/// `charge_local` on the number in `path`, under an exclusive lock of the file.
fn charge_file(path: &Path, bytes: u64, max: u64) -> std::io::Result<bool> {
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)?;
    let locked = FileLock::exclusive(&f)?;
    let mut f = locked.0;
    let mut text = String::new();
    f.read_to_string(&mut text)?;
    let mut kept = match text.trim() {
        "" => 0,
        t => t.parse::<u64>().map_err(|_| {
            std::io::Error::new(std::io::ErrorKind::InvalidData, format!("holds {t:?}"))
        })?,
    };
    let ok = charge_local(&mut kept, bytes, max);
    if ok {
        f.seek(SeekFrom::Start(0))?;
        f.set_len(0)?;
        f.write_all(kept.to_string().as_bytes())?;
    }
    Ok(ok)
}

/// An exclusive `flock` on a file, released on drop.
struct FileLock<'a>(&'a File);

impl<'a> FileLock<'a> {
    fn exclusive(f: &'a File) -> std::io::Result<FileLock<'a>> {
        // SAFETY: flock on a descriptor this File owns and keeps open while the lock lives.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(FileLock(f))
    }
}

impl Drop for FileLock<'_> {
    fn drop(&mut self) {
        // SAFETY: the descriptor is still open (the File outlives this guard).
        unsafe {
            libc::flock(self.0.as_raw_fd(), libc::LOCK_UN);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kreplay_protocol::each_kernel::KeyBy;

    fn each(max: Option<u64>) -> EachKernel {
        EachKernel {
            per_kernel: 1,
            by: KeyBy::Name,
            max_bytes: max,
        }
    }

    #[test]
    fn a_capture_fits_up_to_the_bound_inclusive() {
        assert!(fits(0, 10, 10));
        assert!(!fits(1, 10, 10));
        assert!(!fits(u64::MAX, 1, u64::MAX));
    }

    #[test]
    fn the_first_capture_that_would_pass_stops_capturing() {
        let l = CorpusLedger::new(each(Some(100)), None);
        assert!(!l.is_full());
        assert!(l.charge(60));
        assert!(!l.charge(50), "60 + 50 passes 100");
        assert!(l.is_full());
        assert!(!l.charge(10), "capturing stopped, even for what would fit");
        let unbounded = CorpusLedger::new(each(None), None);
        assert!(unbounded.charge(u64::MAX) && !unbounded.is_full());
    }

    #[test]
    fn processes_share_the_budget_through_the_report_directory() {
        let dir = std::env::temp_dir().join(format!("kreplay-ledger-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let a = CorpusLedger::new(each(Some(100)), Some(&dir));
        let b = CorpusLedger::new(each(Some(100)), Some(&dir));
        assert!(a.charge(70));
        assert!(!b.charge(40), "a kept 70 already");
        assert!(a.is_full(), "b's refusal stops a too");
        assert_eq!(
            std::fs::read_to_string(dir.join(CORPUS_DIR).join(LEDGER_FILE)).unwrap(),
            "70"
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_kernel_is_left_out_once_per_reason_and_slots_are_kept_by_match() {
        let l = CorpusLedger::new(each(None), None);
        l.leave_out("a".into(), "_Z1av", "full".into());
        l.leave_out("a".into(), "_Z1av", "full".into());
        l.leave_out("a".into(), "_Z1av", "too big".into());
        assert_eq!(l.left_out().len(), 2);
        let slot = CorpusSlot {
            kernel_index: 2,
            execution: 1,
        };
        l.assign(5, slot);
        assert_eq!(l.slot(5), Some(slot));
        assert_eq!(l.slot(6), None);
    }
}
