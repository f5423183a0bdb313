//! `record --memory touched` for range captures (issue 35): what a range holds of each region
//! is the union of what its steps touched. A kernel step's pages are found as a single
//! dispatch's are (`touched_run`), by running it once more, instrumented, at its EXIT, from the
//! input it had: the regions it reaches are copied on the device at its ENTER; at its EXIT
//! their output is copied aside, the input put back, the patched kernel run, and the output
//! put back. An op step's pages are its device spans. At the close each snapshot keeps the
//! pages of the union that fall in it. Where any step's pages cannot be told, the range holds
//! whole regions and says why.

use std::time::Instant;

use kreplay_cuda::many::ManyScan;
use kreplay_cuda::touched_patch::PAGE;
use kreplay_cuda::{copy_dtod_async, DeviceBuffer, Stream};
use kreplay_engine::write_set::{self, Evidence};
use kreplay_format::extents::{extents_of_pages, pages_of_ranges};
use kreplay_format::DEFAULT_CHUNK_SIZE;

use crate::device_resources::with_chunk_kernels;

use crate::snapshot::Snapshot;
use crate::touched_run::{self, Front, TouchedLaunch};

/// A range's touched bytes so far, and the kernel step whose EXIT is awaited.
#[derive(Default)]
pub struct RangeTouched {
    /// Device byte ranges [start, end) in this process's addresses: pages of regions the
    /// kernel steps touched, the op steps' spans.
    touched: Vec<(u64, u64)>,
    step: Option<StepRun>,
    /// Linear memory texture or surface objects of the steps view (held whole).
    views: Vec<u64>,
    failed: Option<String>,
    runs: usize,
    run_ns: u64,
}

/// A kernel step between its ENTER and its EXIT.
struct StepRun {
    launch: TouchedLaunch,
    /// Each region the step reaches (address, size) and its bytes before the step ran.
    inputs: Vec<(u64, u64, DeviceBuffer)>,
}

impl RangeTouched {
    /// Linear memory a step reads through texture or surface objects (the first step's:
    /// later steps with them refuse the range).
    pub fn view(&mut self, addresses: impl Iterator<Item = u64>) {
        self.views.extend(addresses);
    }

    fn fail(&mut self, why: String) {
        self.failed.get_or_insert(why);
        self.step = None;
    }

    /// A kernel step's ENTER, the context synchronised: the input of the regions it reaches
    /// (`reached`, address and size) copied aside for its instrumented run. `launch`: how to
    /// launch it again, or why it cannot be (the range then holds whole regions).
    pub fn kernel_enter(
        &mut self,
        launch: Option<Result<TouchedLaunch, String>>,
        reached: &[(u64, u64)],
        step: usize,
    ) {
        if self.failed.is_some() {
            return;
        }
        let launch = match launch {
            Some(Ok(l)) => l,
            Some(Err(why)) => return self.fail(format!("step {step}: {why}")),
            None => return self.fail(format!("step {step} cannot be launched again")),
        };
        match copy_aside(reached) {
            Ok(inputs) => self.step = Some(StepRun { launch, inputs }),
            Err(e) => self.fail(format!("step {step}: {e}")),
        }
    }

    /// The awaited kernel step's EXIT, the context synchronised: its pages.
    pub fn kernel_exit(&mut self, step: usize) {
        let Some(mut run) = self.step.take() else {
            return;
        };
        let Some(front) = touched_run::front() else {
            return self.fail("the Compute Sanitizer API is not in use".into());
        };
        let began = Instant::now();
        match run_step(front, &mut run) {
            Ok(ranges) => {
                self.touched.extend(ranges);
                self.runs += 1;
            }
            Err(e) => self.fail(format!("step {step}: {e}")),
        }
        self.run_ns += began.elapsed().as_nanos() as u64;
    }

    /// An op step's device spans (address, bytes, written): all touched.
    pub fn op(&mut self, spans: &[(u64, u64, bool)]) {
        self.touched.extend(
            spans
                .iter()
                .filter(|s| s.1 > 0)
                .map(|&(a, n, _)| (a, a.saturating_add(n))),
        );
    }

