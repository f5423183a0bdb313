//! `kreplay diff A B` and Python's `kreplay.diff`: which regions and chunks of two captures
//! differ, and for the bytes that differ, the largest absolute and relative error read as the
//! element type asked for; for range captures also which steps differ (`step_diff`). The CLI prints the report as text or JSON; Python gets the JSON.

use std::collections::HashMap;

use kreplay_format::{
    Capture, ChunkEncoding, ChunkRef, FormatError, MemoryState, Reference, Region,
};
use serde::Serialize;

use crate::compare::{Difference, Element};
use crate::describe::demangle;
use crate::step_diff::{diff_steps, StepsDiff};

/// Which memory is compared (by default the results, as `kreplay diff` and Python's `diff`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "lowercase")]
pub enum DiffState {
    /// As the kernel found it: the inputs.
    Pre,
    /// As the kernel left it: the results.
    #[default]
    Post,
}

impl DiffState {
    /// The name `--state` takes.
    pub fn name(self) -> &'static str {
        match self {
            DiffState::Pre => "pre",
            DiffState::Post => "post",
        }
    }

    pub fn from_name(name: &str) -> Option<DiffState> {
        [DiffState::Pre, DiffState::Post]
            .into_iter()
            .find(|s| s.name() == name)
    }
}

/// One pair of regions compared.
#[derive(Debug, Clone, Serialize)]
pub struct RegionDiff {
    pub id_a: u32,
    pub id_b: u32,
    pub address_a: u64,
    pub address_b: u64,
    pub size: u64,
    pub differing_chunks: u64,
    /// Bytes of the region not compared: absent from either capture (captured by touched
    /// pages, REGION_EXTENTS); they are neither equal nor different.
    pub absent_bytes: u64,
    #[serde(flatten)]
    pub diff: Difference,
}

/// The whole comparison: `kreplay diff --json`'s object (fields in its order).
#[derive(Debug, Clone, Serialize)]
pub struct DiffReport {
    pub a: String,
    pub b: String,
    pub kernel_a: String,
    pub kernel_b: String,
    pub state: DiffState,
    pub r#as: Element,
    pub identical: bool,
    pub regions: Vec<RegionDiff>,
    /// Regions of A (ids) with no region of the same size in B, and the reverse.
    pub unmatched_a: Vec<u32>,
    pub unmatched_b: Vec<u32>,
    /// For range captures: the steps compared one by one (left out when neither is a range).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub steps: Option<StepsDiff>,
}

