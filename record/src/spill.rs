//! Regions that do not fit in device scratch (a dispatch reaching more memory than the GPU has
//! free) go straight into the capture file while the application waits: their pre bytes are
//! read from the application's memory through the ring of page-locked buffers, compressed and
//! written before the launch, and after it only the chunks whose GPU digest changed are read
//! and written. Host memory stays at the ring and the writer's batch, as on the scratch path;
//! the stall grows with the region (the bus, compression and the disk), which is the price of
//! not holding it anywhere else.
//!
//! The capture file is opened for the first such region (the format lets regions come before
//! the dispatch); the writer thread later appends the rest of the capture to it.

use kreplay_cuda::chunks::ChunkDigests;
use kreplay_cuda::{DownloadRing, Stream};
use kreplay_format::file::PendingFile;
use kreplay_format::{MemoryState, Region};

use crate::error::RecordError;
use crate::readback::{self, PackedRun};

/// Staging for spilled regions: as the writer's.
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
            (region.region_id, MemoryState::Pre),
            &steps,
            &|_| {},
        )?;
        Ok(Spilled {
            digests: digests.digests,
            raw: region.size,
        })
    }

    /// After the launch: the chunks whose digest changed are read and written as post chunks.
    pub fn post(
        &mut self,
        region: &Region,
        addr: u64,
        before: &Spilled,
        after: &ChunkDigests,
    ) -> Result<u64, RecordError> {
        let changed = changed_chunks(&before.digests, &after.digests);
        let (runs, _) = readback::pack_changed(&changed, region.chunk_size, region.size);
        // Read in place: the runs stay at their offsets in the application's memory.
        let runs: Vec<PackedRun> = runs
            .into_iter()
            .map(|r| PackedRun { at: r.offset, ..r })
            .collect();
        let cap = self.ring.capacity() as u64;
        let steps = readback::post_steps(addr, &runs, region.chunk_size, cap);
        let w = &mut self.file.writer;
        readback::write_steps(
            &mut self.ring,
            w,
            (region.region_id, MemoryState::Post),
            &steps,
            &|_| {},
        )
    }
}

/// Which chunks' digests differ (a chunk count that changed counts every chunk as changed).
pub fn changed_chunks(before: &[[u64; 2]], after: &[[u64; 2]]) -> Vec<bool> {
    if before.len() != after.len() {
        return vec![true; after.len()];
    }
    before.iter().zip(after).map(|(a, b)| a != b).collect()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunks_whose_digest_changed_are_the_write_set() {
        let a = [[1, 2], [3, 4], [5, 6]];
        let b = [[1, 2], [3, 5], [5, 6]];
        assert_eq!(changed_chunks(&a, &b), vec![false, true, false]);
        assert_eq!(changed_chunks(&a, &a), vec![false; 3]);
        assert_eq!(changed_chunks(&a[..2], &b), vec![true; 3]);
    }
}
