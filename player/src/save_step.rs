//! `play --save-step K OUT.krr`: one kernel step of a range as an ordinary single-dispatch
//! capture. The range is replayed from its restored input up to step K, the range's memory
//! read back as step K's input, step K run, the memory read back as its output; the file
//! holds step K's dispatch and module, every region of the range but module globals of other
//! modules (regions are not trimmed to what step K reaches: all of them are kept, so the
//! file is as large as the range's memory), the pointer slots of those regions, and step
//! K's module globals.

use std::path::Path;

use kreplay_cuda::copy_dtoh;
use kreplay_format::file::PendingFile;
use kreplay_format::{
    Annotation, Capture, CaptureHead, CaptureTail, CaptureWriter, Dispatch, MemoryKind,
    MemoryState, ModuleGlobal, ModuleImage, ModuleKind, Region, RegionRole, Textures,
    WriterOptions,
};

use kreplay_engine::PlayError;

use crate::session::Session;

/// What `save_step` wrote.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct SavedStep {
    pub path: String,
    pub step: usize,
    pub kernel: String,
}

/// Why `--save-step k` cannot be done on `cap`, if it cannot (checked before any GPU work).
pub fn save_step_problem(cap: &Capture<'_>, k: usize) -> Option<String> {
    if !cap.is_range() {
        return Some(
            "--save-step takes a range capture (this one is a single dispatch already)".into(),
        );
    }
    let Some(step) = cap.steps.get(k) else {
        return Some(format!(
            "--save-step {k}: the range has {} steps (0 to {})",
            cap.steps.len(),
            cap.steps.len().saturating_sub(1)
        ));
    };
    if step.dispatch().is_none() {
        return Some(format!(
            "--save-step {k}: step {k} is a {} step; --save-step takes a kernel step \
             (steps of kind kernel, not copy-dtod, copy-htod, copy-dtoh, fill, event-record, \
             event-wait or host-wait)",
            step.kind()
        ));
    }
    if k == primary_step(cap) && !cap.textures.objects.is_empty() {
        return Some(format!(
            "--save-step {k}: the step reads texture or surface objects, which --save-step does not save yet"
        ));
    }
    None
}

/// The index of the range's first kernel step (the capture's DISPATCH).
fn primary_step(cap: &Capture<'_>) -> usize {
    cap.steps
        .iter()
        .position(|s| s.dispatch().is_some())
        .unwrap_or(0)
}

/// The regions the saved capture keeps: every linear region but module globals of modules
/// other than `module_id` (CUDA arrays are left out: their texels are not read back).
fn kept_regions<'a>(cap: &'a Capture<'_>, module_id: u32) -> Vec<&'a Region> {
    let other_global = |r: &Region| {
        r.role == RegionRole::Global
            && !cap
                .globals
                .iter()
                .any(|g| g.region_id == r.region_id && g.module_id == module_id)
    };
    cap.regions
        .iter()
        .filter(|r| r.kind != MemoryKind::CudaArray && !other_global(r))
        .collect()
}

/// The modules the saved capture holds: step `d`'s first, then PTX that defines its kernel.
fn step_modules(cap: &Capture<'_>, d: &Dispatch) -> Vec<ModuleImage> {
    let mut out: Vec<ModuleImage> = cap
        .modules
        .iter()
        .filter(|m| m.module_id == d.module_id)
        .cloned()
        .collect();
    out.extend(
        cap.modules
            .iter()
            .filter(|m| {
                m.module_id != d.module_id
                    && m.kind == ModuleKind::Ptx
                    && kreplay_format::ptx::defines_entry(&m.image, &d.kernel_name)
            })
            .cloned(),
    );
    out
}

/// The chunks (offset, length) at which `post` differs from `pre`, `chunk` bytes each (the
/// last may be shorter): the saved output, and so the saved capture's write set.
fn changed_chunks(pre: &[u8], post: &[u8], chunk: u64) -> Vec<(u64, u64)> {
    let chunk = chunk.max(1) as usize;
    pre.chunks(chunk)
        .zip(post.chunks(chunk))
        .enumerate()
        .filter(|(_, (a, b))| a != b)
        .map(|(i, (a, _))| ((i * chunk) as u64, a.len() as u64))
        .collect()
}