/// Why two captures could not be compared.
#[derive(Debug, thiserror::Error)]
pub enum DiffError {
    #[error("{0} lost part of its recorded output (kreplay verify --salvage marked it unknown): compare the inputs with --state pre")]
    PartialOutput(String),
    #[error("{path} holds no recorded output ({} by kreplay pack): compare the inputs with --state pre", .reference.name())]
    NoOutput { path: String, reference: Reference },
    #[error("regions {a} and {b} are cut into chunks of different sizes ({size_a} and {size_b}): not comparable chunk by chunk")]
    ChunkSizes {
        a: u32,
        b: u32,
        size_a: u64,
        size_b: u64,
    },
    /// A chunk that would not decode (the message is the format's alone, as the CLI's was).
    #[error(transparent)]
    Read(#[from] FormatError),
}

/// Compares capture `ca` (called `a` in the report) with `cb` (`b`).
pub fn diff(
    a: &str,
    ca: &Capture<'_>,
    b: &str,
    cb: &Capture<'_>,
    state: DiffState,
    as_: Element,
) -> Result<DiffReport, DiffError> {
    if state == DiffState::Post {
        for (c, path) in [(ca, a), (cb, b)] {
            match c.reference() {
                Reference::Recorded => {}
                Reference::Partial => return Err(DiffError::PartialOutput(path.to_string())),
                reference @ (Reference::Dropped | Reference::Redacted) => {
                    return Err(DiffError::NoOutput {
                        path: path.to_string(),
                        reference,
                    })
                }
            }
        }
    }
    let pairs = pair_regions(&ca.regions, &cb.regions);
    let mut regions = Vec::new();
    for (ra, rb) in &pairs {
        if ra.chunk_size != rb.chunk_size {
            return Err(DiffError::ChunkSizes {
                a: ra.region_id,
                b: rb.region_id,
                size_a: ra.chunk_size,
                size_b: rb.chunk_size,
            });
        }
        regions.push(diff_region(ca, ra, cb, rb, state, as_)?);
    }
    let unmatched = |rs: &[Region], side: fn(&(&Region, &Region)) -> u32| -> Vec<u32> {
        rs.iter()
            .filter(|r| !pairs.iter().any(|p| side(p) == r.region_id))
            .map(|r| r.region_id)
            .collect()
    };
    let unmatched_a = unmatched(&ca.regions, |p| p.0.region_id);
    let unmatched_b = unmatched(&cb.regions, |p| p.1.region_id);
    let steps = diff_steps(ca, cb);
    let identical = regions.iter().all(|r| r.diff.identical())
        && unmatched_a.is_empty()
        && unmatched_b.is_empty()
        && steps.as_ref().is_none_or(StepsDiff::identical);
    Ok(DiffReport {
        a: a.to_string(),
        b: b.to_string(),
        kernel_a: demangle(&ca.dispatch.kernel_name),
        kernel_b: demangle(&cb.dispatch.kernel_name),
        state,
        r#as: as_,
        identical,
        regions,
        unmatched_a,
        unmatched_b,
        steps,
    })
}

/// The chunk holding the bytes of `state` at `offset`: the post-dispatch chunk where the
/// kernel changed it, the pre-dispatch one otherwise.
fn chunk_at<'c>(
    post: &HashMap<u64, &'c ChunkRef>,
    pre: &'c ChunkRef,
    state: DiffState,
) -> &'c ChunkRef {
    match state {
        DiffState::Post => post.get(&pre.offset).copied().unwrap_or(pre),
        DiffState::Pre => pre,
    }
}

fn chunks_by_offset<'c>(
    c: &'c Capture<'_>,
    region_id: u32,
    state: MemoryState,
) -> HashMap<u64, &'c ChunkRef> {
    c.chunks(region_id, state).map(|c| (c.offset, c)).collect()
}

fn diff_region(
    ca: &Capture<'_>,
    ra: &Region,
    cb: &Capture<'_>,
    rb: &Region,
    state: DiffState,
    as_: Element,
) -> Result<RegionDiff, FormatError> {
    let post_a = chunks_by_offset(ca, ra.region_id, MemoryState::Post);
    let post_b = chunks_by_offset(cb, rb.region_id, MemoryState::Post);
    let pre_b = chunks_by_offset(cb, rb.region_id, MemoryState::Pre);
    let mut diff = Difference::default();
    let mut differing_chunks = 0;
    let (mut buf_a, mut buf_b) = (Vec::new(), Vec::new());
    // Only what both captures hold is compared.
    let both = intersect(&present(ca, ra), &present(cb, rb));
    let absent_bytes = ra.size - both.iter().map(|r| r.1).sum::<u64>().min(ra.size);
    for pa in ca.chunks(ra.region_id, MemoryState::Pre) {
        let Some(pb) = pre_b.get(&pa.offset) else {
            continue;
        };
        let (x, y) = (chunk_at(&post_a, pa, state), chunk_at(&post_b, pb, state));
        let held = clip(&both, pa.offset, x.raw_len.min(y.raw_len));
        if held.is_empty() {
            continue;
        }
        // Equal CRC-32s of equal lengths are taken as equal bytes (a 2^-32 chance of missing
        // a difference), so unchanged chunks are not decoded.
        let same = x.raw_len == y.raw_len
            && (x.raw_crc == y.raw_crc
                || (x.encoding == ChunkEncoding::Zero && y.encoding == ChunkEncoding::Zero));
        if same {
            let n: u64 = held.iter().map(|r| r.1).sum();
            diff.bytes += n;
            diff.elements += n / as_.size() as u64;
            continue;
        }
        buf_a.resize(x.raw_len as usize, 0);
        buf_b.resize(y.raw_len as usize, 0);
        ca.read_chunk_into(x, &mut buf_a)?;
        cb.read_chunk_into(y, &mut buf_b)?;
        let before = diff.differing_bytes;
        for (off, len) in held {
            let at = (off - pa.offset) as usize;
            let span = at..at + len as usize;
            diff.add(off, &buf_a[span.clone()], &buf_b[span], as_);
        }
        if diff.differing_bytes > before {
            differing_chunks += 1;
        }
    }
    Ok(RegionDiff {
        id_a: ra.region_id,
        id_b: rb.region_id,
        address_a: ra.address,
        address_b: rb.address,
        size: ra.size,
        differing_chunks,
        absent_bytes,
        diff,
    })
}

