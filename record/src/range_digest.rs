//! The digest of a range's memory after each step (`StateDigest`), which a replay recomputes
//! after the same step to name the first step that diverges.
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
use kreplay_format::{fold_digests, MemoryKind, StateDigest};

use crate::snapshot::Snapshot;

/// One held region's part of a state digest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RegionDigest {
    /// A CUDA array: no address, nothing digested.
    Array,
    /// The region's chunk digests, in chunk order.
    Chunks(Vec<[u64; 2]>),
}

/// The state digest of `regions` (by region id), folded as the module's rule says.
pub fn state_digest(regions: &[RegionDigest]) -> StateDigest {
    let chunks = regions.iter().flat_map(|r| match r {
        RegionDigest::Array => [].iter(),
        RegionDigest::Chunks(c) => c.iter(),
    });
    StateDigest {
        regions: regions.len() as u32,
        digest: fold_digests(chunks),
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn all_chunks_fold_in_region_order_and_arrays_only_count() {
        let (a, b, c) = ([1u64, 2], [3u64, 4], [5u64, 6]);
        let regions = [
            RegionDigest::Chunks(vec![a, b]),
            RegionDigest::Array,
            RegionDigest::Chunks(vec![c]),
        ];
        let d = state_digest(&regions);
        assert_eq!(d.regions, 3, "the array counts");
        assert_eq!(
            d.digest,
            fold_digests([&a, &b, &c]),
            "one fold, no separators"
        );
        let swapped = [
            RegionDigest::Chunks(vec![c]),
            RegionDigest::Array,
            RegionDigest::Chunks(vec![a, b]),
        ];
        assert_ne!(
            state_digest(&swapped).digest,
            d.digest,
            "region order matters"
        );
        let no_array = [
            RegionDigest::Chunks(vec![a, b]),
            RegionDigest::Chunks(vec![c]),
        ];
        let without = state_digest(&no_array);
        assert_eq!(without.digest, d.digest, "an array adds no bytes");
        assert_eq!(without.regions, 2);
    }

    #[test]
    fn a_range_holding_nothing_digests_to_the_empty_fold() {
        let d = state_digest(&[]);
        assert_eq!(d.regions, 0);
        assert_eq!(d.digest, fold_digests(std::iter::empty()));
    }
}
