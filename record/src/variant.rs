//! `kreplay profile --variant` (issue 38): at a profiled dispatch, after the application's own
//! launch (the original's first pass), a variant kernel with the same parameter layout runs
//! on the same restored inputs, with the same grid, block, shared memory and arguments. The
//! variant and the original alternate, N timed passes each, so clock drift hits both alike:
//! variant, original, variant, ..., variant last. The variant's first output is compared with
//! the original's over the dispatch's write set (bit for bit, or as elements within a
//! tolerance: `kreplay_engine::compare`, the comparison `kreplay diff --as` makes). Last, the
//! memory is left as the original's output (`put_back_application_output`), or with `--keep
//! variant` as the last variant pass left it.
//!
//! A variant that writes a chunk the original leaves unchanged is judged `differs` after its
//! first pass and runs no more: restoring between passes puts back only the original's write
//! set, so the original's later passes would read what the variant wrote.

use kreplay_cuda::chunks::chunk_count;
use kreplay_cuda::{copy_dtoh, Function, Stream};
use kreplay_engine::compare::{Difference, Element, Tolerance};
use kreplay_engine::tool::{PassOutcome, PassRunner};
use kreplay_format::DEFAULT_CHUNK_SIZE;
use kreplay_protocol::variant::{FirstDifference, VariantResult, Verdict};

use crate::device_resources::with_chunk_kernels;
use crate::error::RecordError;
use crate::in_place::{changed_ranges, InPlace, Saved};
use crate::trace::trace;
use crate::variant_check::first_outside;

/// The variant as a dispatch runs it: its function in the dispatch's context, checked.
pub struct VariantInput {
    pub function: Function,
    /// Its mangled name.
    pub name: String,
    /// `None`: bit for bit.
    pub tolerance: Option<Tolerance>,
    /// `--keep variant`.
    pub keep: bool,
    /// Timed passes of each, the application's launch the original's first.
    pub passes: u32,
}

/// What the alternation did.
pub struct Alternated {
    /// The original's passes, the application's launch first.
    pub original: Vec<PassOutcome>,
    pub result: VariantResult,
    /// The last variant pass's output is to stay (`--keep variant`, and it stayed inside the
    /// original's write set).
    pub keep_variant_output: bool,
}

/// The passes after the application's launch (`first`), alternating variant and original;
/// the memory ends as the last variant pass left it (the caller puts the original's output
/// back unless `keep_variant_output`).
pub(crate) fn alternate(
    runner: &mut InPlace<'_>,
    v: &VariantInput,
    first: PassOutcome,
) -> Result<Alternated, RecordError> {
    let mut original = vec![first];
    let mut result = VariantResult {
        kernel: v.name.clone(),
        element: v
            .tolerance
            .map_or(Element::F32, |t| t.element)
            .name()
            .into(),
        ..Default::default()
    };
    let passes = v.passes.max(1);
    for i in 1..=passes {
        runner.restore()?;
        runner.prepare(i)?;
        let o = runner.run_of(&v.function, i, true)?;
        result.durations_ns.push(o.duration_ns);
        if i == 1 {
            judge(
                runner.saved,
                runner.stream,
                v.tolerance.as_ref(),
                &mut result,
            )?;
            trace("variant judged");
            if result.wrote_outside {
                break;
            }
        }
        if i < passes {
            runner.restore()?;
            runner.prepare(i)?;
            original.push(runner.run(i)?);
        }
    }
    result.median_ns = crate::range_timing::median_ns(&result.durations_ns).unwrap_or(0);
    let keep_variant_output = v.keep && !result.wrote_outside;
    result.kept = keep_variant_output;
    Ok(Alternated {
        original,
        result,
        keep_variant_output,
    })
}