impl Session<'_> {
    /// Replays the range up to step `k` and writes step `k` as a single-dispatch capture
    /// (`save_step_problem` must have found nothing).
    pub fn save_step(
        &mut self,
        k: usize,
        path: &Path,
        force: bool,
    ) -> Result<SavedStep, PlayError> {
        let cap = self.capture();
        if let Some(why) = save_step_problem(cap, k) {
            return Err(PlayError::Range(why));
        }
        if self.is_relocated() {
            return Err(PlayError::Range(
                "--save-step of a relocated replay is not supported yet (memory holds moved pointers)"
                    .into(),
            ));
        }
        let Some(d) = cap.steps.get(k).and_then(|s| s.dispatch()) else {
            return Err(PlayError::Range(format!("step {k} is not a kernel step")));
        };
        let regions = kept_regions(cap, d.module_id);
        self.replayer_mut().restore_and_wait()?;
        for i in 0..k {
            self.replayer_mut().run_step(i)?;
        }
        let pre = self.read_regions(&regions)?;
        self.replayer_mut().run_step(k)?;
        let post = self.read_regions(&regions)?;
        self.write_step(k, d, &regions, &pre, &post, path, force)
    }

    /// Each region's bytes as the device holds them now. Only a region placed whole is read:
    /// the host buffer is sized by what this session placed, never by the file alone (a
    /// module global placed smaller than the file says, or not at all, is refused).
    fn read_regions(&self, regions: &[&Region]) -> Result<Vec<Vec<u8>>, PlayError> {
        regions
            .iter()
            .map(|r| {
                let (base, usable) = self.placement(r.region_id).ok_or_else(|| {
                    PlayError::Range(format!(
                        "--save-step: region {} was not placed in this replay",
                        r.region_id
                    ))
                })?;
                if usable < r.size {
                    return Err(PlayError::Range(format!(
                        "--save-step: region {} holds {} bytes in the capture but {usable} here (a module global of another size?)",
                        r.region_id, r.size
                    )));
                }
                let mut bytes = vec![0u8; r.size as usize];
                // SAFETY: `r.size` bytes at `base` lie inside the usable bytes this session
                // placed for the region, memory of its own; every range stream was waited for.
                unsafe { copy_dtoh(&mut bytes, base)? };
                Ok(bytes)
            })
            .collect()
    }

    /// Writes step `k` (`d`) with the `regions`' bytes before and after it to `path`.
    #[allow(clippy::too_many_arguments)]
    fn write_step(
        &self,
        k: usize,
        d: &Dispatch,
        regions: &[&Region],
        pre: &[Vec<u8>],
        post: &[Vec<u8>],
        path: &Path,
        force: bool,
    ) -> Result<SavedStep, PlayError> {
        let cap = self.capture();
        let mut f = PendingFile::create(
            path,
            step_uuid(cap.header.uuid, k),
            WriterOptions::default(),
            force,
        )?;
        let memory = StepMemory { regions, pre, post };
        write_step_capture(&mut f.writer, cap, k, d, &memory, self.device_name())?;
        f.finish()?;
        Ok(SavedStep {
            path: path.display().to_string(),
            step: k,
            kernel: d.kernel_name.clone(),
        })
    }
}

/// The saved file's UUID: another capture than the range (derived from it, per step).
fn step_uuid(mut uuid: [u8; 16], k: usize) -> [u8; 16] {
    for (b, k) in uuid[8..].iter_mut().zip((k as u64 + 1).to_le_bytes()) {
        *b ^= k;
    }
    uuid
}

/// The saved step's memory: its regions, each one's bytes before and after the step.
struct StepMemory<'a> {
    regions: &'a [&'a Region],
    pre: &'a [Vec<u8>],
    post: &'a [Vec<u8>],
}

/// Writes step `k` (`d`) of `cap` as a single-dispatch capture: head (capture info, device,
/// step K's modules, its dispatch), each region with its bytes before the step and the
/// chunks the step changed, then step K's module globals, the regions' pointer slots and an
/// annotation naming the range and the device it was replayed on.
fn write_step_capture<W: std::io::Write + std::io::Seek>(
    w: &mut CaptureWriter<W>,
    cap: &Capture<'_>,
    k: usize,
    d: &Dispatch,
    memory: &StepMemory<'_>,
    device: &str,
) -> Result<(), PlayError> {
    let modules = step_modules(cap, d);
    w.head(&CaptureHead {
        info: cap.info.as_ref(),
        device: cap.device.as_ref(),
        modules: &modules,
        dispatch: d,
    })?;
    for ((r, before), after) in memory.regions.iter().zip(memory.pre).zip(memory.post) {
        w.region(r)?;
        w.memory(r.region_id, MemoryState::Pre, 0, before)?;
        for (offset, len) in changed_chunks(before, after, r.chunk_size) {
            let bytes = &after[offset as usize..(offset + len) as usize];
            w.memory(r.region_id, MemoryState::Post, offset, bytes)?;
        }
    }
    let kept = |id: u32| memory.regions.iter().any(|r| r.region_id == id);
    let globals: Vec<ModuleGlobal> = cap
        .globals
        .iter()
        .filter(|g| g.module_id == d.module_id && kept(g.region_id))
        .cloned()
        .collect();
    let slots: Vec<(u32, u64)> = cap
        .pointer_slots
        .iter()
        .copied()
        .filter(|s| kept(s.0))
        .collect();
    let origin = cap.range.as_ref().map_or("", |r| r.origin.as_str());
    let annotations = [Annotation {
        key: SAVED_STEP_ANNOTATION.into(),
        value: format!("step {k} of range capture ({origin}), replayed on {device}"),
    }];
    w.tail(&CaptureTail {
        globals: &globals,
        textures: &Textures::default(),
        pointer_slots: &slots,
        timing: cap.timing.as_ref(),
        graph: None,
        redaction: None,
        annotations: &annotations,
    })?;
    Ok(())
}

