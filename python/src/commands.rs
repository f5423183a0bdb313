//! `kreplay.verify`, `pack`, `extract` and `diff`: the CLI's commands of the same names, from
//! the same library functions (format and player), their results as JSON or dicts and their
//! refusals as exceptions with the CLI's text. The files are read without the interpreter's
//! lock.

use std::error::Error;
use std::path::Path;

use kreplay_format::file::{verify_mapped, MappedFile};
use kreplay_format::{Capture, FormatError, SalvageRefused, Verdict};
use kreplay_player::compare::Element;
use kreplay_player::diff::{DiffError, DiffState};
use kreplay_player::extract::{ExtractError, Extraction};
use kreplay_player::pack::{pack_file, PackPlan, PackRefused, PackRequest};
use pyo3::exceptions::{PyFileExistsError, PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

/// An error and its causes, as the CLI prints them: joined by ": ", a cause its parent
/// already told left out.
fn chain_text(e: &dyn Error) -> String {
    let mut text = String::new();
    let mut next: Option<&dyn Error> = Some(e);
    while let Some(cause) = next {
        let c = cause.to_string();
        let c = c.trim_end();
        if !c.is_empty() && !text.contains(c) {
            if !text.is_empty() {
                text.push_str(": ");
            }
            text.push_str(c);
        }
        next = cause.source();
    }
    text
}

/// A file-system failure is an OSError; anything else the capture or the call got wrong, a
/// ValueError.
fn raise(e: &dyn Error, io: bool) -> PyErr {
    if io {
        PyOSError::new_err(chain_text(e))
    } else {
        PyValueError::new_err(chain_text(e))
    }
}

fn is_io(e: &FormatError) -> bool {
    matches!(e, FormatError::Io(_))
}

/// `e`, caused by the format's `source`: FileExistsError for an output already there (no
/// `force`), else as [`raise`].
fn raise_format(e: &dyn Error, source: &FormatError) -> PyErr {
    match source {
        FormatError::Io(io) if io.kind() == std::io::ErrorKind::AlreadyExists => {
            PyFileExistsError::new_err(chain_text(e))
        }
        _ => raise(e, is_io(source)),
    }
}

fn open(path: &str) -> PyResult<MappedFile> {
    MappedFile::open(Path::new(path))
        .map_err(|e| PyOSError::new_err(format!("cannot open {path}: {e}")))
}

fn parse<'a>(path: &str, file: &'a MappedFile) -> PyResult<Capture<'a>> {
    Capture::parse(file.bytes()).map_err(|e| PyValueError::new_err(format!("{path}: {e}")))
}

/// `kreplay verify --json PATH` as a JSON string, and with `salvage`, what salvage kept (the
/// report as JSON) and the CLI's note when there was nothing to salvage.
#[pyfunction]
#[pyo3(signature = (path, salvage=None, force=false))]
pub fn verify(
    py: Python<'_>,
    path: &str,
    salvage: Option<&str>,
    force: bool,
) -> PyResult<(String, Option<String>, Option<String>)> {
    let file = open(path)?;
    let work = || -> PyResult<(String, Option<String>, Option<String>)> {
        let verified = verify_mapped(&file, &mut |_, _, _| {});
        let verdict = Verdict::of(path, &verified);
        let json =
            serde_json::to_string(&verdict).map_err(|e| PyValueError::new_err(e.to_string()))?;
        let Some(out) = salvage else {
            return Ok((json, None, None));
        };
        if verified.is_ok() {
            return Ok((
                json,
                None,
                Some(format!("{path} is intact; nothing to salvage")),
            ));
        }
        let report = kreplay_format::salvage_into(&file, path, Path::new(out), force).map_err(
            |e| match &e {
                SalvageRefused::IntoItself(_) => PyValueError::new_err(format!("salvage={e}")),
                SalvageRefused::Failed { source, .. } => raise_format(&e, source),
            },
        )?;
        let report =
            serde_json::to_string(&report).map_err(|e| PyValueError::new_err(e.to_string()))?;
        Ok((json, Some(report), None))
    };
    py.detach(work)
}

/// `kreplay diff --json A B --state STATE --as AS` as a JSON string.
#[pyfunction]
#[pyo3(signature = (a, b, state="post", as_="f32"))]
pub fn diff(py: Python<'_>, a: &str, b: &str, state: &str, as_: &str) -> PyResult<String> {
    let state = DiffState::from_name(state).ok_or_else(|| {
        PyValueError::new_err(format!("state={state:?}: expected \"pre\" or \"post\""))
    })?;
    let element = Element::from_name(as_).ok_or_else(|| {
        let names: Vec<&str> = Element::ALL.iter().map(|e| e.name()).collect();
        PyValueError::new_err(format!("as_={as_:?}: expected one of {}", names.join(", ")))
    })?;
    let (fa, fb) = (open(a)?, open(b)?);
    let (ca, cb) = (parse(a, &fa)?, parse(b, &fb)?);
    let work = || -> PyResult<String> {
        let report = kreplay_player::diff::diff(a, &ca, b, &cb, state, element).map_err(|e| {
            let io = matches!(&e, DiffError::Read(f) if is_io(f));
            raise(&e, io)
        })?;
        serde_json::to_string(&report).map_err(|e| PyValueError::new_err(e.to_string()))
    };
    py.detach(work)
}

