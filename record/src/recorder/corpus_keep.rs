//! A finished capture of a corpus (`record --each-kernel`), on its writer thread: charged to
//! the `--max-bytes` budget by its file's size (removed, and its kernel left out, when it
//! would pass it), then checksummed from the file as written, for the manifest.

use std::path::Path;

use kreplay_protocol::config::{demangle, short_kernel_name};
use kreplay_protocol::corpus::{sha256_file, CorpusCapture};

use super::corpus_ledger::CorpusLedger;
use crate::capture::CaptureData;

/// What the manifest will say of capture `p` at `path`, but its size and checksum.
pub(super) fn draft(p: &CaptureData, path: &Path) -> CorpusCapture {
    let d = &p.dispatch;
    CorpusCapture {
        file: path.display().to_string(),
        kernel: short_kernel_name(&demangle(&d.kernel_name)),
        mangled: d.kernel_name.clone(),
        grid: d.grid,
        block: d.block,
        launch_index: p.launch_index,
        nvtx: p.nvtx.clone(),
        graph: p.graph.is_some(),
        bytes_stored: 0,
        in_app_us: d.original_duration_ns.map(|ns| ns as f64 / 1e3),
        sha256: String::new(),
    }
}

/// Keeps the finished file at `path` in the corpus, or removes it: `Err` says why it is not
/// kept (its kernel is then left out).
pub(super) fn keep(
    ledger: &CorpusLedger,
    mut entry: CorpusCapture,
    path: &Path,
) -> Result<CorpusCapture, String> {
    let refuse = |why: String| {
        let _ = std::fs::remove_file(path);
        ledger.leave_out(entry.kernel.clone(), &entry.mangled, why.clone());
        Err(why)
    };
    let bytes = match std::fs::metadata(path) {
        Ok(m) => m.len(),
        Err(e) => return refuse(format!("its capture cannot be read back: {e}")),
    };
    if !ledger.charge(bytes) {
        let max = ledger.each.max_bytes.unwrap_or(0);
        return refuse(format!(
            "its capture ({}) would pass --max-bytes {max} ({})",
            kreplay_format::units::bytes(bytes),
            kreplay_format::units::bytes(max)
        ));
    }
    match sha256_file(path) {
        Ok(sum) => {
            entry.bytes_stored = bytes;
            entry.sha256 = sum;
            Ok(entry)
        }
        Err(e) => refuse(format!("its capture cannot be read back: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kreplay_protocol::each_kernel::{EachKernel, KeyBy};

    fn ledger(max: Option<u64>) -> CorpusLedger {
        CorpusLedger::new(
            EachKernel {
                per_kernel: 1,
                by: KeyBy::Name,
                max_bytes: max,
            },
            None,
        )
    }

    fn file(name: &str, bytes: &[u8]) -> std::path::PathBuf {
        let p = std::env::temp_dir().join(format!("kreplay-keep-{}-{name}", std::process::id()));
        std::fs::write(&p, bytes).unwrap();
        p
    }

    fn entry(mangled: &str) -> CorpusCapture {
        CorpusCapture {
            kernel: short_kernel_name(&demangle(mangled)),
            mangled: mangled.into(),
            ..Default::default()
        }
    }

    #[test]
    fn a_kept_capture_has_its_size_and_the_sha256_of_its_bytes() {
        let p = file("abc", b"abc");
        let kept = keep(&ledger(Some(3)), entry("_Z1av"), &p).unwrap();
        assert_eq!(kept.bytes_stored, 3);
        // FIPS 180-2's example.
        assert_eq!(
            kept.sha256,
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        std::fs::remove_file(p).unwrap();
    }

    #[test]
    fn a_capture_that_would_pass_the_bound_is_removed_and_its_kernel_left_out() {
        let l = ledger(Some(5));
        let first = file("first", b"1234");
        assert!(keep(&l, entry("_Z1av"), &first).is_ok());
        let second = file("second", b"12");
        let why = keep(&l, entry("_Z1bv"), &second).unwrap_err();
        assert!(why.contains("--max-bytes 5"), "{why}");
        assert!(
            !second.exists(),
            "the file that passes the bound is removed"
        );
        assert!(first.exists());
        let left = l.left_out();
        assert_eq!(left.len(), 1);
        assert_eq!(
            (left[0].kernel.as_str(), left[0].mangled.as_str()),
            ("b", "_Z1bv")
        );
        std::fs::remove_file(first).unwrap();
    }
}
