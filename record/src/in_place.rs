//! The GPU side of in-process replay (`kreplay profile`): the regions a dispatch reaches and
//! their pristine copies (`Saved`), and `InPlace`, the runner of the engine's pass loop in the
//! application's process: restore the write set, empty the L2, launch behind a timing gate,
//! check the output against the first pass's. `profile` drives it for the original's passes,
//! `variant` for the original and a variant kernel in turn; both end with
//! `put_back_application_output`.

use kreplay_cuda::chunks::ChunkFlags;
use kreplay_cuda::many::{CopyTable, ManyScan, ScanTable, PIECE_BYTES};
use kreplay_cuda::timing::GatedTimer;
use kreplay_cuda::{
    copy_dtod_async, copy_dtoh, AsFunction, DeviceBuffer, Event, ForeignFunction, KernelArgs,
    LaunchConfig, Stream,
};
use kreplay_engine::tool::{PassOutcome, PassRunner};
use kreplay_engine::write_set::{fewest_gaps, outside, ByteRange, Evidence};
use kreplay_format::DEFAULT_CHUNK_SIZE;

use crate::device_resources::{flush_l2, with_chunk_kernels};
use crate::error::RecordError;
use crate::footprint::{Footprint, Reachable, RegionSpan};
use crate::pass_timeline::DispatchClock;
use crate::readback::{pack, PackedRun};
use crate::snapshot::device_copy;
use crate::spares::{device_buffer, return_buffers, return_stream, return_timer, spare_buffer};
use crate::trace::{trace, trace_with};

/// One region reachable by the dispatch, and its pristine copy on the device.
pub(crate) struct Saved {
    pub(crate) addr: u64,
    pub(crate) size: u64,
    pub(crate) pristine: DeviceBuffer,
    /// The chunks the first pass changed (the whole region where the GPU cannot compare it:
    /// an address that is not 16-byte aligned), gaps between pages bridged past
    /// `MOST_RESTORE_RUNS`.
    pub(crate) write_set: Vec<PackedRun>,
    /// The chunk the write set was found in (the region's size where it could not be).
    pub(crate) chunk: u64,
    /// The first pass's output of the write set, packed.
    pub(crate) first_output: Option<DeviceBuffer>,
}

/// The pristine copy of `size` bytes at `addr`, queued on `stream`: into a spare buffer of
/// that size when the context keeps one, else into a new one (`None`: device memory short).
pub(crate) fn pristine_copy(addr: u64, size: u64, stream: &Stream) -> Option<DeviceBuffer> {
    let Some(buf) = spare_buffer(size) else {
        return device_copy(addr, size, stream);
    };
    // SAFETY: the destination is `buf`, `size` bytes of ours (a spare is only ever handed out
    // at its exact size); the source is a region the walk found, read with the context
    // synchronised, as in `device_copy`.
    unsafe { copy_dtod_async(buf.ptr(), addr, size as usize, stream) }.ok()?;
    Some(buf)
}

/// What a runner leaves once its passes are over.
pub(crate) struct Spent {
    timer: GatedTimer,
    flags: Option<DeviceBuffer>,
}

impl Spent {
    /// Once the dispatch's passes are over and its stream synchronised: what it made for them
    /// goes to the context's spares for the next dispatch (`spares`). Not called after a
    /// failure: those are freed, as before.
    pub(crate) fn recycle(self, saved: Vec<Saved>, stream: Stream) {
        return_timer(self.timer);
        let mut buffers: Vec<DeviceBuffer> = self.flags.into_iter().collect();
        for s in saved {
            buffers.push(s.pristine);
            buffers.extend(s.first_output);
        }
        return_buffers(buffers);
        return_stream(stream);
    }
}

/// Most copies one region's restore makes when its write set is found page by page
/// (`profile --memory touched`): past it the smallest gaps are copied too (`fewest_gaps`).
pub(crate) const MOST_RESTORE_RUNS: usize = 64;