/// Compares what the variant just wrote with the original's output (kept from the first
/// pass) and fills in the verdict and its figures.
fn judge(
    saved: &[Saved],
    stream: &Stream,
    tolerance: Option<&Tolerance>,
    result: &mut VariantResult,
) -> Result<(), RecordError> {
    let element = tolerance.map_or(Element::F32, |t| t.element);
    let mut beyond = 0;
    for s in saved.iter() {
        let write_set: Vec<(u64, u64)> = s.write_set.iter().map(|r| (r.offset, r.len)).collect();
        // In the write set's own chunk (pages under --memory touched), exactly: the write set,
        // gaps bridged or not, covers what the original changed.
        let changed: Vec<(u64, u64)> =
            changed_ranges(s.pristine.ptr(), s.addr, s.size, s.chunk, stream)
                .0
                .iter()
                .map(|r| (r.offset, r.len))
                .collect();
        if let Some(at) = first_outside(&changed, &write_set) {
            result.wrote_outside = true;
            result.first_difference.get_or_insert(FirstDifference {
                region_address: s.addr,
                offset: at,
            });
        }
        let d = region_difference(s, element, tolerance, stream)?;
        result.differing_bytes += d.differing_bytes;
        result.differing_elements += d.differing_elements;
        result.max_abs = result.max_abs.max(d.max_abs);
        result.max_rel = result.max_rel.max(d.max_rel);
        beyond += d.beyond_tolerance;
        if let (None, Some(offset)) = (&result.first_difference, d.first_offset) {
            result.first_difference = Some(FirstDifference {
                region_address: s.addr,
                offset,
            });
        }
    }
    result.verdict = Some(Verdict::judge(
        result.differing_bytes,
        beyond,
        result.wrote_outside,
        tolerance.is_some(),
    ));
    Ok(())
}

/// How the region's write set now (the variant's output) differs from the original's output,
/// offsets relative to the region. Only chunks the GPU finds different are read back; runs it
/// cannot compare (addresses not 16-byte aligned: small globals) are read whole.
fn region_difference(
    s: &Saved,
    element: Element,
    tolerance: Option<&Tolerance>,
    stream: &Stream,
) -> Result<Difference, RecordError> {
    let mut d = Difference::default();
    let Some(first) = &s.first_output else {
        return Ok(d);
    };
    let cs = DEFAULT_CHUNK_SIZE;
    let mut at = 0;
    for r in &s.write_set {
        let (reference, live) = (first.ptr() + at, s.addr + r.offset);
        at += r.len;
        let differing = differing_chunks(reference, live, r.len, stream);
        for off in differing {
            let n = cs.min(r.len - off);
            let (a, b) = (read(reference + off, n)?, read(live + off, n)?);
            d.add_judged(r.offset + off, &a, &b, element, tolerance);
        }
    }
    Ok(d)
}

/// The offsets of the chunks of `len` bytes at `reference` and `live` that differ: found by
/// the GPU, or every chunk where it cannot compare them.
fn differing_chunks(reference: u64, live: u64, len: u64, stream: &Stream) -> Vec<u64> {
    let cs = DEFAULT_CHUNK_SIZE;
    let every_chunk = || (0..len.div_ceil(cs)).map(|i| i * cs).collect();
    if chunk_count(&[reference, live], len, cs).is_err() {
        return every_chunk();
    }
    let scan = with_chunk_kernels(|k| {
        // SAFETY: `reference` is our packed copy of the original's output and `live` the
        // same run of the dispatch's region, `len` bytes each, read while the application
        // waits in the launch callback.
        unsafe { k.scan(reference, Some(live), len, cs, stream) }
    });
    match scan {
        Ok(f) => (0..f.changed.len())
            .filter(|&i| f.changed[i])
            .map(|i| i as u64 * cs)
            .collect(),
        Err(_) => every_chunk(),
    }
}

/// `n` bytes of device memory at `addr`, on the host.
fn read(addr: u64, n: u64) -> Result<Vec<u8>, RecordError> {
    let len = usize::try_from(n).map_err(|_| RecordError::RegionTooLarge(n))?;
    let mut out = vec![0u8; len];
    // SAFETY: callers read a run of a dispatch's region or of our copy of it, `n` bytes that
    // lie inside it, into a host buffer of `n` bytes.
    unsafe { copy_dtoh(&mut out, addr) }
        .map_err(RecordError::cuda("reading the variant's output"))?;
    Ok(out)
}
