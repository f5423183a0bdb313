//! A range capture's steps made live: each kernel step's kernel (from its own module, loaded
//! once, or from the `--module` variant where it defines that kernel), each copy and fill
//! at the addresses this replay placed its memory at, and the stream and event plan.

use std::collections::HashMap;

use kreplay_cuda::{Function, Module, PinnedBuffer};
use kreplay_engine::plan::LaunchPlan;
use kreplay_engine::relocate::Relocation;
use kreplay_engine::step_plan::{timed_steps, StepPlan};
use kreplay_engine::steps::{RangeSteps, StepAction};
use kreplay_engine::{CodeSource, PlayError, RegionPlacement};
use kreplay_format::{Capture, Dispatch, MemoryKind, Op, Region};

use crate::kernels::{find_kernel, restore_globals, step_kernel};

/// A `--module` variant loaded for a range: its kernels replace the range's of the same name.
pub(crate) struct Variant {
    pub module: Module,
    pub image: Vec<u8>,
}

impl Variant {
    /// Whether the variant defines `kernel`.
    pub fn defines(&self, kernel: &str) -> bool {
        self.module.function(kernel).is_ok()
    }
}

/// The range's steps and whether the variant replaced any of them.
pub(crate) struct LoadedRange {
    pub steps: RangeSteps<Function>,
    pub used_variant: bool,
}

/// Where a recorded device span `[addr, addr + bytes)` lives in this replay: in the placement
/// of the region holding it, when the span fits the bytes usable there (a module global can
/// be smaller in the loaded module than in the file); `None` otherwise.
pub(crate) fn place_span(
    regions: &[Region],
    placements: &[RegionPlacement],
    addr: u64,
    bytes: u64,
) -> Option<u64> {
    let r = regions.iter().find(|r| {
        r.kind != MemoryKind::CudaArray && addr >= r.address && addr - r.address < r.size.max(1)
    })?;
    let p = placements.iter().find(|p| p.region_id == r.region_id)?;
    let offset = addr - r.address;
    (offset.checked_add(bytes)? <= p.usable).then_some(p.base + offset)
}

/// Loads the range's steps. `first` is the first kernel step's module (its globals already
/// restored); the globals of every other module are restored here and their placements
/// added to `placements`. The first kernel step is the replayer's own kernel
/// (`StepAction::Primary`).
pub(crate) fn load_range(
    cap: &Capture<'_>,
    first: &Module,
    variant: Option<&Variant>,
    relocation: Option<&Relocation>,
    placements: &mut Vec<RegionPlacement>,
) -> Result<LoadedRange, PlayError> {
    let modules = load_step_modules(cap, relocation, placements)?;
    if let Some(v) = variant {
        // The variant's globals hold what the modules whose kernels it replaces held; they
        // are written once here, not restored between passes (placements stay the captured
        // modules').
        for id in replaced_modules(cap, v) {
            restore_globals(cap, &v.module, relocation, Some(id))?;
        }
    }
    let primary = cap.steps.iter().position(|s| s.dispatch().is_some());
    let mut used_variant = false;
    let mut actions = Vec::with_capacity(cap.steps.len());
    for (i, step) in cap.steps.iter().enumerate() {
        let action = match step.dispatch() {
            Some(_) if Some(i) == primary => StepAction::Primary,
            Some(d) => {
                let module = modules.get(&d.module_id).unwrap_or(first);
                let (k, from_variant) = kernel_action(cap, d, module, variant, relocation)?;
                used_variant |= from_variant;
                k
            }
            None => match &step.action {
                kreplay_format::Action::Op(op) => op_action(op, i, &cap.regions, placements)?,
                kreplay_format::Action::Kernel(_) => StepAction::Order,
            },
        };
        actions.push(action);
    }
    let streams = cap.range.as_ref().map_or(&[][..], |r| &r.streams[..]);
    let plan = StepPlan::new(&cap.steps, streams);
    // SAFETY: kernels over memory this session placed for the capture (as the first kernel,
    // `Replayer::new`'s contract); every copy and fill address is `place_span`'s, inside the
    // usable bytes placed for its region, which the session keeps for the replayer's life.
    let steps = unsafe { RangeSteps::new(actions, plan, &timed_steps(&cap.steps, true))? };
    Ok(LoadedRange {
        steps,
        used_variant,
    })
}

/// The modules of kernel steps other than the first kernel's module, loaded once each, their
/// globals restored (placements added).
fn load_step_modules(
    cap: &Capture<'_>,
    relocation: Option<&Relocation>,
    placements: &mut Vec<RegionPlacement>,
) -> Result<HashMap<u32, Module>, PlayError> {
    let mut loaded: HashMap<u32, Module> = HashMap::new();
    for d in cap.steps.iter().filter_map(|s| s.dispatch()) {
        if d.module_id == cap.dispatch.module_id || loaded.contains_key(&d.module_id) {
            continue;
        }
        let image = &cap
            .module(d.module_id)
            .ok_or(kreplay_engine::plan::PlanError::NoModule(d.module_id))?
            .image;
        let m = Module::load(image)?;
        placements.extend(restore_globals(cap, &m, relocation, Some(d.module_id))?);
        loaded.insert(d.module_id, m);
    }
    Ok(loaded)
}