    /// At the close: each snapshot's touched pages as its `touched` ranges, and the line for
    /// the capture's notes; why not (the snapshots are left whole).
    pub fn apply(&self, snapshots: &mut [Snapshot]) -> Result<String, String> {
        if let Some(why) = &self.failed {
            return Err(why.clone());
        }
        let ranges = merged(&self.touched);
        let (mut pages, mut touched_pages) = (0u64, 0u64);
        for s in snapshots.iter_mut() {
            let size = s.region.size;
            pages += size.div_ceil(PAGE);
            let whole = s.array.is_some()
                || s.spilled.is_some()
                || touched_run::read_unseen(s.region.kind, (s.device_addr, size), &self.views);
            if whole {
                touched_pages += size.div_ceil(PAGE);
                s.touched = None;
                continue;
            }
            let mine = pages_in(&ranges, s.device_addr, size);
            touched_pages += mine.len() as u64;
            s.touched = touched_run::held(&mine, size);
        }
        Ok(format!(
            "--memory touched: the range's steps touched {touched_pages} of the {pages} 4 KiB pages of its {} region(s) ({:.1} % held); {} instrumented kernel run(s) took {:.2} ms",
            snapshots.len(),
            if pages == 0 { 0.0 } else { 100.0 * touched_pages as f64 / pages as f64 },
            self.runs,
            self.run_ns as f64 / 1e6
        ))
    }
}

/// Device copies of `regions` (address, size), made on a stream of ours and waited for.
fn copy_aside(regions: &[(u64, u64)]) -> Result<Vec<(u64, u64, DeviceBuffer)>, String> {
    let stream = Stream::new().map_err(|e| format!("creating a stream: {e}"))?;
    let mut out = Vec::with_capacity(regions.len());
    for &(addr, size) in regions {
        let len = usize::try_from(size).map_err(|_| format!("a region of {size} bytes"))?;
        let buf = DeviceBuffer::new(len.max(1))
            .map_err(|e| format!("no device memory for a copy of {size} bytes: {e}"))?;
        // SAFETY: `len` bytes of a region the walk found (the application's allocation, its
        // context synchronised) into a buffer of ours of that length.
        unsafe { copy_dtod_async(buf.ptr(), addr, len, &stream) }
            .map_err(|e| format!("copying a region aside: {e}"))?;
        out.push((addr, size, buf));
    }
    stream
        .synchronize()
        .map_err(|e| format!("copying the regions aside: {e}"))?;
    Ok(out)
}

/// Copies each buffer back over its region (`copies`: address, size, buffer), waited for.
fn put_back(copies: &[(u64, u64, DeviceBuffer)], stream: &Stream) -> Result<(), String> {
    for (addr, size, buf) in copies {
        // SAFETY: a region of the application's, its context synchronised and the
        // application waiting in the launch's EXIT, from our copy of its bytes.
        unsafe { copy_dtod_async(*addr, buf.ptr(), *size as usize, stream) }
            .map_err(|e| format!("putting a region back: {e}"))?;
    }
    stream
        .synchronize()
        .map_err(|e| format!("putting the regions back: {e}"))
}

/// The step run instrumented from its input; the application's memory holds the step's
/// output again when this returns (short of a kernel fault). The byte ranges it touched.
fn run_step(front: &Front, run: &mut StepRun) -> Result<Vec<(u64, u64)>, String> {
    let regions: Vec<(u64, u64)> = run.inputs.iter().map(|&(a, s, _)| (a, s)).collect();
    let outputs = copy_aside(&regions)?;
    let stream = Stream::new().map_err(|e| format!("creating a stream: {e}"))?;
    // What the application's step changed: its input against its output, both our copies
    // (the application's memory may be another device's, or host memory a kernel of ours
    // must not read, where the copy engine's copies could go).
    let pairs: Vec<(u64, u64, u64)> = run
        .inputs
        .iter()
        .zip(&outputs)
        .map(|((_, size, input), (_, _, output))| (input.ptr(), output.ptr(), *size))
        .collect();
    let changed = step_changes(&pairs, &stream);
    let found = put_back(&run.inputs, &stream)
        .and_then(|()| touched_run::run_tracking(front, &mut run.launch, &regions, &stream));
    // Whatever the run did, the step's output goes back before anything else.
    put_back(&outputs, &stream).map_err(|e| {
        format!("{e}: the application's memory may not hold the step's output (its results may be wrong)")
    })?;
    let found = found?;
    found.inside("the regions it reaches")?;
    if let Some((k, off)) = first_unwritten(&changed, &found.written) {
        return Err(format!(
            "the instrumented run wrote nothing in bytes {off:#x}.. of the region at {:#x}, which the application's step changed: the two runs took different paths, so its pages cannot be trusted",
            regions[k].0
        ));
    }
    Ok(regions
        .iter()
        .zip(&found.touched)
        .flat_map(|(&(addr, size), pages)| page_ranges(pages, addr, size))
        .collect())
}

