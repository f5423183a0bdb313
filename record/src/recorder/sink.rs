//! The sink: writes a finished capture as a `.krr` on a thread of its own (off the
//! application's time), in the one event order the format defines (`CaptureHead`, regions and
//! their chunks, `CaptureTail`). It is handed what it needs (names and files, the report to
//! add to, the captures in flight), never the recorder.

use std::io::{Seek, Write};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use kreplay_format::writer::{CaptureHead, CaptureTail};
use kreplay_format::{
    Annotation, CaptureInfo, CaptureWriter, MemoryState, ModuleImage, ModuleKind,
};
use kreplay_protocol::config::{demangle, short_kernel_name};
use kreplay_protocol::report::CaptureSummary;

use super::corpus_keep;
use super::locking::lock;
use super::marks::{FlagGuard, SELF_CALLS};
use super::outputs::{self, Outputs};
use super::report::Report;
use crate::capture::{CaptureData, CodeObject};
use crate::error::RecordError;
use crate::inflight::InFlight;
use crate::ptx;

/// Captures whose writer thread may still read device scratch.
type Flights = Arc<Mutex<Vec<Arc<InFlight>>>>;

/// What a writer thread is handed.
#[derive(Clone)]
struct Handed {
    outputs: Arc<Outputs>,
    report: Arc<Report>,
    in_flight: Flights,
}

/// The sink (see the module comment).
pub(super) struct Sink {
    handed: Handed,
    writers: Mutex<Vec<JoinHandle<()>>>,
}

impl Sink {
    pub(super) fn new(outputs: Arc<Outputs>, report: Arc<Report>) -> Sink {
        Sink {
            handed: Handed {
                outputs,
                report,
                in_flight: Arc::default(),
            },
            writers: Mutex::new(Vec::new()),
        }
    }

    /// Captures still being written whose snapshots may be in `context`'s device scratch
    /// (context 0: not known).
    pub(super) fn in_flight_in(&self, context: usize) -> Vec<Arc<InFlight>> {
        lock(&self.handed.in_flight)
            .iter()
            .filter(|f| f.context == context || f.context == 0)
            .cloned()
            .collect()
    }

    /// Waits for every writer thread started so far.
    pub(super) fn join(&self) {
        let handles: Vec<_> = std::mem::take(&mut *lock(&self.writers));
        for h in handles {
            let _ = h.join();
        }
    }

    /// Writes a finished capture on a writer thread.
    pub(super) fn write(&self, mut p: CaptureData) {
        let h = &self.handed;
        let path = h.outputs.path(p.match_index, &p.dispatch.kernel_name);
        let info = capture_info(&h.outputs, &p);
        let context = p.context.map_or(0, |c| c.id());
        let flight = InFlight::new(
            context,
            std::mem::take(&mut p.snapshots),
            p.compare_later.take(),
        );
        lock(&h.in_flight).push(flight.clone());
        let name = short_kernel_name(&demangle(&p.dispatch.kernel_name));
        let corpus_entry = h
            .outputs
            .corpus
            .as_ref()
            .map(|_| corpus_keep::draft(&p, &path));
        let handed = h.clone();
        let handle = std::thread::Builder::new()
            .name("kreplay-writer".into())
            .spawn(move || handed.run(&name, &path, &info, (p, corpus_entry), &flight));
        match handle {
            Ok(h) => lock(&self.writers).push(h),
            Err(e) => h
                .report
                .error(format!("cannot start the writer thread: {e}")),
        }
    }
}

fn capture_info(o: &Outputs, p: &CaptureData) -> CaptureInfo {
    CaptureInfo {
        tool_version: env!("CARGO_PKG_VERSION").into(),
        host: o.host.clone(),
        pid: o.pid,
        rank: o.rank,
        command_line: outputs::command_line(),
        time_unix_ns: outputs::now_unix_ns(),
        match_index: p.match_index,
        launch_index: p.launch_index,
        kernel_filter: o.kernel_filter.clone(),
    }
}