/// The module ids of the kernel steps the variant replaces, once each.
fn replaced_modules(cap: &Capture<'_>, v: &Variant) -> Vec<u32> {
    let mut ids = Vec::new();
    for d in cap.steps.iter().filter_map(|s| s.dispatch()) {
        if !ids.contains(&d.module_id) && v.defines(&d.kernel_name) {
            ids.push(d.module_id);
        }
    }
    ids
}

/// A kernel step's kernel: from the variant when it defines the kernel, else from `module`;
/// and whether it came from the variant.
fn kernel_action(
    cap: &Capture<'_>,
    d: &Dispatch,
    module: &Module,
    variant: Option<&Variant>,
    relocation: Option<&Relocation>,
) -> Result<(StepAction<Function>, bool), PlayError> {
    let launch = LaunchPlan::of_dispatch(d)?;
    let (function, from_variant) = match variant.filter(|v| v.defines(&d.kernel_name)) {
        Some(v) => (
            find_kernel(&v.module, &v.image, d, &launch, CodeSource::Variant)?,
            true,
        ),
        None => {
            let image = &cap
                .module(d.module_id)
                .ok_or(kreplay_engine::plan::PlanError::NoModule(d.module_id))?
                .image;
            (
                find_kernel(module, image, d, &launch, CodeSource::Cubin)?,
                false,
            )
        }
    };
    let k = step_kernel(d, &launch, function, relocation)?;
    Ok((StepAction::Kernel(k), from_variant))
}

/// An op step's action, its device addresses placed in this replay (`place_span`).
fn op_action(
    op: &Op,
    index: usize,
    regions: &[Region],
    placements: &[RegionPlacement],
) -> Result<StepAction<Function>, PlayError> {
    let place = |addr: u64, bytes: u64| {
        place_span(regions, placements, addr, bytes).ok_or_else(|| {
            PlayError::Range(format!(
                "step {index} ({}) reaches {bytes} bytes at {addr:#x}, outside the memory this replay placed",
                op.kind()
            ))
        })
    };
    let size = |n: u64| {
        usize::try_from(n).map_err(|_| PlayError::Range(format!("step {index}: {n} bytes")))
    };
    Ok(match op {
        Op::CopyDeviceToDevice { dst, src, bytes } => StepAction::CopyDeviceToDevice {
            dst: place(*dst, *bytes)?,
            src: place(*src, *bytes)?,
            bytes: size(*bytes)?,
        },
        // Placed first: no page-locked memory for a span this replay cannot hold.
        Op::CopyHostToDevice { dst, host } => {
            let dst = place(*dst, host.len() as u64)?;
            let mut buf = PinnedBuffer::new(host.len())?;
            buf.as_mut_slice().copy_from_slice(host);
            StepAction::CopyHostToDevice { dst, host: buf }
        }
        Op::CopyDeviceToHost { src, received } => {
            let src = place(*src, received.len() as u64)?;
            StepAction::CopyDeviceToHost {
                src,
                into: PinnedBuffer::new(received.len())?,
                received: received.clone(),
            }
        }
        Op::Fill {
            dst,
            value,
            element_bytes,
            count,
        } => StepAction::Fill {
            dst: place(*dst, count.saturating_mul(*element_bytes as u64))?,
            value: *value,
            element_bytes: *element_bytes,
            count: size(*count)?,
        },
        Op::RecordEvent { .. } | Op::WaitEvent { .. } | Op::HostWait(_) => StepAction::Order,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use kreplay_format::RegionRole;

    fn region(region_id: u32, address: u64, size: u64, kind: MemoryKind) -> Region {
        Region {
            region_id,
            address,
            size,
            kind,
            role: RegionRole::Argument,
            chunk_size: 1 << 16,
        }
    }

    fn placement(region_id: u32, base: u64, usable: u64) -> RegionPlacement {
        RegionPlacement {
            region_id,
            base,
            usable,
        }
    }

    // Catches: an op address left at the recorded value where memory moved (a copy into
    // whatever lives there now), a span past the usable bytes let through (a global smaller
    // in the loaded module), or an array region taken as linear memory.
    #[test]
    fn op_spans_land_where_their_region_was_placed_or_nowhere() {
        let regions = [
            region(0, 0x1000, 0x100, MemoryKind::Device),
            region(1, 0x2000, 0x40, MemoryKind::Device),
            region(2, 0x3000, 0x100, MemoryKind::CudaArray),
        ];
        let placed = [
            placement(0, 0x9000, 0x100),
            placement(1, 0x7000, 0x20),
            placement(2, 0x5000, 0x100),
        ];
        assert_eq!(place_span(&regions, &placed, 0x1010, 0x10), Some(0x9010));
        assert_eq!(place_span(&regions, &placed, 0x1000, 0x100), Some(0x9000));
        assert_eq!(place_span(&regions, &placed, 0x1080, 0x81), None);
        // Region 1 holds only 0x20 bytes here.
        assert_eq!(place_span(&regions, &placed, 0x2000, 0x20), Some(0x7000));
        assert_eq!(place_span(&regions, &placed, 0x2010, 0x20), None);
        assert_eq!(place_span(&regions, &placed, 0x3000, 8), None);
        assert_eq!(place_span(&regions, &placed, 0x4000, 8), None);
        assert_eq!(place_span(&regions, &placed[..1], 0x2000, 8), None);
        assert_eq!(place_span(&regions, &placed, 0x1000, u64::MAX), None);
    }
}
