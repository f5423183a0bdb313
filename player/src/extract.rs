//! `kreplay extract` and Python's `kreplay.extract`: a capture unpacked into files (code
//! objects, argument bytes, each region raw, a JSON description) or into a standalone
//! reproducer (`--repro`). Every file is new and private (0600, no symlink followed); memory
//! stays bounded by the chunk size whatever a region's size.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use kreplay_engine::repro::{Content, ReproError, Reproducer};
use kreplay_format::file::{create_new_private, MappedFile};
use kreplay_format::units::bytes;
use kreplay_format::{
    Action, Capture, ChunkEncoding, ChunkRef, FormatError, MemoryState, ModuleKind, Op, Reference,
    Region,
};

/// Why nothing (or not everything) was extracted.
#[derive(Debug, thiserror::Error)]
pub enum ExtractError {
    /// `--repro` of a range capture: not written yet.
    #[error("this is a range capture ({0} steps): `extract --repro` writes no reproducer for range captures yet (it comes later in range capture's work); `kreplay extract` without --repro writes its files, and `kreplay play` replays it")]
    RangeReproducer(usize),
    #[error("extract would write {} from a {} capture (more than {}, 16 x its size): pass --force to write it", bytes(*.total), bytes(*.file_len), bytes(*.limit))]
    TooLarge {
        total: u64,
        file_len: u64,
        limit: u64,
    },
    #[error("no reproducer for {name}")]
    NoReproducer {
        name: String,
        #[source]
        source: ReproError,
    },
    #[error("{} is not empty: extract into a new directory, or pass --force to replace files in it", .0.display())]
    NotEmpty(PathBuf),
    #[error("cannot create {}", .0.display())]
    CreateDir(PathBuf, #[source] std::io::Error),
    #[error("cannot read {}", .0.display())]
    ReadDir(PathBuf, #[source] std::io::Error),
    #[error("cannot write {}", .0.display())]
    Write(PathBuf, #[source] std::io::Error),
    /// A chunk that would not decode (the message is the format's alone).
    #[error(transparent)]
    Read(#[from] FormatError),
    #[error("cannot describe the capture: {0}")]
    Describe(String),
}

/// What was extracted (`-o DIR`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extracted {
    pub modules: usize,
    pub regions: usize,
    /// Files of [`argument_files`] (1, `args.bin`, for a single capture).
    pub argument_files: usize,
}

/// An extraction checked and planned before anything is written: its size is within bounds
/// (or forced), and the reproducer, when asked for, could be generated (a capture it cannot
/// carry is refused with nothing left behind).
pub struct Extraction<'f, 'c> {
    file: &'f MappedFile,
    cap: &'c Capture<'f>,
    name: String,
    force: bool,
    repro: Option<Reproducer>,
}

/// Most bytes extract writes without `force`: 16 x the capture's size, at least 256 MiB.
/// Captures compress memory by orders of magnitude (zero chunks cost nothing), so a small
/// file can stand for terabytes; writing them out is something to ask for.
pub fn output_limit(file_len: u64) -> u64 {
    file_len.saturating_mul(16).max(256 << 20)
}

/// Bytes extract would write: modules, arguments, every region, and the post state of
/// written regions (apparent sizes: zero chunks become holes, but still count).
pub fn output_size(cap: &Capture<'_>) -> u64 {
    let modules: u64 = cap.modules.iter().map(|m| m.image.len() as u64).sum();
    let regions: u64 = cap
        .regions
        .iter()
        .map(|r| {
            r.size
                .saturating_mul(if cap.is_written(r.region_id) { 2 } else { 1 })
        })
        .fold(0u64, u64::saturating_add);
    let arguments: u64 = argument_files(cap)
        .iter()
        .map(|(_, b)| b.len() as u64)
        .sum();
    modules.saturating_add(arguments).saturating_add(regions)
}

/// The files of what a capture's launches and copies hold, by name: `args.bin` for a single
/// capture; for a range, per step, `step-K-args.bin` (a kernel step's argument bytes),
/// `step-K-host.bin` (a host-to-device copy's source bytes) and `step-K-received.bin` (what a
/// device-to-host copy received).
pub fn argument_files<'c>(cap: &'c Capture<'_>) -> Vec<(String, &'c [u8])> {
    if !cap.is_range() {
        return vec![("args.bin".into(), &cap.dispatch.arg_bytes)];
    }
    cap.steps
        .iter()
        .enumerate()
        .filter_map(|(k, s)| match &s.action {
            Action::Kernel(d) => Some((format!("step-{k}-args.bin"), &d.arg_bytes[..])),
            Action::Op(Op::CopyHostToDevice { host, .. }) => {
                Some((format!("step-{k}-host.bin"), &host[..]))
            }
            Action::Op(Op::CopyDeviceToHost { received, .. }) => {
                Some((format!("step-{k}-received.bin"), &received[..]))
            }
            Action::Op(_) => None,
        })
        .collect()
}

impl<'f, 'c> Extraction<'f, 'c> {
    /// Checks and plans extracting `cap` (of `file`, called `name` in messages); `repro`:
    /// whether a reproducer is to be written too.
    pub fn plan(
        file: &'f MappedFile,
        cap: &'c Capture<'f>,
        name: &str,
        force: bool,
        repro: bool,
    ) -> Result<Extraction<'f, 'c>, ExtractError> {
        if repro && cap.is_range() {
            return Err(ExtractError::RangeReproducer(cap.steps.len()));
        }
        let total = output_size(cap);
        let file_len = file.bytes().len() as u64;
        let limit = output_limit(file_len);
        if total > limit && !force {
            return Err(ExtractError::TooLarge {
                total,
                file_len,
                limit,
            });
        }
        let repro = if repro {
            Some(
                Reproducer::of(cap).map_err(|source| ExtractError::NoReproducer {
                    name: name.to_string(),
                    source,
                })?,
            )
        } else {
            None
        };
        Ok(Extraction {
            file,
            cap,
            name: name.to_string(),
            force,
            repro,
        })
    }

    /// Writes the modules, the argument files ([`argument_files`]: `args.bin`, or a range's
    /// per step), each region (`region-ID-ADDR.bin`, and `.post.bin` for the recorded output
    /// of written ones) and `capture.json` into `dir`.
    pub fn write_files(&self, dir: &Path) -> Result<Extracted, ExtractError> {
        let (cap, force) = (self.cap, self.force);
        output_dir(dir, force)?;
        let write = |name: String, bytes: &[u8]| write_file(dir, &name, bytes, force);
        for m in &cap.modules {
            let ext = match m.kind {
                ModuleKind::Cubin => "cubin",
                ModuleKind::Ptx => "ptx",
                ModuleKind::Fatbin => "fatbin",
            };
            write(format!("module-{}.{ext}", m.module_id), &m.image)?;
        }
        let arguments = argument_files(cap);
        for (name, bytes) in &arguments {
            write(name.clone(), bytes)?;
        }
        // Without a recorded output the post chunks only say where the kernel writes.
        let reference = cap.reference() == Reference::Recorded;
        for r in &cap.regions {
            let pre = dir.join(format!("region-{}-{:#x}.bin", r.region_id, r.address));
            write_region(self.file, cap, r, &pre, false, force)?;
            if reference && cap.is_written(r.region_id) {
                let post = dir.join(format!("region-{}-{:#x}.post.bin", r.region_id, r.address));
                write_region(self.file, cap, r, &post, true, force)?;
            }
        }
        let desc = crate::describe::describe(&self.name, cap);
        let json =
            serde_json::to_vec_pretty(&desc).map_err(|e| ExtractError::Describe(e.to_string()))?;
        write("capture.json".into(), &json)?;
        Ok(Extracted {
            modules: cap.modules.len(),
            regions: cap.regions.len(),
            argument_files: arguments.len(),
        })
    }

    /// Writes the planned reproducer into `dir`; how many files it has (None: none was
    /// planned).
    pub fn write_repro(&self, dir: &Path) -> Result<Option<usize>, ExtractError> {
        let Some(r) = &self.repro else {
            return Ok(None);
        };
        output_dir(dir, self.force)?;
        for (name, content) in &r.files {
            match content {
                Content::Text(t) => write_file(dir, name, t.as_bytes(), self.force)?,
                Content::Bytes(b) => write_file(dir, name, b, self.force)?,
                Content::Region { region_id, post } => {
                    let Some(region) = self.cap.region(*region_id) else {
                        continue;
                    };
                    let path = dir.join(name);
                    write_region(self.file, self.cap, region, &path, *post, self.force)?;
                }
            }
        }
        Ok(Some(r.files.len()))
    }
}

/// Writes one region chunk by chunk (memory stays bounded by the chunk size whatever the
/// region's size); all-zero chunks become holes of a sparse file. With `post`, chunks the
/// kernel changed are taken from the post-dispatch state.
fn write_region(
    file: &MappedFile,
    cap: &Capture<'_>,
    r: &Region,
    path: &Path,
    post: bool,
    force: bool,
) -> Result<(), ExtractError> {
    let failed = |e| ExtractError::Write(path.to_path_buf(), e);
    let f = create(path, force).map_err(failed)?;
    f.set_len(r.size).map_err(failed)?;
    let changed: HashMap<u64, &ChunkRef> = if post {
        cap.chunks(r.region_id, MemoryState::Post)
            .map(|c| (c.offset, c))
            .collect()
    } else {
        HashMap::new()
    };
    let mut buf = Vec::new();
    for c in cap.chunks(r.region_id, MemoryState::Pre) {
        let src = changed.get(&c.offset).copied().unwrap_or(c);
        if src.encoding == ChunkEncoding::Zero {
            continue;
        }
        buf.resize(src.raw_len as usize, 0);
        cap.read_chunk_into(src, &mut buf)?;
        f.write_all_at(&buf, c.offset).map_err(failed)?;
        // Read once per output file: the input's pages need not stay resident.
        file.release(src.payload_offset, src.payload_offset + src.payload_len);
    }
    Ok(())
}

/// A new private file (0600, no symlink followed); with `force`, one already there is
/// replaced (unlinked first, so a planted symlink is replaced, not followed).
fn create(path: &Path, force: bool) -> std::io::Result<File> {
    if force {
        match fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    create_new_private(path)
}

/// Creates `dir` (or takes an empty one; a non-empty one only with `force`).
fn output_dir(dir: &Path, force: bool) -> Result<(), ExtractError> {
    fs::create_dir_all(dir).map_err(|e| ExtractError::CreateDir(dir.to_path_buf(), e))?;
    let non_empty = fs::read_dir(dir)
        .map_err(|e| ExtractError::ReadDir(dir.to_path_buf(), e))?
        .next()
        .is_some();
    if non_empty && !force {
        return Err(ExtractError::NotEmpty(dir.to_path_buf()));
    }
    Ok(())
}

/// Writes a new file of `dir` (replacing one of that name with `force`).
fn write_file(dir: &Path, name: &str, bytes: &[u8], force: bool) -> Result<(), ExtractError> {
    let p = dir.join(name);
    let mut f = create(&p, force).map_err(|e| ExtractError::Write(p.clone(), e))?;
    f.write_all(bytes).map_err(|e| ExtractError::Write(p, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_output_limit_is_sixteen_times_the_file_and_at_least_256_mib() {
        assert_eq!(output_limit(0), 256 << 20);
        assert_eq!(output_limit(1 << 30), 16 << 30);
        assert_eq!(output_limit(u64::MAX), u64::MAX);
    }

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("kreplay-extract-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn a_capture_extracts_into_a_new_directory_and_not_into_a_full_one() {
        let src = format!(
            "{}/../testdata/captures/cuda-saxpy.krr",
            env!("CARGO_MANIFEST_DIR")
        );
        let file = MappedFile::open(Path::new(&src)).unwrap();
        let cap = Capture::parse(file.bytes()).unwrap();
        let x = Extraction::plan(&file, &cap, "saxpy.krr", false, false).unwrap();
        let dir = scratch("new");
        let done = x.write_files(&dir).unwrap();
        assert_eq!(done.regions, cap.regions.len());
        assert_eq!(
            fs::read(dir.join("args.bin")).unwrap(),
            cap.dispatch.arg_bytes
        );
        let r = &cap.regions[0];
        let pre = dir.join(format!("region-{}-{:#x}.bin", r.region_id, r.address));
        assert_eq!(fs::metadata(pre).unwrap().len(), r.size);
        assert_eq!(
            x.write_repro(&dir).unwrap(),
            None,
            "no reproducer asked for"
        );
        let e = x.write_files(&dir).unwrap_err();
        assert!(matches!(e, ExtractError::NotEmpty(_)), "{e}");
        fs::remove_dir_all(&dir).unwrap();
    }

    // Catches: a reproducer of a capture by touched pages that starts from zeros where play
    // starts from ABSENT_FILL (a different verdict), or that fills present bytes too.
    #[test]
    fn a_capture_by_touched_pages_gets_a_reproducer_that_fills_its_absent_bytes() {
        let path = format!(
            "{}/../testdata/golden/extents.krr",
            env!("CARGO_MANIFEST_DIR")
        );
        let file = MappedFile::open(Path::new(&path)).unwrap();
        let cap = Capture::parse(file.bytes()).unwrap();
        let x = Extraction::plan(&file, &cap, "t.krr", false, true).unwrap();
        let dir = scratch("touched-repro");
        x.write_repro(&dir).unwrap().expect("a reproducer");
        let program = fs::read_to_string(dir.join("repro.cpp")).unwrap();
        let start = program
            .find("std::vector<Absent> ABSENT = {")
            .expect("the table");
        let table = &program[start..];
        let table = &table[..table.find("};").expect("its end")];
        // The golden capture's region 0 holds [0x1000, 0x2000) and [0x4000, its end).
        assert_eq!(
            cap.extents(0).map(|e| e.present.clone()),
            Some(vec![(0x1000, 0x1000), (0x4000, 4196)])
        );
        let want = ["{0, 0x0ull, 0x1000ull}", "{0, 0x2000ull, 0x2000ull}"];
        for row in want {
            assert!(table.contains(row), "{row} not in {table}");
        }
        assert_eq!(table.matches("ull}").count(), want.len(), "{table}");
        assert!(program.contains("fill_absent(r.id, bytes);"));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_range_extracts_its_files_per_step_and_refuses_a_reproducer() {
        let path = format!(
            "{}/../testdata/golden/range-ops.krr",
            env!("CARGO_MANIFEST_DIR")
        );
        let file = MappedFile::open(Path::new(&path)).unwrap();
        let cap = Capture::parse(file.bytes()).unwrap();
        let names: Vec<String> = argument_files(&cap).into_iter().map(|f| f.0).collect();
        assert_eq!(
            names,
            [
                "step-0-host.bin",
                "step-1-args.bin",
                "step-6-args.bin",
                "step-7-received.bin"
            ]
        );
        let e = Extraction::plan(&file, &cap, "r.krr", false, true)
            .err()
            .expect("no reproducer");
        assert!(matches!(e, ExtractError::RangeReproducer(9)), "{e}");
        assert!(e.to_string().contains("comes later"), "{e}");
        let dir = scratch("range");
        let x = Extraction::plan(&file, &cap, "r.krr", false, false).unwrap();
        x.write_files(&dir).unwrap();
        let Action::Kernel(second) = &cap.steps[6].action else {
            panic!("step 6 is a kernel")
        };
        assert_eq!(
            fs::read(dir.join("step-6-args.bin")).unwrap(),
            second.arg_bytes
        );
        assert!(!dir.join("args.bin").exists());
        let json: serde_json::Value =
            serde_json::from_slice(&fs::read(dir.join("capture.json")).unwrap()).unwrap();
        assert_eq!(json["steps"].as_array().map(Vec::len), Some(9));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_single_capture_has_one_argument_file() {
        let saxpy = crate::testdata::bytes("cuda-saxpy");
        let cap = crate::testdata::parse(&saxpy);
        let files = argument_files(&cap);
        assert_eq!(files.len(), 1);
        assert_eq!(files[0].0, "args.bin");
    }
}
