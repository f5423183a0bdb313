//! `play --verify` of a range that did not match: the range replayed once more step by step,
//! the memory digested after each step exactly as the recorder did (range-contract: the GPU
//! chunk digest of regions `0..regions` in region-id order, every chunk digest folded with
//! `fold_digests`, CUDA-array regions contributing nothing), compared with the capture's
//! `RangeInfo::digests` to name the first step that differs.

use kreplay_cuda::chunks::ChunkKernels;
use kreplay_cuda::{Function, Stream};
use kreplay_engine::{PassStats, PlayError, RegionPlacement, Replayer};
use kreplay_format::{Capture, MemoryKind, RegionDigest};

use crate::range::{divergence_search, step_differs, step_reports, RangeReport};

/// The range part of a replay's report; `mismatched` (verifying, and the end state or a
/// device-to-host copy differed) starts the step-by-step search.
pub(crate) fn range_report(
    cap: &Capture<'_>,
    placements: &[RegionPlacement],
    replayer: &mut Replayer<Function>,
    stats: &PassStats,
    mismatched: bool,
    relocated: bool,
    sm_count: u32,
) -> Result<RangeReport, PlayError> {
    let mut report = RangeReport {
        steps: step_reports(cap, &stats.step_medians),
        mismatched_copies: stats.copy_mismatches.clone(),
        ..RangeReport::default()
    };
    if !mismatched {
        return Ok(report);
    }
    if let Err(note) = divergence_search(cap, relocated) {
        report.divergence_note = Some(note);
        return Ok(report);
    }
    let kernels = ChunkKernels::load(sm_count)?;
    let recorded = cap.range.as_ref().map_or(&[][..], |r| &r.digests[..]);
    let mut untold = None;
    report.first_divergent_step = replayer.first_divergent_step(&mut |i, stream| {
        let Some(Some(expected)) = recorded.get(i) else {
            return Ok(false);
        };
        let got = state_digest(cap, placements, &kernels, stream, expected.regions)?;
        match step_differs(Some(expected), got) {
            Some(d) => Ok(d),
            None => {
                untold = Some(i);
                // Stop the search: later steps cannot be told apart from this one's effect.
                Ok(true)
            }
        }
    })?;
    if let Some(i) = untold.filter(|&i| report.first_divergent_step == Some(i)) {
        report.first_divergent_step = None;
        report.divergence_note = Some(format!(
            "the first divergent step is not named: the memory after step {i} cannot be \
             digested here as the recorder did (a region placed smaller or unaligned)"
        ));
    }
    Ok(report)
}

/// The digest of the range's memory now (regions `0..regions`), or `None` when a region
/// cannot be digested as recorded (not placed whole, or not digestible on the GPU).
fn state_digest(
    cap: &Capture<'_>,
    placements: &[RegionPlacement],
    kernels: &ChunkKernels,
    stream: &Stream,
    regions: u32,
) -> Result<Option<[u64; 2]>, PlayError> {
    let mut all = Vec::with_capacity(regions as usize);
    for id in 0..regions {
        let Some(r) = cap.region(id) else {
            return Ok(None);
        };
        if r.kind == MemoryKind::CudaArray {
            all.push(RegionDigest::Array);
            continue;
        }
        let Some(p) = placements.iter().find(|p| p.region_id == id) else {
            return Ok(None);
        };
        if p.usable < r.size {
            return Ok(None);
        }
        // SAFETY: the region's `size` bytes at `base` are memory this session placed for it
        // (`usable` covers them), and every range stream was waited for before this call.
        match unsafe { kernels.digest(p.base, r.size, r.chunk_size, stream) } {
            Ok(d) => all.push(RegionDigest::Chunks(d.digests)),
            Err(_) => return Ok(None),
        }
    }
    Ok(Some(kreplay_format::state_digest(&all).digest))
}
