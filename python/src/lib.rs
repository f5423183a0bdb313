//! `kreplay._native`: the Rust side of the Python package. Thin: an open capture
//! (`CaptureFile`: the file kept open and mapped, so a handle never reads another file that
//! took its name), its description (the same JSON as `kreplay info --json`), a region's bytes
//! decoded once into an anonymous memory map that NumPy views without a copy (buffer
//! protocol, `region.rs`), and a replay (the same JSON as `kreplay play --json`). The Python layer
//! (`kreplay/__init__.py`) builds the objects.

#![deny(clippy::undocumented_unsafe_blocks)]

// `verify`, `pack`, `extract`, `diff`: the CLI's commands of those names.
mod commands;
mod region;

use std::path::Path;

use kreplay_format::file::MappedFile;
use kreplay_format::Capture;
use kreplay_player::{CacheState, CodeChoice, PlayFailure, PlayOptions};
use pyo3::exceptions::{PyOSError, PyRuntimeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use region::{decode_region, RegionBytes};

fn open_file(path: &str) -> PyResult<MappedFile> {
    MappedFile::open(Path::new(path)).map_err(|e| PyOSError::new_err(format!("{path}: {e}")))
}

fn parse<'a>(path: &str, file: &'a MappedFile) -> PyResult<Capture<'a>> {
    Capture::parse(file.bytes()).map_err(|e| PyValueError::new_err(format!("{path}: {e}")))
}

pyo3::create_exception!(
    _native,
    CaptureChanged,
    PyOSError,
    "The capture file was written over in place after it was opened: open it again."
);

/// An open capture: the file stays open and mapped for the object's lifetime, so what it
/// reads is the file it was opened on, whatever happens to the name since. A file replaced by
/// rename is another file (this one reads on, unchanged); one written over in place (the same
/// file, `cp new old`) raises `CaptureChanged` instead of returning other bytes.
#[pyclass(frozen)]
struct CaptureFile {
    path: String,
    file: MappedFile,
}

impl CaptureFile {
    /// The capture, checked first to be the bytes it was opened with.
    fn capture(&self) -> PyResult<Capture<'_>> {
        let changed = self
            .file
            .changed_since_open()
            .map_err(|e| PyOSError::new_err(format!("{}: {e}", self.path)))?;
        if let Some(why) = changed {
            return Err(CaptureChanged::new_err(format!(
                "{}: the file was written over since it was opened ({why}): kreplay.open() it again to read what it holds now",
                self.path
            )));
        }
        parse(&self.path, &self.file)
    }
}

#[pymethods]
impl CaptureFile {
    #[new]
    fn new(path: &str) -> PyResult<CaptureFile> {
        let file = open_file(path)?;
        parse(path, &file)?;
        Ok(CaptureFile {
            path: path.to_string(),
            file,
        })
    }

    #[getter]
    fn path(&self) -> &str {
        &self.path
    }

    /// `kreplay info --json` of the capture, as a string.
    fn describe(&self) -> PyResult<String> {
        let cap = self.capture()?;
        serde_json::to_string(&kreplay_player::describe::describe(&self.path, &cap))
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))
    }

    /// The bytes of region `region_id` before the dispatch (`post=False`) or after it
    /// (`True`: the recorded output where the kernel wrote, the input elsewhere); `writable`
    /// gives a decoding of its own that can be exported writable (for DLPack).
    #[pyo3(signature = (region_id, post=false, writable=false))]
    fn region_bytes(
        &self,
        py: Python<'_>,
        region_id: u32,
        post: bool,
        writable: bool,
    ) -> PyResult<RegionBytes> {
        let cap = self.capture()?;
        decode_region(py, &self.path, &cap, region_id, post, writable)
    }

    /// Replays the capture; returns `kreplay play --json`'s object as a string and the
    /// warnings to show. The defaults are the player's (`play_defaults`).
    #[pyo3(signature = (
        passes=PlayOptions::default().passes,
        verify=PlayOptions::default().verify,
        metrics=Vec::new(),
        warmup=PlayOptions::default().warmup,
        device=PlayOptions::default().device,
        relocate=PlayOptions::default().relocate,
        ptx=false,
        flush_cache=None,
    ))]
    #[allow(clippy::too_many_arguments)]
    fn play(
        &self,
        py: Python<'_>,
        passes: u32,
        verify: bool,
        metrics: Vec<String>,
        warmup: u32,
        device: i32,
        relocate: bool,
        ptx: bool,
        flush_cache: Option<bool>,
    ) -> PyResult<(String, Vec<String>)> {
        let cap = self.capture()?;
        let options = PlayArgs {
            passes,
            verify,
            metrics,
            warmup,
            device,
            relocate,
            ptx,
            flush_cache,
        }
        .options()?;
        replay(py, &self.path, &self.file, &cap, &options)
    }
}

/// `kreplay info --json` of the capture at `path`, as a string.
#[pyfunction]
fn describe(path: &str) -> PyResult<String> {
    CaptureFile::new(path)?.describe()
}

