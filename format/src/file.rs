//! File-system side: open a capture through mmap, and create one that appears under its final
//! name only once complete.

use std::fs::{self, File, OpenOptions};
use std::io::{BufWriter, ErrorKind, Seek, SeekFrom, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use crate::error::Result;
use crate::observe::{Observer, Phase};
use crate::pack::{pack_observed, PackOptions, PackReport};
use crate::reader::{verify_observed, Capture, VerifyReport};
use crate::salvage::{salvage, SalvageReport};
use crate::writer::{CaptureWriter, WriterOptions};

/// A capture file mapped into memory. The file stays open while the mapping lives: a file
/// replaced by rename (a new inode at the path) leaves this one as it was; one written over in
/// place (`cp new old`: the same inode) is seen by [`MappedFile::changed_since_open`].
pub struct MappedFile {
    map: Option<Mmap>,
    dev_ino: (u64, u64),
    file: File,
    /// Size and modification time (s, ns) when mapped.
    stamp: (u64, i64, i64),
    /// The first bytes (the header, with the capture UUID) when mapped.
    head: Vec<u8>,
}

impl MappedFile {
    /// Maps a regular file. FIFOs, devices and directories are refused before anything is
    /// read from them (opening is non-blocking, so a FIFO without a writer cannot hang us).
    pub fn open(path: &Path) -> std::io::Result<MappedFile> {
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(path)?;
        let meta = file.metadata()?;
        if !meta.is_file() {
            let what = if meta.is_dir() {
                "a directory"
            } else {
                "not a regular file (a FIFO, socket or device)"
            };
            return Err(std::io::Error::new(
                ErrorKind::InvalidInput,
                format!("{what}: captures are read from regular files"),
            ));
        }
        let dev_ino = (meta.dev(), meta.ino());
        let stamp = (meta.len(), meta.mtime(), meta.mtime_nsec());
        if meta.len() == 0 {
            // mmap of an empty file fails on Linux; an empty capture is just "not a .krr".
            return Ok(MappedFile {
                map: None,
                dev_ino,
                file,
                stamp,
                head: Vec::new(),
            });
        }
        // SAFETY: the mapping is read-only; kreplay never writes a capture while reading it
        // (outputs go to a new file renamed into place, never truncated in place), and a
        // concurrent truncation by another program is the documented hazard of mmap readers
        // (it faults rather than corrupting memory we own).
        let map = unsafe { Mmap::map(&file)? };
        let head = map[..map.len().min(HEAD_LEN)].to_vec();
        Ok(MappedFile {
            map: Some(map),
            dev_ino,
            file,
            stamp,
            head,
        })
    }

    /// Why the bytes behind this mapping are no longer those it was opened with (`None`: they
    /// are): the file was written over in place since (its size, modification time or header
    /// differ). Check before reading: a file cut shorter faults on access past its new end.
    /// A file replaced by rename is another file: this one is unchanged.
    pub fn changed_since_open(&self) -> std::io::Result<Option<String>> {
        let meta = self.file.metadata()?;
        let (len, sec, nsec) = self.stamp;
        if meta.len() != len {
            return Ok(Some(format!(
                "its size changed from {len} to {} bytes",
                meta.len()
            )));
        }
        if (meta.mtime(), meta.mtime_nsec()) != (sec, nsec) {
            return Ok(Some("it was modified".into()));
        }
        if self.bytes()[..self.head.len()] != self.head[..] {
            return Ok(Some("its header (the capture's identity) changed".into()));
        }
        Ok(None)
    }

    pub fn bytes(&self) -> &[u8] {
        self.map.as_deref().unwrap_or(&[])
    }

    /// Drops the pages of bytes `[start, end)` from this process's memory (one pass over a
    /// large file then stays bounded); touched again, they are read back from the file.
    pub fn release(&self, start: u64, end: u64) {
        let Some(m) = &self.map else {
            return;
        };
        let end = end.min(m.len() as u64);
        if start >= end {
            return;
        }
        // SAFETY: the mapping is read-only and file-backed: MADV_DONTNEED only drops pages,
        // which the next access reads back from the file with the same bytes, so references
        // into the mapping stay valid and see the same data. The range lies inside the map.
        let _ = unsafe {
            m.unchecked_advise_range(
                memmap2::UncheckedAdvice::DontNeed,
                start as usize,
                (end - start) as usize,
            )
        };
    }

    /// Whether `path` names this very file (another name, a link or a symlink to it).
    pub fn is_same_file(&self, path: &Path) -> bool {
        fs::metadata(path).is_ok_and(|m| (m.dev(), m.ino()) == self.dev_ino)
    }
}

/// How much of the start of a file [`MappedFile::changed_since_open`] compares: the header,
/// which holds the capture's UUID.
const HEAD_LEN: usize = crate::layout::HEADER_LEN;

/// Verifies a mapped capture (see [`crate::verify`]), dropping each stretch of the file once
/// checked, so resident memory stays near one verification wave (64 MiB) whatever the
/// file's size; `progress` hears how far each phase got.
pub fn verify_mapped(
    file: &MappedFile,
    progress: &mut dyn FnMut(Phase, u64, u64),
) -> Result<VerifyReport> {
    verify_observed(file.bytes(), &mut Releasing { file, progress })
}

/// Creates a new file for output: never follows a symlink planted at `path`, never opens an
/// existing file (so never truncates one), mode 0600 (captures hold application memory).
pub fn create_new_private(path: &Path) -> std::io::Result<File> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

fn exists_error(path: &Path) -> std::io::Error {
    std::io::Error::new(
        ErrorKind::AlreadyExists,
        format!(
            "{} already exists: pass --force to replace it",
            path.display()
        ),
    )
}

/// Whether something (a file, a directory, a dangling symlink) is at `path`.
pub fn occupied(path: &Path) -> bool {
    fs::symlink_metadata(path).is_ok()
}

/// An output written to `NAME.partial`, given its final name only once complete: readers
/// never see half a file, a failure leaves nothing behind, and an existing `NAME` is
/// replaced only when `force` is set (atomically, by rename; otherwise a hard link refuses
/// atomically if `NAME` appeared meanwhile).
pub struct AtomicOutput {
    file: Option<File>,
    tmp: PathBuf,
    final_path: PathBuf,
    force: bool,
}

impl AtomicOutput {
    pub fn create(final_path: &Path, force: bool) -> std::io::Result<AtomicOutput> {
        if !force && occupied(final_path) {
            return Err(exists_error(final_path));
        }
        let mut tmp = final_path.as_os_str().to_owned();
        tmp.push(".partial");
        let tmp = PathBuf::from(tmp);
        if force {
            // A stale partial file from an interrupted run; unlink never follows a symlink.
            let _ = fs::remove_file(&tmp);
        }
        let file = create_new_private(&tmp).map_err(|e| {
            if e.kind() == ErrorKind::AlreadyExists {
                std::io::Error::new(
                    e.kind(),
                    format!(
                        "{} already exists (left by an interrupted run, or another one is writing it): remove it or pass --force",
                        tmp.display()
                    ),
                )
            } else {
                std::io::Error::new(e.kind(), format!("cannot create {}: {e}", tmp.display()))
            }
        })?;
        Ok(AtomicOutput {
            file: Some(file),
            tmp,
            final_path: final_path.to_path_buf(),
            force,
        })
    }

    /// The file being written.
    pub fn take_file(&mut self) -> Option<File> {
        self.file.take()
    }

    /// Where the bytes go until `publish`.
    pub fn partial_path(&self) -> &Path {
        &self.tmp
    }

    /// Gives the synced file its final name.
    pub fn publish(mut self) -> std::io::Result<()> {
        let result = self.publish_inner();
        if result.is_err() {
            let _ = fs::remove_file(&self.tmp);
        }
        self.tmp = PathBuf::new(); // published or removed: nothing for Drop to do
        result
    }

    fn publish_inner(&self) -> std::io::Result<()> {
        if self.force {
            return fs::rename(&self.tmp, &self.final_path);
        }
        match fs::hard_link(&self.tmp, &self.final_path) {
            Ok(()) => fs::remove_file(&self.tmp),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => Err(exists_error(&self.final_path)),
            // File systems without hard links: check, then rename (not atomic, still refuses
            // an output that was there before).
            Err(_) if occupied(&self.final_path) => Err(exists_error(&self.final_path)),
            Err(_) => fs::rename(&self.tmp, &self.final_path),
        }
    }
}

impl Drop for AtomicOutput {
    fn drop(&mut self) {
        if !self.tmp.as_os_str().is_empty() {
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

/// Salvages `data` into `path`: streamed to `path.partial`, checked with `verify` there, and
/// given its final name only when it verifies (nothing is left behind otherwise). Memory stays
/// bounded by the verifier's, not by the capture's size.
pub fn salvage_to_file(data: &[u8], path: &Path, force: bool) -> Result<SalvageReport> {
    write_verified(path, force, |out| salvage(data, out))
}

/// Repacks the capture `input` into `path` (see [`crate::pack`]): streamed to `path.partial`,
/// checked with `verify` there, renamed when it verifies. The capture keeps its UUID: it is
/// the same dispatch. The input's pages are dropped as they are consumed, and the output's
/// as they are verified: memory stays bounded whatever the capture's size.
pub fn pack_to_file(
    input: &MappedFile,
    path: &Path,
    force: bool,
    opts: PackOptions,
    progress: &mut dyn FnMut(Phase, u64, u64),
) -> Result<PackReport> {
    let cap = Capture::parse(input.bytes())?;
    let mut observer = Releasing {
        file: input,
        progress,
    };
    write_verified(path, force, |out| {
        pack_observed(&cap, out, cap.header.uuid, opts, &mut observer)
    })
}

/// Reports `file`'s progress and drops the pages of what it is done with.
struct Releasing<'a> {
    file: &'a MappedFile,
    progress: &'a mut dyn FnMut(Phase, u64, u64),
}

impl Observer for Releasing<'_> {
    fn progress(&mut self, phase: Phase, done: u64, total: u64) {
        (self.progress)(phase, done, total);
    }
    fn done_with(&mut self, start: u64, end: u64) {
        self.file.release(start, end);
    }
}

/// Runs `write` into `path.partial`, syncs it, checks it with `verify` (dropping the pages of
/// the new file as they are checked), and gives it its final name only then (nothing is left
/// behind otherwise).
fn write_verified<R>(
    path: &Path,
    force: bool,
    write: impl FnOnce(BufWriter<File>) -> Result<(BufWriter<File>, R)>,
) -> Result<R> {
    let mut out = AtomicOutput::create(path, force)?;
    let file = out
        .take_file()
        .ok_or_else(|| std::io::Error::other("no file"))?;
    let (w, report) = write(BufWriter::with_capacity(1 << 20, file))?;
    let file = w.into_inner().map_err(|e| e.into_error())?;
    file.sync_data()?;
    drop(file);
    let written = MappedFile::open(out.partial_path())?;
    verify_mapped(&written, &mut |_, _, _| {})?;
    drop(written);
    out.publish()?;
    Ok(report)
}

/// The capture file as its writer sees it: every `WRITEBACK_EVERY` bytes written, the kernel
/// is asked to start writing them to the disk (`sync_file_range`, not waiting). Otherwise the
/// page cache holds gigabytes of a large capture until the final sync, which then writes them
/// all while nothing else happens; started early, the disk works while the next chunks
/// compress.
pub struct WritebackFile {
    file: File,
    /// Bytes written from `kicked` on that the kernel was not yet asked to write.
    pending: u64,
    kicked: u64,
}

const WRITEBACK_EVERY: u64 = 64 << 20;

impl WritebackFile {
    fn new(file: File) -> WritebackFile {
        WritebackFile {
            file,
            pending: 0,
            kicked: 0,
        }
    }

    fn into_inner(self) -> File {
        self.file
    }
}

impl Write for WritebackFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.file.write(buf)?;
        self.pending += n as u64;
        if self.pending >= WRITEBACK_EVERY {
            #[cfg(target_os = "linux")]
            {
                use std::os::fd::AsRawFd;
                // SAFETY: a plain system call on our own open descriptor; it only starts the
                // write-out of pages already written (a failure leaves that to the final sync).
                unsafe {
                    libc::sync_file_range(
                        self.file.as_raw_fd(),
                        self.kicked as libc::off64_t,
                        self.pending as libc::off64_t,
                        libc::SYNC_FILE_RANGE_WRITE,
                    );
                }
            }
            self.kicked += self.pending;
            self.pending = 0;
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.file.flush()
    }
}

impl Seek for WritebackFile {
    fn seek(&mut self, pos: SeekFrom) -> std::io::Result<u64> {
        self.file.seek(pos)
    }
}

/// A capture being written to `NAME.partial`, renamed to `NAME` by `finish`.
pub struct PendingFile {
    pub writer: CaptureWriter<BufWriter<WritebackFile>>,
    out: AtomicOutput,
}

impl PendingFile {
    /// Starts a capture at `final_path`; refuses an existing file unless `force`.
    pub fn create(
        final_path: &Path,
        uuid: [u8; 16],
        opts: WriterOptions,
        force: bool,
    ) -> Result<PendingFile> {
        let mut out = AtomicOutput::create(final_path, force)?;
        let file = out
            .take_file()
            .ok_or_else(|| std::io::Error::other("no file"))?;
        let writer = CaptureWriter::new(
            BufWriter::with_capacity(1 << 20, WritebackFile::new(file)),
            uuid,
            opts,
        )?;
        Ok(PendingFile { writer, out })
    }

    /// Where the capture is written until it is complete.
    pub fn partial_path(&self) -> &Path {
        self.out.partial_path()
    }

    /// Finishes the log, syncs it and gives it its final name. On failure (a full disk, a
    /// vanished directory, a file that appeared under the final name) the partial file is
    /// removed: nothing half-written is left behind.
    pub fn finish(self) -> Result<u64> {
        let out = self.writer.finish()?;
        let file = out.into_inner().map_err(|e| e.into_error())?.into_inner();
        file.sync_data()?;
        let len = file.metadata()?.len();
        drop(file);
        self.out.publish()?;
        Ok(len)
    }

    /// Gives up: removes the partial file.
    pub fn abandon(self) {
        drop(self);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn scratch_dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("kreplay-file-{tag}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        fs::create_dir_all(&d).expect("scratch directory");
        d
    }

    #[test]
    fn a_mapping_knows_when_its_file_was_written_over() {
        let d = scratch_dir("changed");
        let path = d.join("a.krr");
        let (a, b) = (vec![1u8; 200], vec![2u8; 200]);
        fs::write(&path, &a).expect("write");
        let m = MappedFile::open(&path).expect("open");
        assert_eq!(m.changed_since_open().expect("stat"), None);
        // Replaced by rename: a new inode at the path; the mapping keeps the old bytes.
        fs::write(d.join("b.krr"), &b).expect("write");
        fs::rename(d.join("b.krr"), &path).expect("rename");
        assert_eq!(m.changed_since_open().expect("stat"), None);
        assert_eq!(m.bytes(), &a[..]);
        // Written over in place (`cp`): the same inode, other bytes.
        let m = MappedFile::open(&path).expect("open");
        fs::write(&path, vec![3u8; 100]).expect("write");
        let why = m.changed_since_open().expect("stat").expect("changed");
        assert!(why.contains("size"), "{why}");
        let m = MappedFile::open(&path).expect("open");
        let mut f = OpenOptions::new().write(true).open(&path).expect("open");
        f.write_all(&[4u8; 100]).expect("write");
        drop(f);
        // Same size: the modification time or the header says it.
        assert!(m.changed_since_open().expect("stat").is_some());
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn finished_file_appears_under_its_final_name_only() {
        let d = scratch_dir("ok");
        let path = d.join("x.krr");
        let f =
            PendingFile::create(&path, [1; 16], WriterOptions::default(), false).expect("create");
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
        let f =
            PendingFile::create(&path, [2; 16], WriterOptions::default(), false).expect("create");
        // A non-empty directory where the file should land: the final rename fails.
        fs::create_dir_all(path.join("occupied")).expect("blocker");
        assert!(f.finish().is_err());
        assert!(
            !d.join("x.krr.partial").exists(),
            "partial file left behind"
        );
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn existing_outputs_are_kept_unless_forced() {
        let d = scratch_dir("exists");
        let path = d.join("x.krr");
        fs::write(&path, b"precious").expect("existing");
        let e = PendingFile::create(&path, [3; 16], WriterOptions::default(), false)
            .err()
            .expect("refused");
        assert!(e.to_string().contains("--force"), "{e}");
        assert_eq!(fs::read(&path).expect("kept"), b"precious");
        let f =
            PendingFile::create(&path, [3; 16], WriterOptions::default(), true).expect("forced");
        f.finish().expect("finish");
        assert_ne!(fs::read(&path).expect("replaced"), b"precious");
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn planted_symlinks_are_not_followed() {
        let d = scratch_dir("symlink");
        let victim = d.join("victim");
        fs::write(&victim, b"keep me").expect("victim");
        let path = d.join("x.krr");
        std::os::unix::fs::symlink(&victim, d.join("x.krr.partial")).expect("plant");
        assert!(PendingFile::create(&path, [4; 16], WriterOptions::default(), false).is_err());
        std::os::unix::fs::symlink(&victim, &path).expect("plant at the final name");
        let _ = fs::remove_file(d.join("x.krr.partial"));
        assert!(PendingFile::create(&path, [4; 16], WriterOptions::default(), false).is_err());
        // Forced: the symlink itself is replaced, its target untouched.
        let f =
            PendingFile::create(&path, [4; 16], WriterOptions::default(), true).expect("forced");
        f.finish().expect("finish");
        assert_eq!(fs::read(&victim).expect("victim"), b"keep me");
        assert!(!fs::symlink_metadata(&path).expect("output").is_symlink());
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn outputs_are_private() {
        use std::os::unix::fs::PermissionsExt;
        let d = scratch_dir("mode");
        let path = d.join("x.krr");
        let f =
            PendingFile::create(&path, [5; 16], WriterOptions::default(), false).expect("create");
        f.finish().expect("finish");
        let mode = fs::metadata(&path).expect("meta").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let mut out = AtomicOutput::create(&d.join("y.bin"), false).expect("create");
        let mut f = out.take_file().expect("file");
        f.write_all(b"abc").expect("write");
        drop(f);
        out.publish().expect("publish");
        let mode = fs::metadata(d.join("y.bin"))
            .expect("meta")
            .permissions()
            .mode()
            & 0o777;
        assert_eq!(mode, 0o600);
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn a_fifo_is_refused_without_blocking() {
        let d = scratch_dir("fifo");
        let fifo = d.join("pipe.krr");
        let c = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).expect("path");
        // SAFETY: c is a NUL-terminated path that outlives the call.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = MappedFile::open(&fifo).err().expect("refused");
        assert!(e.to_string().contains("not a regular file"), "{e}");
        let e = MappedFile::open(&d).err().expect("refused");
        assert!(e.to_string().contains("directory"), "{e}");
        let _ = fs::remove_dir_all(&d);
    }

    #[test]
    fn the_same_file_is_recognised_through_other_names() {
        let d = scratch_dir("same");
        let path = d.join("x.krr");
        fs::write(&path, b"\x89KRR").expect("write");
        std::os::unix::fs::symlink(&path, d.join("alias.krr")).expect("alias");
        let m = MappedFile::open(&path).expect("open");
        assert!(m.is_same_file(&d.join("alias.krr")));
        assert!(m.is_same_file(&d.join(".").join("x.krr")));
        assert!(!m.is_same_file(&d.join("other.krr")));
        let _ = fs::remove_dir_all(&d);
    }
}
