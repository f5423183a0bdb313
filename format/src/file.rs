//! File-system side: open a capture through mmap, and create one that appears under its final
//! name only once complete.

use std::fs::{self, File};
use std::io::BufWriter;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use crate::error::Result;
use crate::writer::{CaptureWriter, WriterOptions};

/// A capture file mapped into memory.
pub struct MappedFile {
    map: Option<Mmap>,
}

impl MappedFile {
    pub fn open(path: &Path) -> std::io::Result<MappedFile> {
        let file = File::open(path)?;
        let len = file.metadata()?.len();
        if len == 0 {
            // mmap of an empty file fails on Linux; an empty capture is just "not a .krr".
            return Ok(MappedFile { map: None });
        }
        // SAFETY: the mapping is read-only; kreplay never writes a capture while reading it,
        // and a concurrent truncation by another program is the documented hazard of mmap
        // readers (it faults rather than corrupting memory we own).
        let map = unsafe { Mmap::map(&file)? };
        Ok(MappedFile { map: Some(map) })
    }

    pub fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
    }
}

/// A capture being written to `NAME.partial`, renamed to `NAME` by `finish`.
pub struct PendingFile {
    pub writer: CaptureWriter<BufWriter<File>>,
    tmp: PathBuf,
    final_path: PathBuf,
}

impl PendingFile {
    pub fn create(final_path: &Path, uuid: [u8; 16], opts: WriterOptions) -> Result<PendingFile> {
        let mut tmp = final_path.as_os_str().to_owned();
        tmp.push(".partial");
        let tmp = PathBuf::from(tmp);
        let file = File::create(&tmp)?;
        let writer = CaptureWriter::new(BufWriter::with_capacity(1 << 20, file), uuid, opts)?;
        Ok(PendingFile {
            writer,
            tmp,
            final_path: final_path.to_path_buf(),
        })
    }

    /// Finishes the log, syncs it and gives it its final name. On failure (a full disk, a
    /// vanished directory) the partial file is removed: nothing half-written is left behind.
    pub fn finish(self) -> Result<u64> {
        let tmp = self.tmp.clone();
        let result = (|| {
            let out = self.writer.finish()?;
            let file = out.into_inner().map_err(|e| e.into_error())?;
            file.sync_data()?;
            let len = file.metadata()?.len();
            fs::rename(&self.tmp, &self.final_path)?;
            Ok(len)
        })();
        if result.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        result
    }

    /// Gives up: removes the partial file.
    pub fn abandon(self) {
        drop(self.writer);
        let _ = fs::remove_file(&self.tmp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch_dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("kreplay-file-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).expect("scratch directory");
        d
    }

    #[test]
    fn finished_file_appears_under_its_final_name_only() {
        let d = scratch_dir("ok");
        let path = d.join("x.krr");
        let f = PendingFile::create(&path, [1; 16], WriterOptions::default()).expect("create");
        assert!(d.join("x.krr.partial").exists());
        assert!(!path.exists(), "no final name before finish");
        let len = f.finish().expect("finish");
        assert_eq!(fs::metadata(&path).expect("final file").len(), len);
        assert!(!d.join("x.krr.partial").exists());
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn failed_finish_leaves_no_partial_file() {
        let d = scratch_dir("fail");
        let path = d.join("x.krr");
        let f = PendingFile::create(&path, [2; 16], WriterOptions::default()).expect("create");
        // A non-empty directory where the file should land: the final rename fails.
        fs::create_dir_all(path.join("occupied")).expect("blocker");
        assert!(f.finish().is_err());
        assert!(
            !d.join("x.krr.partial").exists(),
            "partial file left behind"
        );
        let _ = fs::remove_dir_all(&d);
    }
}
