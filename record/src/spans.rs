//! Allocations that lie end to end, captured as one region (`KREPLAY_DEBUG_SPANS=1`, a
//! measurement aid, not yet the default): a pointer table's 10,000 allocations of 4 KiB come
//! from `cudaMalloc` 256 bytes apart at most (each small allocation is 256-byte aligned and the
//! next one follows it: the captures in `testdata/captures` show it), so they lie end to end in
//! runs, and every per-region step of a capture (the slab's rows, the snapshots, the comparison
//! rows after the step, the writer's per-region work) is paid 10,000 times for what a few dozen
//! regions hold. The walk still finds each allocation; only what it found is merged.
//!
//! A span joins regions reached through stored pointers (`Indirect`: an argument's buffer
//! stays one region, as the Python API, `extract`, `diff` and `share --redact`'s typing of a
//! region from its argument expect) that lie end to end in address order, of the same kind
//! and readability, that a kernel of this device may read (they go to the slab), that are no
//! texture handle table and no copy of the walk's own, up to `SPAN_MOST_BYTES` (the largest
//! region the slab takes, so a span stays in it). The walk's references to regions (pointer
//! slots, heap words, handle tables) are moved to the span at the same address. Spans are
//! numbered in the order of their first region's id, so the argument's regions keep the
//! first ids.
//!
//! A span is only ever copied by the chunk kernels (the slab's copy, its second half, the
//! comparisons): the driver's `cuMemcpy` has never been given a range across two allocations,
//! so `worth_keeping` keeps spans only where the slab with its second half takes every one
//! of them (the capture would otherwise copy a span that missed the slab with the driver).
//! A span is one 4 MiB chunk: a write into one of its allocations stores the span's bytes
//! after the step (at most 1 MiB), not the allocation's.

use kreplay_format::RegionRole;

use crate::walk::{FoundRegion, HeapWord, Walk};

/// The longest span: the largest region the snapshot slab takes.
pub(crate) const SPAN_MOST_BYTES: u64 = crate::snapshot::SLAB_REGION_BYTES;

/// Whether `KREPLAY_DEBUG_SPANS=1` asks for spans, read once.
pub(crate) fn switched_on() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var_os("KREPLAY_DEBUG_SPANS").is_some_and(|v| v == "1"))
}

/// `walk` with its regions that lie end to end merged into spans (see the module comment),
/// and per region of it whether it is a span of more than one; `None` when nothing joins.
/// `walk_copied(base, size)`: the walk made a copy of exactly that region (`WalkCopies`),
/// which the snapshot takes as it is.
pub(crate) fn coalesced(
    walk: &Walk,
    walk_copied: impl Fn(u64, u64) -> bool,
) -> Option<(Walk, Vec<bool>)> {
    let plan = plan(walk, walk_copied);
    if plan.spans.len() == walk.regions.len() {
        return None;
    }
    Some(apply(walk, &plan))
}

/// Whether a walk `coalesced` made is worth keeping for a capture (`placement`: its
/// `slab_placement`): every span of more than one region (`multi`, per region) is placed in the
/// slab (`slab_plan`), and the slab with its second half is within what the post half takes
/// and `allowed` (the scratch rule, asked of the driver) says it may be: then only the chunk
/// kernels copy a span. Otherwise the walk as found is kept.
pub(crate) fn worth_keeping(
    placement: &(Vec<Option<u64>>, u64),
    multi: &[bool],
    allowed: impl FnOnce(u64) -> bool,
) -> bool {
    let (at, total) = placement;
    let placed = multi.iter().zip(at).all(|(&m, a)| !m || a.is_some());
    placed
        && multi.iter().any(|&m| m)
        && *total <= crate::snapshot::POST_HALF_MOST_BYTES
        && allowed(2 * total)
}

/// How a walk's regions join: the spans (first region, bytes, smallest id, regions), and per
/// region its span and its offset in it.
struct Plan {
    spans: Vec<(usize, u64, usize, usize)>,
    span_of: Vec<usize>,
    offset: Vec<u64>,
    /// Per span, its new id (spans in order of their smallest region id).
    new_id: Vec<u32>,
}

