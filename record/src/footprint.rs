//! The footprint seam: what memory a step reads (the regions to snapshot before it runs) and
//! what it wrote (which bytes of them, given what comparing them before and after says). The
//! capture asks only this; the reachable walk (`Reachable`, over `reachable::reach`) is the one
//! way of answering today. Touched-bytes tracking (`--memory touched`, issue 35) is the next: it
//! keeps the walk's regions (which allocations exist) and narrows both answers to the pages
//! the instrumented kernel touched. Each way is a mechanism in a module of its own, made a
//! `Footprint` here, where `for_capture` chooses among them (the mechanisms know nothing of
//! this seam, so nothing imports in a circle).
//!
//! The decision "which bytes were written" for the walk is `kreplay_engine::write_set::written`,
//! the one function every comparison (GPU scan, host compare, digests) goes through; the
//! replay's restore reads the same ranges back from the capture.

use std::sync::Arc;

use kreplay_cuda::ForeignFunction;
use kreplay_engine::write_set::{self, ByteRange, Evidence};
use kreplay_format::{MemoryKind, Region};

use crate::error::RecordError;
use crate::walk::Walk;

/// The step about to run, as a footprint needs it.
pub struct Step<'a> {
    /// The argument bytes and (offset, size) of each parameter.
    pub args: &'a [u8],
    pub layout: &'a [(u32, u32)],
    pub function: &'a ForeignFunction,
    /// Global variables of the kernel's module: (name, size).
    pub module_objects: &'a [(String, u64)],
    /// Every live allocation, for `--memory all` (empty otherwise).
    pub allocations: &'a [(u64, u64, MemoryKind)],
    /// The snapshot will copy every region to device scratch: a footprint that reads regions
    /// anyway may copy them as it goes (`Reads::copies`).
    pub copy_regions: bool,
}

/// What a step may read: the regions to snapshot (their index is their region id), what was
/// learnt finding them (pointer words and slots, the device heap, handle tables, notes), and
/// the texture objects in its arguments.
pub struct Reads {
    pub walk: Walk,
    pub textures: crate::textures::Found,
    /// Regions already copied to device scratch while they were read (see `Step::copy_regions`).
    pub copies: crate::reachable::WalkCopies,
}

/// A region as a write set is decided over it: where it is in this process, its size, and the
/// chunk size its bytes were compared in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegionSpan {
    pub base: u64,
    pub size: u64,
    pub chunk: u64,
}

impl RegionSpan {
    /// `region`, whose bytes are at `base` in this process (a global's address here).
    pub fn of(region: &Region, base: u64) -> RegionSpan {
        RegionSpan {
            base,
            size: region.size,
            chunk: region.chunk_size,
        }
    }
}

/// One way of knowing what a step reads and writes.
pub trait Footprint: Send + Sync {
    /// What the step may read. Call with the context synchronised.
    fn reads(&self, step: &Step<'_>) -> Result<Reads, RecordError>;
    /// The byte ranges of `region` the step wrote, in order, given what comparing its bytes
    /// before and after the step says.
    fn written(&self, region: RegionSpan, evidence: Evidence<'_>) -> Vec<ByteRange>;
}

/// The footprint a capture uses (shared with the writer thread, which compares on the host
/// what the GPU could not).
pub fn for_capture() -> Arc<dyn Footprint> {
    Arc::new(Reachable)
}

/// What a dispatch can reach through pointers: every byte of every allocation it reaches may
/// be read, and a region's written bytes are those a comparison found changed.
pub struct Reachable;

impl Footprint for Reachable {
    fn reads(&self, step: &Step<'_>) -> Result<Reads, RecordError> {
        let (walk, textures, copies) = crate::reachable::reach(
            step.args,
            step.layout,
            step.function,
            step.module_objects,
            step.allocations,
            step.copy_regions,
        )?;
        Ok(Reads {
            walk,
            textures,
            copies,
        })
    }

    fn written(&self, region: RegionSpan, evidence: Evidence<'_>) -> Vec<ByteRange> {
        write_set::written(evidence, region.chunk, region.size)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kreplay_format::RegionRole;

    #[test]
    fn the_walk_says_written_what_the_comparison_found_changed_in_the_regions_chunks() {
        let region = Region {
            region_id: 2,
            address: 0x7000_0000,
            size: 10,
            kind: MemoryKind::Device,
            role: RegionRole::Argument,
            chunk_size: 4,
        };
        let span = RegionSpan::of(&region, 0x5000);
        assert_eq!((span.base, span.size, span.chunk), (0x5000, 10, 4));
        let r = |offset, len| ByteRange { offset, len };
        let changed = [false, true, true];
        assert_eq!(
            Reachable.written(span, Evidence::Changed(&changed)),
            vec![r(4, 6)]
        );
        assert_eq!(Reachable.written(span, Evidence::Unknown), vec![r(0, 10)]);
    }
}
