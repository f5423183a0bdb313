//! CUDA arrays a dispatch writes (through surface objects) live in two places during a replay:
//! the array the kernel writes, and a linear shadow in device memory that the restorer, the
//! determinism digest and the verification treat like any region. Before a pass the shadow's
//! restored texels go into the array; after it the array's texels come back to the shadow.
//! Arrays the dispatch only reads are filled once and need neither.

use std::rc::Rc;

use kreplay_cuda::texture::CudaArray;
use kreplay_cuda::{CuResult, Stream};
use kreplay_format::{Capture, MemoryState};

/// The written arrays and their shadows (device addresses).
#[derive(Default)]
pub struct ArraySync {
    pairs: Vec<(Rc<CudaArray>, u64)>,
}

impl ArraySync {
    /// # Safety
    /// Each shadow address starts `CudaArray::texel_bytes` bytes of device memory that are
    /// *readable* and *writable* (`kreplay_cuda::memory`'s contracts) while the `ArraySync`
    /// lives: `push` reads and `pull` writes them without further checks.
    pub unsafe fn new(pairs: Vec<(Rc<CudaArray>, u64)>) -> ArraySync {
        ArraySync { pairs }
    }

    pub fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    /// Shadow → array, queued on `stream` (after the restore).
    pub fn push(&self, stream: &Stream) -> CuResult<()> {
        for (array, shadow) in &self.pairs {
            // SAFETY: the shadow is readable while `self` lives (`new`'s contract).
            unsafe { array.copy_from_device(*shadow, stream)? };
        }
        Ok(())
    }

    /// Array → shadow, queued on `stream` (after the launch).
    pub fn pull(&self, stream: &Stream) -> CuResult<()> {
        for (array, shadow) in &self.pairs {
            // SAFETY: the shadow is writable while `self` lives (`new`'s contract).
            unsafe { array.copy_to_device(*shadow, stream)? };
        }
        Ok(())
    }
}

/// Whether the dispatch wrote the array whose texels are region `region_id` (the capture holds
/// post-dispatch chunks for it).
pub fn written(cap: &Capture<'_>, region_id: u32) -> bool {
    cap.chunks(region_id, MemoryState::Post).next().is_some()
}