fn plan(walk: &Walk, walk_copied: impl Fn(u64, u64) -> bool) -> Plan {
    let regions = &walk.regions;
    let n = regions.len();
    let mut in_handle_table = vec![false; n];
    for (id, _) in &walk.handle_tables {
        if let Some(t) = in_handle_table.get_mut(*id as usize) {
            *t = true;
        }
    }
    let joins = |i: usize| {
        let r = &regions[i];
        !in_handle_table[i]
            && r.role == RegionRole::Indirect
            && r.global.is_none()
            && r.size > 0
            && r.size < SPAN_MOST_BYTES
            && walk.kernel_readable.get(i).copied().unwrap_or(false)
            && !walk_copied(r.base, r.size)
    };
    let joinable: Vec<bool> = (0..n).map(joins).collect();
    let mut order: Vec<usize> = (0..n).collect();
    // A pointer table's regions come in address order already: no sort then.
    if !regions.windows(2).all(|w| w[0].base <= w[1].base) {
        order.sort_unstable_by_key(|&i| regions[i].base);
    }
    let mut spans: Vec<(usize, u64, usize, usize)> = Vec::new();
    let (mut span_of, mut offset) = (vec![0; n], vec![0; n]);
    for i in order {
        let r = &regions[i];
        let joins_last = spans.last().is_some_and(|&(first, bytes, _, _)| {
            let f = &regions[first];
            joinable[i]
                && joinable[first]
                && f.base.checked_add(bytes) == Some(r.base)
                && (f.kind, f.role, f.readable) == (r.kind, r.role, r.readable)
                && bytes.saturating_add(r.size) <= SPAN_MOST_BYTES
        });
        match spans.last_mut().filter(|_| joins_last) {
            Some((first, bytes, least, parts)) => {
                offset[i] = r.base - regions[*first].base;
                *bytes += r.size;
                *least = (*least).min(i);
                *parts += 1;
            }
            None => spans.push((i, r.size, i, 1)),
        }
        span_of[i] = spans.len() - 1;
    }
    let mut by_least: Vec<usize> = (0..spans.len()).collect();
    by_least.sort_unstable_by_key(|&s| spans[s].2);
    let mut new_id = vec![0u32; spans.len()];
    for (id, &s) in by_least.iter().enumerate() {
        new_id[s] = id as u32;
    }
    Plan {
        spans,
        span_of,
        offset,
        new_id,
    }
}