/// The defaults of `diff`'s keywords, from the player's (the CLI's flags have the same).
#[pyfunction]
pub fn diff_defaults(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let out = PyDict::new(py);
    out.set_item("state", DiffState::default().name())?;
    out.set_item("as_", Element::default().name())?;
    Ok(out)
}

/// `kreplay pack SRC -o DST`: what the pack did, as a dict.
#[pyfunction]
#[pyo3(signature = (src, dst, level=None, redact=false, drop_post=false, force=false))]
pub fn pack<'py>(
    py: Python<'py>,
    src: &str,
    dst: &str,
    level: Option<i32>,
    redact: bool,
    drop_post: bool,
    force: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let file = open(src)?;
    let request = PackRequest {
        level,
        redact,
        drop_post,
    };
    let work = || -> Result<kreplay_format::PackReport, PyErr> {
        let refused = |e: PackRefused| match &e {
            PackRefused::IntoItself(_) => PyValueError::new_err(format!("dst={e}")),
            PackRefused::Failed { source, .. } => raise_format(&e, source),
            PackRefused::Level(_) => raise(&e, false),
        };
        let plan = PackPlan::of(file.bytes(), request).map_err(refused)?;
        pack_file(&file, src, Path::new(dst), force, plan, &mut |_, _, _| {}).map_err(refused)
    };
    let report = py.detach(work)?;
    let out = PyDict::new(py);
    out.set_item("file", src)?;
    out.set_item("output", dst)?;
    out.set_item("size", std::fs::metadata(dst).map(|m| m.len()).unwrap_or(0))?;
    out.set_item("level", report.level)?;
    out.set_item("reference", report.reference.map(|r| r.name()))?;
    out.set_item("redacted_bytes", report.redacted_bytes)?;
    out.set_item("kept_bytes", report.kept_bytes)?;
    out.set_item("kept_regions", report.kept_regions)?;
    out.set_item("dropped_post_bytes", report.dropped_post_bytes)?;
    let (replaced, kept) = report.redaction.as_ref().map_or((0, 0), |r| {
        let replaced = r.fields.iter().filter(|f| !f.kept).count();
        (replaced, r.fields.len() - replaced)
    });
    out.set_item("fields_replaced", replaced)?;
    out.set_item("fields_kept", kept)?;
    Ok(out)
}

fn extract_error(e: ExtractError) -> PyErr {
    let io = match &e {
        ExtractError::CreateDir(..) | ExtractError::ReadDir(..) | ExtractError::Write(..) => true,
        ExtractError::Read(f) => is_io(f),
        _ => false,
    };
    raise(&e, io)
}

/// `kreplay extract PATH [-o OUT_DIR] [--repro REPRO] [--force]`: what it wrote, as a dict.
#[pyfunction]
#[pyo3(signature = (path, out_dir=None, repro=None, force=false))]
pub fn extract<'py>(
    py: Python<'py>,
    path: &str,
    out_dir: Option<&str>,
    repro: Option<&str>,
    force: bool,
) -> PyResult<Bound<'py, PyDict>> {
    if out_dir.is_none() && repro.is_none() {
        return Err(PyValueError::new_err(
            "extract needs out_dir (the files) or repro (a reproducer's directory), or both",
        ));
    }
    let file = open(path)?;
    let cap = parse(path, &file)?;
    let work = || -> PyResult<(Option<kreplay_player::extract::Extracted>, Option<usize>)> {
        let x =
            Extraction::plan(&file, &cap, path, force, repro.is_some()).map_err(extract_error)?;
        let done = match out_dir {
            Some(d) => Some(x.write_files(Path::new(d)).map_err(extract_error)?),
            None => None,
        };
        let repro_files = match repro {
            Some(d) => x.write_repro(Path::new(d)).map_err(extract_error)?,
            None => None,
        };
        Ok((done, repro_files))
    };
    let (done, repro_files) = py.detach(work)?;
    let out = PyDict::new(py);
    out.set_item("output", out_dir)?;
    out.set_item("modules", done.map(|d| d.modules))?;
    out.set_item("regions", done.map(|d| d.regions))?;
    out.set_item("repro", repro)?;
    out.set_item("repro_files", repro_files)?;
    Ok(out)
}

/// Adds the commands to the native module.
pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_function(wrap_pyfunction!(verify, m)?)?;
    m.add_function(wrap_pyfunction!(diff, m)?)?;
    m.add_function(wrap_pyfunction!(diff_defaults, m)?)?;
    m.add_function(wrap_pyfunction!(pack, m)?)?;
    m.add_function(wrap_pyfunction!(extract, m)?)?;
    Ok(())
}