/// What the step changed of each region: `pairs` are our copies of it (input before, output
/// after, bytes), compared on the GPU in one launch; per region the changed chunks, one
/// (offset, length) run each (a run per chunk: each must hold a page the instrumented run
/// wrote). `None` for every region where the GPU cannot compare them (nothing is checked).
fn step_changes(pairs: &[(u64, u64, u64)], stream: &Stream) -> Vec<Option<Vec<(u64, u64)>>> {
    let cs = DEFAULT_CHUNK_SIZE;
    let mut first_flag = 0;
    let scans: Vec<ManyScan> = pairs
        .iter()
        .map(|&(pre, post, bytes)| {
            let scan = ManyScan {
                pre,
                post,
                bytes,
                chunk_shift: cs.trailing_zeros(),
                first_flag,
            };
            first_flag += bytes.div_ceil(cs) as usize;
            scan
        })
        .collect();
    // SAFETY: every `pre` and `post` is a buffer of ours of `bytes` bytes (`copy_aside`),
    // alive until this returns.
    match with_chunk_kernels(|k| unsafe { k.scan_many(&scans, stream) }) {
        Ok(flags) => changed_chunks(&flags.changed, pairs.iter().map(|p| p.2), cs)
            .into_iter()
            .map(Some)
            .collect(),
        Err(_) => vec![None; pairs.len()],
    }
}

/// Per region (`sizes`, in order; their chunk flags laid end to end from 0, `chunk` bytes
/// each), the (offset, length) of each changed chunk, the last cut at the region's end: the
/// write set's runs (`write_set::written`) cut per chunk (`touched_run::chunk_pieces`).
fn changed_chunks(
    flags: &[bool],
    sizes: impl Iterator<Item = u64>,
    chunk: u64,
) -> Vec<Vec<(u64, u64)>> {
    let mut first = 0;
    sizes
        .map(|size| {
            let n = size.div_ceil(chunk) as usize;
            let mine = flags.get(first..).unwrap_or(&[]);
            let mine = &mine[..n.min(mine.len())];
            first += n;
            let runs = write_set::written(Evidence::Changed(mine), chunk, size)
                .into_iter()
                .map(|r| (r.offset, r.len));
            touched_run::chunk_pieces(runs, chunk).collect()
        })
        .collect()
}

/// The first region (its index, and the offset of the run) where the application's step
/// changed bytes (`changed`: runs per region, `None` where not known) in which the
/// instrumented run wrote no page (`written`: its pages per region, ascending), as
/// `touched_run::unwritten_run` judges a single dispatch.
fn first_unwritten(
    changed: &[Option<Vec<(u64, u64)>>],
    written: &[Vec<u64>],
) -> Option<(usize, u64)> {
    changed
        .iter()
        .zip(written)
        .enumerate()
        .find_map(|(k, (runs, pages))| {
            touched_run::unwritten_run(runs.as_deref()?.iter().copied(), pages).map(|off| (k, off))
        })
}

/// The byte ranges [start, end) of the region at `addr`, `size` bytes long, that its `pages`
/// (ascending) cover, runs of pages merged.
fn page_ranges(pages: &[u64], addr: u64, size: u64) -> Vec<(u64, u64)> {
    (extents_of_pages(pages, PAGE, size).into_iter())
        .map(|(o, l)| (addr + o, addr + o + l))
        .collect()
}

/// `ranges` sorted and merged where they overlap or touch.
fn merged(ranges: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut v: Vec<(u64, u64)> = ranges.iter().copied().filter(|r| r.0 < r.1).collect();
    v.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(v.len());
    for (a, b) in v {
        match out.last_mut() {
            Some(last) if a <= last.1 => last.1 = last.1.max(b),
            _ => out.push((a, b)),
        }
    }
    out
}