/// The byte ranges of `len` bytes at `live` whose `cs`-byte chunks differ from `pristine`,
/// exactly (no gaps bridged), and whether the GPU compared them (else the whole range). A
/// chunk below the chunk scan's 64 KiB span (a page) is compared by the scan over many
/// pieces, cut at every chunk.
pub(crate) fn changed_ranges(
    pristine: u64,
    live: u64,
    len: u64,
    cs: u64,
    stream: &Stream,
) -> (Vec<ByteRange>, bool) {
    let scan = with_chunk_kernels(|k| {
        // SAFETY: callers pass a region's pristine copy (ours) and the region itself (the
        // application's allocation, read while the application waits in the launch callback).
        unsafe {
            if cs < PIECE_BYTES {
                let one = ManyScan {
                    pre: pristine,
                    post: live,
                    bytes: len,
                    chunk_shift: cs.trailing_zeros(),
                    first_flag: 0,
                };
                k.scan_many(&[one], stream)
            } else {
                k.scan(pristine, Some(live), len, cs, stream)
            }
        }
    });
    let evidence = match &scan {
        Ok(ChunkFlags { changed, .. }) => Evidence::Changed(changed),
        Err(_) => Evidence::Unknown,
    };
    let span = RegionSpan {
        base: live,
        size: len,
        chunk: cs,
    };
    (Reachable.written(span, evidence), scan.is_ok())
}

/// The runs' byte ranges in their region, in order (where they sit in a packed copy aside).
fn as_ranges(runs: &[PackedRun]) -> Vec<ByteRange> {
    runs.iter()
        .map(|r| ByteRange {
            offset: r.offset,
            len: r.len,
        })
        .collect()
}

/// Most chunks one region's write set is found in: a finer chunk over a region larger than
/// `MOST_CHUNKS` of them is widened (4 GiB: 16 KiB chunks; 16 GiB: 64 KiB, the chunk scan's
/// own), so the many-pieces scan's table stays at 8 MiB. (The restore's and the output
/// check's tables hold a row per 64 KiB of the write set, made once a dispatch.)
const MOST_CHUNKS: u64 = 1 << 18;

/// The chunk a region of `size` bytes is compared in, asked for `chunk` (a power of two).
fn restore_chunk_for(size: u64, chunk: u64) -> u64 {
    let widened = size.div_ceil(MOST_CHUNKS).next_power_of_two();
    chunk.max(widened).min(DEFAULT_CHUNK_SIZE.max(chunk))
}

/// The GPU side of the pass loop, in the application's process.
pub(crate) struct InPlace<'a> {
    pub(crate) function: &'a ForeignFunction,
    pub(crate) config: &'a LaunchConfig,
    pub(crate) args: &'a mut KernelArgs,
    pub(crate) stream: &'a Stream,
    pub(crate) timer: GatedTimer,
    pub(crate) cache_flush: bool,
    /// The chunk the write set is found in (`profile --memory touched`: a 4 KiB page).
    pub(crate) restore_chunk: u64,
    pub(crate) saved: &'a mut [Saved],
    pub(crate) restores_ns: Vec<u64>,
    /// Wall time of each extra pass beyond its kernel's run, in ns.
    pub(crate) overheads_ns: Vec<u64>,
    /// When the current extra pass began (its restore).
    pass_began: Option<std::time::Instant>,
    /// Each timed pass's output check (planned once the write set is known).
    check: Option<OutputCheck>,
    /// Bracket the restore copies, read after the pass's one wait.
    restore_events: (Event, Event),
    restore_queued: bool,
    /// The restore's copies as one table on the device, when the write set was found page by
    /// page in more than one run (one launch per restore instead of a copy call per run).
    restore_table: Option<CopyTable>,
    /// `profile --trace`: where each pass ran on the GPU.
    pub(crate) clock: Option<DispatchClock>,
}

/// The output check of each timed pass, planned once after the first: one GPU scan per
/// write-set run (the first pass's output against memory), all queued into one flags buffer
/// and read back after the pass's one wait. Runs the GPU cannot compare (addresses not
/// 16-byte aligned: small globals) are compared on the host.
struct OutputCheck {
    /// (first pass's output, live memory, bytes, chunks).
    gpu: Vec<(u64, u64, u64, usize)>,
    host: Vec<(u64, u64, u64)>,
    flags: Option<DeviceBuffer>,
    readback: Vec<u8>,
    /// Page restores: every run in one table, one flag each, one launch a pass.
    table: Option<ScanTable>,
}

impl OutputCheck {
    /// Page restores (`batched`): the runs as one scan table when it can be made, else as by
    /// chunks.
    fn plan(saved: &[Saved], batched: bool) -> Result<OutputCheck, RecordError> {
        if batched {
            if let Some(check) = Self::plan_table(saved) {
                return Ok(check);
            }
        }
        Self::plan_chunks(saved)
    }