/// The bytes of region `region_id` of the capture at `path` (see `CaptureFile.region_bytes`).
#[pyfunction]
#[pyo3(signature = (path, region_id, post=false, writable=false))]
fn region_bytes(
    py: Python<'_>,
    path: &str,
    region_id: u32,
    post: bool,
    writable: bool,
) -> PyResult<RegionBytes> {
    CaptureFile::new(path)?.region_bytes(py, region_id, post, writable)
}

/// What a replay is asked for (the keyword arguments of `kreplay.play`).
struct PlayArgs {
    passes: u32,
    verify: bool,
    metrics: Vec<String>,
    warmup: u32,
    device: i32,
    relocate: bool,
    ptx: bool,
    /// As `kreplay play --cache`: None keeps the L2 for timed passes and flushes it for
    /// counter passes (ncu's way); Some(true) flushes before both, Some(false) keeps for both.
    flush_cache: Option<bool>,
}

impl PlayArgs {
    /// The keywords as the player's options.
    fn options(self) -> PyResult<PlayOptions> {
        if self.passes == 0 {
            return Err(PyValueError::new_err("passes must be at least 1"));
        }
        Ok(PlayOptions {
            passes: self.passes,
            warmup: self.warmup,
            verify: self.verify,
            device: self.device,
            code: if self.ptx {
                CodeChoice::Ptx
            } else {
                CodeChoice::Captured
            },
            relocate: self.relocate,
            cache: self.flush_cache.map(|flush| {
                if flush {
                    CacheState::Flush
                } else {
                    CacheState::Keep
                }
            }),
            metrics: self.metrics,
            ..PlayOptions::default()
        })
    }
}

/// The keyword defaults of `kreplay.play`, from the player's (the CLI's flags have the same).
#[pyfunction]
fn play_defaults(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let d = PlayOptions::default();
    let out = PyDict::new(py);
    out.set_item("passes", d.passes)?;
    out.set_item("verify", d.verify)?;
    out.set_item("metrics", d.metrics)?;
    out.set_item("warmup", d.warmup)?;
    out.set_item("device", d.device)?;
    out.set_item("relocate", d.relocate)?;
    out.set_item("ptx", d.code == CodeChoice::Ptx)?;
    out.set_item("flush_cache", d.cache.map(|c| c == CacheState::Flush))?;
    Ok(out)
}

/// Replays the capture at `path`; returns `kreplay play --json`'s object as a string and the
/// warnings to show.
#[pyfunction]
#[pyo3(signature = (
    path,
    passes=PlayOptions::default().passes,
    verify=PlayOptions::default().verify,
    metrics=Vec::new(),
    warmup=PlayOptions::default().warmup,
    device=PlayOptions::default().device,
    relocate=PlayOptions::default().relocate,
    ptx=false,
    flush_cache=None,
))]
#[allow(clippy::too_many_arguments)]
fn play(
    py: Python<'_>,
    path: &str,
    passes: u32,
    verify: bool,
    metrics: Vec<String>,
    warmup: u32,
    device: i32,
    relocate: bool,
    ptx: bool,
    flush_cache: Option<bool>,
) -> PyResult<(String, Vec<String>)> {
    CaptureFile::new(path)?.play(
        py,
        passes,
        verify,
        metrics,
        warmup,
        device,
        relocate,
        ptx,
        flush_cache,
    )
}

/// The player's replay, without the interpreter's lock; the report as JSON.
fn replay(
    py: Python<'_>,
    path: &str,
    file: &MappedFile,
    cap: &Capture<'_>,
    options: &PlayOptions,
) -> PyResult<(String, Vec<String>)> {
    let replay = || -> Result<(String, Vec<String>), String> {
        // As `kreplay play`: each chunk's file pages are dropped once uploaded and verified.
        let release = |start: u64, end: u64| file.release(start, end);
        let outcome = kreplay_player::play(cap, options, &release, &mut ())
            .map_err(|e| failure_message(&e, path))?;
        let json = serde_json::to_string(&outcome.json()).map_err(|e| e.to_string())?;
        Ok((json, outcome.warnings))
    };
    py.detach(replay).map_err(PyRuntimeError::new_err)
}

/// A failed replay in the CLI's words: what failed, naming the capture, then why.
fn failure_message(e: &PlayFailure, path: &str) -> String {
    let what = match e {
        PlayFailure::Blocked(_) => return format!("{path} {e}"),
        PlayFailure::Open(_) => format!("cannot replay {path}"),
        PlayFailure::Run {
            heap_note: Some(n), ..
        } => format!("replay failed (the kernel reads the device heap, not captured: {n})"),
        _ => e.to_string(),
    };
    match e.cause() {
        Some(cause) => format!("{what}: {cause}"),
        None => what,
    }
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(describe, m)?)?;
    m.add_function(wrap_pyfunction!(region_bytes, m)?)?;
    m.add_function(wrap_pyfunction!(play, m)?)?;
    m.add_function(wrap_pyfunction!(play_defaults, m)?)?;
    m.add_class::<RegionBytes>()?;
    m.add_class::<CaptureFile>()?;
    m.add("CaptureChanged", m.py().get_type::<CaptureChanged>())?;
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    commands::register(m)?;
    Ok(())
}
