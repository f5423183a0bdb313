//! A region's bytes as Python sees them: decoded once into an anonymous memory map that
//! NumPy views without a copy (buffer protocol). Read-only by default, since every view of one
//! `RegionBytes` shares its memory; writable when asked for at decoding, for a consumer that
//! cannot take a read-only buffer (DLPack to `torch.Tensor`: torch has no read-only tensors),
//! which then owns a decoding of its own.

use std::ffi::{c_int, c_void, CStr};

use kreplay_format::{Capture, ChunkEncoding, MemoryState};
use memmap2::MmapMut;
use pyo3::exceptions::{PyBufferError, PyOSError, PyValueError};
use pyo3::prelude::*;

/// A region's bytes, decoded into anonymous memory (chunks stored as zeros are never
/// touched: they cost no memory), exported through the buffer protocol: read-only, or
/// writable when decoded with `writable=True` (a private decoding: writes reach no other view
/// and never the file).
#[pyclass(frozen)]
pub(crate) struct RegionBytes {
    map: MmapMut,
    len: usize,
    writable: bool,
}

#[pymethods]
impl RegionBytes {
    fn __len__(&self) -> usize {
        self.len
    }

    /// Whether the buffer can be exported writable (decoded with `writable=True`).
    #[getter]
    fn writable(&self) -> bool {
        self.writable
    }

    /// # Safety
    /// Called by the interpreter with a valid `view` to fill; the buffer stays valid while
    /// `view.obj` holds a reference to this object, which owns the mapping and never drops
    /// or moves it while alive (the class is frozen).
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut pyo3::ffi::Py_buffer,
        flags: c_int,
    ) -> PyResult<()> {
        if view.is_null() {
            return Err(PyBufferError::new_err("no view to fill"));
        }
        let wants_writable = flags & pyo3::ffi::PyBUF_WRITABLE == pyo3::ffi::PyBUF_WRITABLE;
        let this = slf.get();
        if wants_writable && !this.writable {
            return Err(PyBufferError::new_err(
                "a capture's region is read-only: copy it (numpy.array(region.array())) to change it",
            ));
        }
        // Writes from Python go through this pointer only when the region was decoded
        // writable; Rust never reads or borrows the mapping's bytes after decoding.
        let ptr = this.map.as_ptr().cast_mut() as *mut c_void;
        let len = this.len as isize;
        let readonly = c_int::from(!this.writable);
        const FORMAT: &CStr = c"B";
        // SAFETY: `view` is non-null and ours to fill (the buffer protocol's contract); the
        // fields point into `this` (the mapping) and into `view` itself, both alive as long
        // as the view holds its reference to `slf`.
        unsafe {
            (*view).obj = slf.into_any().into_ptr();
            (*view).buf = ptr;
            (*view).len = len;
            (*view).readonly = readonly;
            (*view).itemsize = 1;
            (*view).format = if flags & pyo3::ffi::PyBUF_FORMAT == pyo3::ffi::PyBUF_FORMAT {
                FORMAT.as_ptr() as *mut _
            } else {
                std::ptr::null_mut()
            };
            (*view).ndim = 1;
            (*view).shape = if flags & pyo3::ffi::PyBUF_ND == pyo3::ffi::PyBUF_ND {
                &mut (*view).len
            } else {
                std::ptr::null_mut()
            };
            (*view).strides = if flags & pyo3::ffi::PyBUF_STRIDES == pyo3::ffi::PyBUF_STRIDES {
                &mut (*view).itemsize
            } else {
                std::ptr::null_mut()
            };
            (*view).suboffsets = std::ptr::null_mut();
            (*view).internal = std::ptr::null_mut();
        }
        Ok(())
    }

    /// # Safety
    /// Nothing was allocated for the view.
    unsafe fn __releasebuffer__(&self, _view: *mut pyo3::ffi::Py_buffer) {}
}

/// A region's bytes decoded into anonymous memory: before the dispatch, or after it (`post`:
/// the recorded output where the kernel wrote, the input elsewhere).
pub(crate) fn decode_region(
    py: Python<'_>,
    path: &str,
    cap: &Capture<'_>,
    region_id: u32,
    post: bool,
    writable: bool,
) -> PyResult<RegionBytes> {
    let region = cap
        .region(region_id)
        .ok_or_else(|| PyValueError::new_err(format!("{path}: no region {region_id}")))?;
    if post && cap.reference() != kreplay_format::Reference::Recorded {
        return Err(PyValueError::new_err(format!(
            "{path}: holds no recorded output ({} by kreplay pack)",
            cap.reference().name()
        )));
    }
    let len = usize::try_from(region.size)
        .map_err(|_| PyValueError::new_err("region larger than this machine's address space"))?;
    // The size comes from the file, but only reserves address space: pages are touched
    // chunk by chunk as each is decoded (and each chunk's length is checked by the reader).
    let mut map = MmapMut::map_anon(len.max(1))
        .map_err(|e| PyOSError::new_err(format!("cannot map {len} bytes: {e}")))?;
    py.detach(|| decode_chunks(cap, region_id, post, &mut map))
        .map_err(|e| PyValueError::new_err(format!("{path}: {e}")))?;
    Ok(RegionBytes { map, len, writable })
}

/// Every chunk of the region that holds bytes, decoded into `map`: the pre-state, then the
/// post-state over it when `post`. Zero chunks of the pre-state are skipped (the map is
/// zeroed already).
fn decode_chunks(
    cap: &Capture<'_>,
    region_id: u32,
    post: bool,
    map: &mut MmapMut,
) -> Result<(), kreplay_format::FormatError> {
    let states: &[MemoryState] = if post {
        &[MemoryState::Pre, MemoryState::Post]
    } else {
        &[MemoryState::Pre]
    };
    for &s in states {
        for c in cap.chunks(region_id, s) {
            if c.encoding == ChunkEncoding::Zero && s == MemoryState::Pre {
                continue;
            }
            let end = c.offset.saturating_add(c.raw_len);
            let Some(dst) = map.get_mut(c.offset as usize..end as usize) else {
                continue;
            };
            cap.read_chunk_into(c, dst)?;
        }
    }
    Ok(())
}