    fn plan_table(saved: &[Saved]) -> Option<OutputCheck> {
        let mut scans = Vec::new();
        for s in saved {
            let Some(first) = &s.first_output else {
                continue;
            };
            let mut at = 0;
            for r in &s.write_set {
                // One flag a run: a chunk wider than any run.
                scans.push(ManyScan {
                    pre: first.ptr() + at,
                    post: s.addr + r.offset,
                    bytes: r.len,
                    chunk_shift: 62,
                    first_flag: scans.len(),
                });
                at += r.len;
            }
        }
        let table = with_chunk_kernels(|k| k.scan_table(&scans)).ok()?;
        let total = table.flags() * 8;
        let flags = device_buffer(total.max(8) as u64).ok()?;
        Some(OutputCheck {
            gpu: Vec::new(),
            host: Vec::new(),
            flags: Some(flags),
            readback: vec![0u8; total],
            table: Some(table),
        })
    }

    fn plan_chunks(saved: &[Saved]) -> Result<OutputCheck, RecordError> {
        let cs = DEFAULT_CHUNK_SIZE;
        let (mut gpu, mut host) = (Vec::new(), Vec::new());
        for s in saved {
            let Some(first) = &s.first_output else {
                continue;
            };
            let mut at = 0;
            for r in &s.write_set {
                let (a, b) = (first.ptr() + at, s.addr + r.offset);
                match kreplay_cuda::chunks::chunk_count(&[a, b], r.len, cs) {
                    Ok(n) => gpu.push((a, b, r.len, n)),
                    Err(_) => host.push((a, b, r.len)),
                }
                at += r.len;
            }
        }
        let total: usize = gpu.iter().map(|g| g.3 * 8).sum();
        let flags = if total > 0 {
            Some(
                device_buffer(total as u64)
                    .map_err(|_| RecordError::NoPostScratch(total as u64))?,
            )
        } else {
            None
        };
        Ok(OutputCheck {
            gpu,
            host,
            flags,
            readback: vec![0u8; total],
            table: None,
        })
    }

    /// Queues the GPU scans behind the pass on `stream`.
    fn queue(&self, stream: &Stream) -> Result<(), RecordError> {
        let Some(flags) = &self.flags else {
            return Ok(());
        };
        if let Some(table) = &self.table {
            // SAFETY: the table's scans read a region and our copy of it (`plan_table`), and
            // `flags` was sized for the table's flags; both live in `self` past the pass's wait.
            return with_chunk_kernels(|k| unsafe { k.queue_scan(table, flags.ptr(), stream) })
                .map_err(|e| RecordError::Config(format!("comparing a pass's output: {e}")));
        }
        let cs = DEFAULT_CHUNK_SIZE;
        with_chunk_kernels(|k| {
            let mut off = 0u64;
            for &(a, b, len, _) in &self.gpu {
                // SAFETY: `a` and `b` are a region and our copy of it (see `OutputCheck::plan`);
                // `flags` was sized for 8 bytes per chunk of every scan, so `off` stays inside.
                let n = unsafe { k.scan_queued(a, b, len, cs, flags.ptr() + off, stream)? };
                off += n as u64 * 8;
            }
            Ok(())
        })
        .map_err(|e| RecordError::Config(format!("comparing a pass's output: {e}")))
    }