/// The pages (relative to the region, ascending) of the region at `addr`, `size` bytes long,
/// that hold a byte of one of `ranges` ([start, end), sorted, merged).
fn pages_in(ranges: &[(u64, u64)], addr: u64, size: u64) -> Vec<u64> {
    let held: Vec<(u64, u64)> = ranges.iter().map(|&(a, b)| (a, b - a)).collect();
    pages_of_ranges(&held, addr, size, PAGE)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Catches: a step's pages given the wrong region's addresses, a partial last page made
    // whole (past the region), adjacent pages left as separate ranges.
    #[test]
    fn a_steps_pages_become_byte_ranges_of_its_region() {
        let base = 0x7000_0000;
        assert_eq!(
            page_ranges(&[0, 1, 3], base, 3 * PAGE + 10),
            vec![
                (base, base + 2 * PAGE),
                (base + 3 * PAGE, base + 3 * PAGE + 10)
            ]
        );
        assert_eq!(page_ranges(&[5], base, PAGE), vec![]);
        assert_eq!(page_ranges(&[], base, PAGE), vec![]);
    }

    // Catches: the union of the steps lost where two steps touched overlapping bytes, an
    // op's span that ends inside a page not holding that page, a region given another
    // region's pages, a region starting inside a page given the page's other bytes.
    #[test]
    fn the_union_of_the_steps_falls_into_each_region_as_its_pages() {
        let a = 0x1000_0000u64;
        let r = merged(&[
            (a + 10, a + 20),
            (a + 5 * PAGE, a + 6 * PAGE),
            (a, a + PAGE),
            (a + PAGE, a + PAGE + 1),
            (a + 9 * PAGE, a + 9 * PAGE),
        ]);
        assert_eq!(r, vec![(a, a + PAGE + 1), (a + 5 * PAGE, a + 6 * PAGE)]);
        assert_eq!(pages_in(&r, a, 8 * PAGE), vec![0, 1, 5]);
        assert_eq!(pages_in(&r, a + 4 * PAGE, 4 * PAGE), vec![1]);
        assert_eq!(pages_in(&r, a + 6 * PAGE, 4 * PAGE), Vec::<u64>::new());
        assert_eq!(pages_in(&r, a + 100, PAGE), vec![0]);
        assert_eq!(pages_in(&r, a + PAGE - 100, PAGE), vec![0]);
        assert_eq!(pages_in(&r, a + PAGE - 100, 2 * PAGE), vec![0]);
        assert_eq!(pages_in(&r, a + 5 * PAGE - 100, PAGE), vec![0]);
        assert_eq!(pages_in(&r, 0x10, 64), Vec::<u64>::new());
        proptest::proptest!(|(spans in proptest::collection::vec((0u64..64 * 4096, 1u64..3 * 4096), 0..12), off in 0u64..16 * 4096, size in 1u64..32 * 4096)| {
            let raw: Vec<(u64, u64)> = spans.iter().map(|&(s, n)| (a + s, a + s + n)).collect();
            let got = pages_in(&merged(&raw), a + off, size);
            let want: Vec<u64> = (0..size.div_ceil(PAGE)).filter(|&p| {
                let (lo, hi) = (a + off + p * PAGE, (a + off + (p + 1) * PAGE).min(a + off + size));
                raw.iter().any(|&(s, e)| s < hi && lo < e)
            }).collect();
            proptest::prop_assert_eq!(got, want);
        });
    }

    // Catches: a step whose instrumented run took another path (it wrote nothing where the
    // application's step changed bytes) taken at its pages; a region the GPU could not compare
    // (`None`) refused; the wrong region or offset named.
    #[test]
    fn a_step_run_that_did_not_write_where_the_application_did_is_refused() {
        let p = PAGE;
        let changed = vec![Some(vec![(0, 2 * p)]), None, Some(vec![(4 * p, p)])];
        assert_eq!(first_unwritten(&changed, &[vec![1], vec![], vec![4]]), None);
        assert_eq!(
            first_unwritten(&changed, &[vec![1], vec![], vec![3, 5]]),
            Some((2, 4 * p))
        );
        assert_eq!(
            first_unwritten(&changed, &[vec![2], vec![0], vec![4]]),
            Some((0, 0))
        );
        assert_eq!(
            first_unwritten(&[None, Some(vec![])], &[vec![], vec![]]),
            None
        );
    }

    // Catches: a region given another region's flags (they lie end to end), a partial last
    // chunk reported whole, adjacent changed chunks merged into one run (each must hold a
    // written page), flags missing past the end taken for changes, an empty region.
    #[test]
    fn each_regions_changed_chunks_come_from_its_own_flags() {
        let c = 16;
        let flags = [true, true, false, false, true, true];
        assert_eq!(
            changed_chunks(&flags, [40, 0, 16, 20].into_iter(), c),
            vec![
                vec![(0, 16), (16, 16)],
                vec![],
                vec![],
                vec![(0, 16), (16, 4)]
            ]
        );
        assert_eq!(
            changed_chunks(&[true], [40].into_iter(), c),
            vec![vec![(0, 16)]]
        );
    }

    #[test]
    fn a_failed_step_leaves_the_range_whole_and_says_why() {
        let mut t = RangeTouched::default();
        t.kernel_enter(None, &[], 2);
        t.op(&[(0x1000, 10, true)]);
        let mut none: Vec<Snapshot> = Vec::new();
        let why = t
            .apply(&mut none)
            .expect_err("a step could not be repeated");
        assert!(why.contains("step 2 cannot be launched again"), "{why}");
        let mut ok = RangeTouched::default();
        ok.op(&[(0x1000, 10, true), (0x9000, 0, false)]);
        assert_eq!(ok.touched, vec![(0x1000, 0x100a)]);
        assert!(ok.apply(&mut none).is_ok());
    }
}
