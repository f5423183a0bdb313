//! The digest of a range's memory after each step (`StateDigest`), which a replay recomputes
//! after the same step to name the first step that diverges. The fold is
//! `kreplay_format::state_digest`, the one both sides call.
//!
//! The rule (the player must follow it to the letter):
//! - the regions are those the range held after the step: region ids `0..regions`, in id order;
//! - each region is digested on the GPU with the chunk digest (`kreplay_cuda::chunks`,
//!   `digest(address, region.size, region.chunk_size)`: one `[u64; 2]` per chunk, in chunk
//!   order), at its address in the process;
//! - a CUDA-array region counts in `regions` but contributes no digest;
//! - every chunk digest of every region, in that order, is folded in one pass with
//!   `kreplay_format::fold_digests` (no separator between regions).

use kreplay_cuda::Stream;
use kreplay_format::{state_digest, MemoryKind, RegionDigest, StateDigest};

use crate::snapshot::Snapshot;

/// The digest of the held memory now, on the GPU. Call with the context synchronised. `None`
/// where the GPU cannot digest a region (an unaligned module global, say): the step then has
/// no digest, and a replay checks it at the range's end only.
pub fn digest_held(snapshots: &[Snapshot]) -> Option<StateDigest> {
    let stream = Stream::new().ok()?;
    let mut regions = Vec::with_capacity(snapshots.len());
    for s in snapshots {
        if s.region.kind == MemoryKind::CudaArray {
            regions.push(RegionDigest::Array);
            continue;
        }
        let d = crate::spill::digest(&s.region, s.device_addr, &stream).ok()?;
        regions.push(RegionDigest::Chunks(d.digests));
    }
    Some(state_digest(&regions))
}