impl Handed {
    /// The writer thread's body (`corpus_entry`: each-kernel mode's draft of the capture's
    /// manifest entry).
    fn run(
        &self,
        name: &str,
        path: &Path,
        info: &CaptureInfo,
        (p, corpus_entry): (CaptureData, Option<kreplay_protocol::corpus::CorpusCapture>),
        flight: &Arc<InFlight>,
    ) {
        // Whatever this thread asks of the driver is the recorder's.
        let _self_calls = FlagGuard::force(&SELF_CALLS);
        // A panic here must not take the application down with it (a writer thread's
        // panic is caught at join, but this thread also reports); the partial file is
        // removed by PendingFile's drop.
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            write_capture(&self.outputs, path, info, p, flight)
        }))
        .unwrap_or(Err(RecordError::WriterPanicked));
        lock(&self.in_flight).retain(|f| !Arc::ptr_eq(f, flight));
        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match result {
            Ok(summary) => self.kept(name, summary, corpus_entry),
            Err(e) => self.report.error(format!(
                "capture of {name} could not be written to {}: {e}; the application continues",
                path.display()
            )),
        }));
    }

    /// A written capture, kept in the corpus (each-kernel mode) or not.
    fn kept(
        &self,
        name: &str,
        mut summary: CaptureSummary,
        corpus_entry: Option<kreplay_protocol::corpus::CorpusCapture>,
    ) {
        let (Some(ledger), Some(entry)) = (&self.outputs.corpus, corpus_entry) else {
            return self.written(name, summary);
        };
        match corpus_keep::keep(ledger, entry, std::path::Path::new(&summary.file)) {
            Ok(entry) => {
                summary.corpus = Some(entry);
                self.written(name, summary);
            }
            Err(why) => crate::diag!(
                "kreplay: {name} (match {}) left out of the corpus: {why}",
                summary.match_index
            ),
        }
    }

    /// Says a capture was written, and keeps its summary.
    fn written(&self, name: &str, summary: CaptureSummary) {
        if !self.outputs.quiet {
            crate::diag!(
                "kreplay: captured {} (match {}) -> {}: {} regions, {} of memory stored in {}, stalled the app {:.1} ms, {:.1} ms in all",
                name,
                summary.match_index,
                summary.file,
                summary.regions,
                kreplay_format::units::bytes(summary.raw_bytes),
                kreplay_format::units::bytes(summary.stored_bytes),
                summary.stall_ms,
                summary.total_ms
            );
        }
        if std::env::var_os("KREPLAY_DEBUG_STALL").is_some() {
            let phases: Vec<String> = summary
                .stall_phases
                .iter()
                .map(|p| format!("{} {:.1} ms", p.phase, p.ms))
                .collect();
            crate::diag!(
                "kreplay: stall of match {}: {}",
                summary.match_index,
                phases.join(", ")
            );
        }
        if let Some(dir) = &self.outputs.report_dir {
            outputs::note_capture(dir, &summary);
        }
        self.report.capture(summary);
    }
}

/// What a capture's bytes amount to: raw memory bytes and regions written.
#[derive(Debug, Default, Clone, Copy)]
struct Written {
    raw_bytes: u64,
    regions: usize,
}

fn write_capture(
    outputs: &Outputs,
    path: &Path,
    info: &CaptureInfo,
    mut p: CaptureData,
    flight: &InFlight,
) -> Result<CaptureSummary, RecordError> {
    if flight.on_device() {
        // Fails only when the context went away before this thread started, in which case
        // the teardown callback has brought the snapshots home already (checked when read).
        if let Some(c) = p.context {
            let _ = c.make_current();
        } else {
            return Err(RecordError::NoContext);
        }
    }
    // Regions that did not fit in device scratch are in the file already.
    let mut f = match p.spill.take() {
        Some(spill) => spill.into_file(),
        None => outputs.open(path, info.time_unix_ns, info.match_index)?,
    };
    let written = match write_events(&mut f.writer, info, &p, flight) {
        Ok(w) => w,
        Err(e) => {
            f.abandon();
            return Err(e);
        }
    };
    let stored = f.writer.position();
    f.finish()?;
    Ok(summary_of(&p, info, path, written, stored))
}

/// Every event of a capture, in the format's order.
fn write_events<W: Write + Seek>(
    w: &mut CaptureWriter<W>,
    info: &CaptureInfo,
    p: &CaptureData,
    flight: &InFlight,
) -> Result<Written, RecordError> {
    let e = RecordError::Format;
    let modules = if p.steps.is_empty() {
        modules_of(
            &p.module,
            ptx::resolve(&p.ptx_sources, &p.dispatch.kernel_name),
        )
    } else {
        range_modules(&p.module, &p.step_modules)
    };
    w.head(&CaptureHead {
        info: Some(info),
        device: p.device.as_ref(),
        modules: &modules,
        dispatch: &p.dispatch,
    })
    .map_err(e)?;
    if !p.steps.is_empty() {
        w.steps(&p.steps).map_err(e)?;
        if let Some(range) = &p.range {
            w.range_info(range).map_err(e)?;
        }
    }
    let mut written = write_regions(w, p, flight)?;
    // Post chunks of host snapshots, and of those the teardown callback brought home.
    for (region, offset, bytes) in flight.take_early_post().iter().chain(&p.post) {
        written.raw_bytes += bytes.len() as u64;
        w.memory(*region, MemoryState::Post, *offset, bytes)
            .map_err(e)?;
    }
    let annotations = annotations_of(&p.notes, p.device_heap.as_deref());
    w.tail(&CaptureTail {
        globals: &p.globals,
        textures: &p.textures,
        pointer_slots: &p.pointer_slots,
        timing: Some(&p.timing),
        graph: p.graph.as_ref(),
        redaction: None,
        annotations: &annotations,
    })
    .map_err(e)?;
    Ok(written)
}

