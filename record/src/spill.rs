//! Regions that do not fit in device scratch (a dispatch reaching more memory than the GPU has
//! free) go straight into the capture file while the application waits: their pre bytes are
//! read from the application's memory through the ring of page-locked buffers, compressed and
//! written before the launch, and after it only the ranges the footprint says were written
//! (from the GPU digests, see `footprint`) are read and written. Host memory stays at the ring
//! and the writer's batch, as on the scratch path; the stall grows with the region (the bus,
//! compression and the disk), which is the price of not holding it anywhere else.
//!
//! The capture file is opened for the first such region (the format lets regions come before
//! the dispatch); the writer thread later appends the rest of the capture to it.

use kreplay_cuda::chunks::ChunkDigests;
use kreplay_cuda::{DownloadRing, Stream};
use kreplay_engine::write_set::ByteRange;
use kreplay_format::file::PendingFile;
use kreplay_format::{MemoryState, Region};

use crate::error::RecordError;
use crate::readback;

/// Staging for spilled regions (made during the stall, for the capture alone: the writers'
/// kept rings are at most 16 MiB a buffer, `staging_rings`).
const STAGING_BYTES: usize = 64 << 20;
const STAGING_SLOTS: usize = 3;

/// Opens the capture file (at its final name's `.partial`).
pub type OpenFile<'a> = &'a dyn Fn() -> Result<PendingFile, RecordError>;

/// The capture file, opened early because some region had to be written during the stall.
pub struct Spill {
    pub file: PendingFile,
    ring: DownloadRing,
}

/// A region written by the spill: its chunk digests before the launch, and the memory bytes
/// (pre and post) it put in the file.
pub struct Spilled {
    pub digests: Vec<[u64; 2]>,
    pub raw: u64,
}

impl Spill {
    pub fn open(open: OpenFile<'_>) -> Result<Spill, RecordError> {
        let file = open()?;
        let ring = DownloadRing::new(STAGING_SLOTS, STAGING_BYTES)
            .map_err(RecordError::cuda("allocating page-locked staging"))?;
        Ok(Spill { file, ring })
    }

    /// The file, for the writer to go on with; the ring is freed outside measured windows
    /// (this runs on the writer thread: freeing page-locked buffers beside a stall made its
    /// driver calls wait, `quiet`).
    pub fn into_file(self) -> PendingFile {
        let Spill { file, ring } = self;
        crate::quiet::outside_measurement(|| drop(ring));
        file
    }

    /// Declares `region` (whose bytes are at `addr` in this process) and writes its pre bytes;
    /// zero chunks (the GPU says which) are not read.
    pub fn pre(
        &mut self,
        region: &Region,
        addr: u64,
        digests: ChunkDigests,
    ) -> Result<Spilled, RecordError> {
        let w = &mut self.file.writer;
        w.region(region)?;
        let cap = self.ring.capacity() as u64;
        let steps = readback::pre_steps(
            addr,
            region.size,
            region.chunk_size,
            Some(&digests.nonzero),
            cap,
        );
        readback::write_steps(
            &mut self.ring,
            w,
            (region.region_id, MemoryState::Pre, None),
            (&steps, crate::quiet::Pacing::Unpaced),
            &|_| {},
        )?;
        Ok(Spilled {
            digests: digests.digests,
            raw: region.size,
        })
    }

    /// After the launch: the `written` ranges are read and written as post chunks.
    pub fn post(
        &mut self,
        region: &Region,
        addr: u64,
        written: &[ByteRange],
    ) -> Result<u64, RecordError> {
        // Read in place: the runs stay at their offsets in the application's memory.
        let runs = readback::in_place(written);
        let cap = self.ring.capacity() as u64;
        let steps = readback::post_steps(addr, &runs, region.chunk_size, cap);
        let w = &mut self.file.writer;
        readback::write_steps(
            &mut self.ring,
            w,
            (region.region_id, MemoryState::Post, None),
            (&steps, crate::quiet::Pacing::Unpaced),
            &|_| {},
        )
    }
}

/// Digests `region`'s bytes at `addr` on the GPU (an error where the GPU cannot: an unaligned
/// address, say; before the launch the caller then copies to the host instead).
pub fn digest(region: &Region, addr: u64, stream: &Stream) -> Result<ChunkDigests, RecordError> {
    crate::device_resources::with_chunk_kernels(|k| {
        // SAFETY: `addr` is the region (the application's allocation) read with its context
        // synchronised, `region.size` bytes.
        unsafe { k.digest(addr, region.size, region.chunk_size, stream) }
    })
    .map_err(RecordError::WriteSet)
}