/// `walk` as `plan` joins it, and per span whether it holds more than one region.
fn apply(walk: &Walk, plan: &Plan) -> (Walk, Vec<bool>) {
    let mut order: Vec<usize> = (0..plan.spans.len()).collect();
    order.sort_unstable_by_key(|&s| plan.new_id[s]);
    let regions: Vec<FoundRegion> = order
        .iter()
        .map(|&s| {
            let (first, bytes, _, _) = plan.spans[s];
            FoundRegion {
                size: bytes,
                ..walk.regions[first].clone()
            }
        })
        .collect();
    let multi = order.iter().map(|&s| plan.spans[s].3 > 1).collect();
    let kernel_readable = if walk.kernel_readable.is_empty() {
        Vec::new()
    } else {
        order
            .iter()
            .map(|&s| {
                let first = plan.spans[s].0;
                walk.kernel_readable.get(first).copied().unwrap_or(false)
            })
            .collect()
    };
    // A region id the walk gave, at an offset in it: the span's id, the offset in the span.
    let moved = |id: u32, off: u64| -> (u32, u64) {
        let i = id as usize;
        match plan.span_of.get(i) {
            Some(&s) => (plan.new_id[s], plan.offset[i] + off),
            None => (id, off),
        }
    };
    let mut pointer_slots: Vec<(u32, u64)> = walk
        .pointer_slots
        .iter()
        .map(|&(id, off)| moved(id, off))
        .collect();
    pointer_slots.sort_unstable();
    pointer_slots.dedup();
    let spans = Walk {
        regions,
        kernel_readable,
        pointer_slots,
        heap_words: walk
            .heap_words
            .iter()
            .map(|&h| match h.region {
                Some(id) => {
                    let (id, offset) = moved(id, h.offset);
                    HeapWord {
                        region: Some(id),
                        offset,
                        ..h
                    }
                }
                None => h,
            })
            .collect(),
        handle_tables: walk
            .handle_tables
            .iter()
            .map(|(id, words)| (moved(*id, 0).0, words.clone()))
            .collect(),
        pointer_words: walk.pointer_words.clone(),
        heap_word_count: walk.heap_word_count,
        notes: walk.notes.clone(),
    };
    (spans, multi)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kreplay_format::{MemoryKind, RegionRole};
    use proptest::prelude::*;

    /// The walk `coalesced` makes of `walk`, or `walk` when nothing joins.
    fn joined(walk: &Walk, copied: impl Fn(u64, u64) -> bool) -> Walk {
        coalesced(walk, copied).map_or_else(|| walk.clone(), |(spans, _)| spans)
    }

    fn region(base: u64, size: u64, role: RegionRole) -> FoundRegion {
        FoundRegion {
            base,
            size,
            role,
            kind: MemoryKind::Device,
            global: None,
            readable: Some(true),
        }
    }

    /// A pointer table's shape: the table (an argument), then `n` allocations of 4 KiB end to
    /// end, the table's words pointing at each.
    fn table_walk(n: u64) -> Walk {
        let table = 0x7f00_0000_0000;
        let first = 0x7f10_0000_0000;
        let mut regions = vec![region(table, n * 8, RegionRole::Argument)];
        regions.extend((0..n).map(|i| region(first + i * 4096, 4096, RegionRole::Indirect)));
        Walk {
            kernel_readable: vec![true; regions.len()],
            pointer_slots: (0..n).map(|i| (0, i * 8)).collect(),
            regions,
            ..Walk::default()
        }
    }

    // Catches: allocations end to end left apart (the per-region cost the spans remove), a
    // span longer than the slab takes, the table (another role) joined to them, or a slot
    // moved off its address.
    #[test]
    fn a_pointer_tables_allocations_join_into_spans_the_slab_takes() {
        let walk = table_walk(10_000);
        let spans = joined(&walk, |_, _| false);
        let per_span = SPAN_MOST_BYTES / 4096;
        assert_eq!(
            spans.regions.len(),
            1 + 10_000usize.div_ceil(per_span as usize)
        );
        assert_eq!(
            spans.regions[0], walk.regions[0],
            "the table stays whole, id 0"
        );
        assert!(spans.regions[1..]
            .iter()
            .all(|r| r.size <= SPAN_MOST_BYTES && r.role == RegionRole::Indirect));
        assert_eq!(spans.regions[1].size, SPAN_MOST_BYTES);
        assert_eq!(
            spans.pointer_slots, walk.pointer_slots,
            "the table's own words"
        );
        assert_eq!(spans.kernel_readable.len(), spans.regions.len());
    }

    // Catches: a module global, a handle table, an argument's buffer, a region the walk
    // copied or one a kernel may not read joined into a span (each is read or told apart on
    // its own).
    #[test]
    fn regions_read_on_their_own_stay_whole() {
        let mut walk = table_walk(5);
        walk.regions[2].global = Some("g".into());
        walk.handle_tables.push((3, vec![(0, 7)]));
        walk.kernel_readable[4] = false;
        walk.regions[5].role = RegionRole::Argument;
        assert!(coalesced(&walk, |_, _| false).is_none(), "nothing joins");
        // Two arguments' buffers end to end: two regions still.
        let args = Walk {
            regions: vec![
                region(0x1000_0000, 4096, RegionRole::Argument),
                region(0x1000_1000, 4096, RegionRole::Argument),
            ],
            kernel_readable: vec![true, true],
            ..Walk::default()
        };
        assert!(coalesced(&args, |_, _| false).is_none());
        let walk = table_walk(3);
        let copied = walk.regions[2].base;
        let spans = joined(&walk, |b, _| b == copied);
        assert_eq!(spans.regions.len(), 4, "the copied region splits the run");
    }

    // Catches: spans kept where one would be copied by the driver across allocations (it
    // missed the slab, the slab has no second half, the scratch rule said no), or spans
    // dropped where the slab takes them all.
    #[test]
    fn spans_are_kept_only_where_the_slab_and_its_second_half_take_them() {
        let walk = table_walk(1000);
        let (spans, multi) = coalesced(&walk, |_, _| false).expect("joined");
        assert_eq!(
            multi.iter().filter(|&&m| m).count(),
            4,
            "1,000 x 4 KiB: four spans"
        );
        assert!(!multi[0], "the table is a region of the walk");
        let eligible: Vec<(u64, bool)> = spans.regions.iter().map(|r| (r.size, true)).collect();
        let placement = crate::snapshot::slab_plan(&eligible);
        assert!(worth_keeping(&placement, &multi, |_| true));
        assert!(
            !worth_keeping(&placement, &multi, |_| false),
            "the scratch rule said no"
        );
        let mut missed = placement.clone();
        missed.0[2] = None;
        assert!(
            !worth_keeping(&missed, &multi, |_| true),
            "a span outside the slab"
        );
        let huge = (
            placement.0.clone(),
            crate::snapshot::POST_HALF_MOST_BYTES + 1,
        );
        assert!(!worth_keeping(&huge, &multi, |_| true), "no second half");
        assert!(
            !worth_keeping(&placement, &vec![false; multi.len()], |_| true),
            "nothing joined"
        );
    }

    /// Disjoint regions from (gap before, size, role, readable-by-kernel) steps, in address
    /// order, then shuffled by `rotate`; slots at random regions and offsets.
    fn arbitrary_walk() -> impl Strategy<Value = Walk> {
        (
            prop::collection::vec(
                (0u64..2, 1u64..40_000, 0u8..3, prop::bool::weighted(0.9)),
                1..60,
            ),
            0usize..60,
            prop::collection::vec((0usize..60, 0u64..40_000), 0..40),
        )
            .prop_map(|(steps, rotate, slots)| {
                let mut at = 0x7f00_0000_0000u64;
                let mut regions = Vec::new();
                let mut readable = Vec::new();
                for (gap, size, role, ok) in steps {
                    at += gap * 512;
                    let role = [
                        RegionRole::Argument,
                        RegionRole::Indirect,
                        RegionRole::Indirect,
                    ][role as usize];
                    regions.push(region(at, size, role));
                    readable.push(ok);
                    at += size;
                }
                let n = regions.len();
                regions.rotate_left(rotate % n);
                readable.rotate_left(rotate % n);
                let pointer_slots = slots
                    .into_iter()
                    .map(|(r, off)| ((r % n) as u32, off % regions[r % n].size))
                    .collect();
                let heap_words = vec![HeapWord {
                    region: Some((n / 2) as u32),
                    offset: 0,
                    value: 1,
                }];
                Walk {
                    regions,
                    kernel_readable: readable,
                    pointer_slots,
                    heap_words,
                    ..Walk::default()
                }
            })
    }

    proptest! {
        // Catches: any span that is not exactly the union of the regions it replaced, a byte
        // lost or added, a reference moved off its address, a span over the limit, a region
        // that may not join joined, or ids out of first-id order.
        #[test]
        fn spans_cover_the_same_bytes_and_references_keep_their_addresses(walk in arbitrary_walk()) {
            let (spans, multi) = coalesced(&walk, |_, _| false)
                .unwrap_or_else(|| (walk.clone(), vec![false; walk.regions.len()]));
            prop_assert_eq!(multi.len(), spans.regions.len());
            let bytes = |w: &Walk| {
                let mut r: Vec<(u64, u64)> = w.regions.iter().map(|r| (r.base, r.size)).collect();
                r.sort_unstable();
                // Merged end to end: the same runs either way.
                let mut runs: Vec<(u64, u64)> = Vec::new();
                for (b, s) in r {
                    match runs.last_mut() {
                        Some((rb, rs)) if *rb + *rs == b => *rs += s,
                        _ => runs.push((b, s)),
                    }
                }
                runs
            };
            prop_assert_eq!(bytes(&spans), bytes(&walk));
            prop_assert_eq!(spans.kernel_readable.len(), spans.regions.len());
            let address = |w: &Walk, id: u32, off: u64| w.regions[id as usize].base + off;
            // The slots at the same addresses (sorted and without repeats, as the reader
            // keeps them), each inside its region.
            let at = |w: &Walk| {
                let mut a: Vec<u64> = w.pointer_slots.iter().map(|&(id, off)| address(w, id, off)).collect();
                a.sort_unstable();
                a.dedup();
                a
            };
            prop_assert_eq!(at(&spans), at(&walk));
            if multi.iter().any(|&m| m) {
                prop_assert!(spans.pointer_slots.windows(2).all(|w| w[0] < w[1]), "sorted, no repeats");
            }
            for b in &spans.pointer_slots {
                prop_assert!(b.1 < spans.regions[b.0 as usize].size);
            }
            for (a, b) in walk.heap_words.iter().zip(&spans.heap_words) {
                let (ra, rb) = (a.region.unwrap_or(0), b.region.unwrap_or(0));
                prop_assert_eq!(address(&walk, ra, a.offset), address(&spans, rb, b.offset));
            }
            for (i, s) in spans.regions.iter().enumerate() {
                // Each span is a run of the walk's regions end to end: its first is one of
                // them, with the same role and readability; a joined one holds only joinable
                // regions within the limit.
                let parts: Vec<usize> = (0..walk.regions.len())
                    .filter(|&k| walk.regions[k].base >= s.base && walk.regions[k].base < s.base + s.size)
                    .collect();
                prop_assert_eq!(parts.iter().map(|&k| walk.regions[k].size).sum::<u64>(), s.size);
                prop_assert_eq!(multi[i], parts.len() > 1);
                if parts.len() > 1 {
                    prop_assert!(s.size <= SPAN_MOST_BYTES);
                    prop_assert!(spans.kernel_readable[i]);
                    for &k in &parts {
                        prop_assert!(walk.kernel_readable[k] && walk.regions[k].role == s.role);
                    }
                }
            }
            // Ids in order of each span's smallest original id: the first region keeps id 0.
            prop_assert!(spans.regions[0].base <= walk.regions[0].base);
            prop_assert!(walk.regions[0].base < spans.regions[0].base + spans.regions[0].size);
        }
    }
}
