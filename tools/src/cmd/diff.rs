//! `kreplay diff A B`: which regions and chunks of two captures differ, and for the bytes that
//! differ, the largest absolute and relative error read as the element type the user picks.

use std::collections::HashMap;
use std::io::Write;
use std::process::ExitCode;

use anyhow::Context;
use kreplay_format::{Capture, ChunkEncoding, ChunkRef, MemoryState, Region};
use serde::Serialize;

use crate::cli::{DiffArgs, DiffState};
use crate::compare::Difference;
use crate::describe::{bytes, demangle};
use crate::out;
use crate::output::printable;

#[derive(Serialize)]
struct RegionDiff {
    id_a: u32,
    id_b: u32,
    address_a: u64,
    address_b: u64,
    size: u64,
    differing_chunks: u64,
    #[serde(flatten)]
    diff: Difference,
}

#[derive(Serialize)]
struct Report {
    a: String,
    b: String,
    kernel_a: String,
    kernel_b: String,
    state: DiffState,
    r#as: crate::compare::Element,
    identical: bool,
    regions: Vec<RegionDiff>,
    /// Regions of A (ids) with no region of the same size in B, and the reverse.
    unmatched_a: Vec<u32>,
    unmatched_b: Vec<u32>,
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

fn diff_region(
    ca: &Capture<'_>,
    ra: &Region,
    cb: &Capture<'_>,
    rb: &Region,
    a: &DiffArgs,
) -> anyhow::Result<RegionDiff> {
    let post_a: HashMap<u64, &ChunkRef> = ca
        .chunks(ra.region_id, MemoryState::Post)
        .map(|c| (c.offset, c))
        .collect();
    let post_b: HashMap<u64, &ChunkRef> = cb
        .chunks(rb.region_id, MemoryState::Post)
        .map(|c| (c.offset, c))
        .collect();
    let pre_b: HashMap<u64, &ChunkRef> = cb
        .chunks(rb.region_id, MemoryState::Pre)
        .map(|c| (c.offset, c))
        .collect();
    let mut diff = Difference::default();
    let mut differing_chunks = 0;
    let (mut buf_a, mut buf_b) = (Vec::new(), Vec::new());
    for pa in ca.chunks(ra.region_id, MemoryState::Pre) {
        let Some(pb) = pre_b.get(&pa.offset) else {
            continue;
        };
        let (x, y) = (
            chunk_at(&post_a, pa, a.state),
            chunk_at(&post_b, pb, a.state),
        );
        // Equal CRC-32s of equal lengths are taken as equal bytes (a 2^-32 chance of missing
        // a difference), so unchanged chunks are not decoded.
        let same = x.raw_len == y.raw_len
            && (x.raw_crc == y.raw_crc
                || (x.encoding == ChunkEncoding::Zero && y.encoding == ChunkEncoding::Zero));
        if same {
            diff.bytes += x.raw_len;
            diff.elements += x.raw_len / a.r#as.size() as u64;
            continue;
        }
        buf_a.resize(x.raw_len as usize, 0);
        buf_b.resize(y.raw_len as usize, 0);
        ca.read_chunk_into(x, &mut buf_a)?;
        cb.read_chunk_into(y, &mut buf_b)?;
        let before = diff.differing_bytes;
        diff.add(pa.offset, &buf_a, &buf_b, a.r#as);
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
        diff,
    })
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

pub fn run(a: DiffArgs) -> anyhow::Result<ExitCode> {
    let fa = super::open(&a.a)?;
    let fb = super::open(&a.b)?;
    let ca = Capture::parse(fa.bytes()).with_context(|| format!("{}", a.a.display()))?;
    let cb = Capture::parse(fb.bytes()).with_context(|| format!("{}", a.b.display()))?;
    for c in [&ca, &cb] {
        kreplay_format::range::refuse_range(c, "diff").map_err(anyhow::Error::msg)?;
    }
    if a.state == DiffState::Post {
        for (c, path) in [(&ca, &a.a), (&cb, &a.b)] {
            match c.reference() {
                kreplay_format::Reference::Recorded => {}
                kreplay_format::Reference::Partial => anyhow::bail!(
                    "{} lost part of its recorded output (kreplay verify --salvage marked it unknown): compare the inputs with --state pre",
                    path.display()
                ),
                r @ (kreplay_format::Reference::Dropped | kreplay_format::Reference::Redacted) => {
                    anyhow::bail!(
                        "{} holds no recorded output ({} by kreplay pack): compare the inputs with --state pre",
                        path.display(),
                        r.name()
                    )
                }
            }
        }
    }
    let pairs = pair_regions(&ca.regions, &cb.regions);
    let mut regions = Vec::new();
    for (ra, rb) in &pairs {
        if ra.chunk_size != rb.chunk_size {
            anyhow::bail!(
                "regions {} and {} are cut into chunks of different sizes ({} and {}): not comparable chunk by chunk",
                ra.region_id,
                rb.region_id,
                ra.chunk_size,
                rb.chunk_size
            );
        }
        regions.push(diff_region(&ca, ra, &cb, rb, &a)?);
    }
    let unmatched_a: Vec<u32> = ca
        .regions
        .iter()
        .filter(|r| !pairs.iter().any(|p| p.0.region_id == r.region_id))
        .map(|r| r.region_id)
        .collect();
    let unmatched_b: Vec<u32> = cb
        .regions
        .iter()
        .filter(|r| !pairs.iter().any(|p| p.1.region_id == r.region_id))
        .map(|r| r.region_id)
        .collect();
    let identical = regions.iter().all(|r| r.diff.identical())
        && unmatched_a.is_empty()
        && unmatched_b.is_empty();
    let report = Report {
        a: a.a.display().to_string(),
        b: a.b.display().to_string(),
        kernel_a: demangle(&ca.dispatch.kernel_name),
        kernel_b: demangle(&cb.dispatch.kernel_name),
        state: a.state,
        r#as: a.r#as,
        identical,
        regions,
        unmatched_a,
        unmatched_b,
    };
    let stdout = std::io::stdout();
    let mut w = stdout.lock();
    if a.json {
        serde_json::to_writer(&mut w, &report)?;
        out!(w);
    } else {
        print_text(&mut w, &report)?;
    }
    Ok(if identical {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn print_text(w: &mut impl Write, r: &Report) -> anyhow::Result<()> {
    if r.kernel_a != r.kernel_b {
        out!(
            w,
            "note      different kernels: {} / {}",
            printable(&r.kernel_a),
            printable(&r.kernel_b)
        );
    }
    out!(
        w,
        "diff      {} state, elements read as {}",
        match r.state {
            DiffState::Post => "post-dispatch",
            DiffState::Pre => "pre-dispatch",
        },
        format!("{:?}", r.r#as).to_lowercase()
    );
    out!(
        w,
        "regions   {:>7} {:>18} {:>10} {:>14} {:>7} {:>14} {:>12} {:>12}",
        "a/b",
        "address (a)",
        "size",
        "bytes differ",
        "chunks",
        "elements",
        "max abs",
        "max rel"
    );
    for d in &r.regions {
        let x = &d.diff;
        out!(
            w,
            "          {:>7} {:>#18x} {:>10} {:>14} {:>7} {:>14} {:>12} {:>12}{}",
            format!("{}/{}", d.id_a, d.id_b),
            d.address_a,
            bytes(d.size),
            x.differing_bytes,
            d.differing_chunks,
            x.differing_elements,
            if x.identical() {
                "-".into()
            } else {
                format!("{:.4e}", x.max_abs)
            },
            if x.identical() {
                "-".into()
            } else {
                format!("{:.4e}", x.max_rel)
            },
            match (x.first_offset, x.nan_mismatches) {
                (Some(o), 0) => format!("  first at +{o:#x}"),
                (Some(o), n) => format!("  first at +{o:#x}, {n} NaN mismatch(es)"),
                _ => String::new(),
            }
        );
    }
    if !r.unmatched_a.is_empty() || !r.unmatched_b.is_empty() {
        out!(
            w,
            "unmatched regions: {:?} in A, {:?} in B (no region of the same size)",
            r.unmatched_a,
            r.unmatched_b
        );
    }
    out!(
        w,
        "result    {}",
        if r.identical {
            crate::output::verdict("identical", true)
        } else {
            crate::output::verdict("different", false)
        }
    );
    Ok(())
}