/// The (offset, length) ranges of region `r` that capture `c` holds: its extents, or all of it.
fn present(c: &Capture<'_>, r: &Region) -> Vec<(u64, u64)> {
    match c.extents(r.region_id) {
        Some(e) => e.present.clone(),
        None => vec![(0, r.size)],
    }
}

/// The ranges in both `a` and `b` (each sorted and non-overlapping).
fn intersect(a: &[(u64, u64)], b: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let (mut i, mut j, mut out) = (0, 0, Vec::new());
    while i < a.len() && j < b.len() {
        let (a0, a1) = (a[i].0, a[i].0.saturating_add(a[i].1));
        let (b0, b1) = (b[j].0, b[j].0.saturating_add(b[j].1));
        let (lo, hi) = (a0.max(b0), a1.min(b1));
        if lo < hi {
            out.push((lo, hi - lo));
        }
        if a1 <= b1 {
            i += 1;
        } else {
            j += 1;
        }
    }
    out
}

/// The parts of `ranges` inside `[start, start + len)`.
fn clip(ranges: &[(u64, u64)], start: u64, len: u64) -> Vec<(u64, u64)> {
    let end = start.saturating_add(len);
    ranges
        .iter()
        .filter_map(|&(o, n)| {
            let (lo, hi) = (o.max(start), o.saturating_add(n).min(end));
            (lo < hi).then(|| (lo, hi - lo))
        })
        .collect()
}

