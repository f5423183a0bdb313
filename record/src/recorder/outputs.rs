//! Where captures go and what the report directory is told: file names, the capture UUID,
//! `.partial` files noted so `kreplay record` can remove them if the application dies, and
//! the notes a finished capture and a started recorder leave there.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use kreplay_format::file::PendingFile;
use kreplay_format::WriterOptions;
use kreplay_protocol::config::{demangle, expand_output, short_kernel_name, Config};
use kreplay_protocol::each_kernel::expand_slot;
use kreplay_protocol::report::CaptureSummary;

use super::corpus_ledger::CorpusLedger;
use crate::error::RecordError;

/// This process, and what its captures' names and files are made of.
#[derive(Debug, Clone)]
pub(super) struct Outputs {
    pub pid: u32,
    pub rank: Option<u32>,
    pub host: String,
    /// The output name with its placeholders (`%k`, `%p`, `%n`, …).
    template: String,
    /// Replace existing files.
    force: bool,
    pub report_dir: Option<PathBuf>,
    /// What the user asked to match, as they wrote it (for the capture info).
    pub kernel_filter: String,
    /// No per-capture summary lines.
    pub quiet: bool,
    /// Each-kernel mode: the corpus's slots (for the names), budget and left-out kernels.
    pub corpus: Option<Arc<CorpusLedger>>,
}

impl Outputs {
    pub(super) fn new(config: &Config, pid: u32, rank: Option<u32>, host: String) -> Outputs {
        Outputs {
            pid,
            rank,
            host,
            template: config.output.clone(),
            force: config.force,
            report_dir: config.report_dir.clone(),
            // A range capture says where it came from in the same field.
            kernel_filter: match (config.launch_range, &config.boundary_range) {
                (Some(r), _) => format!("launch-range {}", r.env_value()),
                (None, Some(b)) => b.origin(),
                (None, None) => config.kernel_text.clone(),
            },
            quiet: config.quiet,
            corpus: None,
        }
    }

    /// The outputs of each-kernel mode, whose names take their slot from `ledger`.
    pub(super) fn with_corpus(self, ledger: Option<Arc<CorpusLedger>>) -> Outputs {
        Outputs {
            corpus: ledger,
            ..self
        }
    }

    /// Where match `index` of kernel `kernel` (mangled) is written.
    pub(super) fn path(&self, index: u64, kernel: &str) -> PathBuf {
        let name = short_kernel_name(&demangle(kernel));
        let slot = self.corpus.as_ref().and_then(|c| c.slot(index));
        let template = match slot {
            Some(slot) => expand_slot(&self.template, slot),
            None => self.template.clone(),
        };
        PathBuf::from(expand_output(
            &template, self.pid, self.rank, &self.host, index, &name,
        ))
    }

    /// Opens the capture file of match `index` of `kernel` (its `.partial`), noted in the
    /// report directory so that `kreplay record` removes it if the application dies.
    pub(super) fn opener(
        &self,
        index: u64,
        kernel: &str,
    ) -> impl Fn() -> Result<PendingFile, RecordError> + '_ {
        let path = self.path(index, kernel);
        move || self.open(&path, now_unix_ns(), index)
    }

    /// Creates the `.partial` of the capture at `path` made at `time_unix_ns`.
    pub(super) fn open(
        &self,
        path: &Path,
        time_unix_ns: u64,
        index: u64,
    ) -> Result<PendingFile, RecordError> {
        open_capture_file(
            path,
            capture_uuid(time_unix_ns, self.pid, index, path),
            self.force,
            self.report_dir.as_deref(),
        )
    }
}

pub(super) fn now_unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// The process's command line, as the capture info keeps it.
pub(super) fn command_line() -> Vec<String> {
    std::fs::read("/proc/self/cmdline")
        .map(|b| {
            b.split(|&c| c == 0)
                .filter(|s| !s.is_empty())
                .map(|s| String::from_utf8_lossy(s).into_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// A capture's UUID: its time, process and match, and its path.
fn capture_uuid(time_unix_ns: u64, pid: u32, index: u64, path: &Path) -> [u8; 16] {
    let mut uuid = [0u8; 16];
    let seed = time_unix_ns ^ ((pid as u64) << 32) ^ index;
    uuid[..8].copy_from_slice(&seed.to_le_bytes());
    uuid[8..].copy_from_slice(&fnv1a(path.to_string_lossy().as_bytes()).to_le_bytes());
    uuid
}

/// Creates the capture file's `.partial` (and its directory), noted in the report directory.
fn open_capture_file(
    path: &Path,
    uuid: [u8; 16],
    force: bool,
    report_dir: Option<&Path>,
) -> Result<PendingFile, RecordError> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let f = PendingFile::create(path, uuid, WriterOptions::default(), force)?;
    if let Some(dir) = report_dir {
        note_partial(dir, f.partial_path());
    }
    Ok(f)
}

/// 64-bit FNV-1a, for the capture UUID's second half.
fn fnv1a(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &c| {
        (h ^ c as u64).wrapping_mul(0x100_0000_01b3)
    })
}

/// Notes in the report directory that the recorder started in this process (best effort: a
/// failure only means a killed application is reported as "cannot tell").
pub(super) fn note_started() {
    let Some(dir) = std::env::var_os(kreplay_protocol::config::env::REPORT_DIR) else {
        return;
    };
    let dir = Path::new(&dir).join(kreplay_protocol::config::STARTED_DIR);
    if std::fs::create_dir_all(&dir).is_ok() {
        let _ = std::fs::write(dir.join(std::process::id().to_string()), b"");
    }
}

/// Notes a `.partial` file in the report directory, so `kreplay record` can remove it if the
/// application dies before the capture is finished (best effort: a failure here only means a
/// leftover could stay behind).
fn note_partial(report_dir: &Path, partial: &Path) {
    let dir = report_dir.join(kreplay_protocol::config::PARTIALS_DIR);
    let Ok(abs) = std::path::absolute(partial) else {
        return;
    };
    if std::fs::create_dir_all(&dir).is_ok() {
        let name = format!(
            "{}-{:016x}",
            std::process::id(),
            fnv1a(abs.as_os_str().as_encoded_bytes())
        );
        let _ = std::fs::write(dir.join(name), abs.as_os_str().as_encoded_bytes());
    }
}

/// Writes a finished capture's summary into the report directory at once (best effort).
pub(super) fn note_capture(report_dir: &Path, summary: &CaptureSummary) {
    let dir = report_dir.join(kreplay_protocol::config::CAPTURES_DIR);
    if std::fs::create_dir_all(&dir).is_ok() {
        if let Ok(bytes) = serde_json::to_vec(summary) {
            let name = format!("{}-{}.json", std::process::id(), summary.match_index);
            let _ = std::fs::write(dir.join(name), bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capture_uuid_holds_its_time_process_match_and_path() {
        let a = capture_uuid(1_000, 42, 1, Path::new("a.krr"));
        assert_eq!(a[..8], (1_000u64 ^ (42u64 << 32) ^ 1).to_le_bytes());
        assert_eq!(a[8..], fnv1a(b"a.krr").to_le_bytes());
        assert_ne!(a, capture_uuid(1_000, 42, 1, Path::new("b.krr")));
        assert_ne!(a, capture_uuid(1_000, 42, 2, Path::new("a.krr")));
        // The FNV-1a of nothing is its offset basis.
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
    }
}