/// The regions and their chunks, streamed from the snapshots with a progress bar.
fn write_regions<W: Write + Seek>(
    w: &mut CaptureWriter<W>,
    p: &CaptureData,
    flight: &InFlight,
) -> Result<Written, RecordError> {
    let mut written = Written::default();
    let mut ring = None;
    let total = flight.total_bytes();
    let name = short_kernel_name(&demangle(&p.dispatch.kernel_name));
    let bar = kreplay_protocol::progress::Progress::bytes(&format!("kreplay: {name}"), total);
    let done = std::cell::Cell::new(0u64);
    let progress = |n: u64| {
        done.set(done.get() + n);
        bar.set("writing", done.get(), total);
    };
    let mut all = || {
        while let Some(region) = flight.write_region(written.regions, w, &mut ring, &progress) {
            written.raw_bytes += region?;
            written.regions += 1;
        }
        Ok::<(), RecordError>(())
    };
    let result = all();
    // Kept for the next capture's writer: pinning a ring again would run beside its stall.
    if let Some(ring) = ring {
        crate::staging_rings::give_back(ring, result.is_ok());
    }
    result.map(|()| written)
}

/// The code objects a capture keeps: the cubin, then the PTX the application shipped for the
/// kernel (for replay on other GPUs), under the next module id.
fn modules_of(cubin: &CodeObject, ptx: Option<(u32, Vec<u8>)>) -> Vec<ModuleImage> {
    let mut modules = vec![cubin.to_image()];
    if let Some((arch, text)) = ptx {
        modules.push(ModuleImage {
            module_id: cubin.module_id.wrapping_add(1),
            kind: ModuleKind::Ptx,
            arch,
            image: text,
        });
    }
    modules
}

/// The code objects of a range capture: each step's cubin once. No PTX yet: a PTX module
/// takes the id after its cubin's, which another step's module may hold.
fn range_modules(first: &CodeObject, others: &[CodeObject]) -> Vec<ModuleImage> {
    std::iter::once(first)
        .chain(others)
        .map(CodeObject::to_image)
        .collect()
}

/// The recorder's annotations: its notes, then what the device heap held.
fn annotations_of(notes: &[String], device_heap: Option<&str>) -> Vec<Annotation> {
    let notes = notes.iter().map(|n| Annotation {
        key: "recorder".into(),
        value: n.clone(),
    });
    let heap = device_heap.map(|n| Annotation {
        key: kreplay_format::DEVICE_HEAP_ANNOTATION.into(),
        value: n.into(),
    });
    notes.chain(heap).collect()
}

fn summary_of(
    p: &CaptureData,
    info: &CaptureInfo,
    path: &Path,
    written: Written,
    stored: u64,
) -> CaptureSummary {
    CaptureSummary {
        kernel: p.dispatch.kernel_name.clone(),
        match_index: info.match_index,
        file: path.display().to_string(),
        regions: written.regions,
        raw_bytes: written.raw_bytes,
        stored_bytes: stored,
        stall_ms: p.stall_ns as f64 / 1e6,
        total_ms: p.began.elapsed().as_secs_f64() * 1e3,
        stall_phases: p
            .stall_phases
            .iter()
            .map(|&(phase, ns)| kreplay_protocol::report::StallPhase {
                phase: phase.into(),
                ms: ns as f64 / 1e6,
            })
            .collect(),
        corpus: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cubin_comes_first_and_its_ptx_takes_the_next_module_id() {
        let cubin = CodeObject {
            module_id: 4,
            arch: 90,
            image: Arc::new(vec![0x7f, b'E', b'L', b'F']),
        };
        let only = modules_of(&cubin, None);
        assert_eq!(only.len(), 1);
        assert_eq!(only[0].kind, ModuleKind::Cubin);
        let both = modules_of(&cubin, Some((80, b".version 8.0".to_vec())));
        let ids: Vec<(u32, ModuleKind, u32)> =
            both.iter().map(|m| (m.module_id, m.kind, m.arch)).collect();
        assert_eq!(ids, [(4, ModuleKind::Cubin, 90), (5, ModuleKind::Ptx, 80)]);
        assert_eq!(both[0].image, *cubin.image);
    }

    #[test]
    fn the_recorders_notes_come_before_the_device_heap() {
        let notes = ["first".to_string(), "second".to_string()];
        let all = annotations_of(&notes, Some("heap 8 MiB"));
        let pairs: Vec<(&str, &str)> = all
            .iter()
            .map(|a| (a.key.as_str(), a.value.as_str()))
            .collect();
        assert_eq!(
            pairs,
            [
                ("recorder", "first"),
                ("recorder", "second"),
                (kreplay_format::DEVICE_HEAP_ANNOTATION, "heap 8 MiB"),
            ]
        );
        assert!(annotations_of(&[], None).is_empty());
    }
}