    /// After the wait: whether the write set holds what the first pass wrote there.
    fn same(&mut self, stream: &Stream) -> Result<bool, RecordError> {
        if let Some(flags) = &self.flags {
            // SAFETY: `flags` is our buffer, as long as `readback`.
            unsafe { copy_dtoh(&mut self.readback, flags.ptr()) }
                .map_err(RecordError::cuda("reading the output check"))?;
            if let Some(table) = &self.table {
                let n = table.flags();
                return Ok(self.readback[n * 4..n * 8].iter().all(|&b| b == 0));
            }
            let mut off = 0;
            for &(.., n) in &self.gpu {
                let changed = &self.readback[off + n * 4..off + n * 8];
                if changed.iter().any(|&b| b != 0) {
                    return Ok(false);
                }
                off += n * 8;
            }
        }
        for &(a, b, len) in &self.host {
            if differs(a, b, len, stream)? {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

impl<'a> InPlace<'a> {
    /// The runner of a dispatch's further passes, once its first pass ran.
    pub(crate) fn new(
        launch: (&'a ForeignFunction, &'a LaunchConfig, &'a mut KernelArgs),
        stream: &'a Stream,
        timer: GatedTimer,
        cache_flush: bool,
        saved: &'a mut [Saved],
    ) -> Result<InPlace<'a>, RecordError> {
        let event = || Event::new().map_err(RecordError::cuda("creating the restore events"));
        Ok(InPlace {
            function: launch.0,
            config: launch.1,
            args: launch.2,
            stream,
            timer,
            cache_flush,
            restore_chunk: DEFAULT_CHUNK_SIZE,
            saved,
            restores_ns: Vec::new(),
            overheads_ns: Vec::new(),
            pass_began: None,
            check: None,
            restore_events: (event()?, event()?),
            restore_queued: false,
            restore_table: None,
            clock: None,
        })
    }

    /// Ends the runner: its timer and the output check's flags, for `Spent::recycle`.
    pub(crate) fn into_spent(self) -> Spent {
        // A pass that failed before its wait may leave a restore or a check queued that reads
        // the tables dropped here: let it finish first (after a pass's wait, this costs
        // nothing). A failure is the stream's, and the put-back that follows reports it.
        let _ = self.stream.synchronize();
        Spent {
            timer: self.timer,
            flags: self.check.and_then(|c| c.flags),
        }
    }

    fn err(during: &'static str) -> impl Fn(kreplay_cuda::CudaError) -> RecordError + Copy {
        RecordError::cuda(during)
    }

    /// After the first pass: the write set, and a copy of what the pass wrote there.
    pub(crate) fn learn_write_set(&mut self) -> Result<(), RecordError> {
        for s in self.saved.iter_mut() {
            let cs = restore_chunk_for(s.size, self.restore_chunk);
            let (changed, compared) =
                changed_ranges(s.pristine.ptr(), s.addr, s.size, cs, self.stream);
            // Not compared: the whole region is its write set, one chunk of its size.
            s.chunk = if compared { cs } else { cs.max(s.size) };
            s.write_set = if cs < DEFAULT_CHUNK_SIZE {
                pack(&fewest_gaps(changed, MOST_RESTORE_RUNS)).0
            } else {
                pack(&changed).0
            };
            let total: u64 = s.write_set.iter().map(|r| r.len).sum();
            s.first_output = None;
            if total > 0 {
                let out = device_copy_packed(s.addr, &s.write_set, total, self.stream)?;
                s.first_output = Some(out);
            }
        }
        self.check = Some(OutputCheck::plan(self.saved, self.by_pages())?);
        self.restore_table = self.plan_restore_table();
        self.stream
            .synchronize()
            .map_err(Self::err("copying the first pass's output"))
    }

    /// Whether the write set is found page by page (`profile --memory touched`): its runs are
    /// then many and small, so the restore and the output check run as one launch each.
    fn by_pages(&self) -> bool {
        self.restore_chunk < DEFAULT_CHUNK_SIZE
    }

    /// The restore's copies, one call per write-set run.
    fn restore_runs(&self) -> Result<(), RecordError> {
        for s in self.saved.iter() {
            for r in &s.write_set {
                // SAFETY: the write set lies in the dispatch's region, which the kernel writes
                // anyway, restored while the application waits in the launch callback (no Rust
                // value of kreplay's lives there); the source is our pristine copy.
                unsafe {
                    copy_dtod_async(
                        s.addr + r.offset,
                        s.pristine.ptr() + r.offset,
                        r.len as usize,
                        self.stream,
                    )
                }
                .map_err(Self::err("restoring the write set"))?;
            }
        }
        Ok(())
    }

    /// Under page restores, the write set's runs as one copy table, when there is more than
    /// one (`None` otherwise, or where the table cannot be made: the runs are copied one by
    /// one then).
    fn plan_restore_table(&self) -> Option<CopyTable> {
        if !self.by_pages() {
            return None;
        }
        let copies: Vec<(u64, u64, u64)> = self
            .saved
            .iter()
            .flat_map(|s| {
                s.write_set
                    .iter()
                    .map(move |r| (s.addr + r.offset, s.pristine.ptr() + r.offset, r.len))
            })
            .collect();
        if copies.len() < 2 {
            return None;
        }
        with_chunk_kernels(|k| k.copy_table(&copies)).ok()
    }

    /// After a pass's wait: the restore's GPU time, when one was queued before it.
    fn note_restore(&mut self) -> Option<u64> {
        if !std::mem::take(&mut self.restore_queued) {
            return None;
        }
        let ns = self
            .restore_events
            .1
            .elapsed_ns_since(&self.restore_events.0)
            .ok()?;
        self.restores_ns.push(ns);
        Some(ns)
    }
}

/// Whether `len` bytes at device addresses `a` and `b` differ: on the GPU, or on the host where
/// the GPU cannot compare them (addresses not 16-byte aligned: small globals).
fn differs(a: u64, b: u64, len: u64, stream: &Stream) -> Result<bool, RecordError> {
    let cs = DEFAULT_CHUNK_SIZE;
    // SAFETY: callers compare a region of the dispatch with our copy of it, while the
    // application waits in the launch callback.
    if let Ok(flags) = with_chunk_kernels(|k| unsafe { k.scan(a, Some(b), len, cs, stream) }) {
        return Ok(flags.changed.iter().any(|&c| c));
    }
    let n = usize::try_from(len).map_err(|_| RecordError::RegionTooLarge(len))?;
    let (mut x, mut y) = (vec![0u8; n], vec![0u8; n]);
    let read = RecordError::cuda("comparing a pass's output");
    // SAFETY: as for the scan above; the host buffers are ours, `len` bytes each.
    unsafe {
        copy_dtoh(&mut x, a).map_err(read)?;
        copy_dtoh(&mut y, b).map_err(read)?;
    }
    Ok(x != y)
}

/// Copies the runs of `addr` end to end into a new device buffer of `total` bytes.
fn device_copy_packed(
    addr: u64,
    runs: &[PackedRun],
    total: u64,
    stream: &Stream,
) -> Result<DeviceBuffer, RecordError> {
    let buf = device_buffer(total).map_err(|_| RecordError::NoPostScratch(total))?;
    let mut at = 0;
    for r in runs {
        // SAFETY: the runs lie in the region at `addr` (the application's, while it waits in
        // the launch callback) and end to end in `buf`, sized to their total.
        unsafe { copy_dtod_async(buf.ptr() + at, addr + r.offset, r.len as usize, stream) }
            .map_err(RecordError::cuda("copying the first pass's output"))?;
        at += r.len;
    }
    Ok(buf)
}

impl PassRunner for InPlace<'_> {
    type Error = RecordError;

    /// Queued, not waited for: the pass's launch follows on the same stream, and its one wait
    /// covers both (the copies' GPU time is read from events afterwards).
    fn restore(&mut self) -> Result<(), RecordError> {
        let t = std::time::Instant::now();
        self.restore_events
            .0
            .record(self.stream)
            .map_err(Self::err("timing the restore"))?;
        if let Some(table) = &self.restore_table {
            // SAFETY: the table holds the write set's runs (`plan_restore_table`), each in the
            // dispatch's region and in our pristine copy of it, disjoint; `self` keeps the table
            // and the copies until the pass's wait, or `into_spent`'s, after which no launch of
            // it is pending.
            with_chunk_kernels(|k| unsafe { k.queue_copies(table, self.stream) })
                .map_err(|e| RecordError::Config(format!("restoring the write set: {e}")))?;
        } else {
            self.restore_runs()?;
        }
        self.restore_events
            .1
            .record(self.stream)
            .map_err(Self::err("timing the restore"))?;
        self.restore_queued = true;
        self.pass_began = Some(t);
        Ok(())
    }

    /// The L2 is emptied here, before BEGIN, so a tool that starts counters at BEGIN (the
    /// built-in counters do) sees the dispatch alone.
    fn prepare(&mut self, _pass: u32) -> Result<(), RecordError> {
        if self.cache_flush {
            if let Some(c) = &mut self.clock {
                c.before_flush(self.stream);
            }
            // Without a sweep (device memory short) the pass runs with what L2 holds.
            let ran = flush_l2(self.stream).is_ok();
            if let Some(c) = &mut self.clock {
                c.after_flush(self.stream, ran);
            }
        }
        Ok(())
    }

    fn run(&mut self, pass: u32) -> Result<PassOutcome, RecordError> {
        let function = self.function;
        self.run_of(function, pass, false)
    }
}

impl InPlace<'_> {
    /// A pass of `function` (the original's, or a variant with the same parameter layout,
    /// `variant`), with the original's geometry and arguments.
    pub(crate) fn run_of(
        &mut self,
        function: &impl AsFunction,
        pass: u32,
        variant: bool,
    ) -> Result<PassOutcome, RecordError> {
        trace_with(|| format!("pass {pass}: begin"));
        let outcome = self.run_timed(function, pass, variant)?;
        if let Some(t) = self.pass_began.take() {
            let wall = t.elapsed().as_nanos() as u64;
            self.overheads_ns
                .push(wall.saturating_sub(outcome.duration_ns));
        }
        Ok(outcome)
    }
}

impl InPlace<'_> {
    fn run_timed(
        &mut self,
        function: &impl AsFunction,
        pass: u32,
        variant: bool,
    ) -> Result<PassOutcome, RecordError> {
        self.timer
            .arm(self.stream)
            .map_err(Self::err("arming the pass timer"))?;
        trace("pass timer armed");
        // SAFETY: the application's own launch (or a variant whose parameter layout was
        // checked equal to it), repeated with its own arguments on memory restored to what it
        // was at the launch, while the application waits in the callback.
        let launched =
            unsafe { kreplay_cuda::launch(function, self.config, self.args, self.stream) }
                .map_err(Self::err("launching a pass"));
        trace("pass queued");
        let stopped = self.timer.finish(self.stream);
        trace("pass launched, gate opened");
        launched?;
        stopped.map_err(Self::err("stopping the pass timer"))?;
        if let Some(check) = &self.check {
            check.queue(self.stream)?;
        }
        // The pass's one wait: restore, kernel and output check.
        self.stream
            .synchronize()
            .map_err(RecordError::KernelFailed)?;
        let restore_ns = self.note_restore();
        let duration_ns = self
            .timer
            .elapsed_ns()
            .map_err(Self::err("reading the pass timer"))?;
        if let Some(c) = &mut self.clock {
            let restore = restore_ns.map(|ns| (&self.restore_events.0, ns));
            c.pass(
                pass,
                variant,
                (self.timer.start_event(), duration_ns),
                restore,
            );
        }
        trace_with(|| format!("pass {pass}: done, {duration_ns} ns"));
        let matches_first = match &mut self.check {
            Some(check) => Some(check.same(self.stream)?),
            None => None,
        };
        Ok(PassOutcome {
            index: pass,
            duration_ns,
            matches_first,
        })
    }
}

/// Puts the application's own output back over the write set (unless `keep_write_set`: the
/// variant's output that is there stays, `--keep variant`), and the pristine bytes over any
/// other chunk a pass changed.
pub(crate) fn put_back_application_output(
    saved: &[Saved],
    stream: &Stream,
    keep_write_set: bool,
) -> Result<(), RecordError> {
    let e = RecordError::cuda("putting the application's output back");
    for s in saved {
        let mut at = 0;
        if let Some(first) = s.first_output.as_ref().filter(|_| !keep_write_set) {
            for r in &s.write_set {
                // SAFETY: the write set lies in the dispatch's region (the application's,
                // which the kernel writes anyway, while the application waits); the source is
                // our packed copy of the first pass's output.
                unsafe {
                    copy_dtod_async(s.addr + r.offset, first.ptr() + at, r.len as usize, stream)
                }
                .map_err(e)?;
                at += r.len;
            }
        }
        stream.synchronize().map_err(e)?;
        // Compared in the write set's own chunk: what a pass changed outside it (the
        // application's launch changed nothing there) gets its pristine bytes, and nothing
        // inside it does.
        let (changed, _) = changed_ranges(s.pristine.ptr(), s.addr, s.size, s.chunk, stream);
        for r in outside(&changed, &as_ranges(&s.write_set)) {
            // SAFETY: a range of the dispatch's region (clipped to its size), given back its
            // pristine bytes while the application waits.
            unsafe {
                copy_dtod_async(
                    s.addr + r.offset,
                    s.pristine.ptr() + r.offset,
                    r.len as usize,
                    stream,
                )
            }
            .map_err(e)?;
        }
    }
    stream.synchronize().map_err(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Catches: a 16 GiB region scanned in 4 KiB chunks (4 Mi pieces), the chunk widened past
    // the default, a small region's page chunk widened at all.
    #[test]
    fn a_fine_chunk_is_widened_only_over_a_large_region() {
        let page = 4096;
        assert_eq!(restore_chunk_for(256 << 20, page), page);
        assert_eq!(restore_chunk_for(1 << 30, page), page);
        assert_eq!(restore_chunk_for((1 << 30) + 1, page), 2 * page);
        assert_eq!(restore_chunk_for(4 << 30, page), 16 << 10);
        assert_eq!(restore_chunk_for(16 << 30, page), 64 << 10);
        assert_eq!(restore_chunk_for(1 << 50, page), DEFAULT_CHUNK_SIZE);
        assert_eq!(
            restore_chunk_for(16 << 30, DEFAULT_CHUNK_SIZE),
            DEFAULT_CHUNK_SIZE
        );
        assert_eq!(restore_chunk_for(0, page), page);
    }
}