/// Pairs regions of A and B: the same id and size, else the same address and size, else the
/// same role and size in order.
fn pair_regions<'r>(ra: &'r [Region], rb: &'r [Region]) -> Vec<(&'r Region, &'r Region)> {
    let mut taken = vec![false; rb.len()];
    let mut pairs = Vec::new();
    type Rule = fn(&Region, &Region) -> bool;
    let rules: [Rule; 3] = [
        |x, y| x.region_id == y.region_id && x.size == y.size,
        |x, y| x.address == y.address && x.size == y.size,
        |x, y| x.role == y.role && x.size == y.size,
    ];
    let mut done = vec![false; ra.len()];
    for rule in rules {
        for (i, x) in ra.iter().enumerate() {
            if done[i] {
                continue;
            }
            if let Some(j) = (0..rb.len()).find(|&j| !taken[j] && rule(x, &rb[j])) {
                taken[j] = true;
                done[i] = true;
                pairs.push((x, &rb[j]));
            }
        }
    }
    pairs.sort_by_key(|p| p.0.region_id);
    pairs
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::{bytes, parse, without_output};

    #[test]
    fn a_capture_is_identical_to_itself_region_by_region() {
        let saxpy = bytes("cuda-saxpy");
        let c = parse(&saxpy);
        let r = diff("a", &c, "b", &c, DiffState::Post, Element::F32).unwrap();
        assert!(r.identical);
        assert_eq!(r.regions.len(), c.regions.len());
        assert!(r.unmatched_a.is_empty() && r.unmatched_b.is_empty());
    }

    #[test]
    fn the_results_differ_from_the_inputs_where_the_kernel_wrote() {
        // The same capture's post state against its pre state: packed without output, the
        // post chunks are gone, so compare pre (b) with post (a) by pairing a with itself.
        let saxpy = bytes("cuda-saxpy");
        let c = parse(&saxpy);
        let pre = diff("a", &c, "a", &c, DiffState::Pre, Element::F32).unwrap();
        assert!(pre.identical);
        let dropped = without_output(&saxpy);
        let d = parse(&dropped);
        let e = diff("a", &c, "d", &d, DiffState::Post, Element::F32).unwrap_err();
        assert_eq!(
            e.to_string(),
            "d holds no recorded output (dropped by kreplay pack): compare the inputs with --state pre"
        );
        assert!(
            diff("a", &c, "d", &d, DiffState::Pre, Element::F32)
                .unwrap()
                .identical
        );
    }

    #[test]
    fn regions_pair_by_id_then_address_then_role_of_the_same_size() {
        let other = bytes("cuda-globals");
        let saxpy = bytes("cuda-saxpy");
        let (a, b) = (parse(&saxpy), parse(&other));
        let r = diff("a", &a, "b", &b, DiffState::Pre, Element::U8).unwrap();
        assert!(!r.identical);
        for p in &r.regions {
            let (x, y) = (a.region(p.id_a).unwrap(), b.region(p.id_b).unwrap());
            assert_eq!(x.size, y.size);
        }
        let paired = r.regions.len() + r.unmatched_a.len();
        assert_eq!(paired, a.regions.len());
    }

    #[test]
    fn two_range_captures_compare_step_by_step_and_by_memory() {
        let r = crate::testdata::golden("range-ops");
        let c = parse(&r);
        let same = diff("a", &c, "b", &c, DiffState::Post, Element::F32).unwrap();
        assert!(same.identical);
        assert_eq!(same.regions.len(), c.regions.len());
        let json = serde_json::to_value(&same).unwrap();
        assert_eq!(json["steps"]["steps_a"], 9);
        let saxpy = bytes("cuda-saxpy");
        let single = parse(&saxpy);
        let mixed = diff("a", &c, "s", &single, DiffState::Post, Element::F32).unwrap();
        assert!(!mixed.identical, "9 steps against 1");
        let singles = diff("s", &single, "s", &single, DiffState::Post, Element::F32).unwrap();
        let json = serde_json::to_value(&singles).unwrap();
        assert!(
            json.get("steps").is_none(),
            "a single capture's report is as it was"
        );
    }

    // Catches: two sorted range lists intersected wrongly at a shared edge, a range spanning
    // several of the other's, or a chunk window clipping a range it only touches.
    #[test]
    fn present_ranges_intersect_and_clip_to_a_chunk() {
        let a = [(0, 4096), (8192, 8192)];
        let b = [(4096, 8192), (14336, 4096)];
        assert_eq!(intersect(&a, &b), vec![(8192, 4096), (14336, 2048)]);
        assert_eq!(intersect(&a, &[(0, 1 << 20)]), a.to_vec());
        assert!(intersect(&[(0, 4096)], &[(4096, 4096)]).is_empty());
        assert_eq!(clip(&a, 4096, 8192), vec![(8192, 4096)]);
        assert!(clip(&a, 4096, 4096).is_empty());
    }

    // Catches: absent bytes (captured by touched pages) compared as zeros, so a capture
    // looked identical to one holding other bytes there, or their count lost.
    #[test]
    fn absent_bytes_are_counted_not_compared() {
        let bytes = crate::testdata::golden("extents");
        let cap = crate::testdata::parse(&bytes);
        let r = diff("a", &cap, "b", &cap, DiffState::Pre, Element::F32).expect("diff");
        let total_absent: u64 = r.regions.iter().map(|d| d.absent_bytes).sum();
        let expected: u64 = cap
            .regions
            .iter()
            .map(|g| g.size - cap.present_bytes(g.region_id))
            .sum();
        assert!(expected > 0, "the golden capture has absent bytes");
        assert_eq!(total_absent, expected);
        for d in &r.regions {
            assert_eq!(d.diff.bytes + d.absent_bytes, d.size, "region {}", d.id_a);
        }
        assert!(r.identical);
    }

    #[test]
    fn the_state_is_named_as_the_flag_takes_it() {
        for s in [DiffState::Pre, DiffState::Post] {
            assert_eq!(DiffState::from_name(s.name()), Some(s));
        }
        assert_eq!(DiffState::from_name("after"), None);
    }
}