/// The annotation a saved step carries: which range it came from.
pub const SAVED_STEP_ANNOTATION: &str = "kreplay.saved_step";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata;

    // Catches: an op step or a step past the end accepted (a capture of nothing written),
    // or a single capture taken for a range.
    #[test]
    fn only_a_kernel_step_of_a_range_can_be_saved() {
        let b = testdata::bytes("cuda-saxpy");
        let mut cap = testdata::parse(&b);
        assert!(save_step_problem(&cap, 0)
            .expect("a single capture")
            .contains("range capture"));
        let d = cap.dispatch.clone();
        cap.steps = vec![
            kreplay_format::Step::op(0, kreplay_format::Op::RecordEvent { event: 1 }),
            kreplay_format::Step::kernel(0, d.clone()),
            kreplay_format::Step::kernel(0, d),
        ];
        assert!(cap.is_range());
        assert_eq!(save_step_problem(&cap, 1), None);
        assert_eq!(save_step_problem(&cap, 2), None);
        let op = save_step_problem(&cap, 0).expect("an op step");
        assert!(
            op.contains("event-record step") && op.contains("kernel step"),
            "{op}"
        );
        let past = save_step_problem(&cap, 3).expect("past the end");
        assert!(past.contains("3 steps"), "{past}");
    }

    // Catches: chunks compared at the wrong size, a short last chunk lost, or unchanged
    // chunks saved as output (a write set larger than the step's).
    #[test]
    fn only_changed_chunks_are_saved_as_output() {
        let pre = [0u8; 10];
        let mut post = pre;
        post[5] = 1;
        post[9] = 2;
        assert_eq!(changed_chunks(&pre, &post, 4), vec![(4, 4), (8, 2)]);
        assert_eq!(changed_chunks(&pre, &pre, 4), vec![]);
    }

    // Catches: another module's globals kept (a global the saved module cannot hold), or
    // argument regions dropped.
    #[test]
    fn the_saved_regions_are_all_but_other_modules_globals() {
        let b = testdata::bytes("cuda-globals");
        let cap = testdata::parse(&b);
        let module = cap.dispatch.module_id;
        let all: Vec<u32> = kept_regions(&cap, module)
            .iter()
            .map(|r| r.region_id)
            .collect();
        assert_eq!(all.len(), cap.regions.len());
        let none: Vec<u32> = kept_regions(&cap, module + 100)
            .iter()
            .map(|r| r.region_id)
            .collect();
        let globals = cap
            .regions
            .iter()
            .filter(|r| r.role == RegionRole::Global)
            .count();
        assert!(globals > 0);
        assert_eq!(none.len(), cap.regions.len() - globals);
        assert_eq!(step_modules(&cap, &cap.dispatch)[0].module_id, module);
    }

    // Catches: a saved step that does not parse as a single capture (a range's events
    // left in, a region without its input), the wrong dispatch, or output chunks that are
    // not the ones the step changed.
    #[test]
    fn a_saved_step_reads_back_as_a_single_capture_of_that_step() {
        let b = testdata::bytes("cuda-saxpy");
        let mut cap = testdata::parse(&b);
        let mut second = cap.dispatch.clone();
        second.grid = [7, 1, 1];
        cap.steps = vec![
            kreplay_format::Step::kernel(0, cap.dispatch.clone()),
            kreplay_format::Step::kernel(0, second.clone()),
        ];
        let regions = kept_regions(&cap, second.module_id);
        let pre: Vec<Vec<u8>> = regions
            .iter()
            .map(|r| cap.read_region(r.region_id).expect("region"))
            .collect();
        let mut post = pre.clone();
        let y = regions.iter().position(|r| r.region_id == 1).expect("y");
        post[y][5 << 20] ^= 0xff;
        let memory = StepMemory {
            regions: &regions,
            pre: &pre,
            post: &post,
        };
        let mut w = CaptureWriter::new(
            std::io::Cursor::new(Vec::new()),
            step_uuid(cap.header.uuid, 1),
            WriterOptions::default(),
        )
        .expect("writer");
        write_step_capture(&mut w, &cap, 1, &second, &memory, "gpu").expect("written");
        let bytes = w.finish().expect("finished").into_inner();
        let saved = Capture::parse(&bytes).expect("parses");
        assert!(!saved.is_range());
        assert_eq!(saved.dispatch, second);
        assert_eq!(saved.regions.len(), regions.len());
        let posts: Vec<u64> = saved
            .chunks(1, MemoryState::Post)
            .map(|c| c.offset)
            .collect();
        assert_eq!(posts, vec![4 << 20]);
        assert_eq!(saved.read_region(0).expect("x"), pre[0]);
        assert!(saved
            .annotations
            .iter()
            .any(|a| a.key == SAVED_STEP_ANNOTATION && a.value.contains("step 1")));
        assert_ne!(saved.header.uuid, cap.header.uuid);
    }
}
