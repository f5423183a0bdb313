//! The replay plan: every decision a replay makes, computed from a capture and the options
//! without touching a GPU (so it is tested on the CPU, on the real captures in testdata).
//! The player materialises it; the GPU then only does what must run on a GPU.
//!
//! - `LaunchPlan`: the dispatch checked (every parameter inside the argument bytes), the launch
//!   attributes to pass (rebuilt, dropped or refused), function attributes to raise.
//! - `CodePlan`: which code object runs on this GPU (cubin, PTX through the JIT, a variant).
//! - `MemoryPlan`: the ranges needed at their original addresses, how they move together when
//!   they cannot have them, and whether moving is exact.
//! - `WriteSet` (`restore`): the bytes each pass restores, from the capture's post-state.

use kreplay_cuda::launch::attr;
use kreplay_format::{ptx, Capture, FormatError, LaunchApi, MemoryKind, ModuleKind, RegionRole};

use crate::attributes::{self, PlannedAttribute};
use crate::options::{CodeChoice, CodeSource, OpenOptions, Placement};
use crate::relocate;

/// A capture that cannot be replayed as asked, found before any GPU work.
#[derive(Debug, thiserror::Error)]
pub enum PlanError {
    #[error("capture is damaged: {0}")]
    Damaged(FormatError),
    #[error("the capture was recorded for sm_{captured} and holds no PTX, but device {ordinal} ({name}) is sm_{device}: replay it on an sm_{captured} GPU, or pass --module with a cubin built for sm_{device}")]
    WrongArch {
        captured: u32,
        device: u32,
        ordinal: i32,
        name: String,
    },
    #[error("--ptx: the capture holds no PTX for {0} (the application shipped none, or an older kreplay recorded it)")]
    NoPtx(String),
    #[error("the captured PTX targets sm_{ptx}, newer than {name} (sm_{device}): the JIT cannot compile it for this GPU")]
    PtxTooNew { ptx: u32, device: u32, name: String },
    #[error("the capture cannot be replayed: {}", .0.join("; "))]
    Unreplayable(Vec<String>),
    #[error("the capture holds no module {0} for its dispatch")]
    NoModule(u32),
    #[error("the capture uses launch attribute {id}, unknown to this kreplay (recorded with a newer CUDA, or the file is damaged): upgrade kreplay")]
    UnknownAttribute { id: u32 },
}

/// The GPU a plan is made for.
#[derive(Debug, Clone)]
pub struct Target {
    pub ordinal: i32,
    pub name: String,
    /// major*10+minor.
    pub arch: u32,
}

/// How the dispatch is launched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaunchPlan {
    /// (offset, size) of each parameter, all inside the argument bytes.
    pub layout: Vec<(u32, u32)>,
    /// Attributes in the order they are passed (event attributes get a fresh event).
    pub attributes: Vec<PlannedAttribute>,
    /// What was rebuilt or dropped, in words.
    pub notes: Vec<String>,
    /// Raise the dynamic shared memory limit to this (over the 48 KiB default).
    pub max_dynamic_shared: Option<u32>,
    /// The cluster is larger than the portable 8 blocks.
    pub non_portable_cluster: bool,
}

const DEFAULT_DYNAMIC_SHARED: u32 = 48 * 1024;
const PORTABLE_CLUSTER_BLOCKS: u32 = 8;

fn plain(id: u32, value: [u8; 64]) -> PlannedAttribute {
    PlannedAttribute {
        id,
        value,
        needs_event: false,
    }
}

impl LaunchPlan {
    /// A salvaged capture that lost what the dispatch needs is refused here, before any GPU
    /// work (`kreplay_format::replay_blockers`). A capture by touched pages is not: the
    /// session fills its absent pages (`kreplay_format::absent::ABSENT_FILL`).
    pub fn new(cap: &Capture<'_>) -> Result<LaunchPlan, PlanError> {
        let why = kreplay_format::absent::unreplayable(cap);
        if !why.is_empty() {
            return Err(PlanError::Unreplayable(why));
        }
        Self::of_dispatch(&cap.dispatch)
    }

    /// The plan of a dispatch as the recorder holds it (in-process replay) or a file does.
    pub fn of_dispatch(d: &kreplay_format::Dispatch) -> Result<LaunchPlan, PlanError> {
        if let Some(p) = d
            .params
            .iter()
            .find(|p| p.offset as u64 + p.size as u64 > d.arg_bytes.len() as u64)
        {
            return Err(PlanError::Damaged(FormatError::Inconsistent {
                offset: 0,
                what: format!(
                    "parameter at offset {} ({} bytes) lies outside the {} argument bytes",
                    p.offset,
                    p.size,
                    d.arg_bytes.len()
                ),
            }));
        }
        let planned =
            attributes::plan(&d.attributes).map_err(|id| PlanError::UnknownAttribute { id })?;
        let mut attributes = planned.attributes;
        // Launches made through the older entry points carry their cluster and cooperative
        // flag outside the attribute list: passed as attributes here, as cuLaunchKernelEx
        // takes them.
        if d.cluster != [0, 0, 0] && !attributes.iter().any(|a| a.id == attr::CLUSTER_DIMENSION) {
            let mut v = [0u8; 64];
            for (i, c) in d.cluster.iter().enumerate() {
                v[i * 4..i * 4 + 4].copy_from_slice(&c.max(&1).to_le_bytes());
            }
            attributes.push(plain(attr::CLUSTER_DIMENSION, v));
        }
        if d.api == LaunchApi::LaunchCooperativeKernel
            && !attributes.iter().any(|a| a.id == attr::COOPERATIVE)
        {
            let mut v = [0u8; 64];
            v[..4].copy_from_slice(&1i32.to_le_bytes());
            attributes.push(plain(attr::COOPERATIVE, v));
        }
        let cluster_blocks: u32 = d
            .cluster
            .iter()
            .map(|&c| c.max(1))
            .fold(1u32, |a, c| a.saturating_mul(c));
        Ok(LaunchPlan {
            layout: d.params.iter().map(|p| (p.offset, p.size)).collect(),
            attributes,
            notes: planned.notes,
            max_dynamic_shared: (d.dynamic_shared_bytes > DEFAULT_DYNAMIC_SHARED)
                .then_some(d.dynamic_shared_bytes),
            non_portable_cluster: cluster_blocks > PORTABLE_CLUSTER_BLOCKS,
        })
    }
}

/// The driver's launch configuration of a planned dispatch: geometry, dynamic shared memory,
/// attributes (an attribute naming an event gets a fresh one).
pub fn launch_config(
    d: &kreplay_format::Dispatch,
    plan: &LaunchPlan,
) -> Result<kreplay_cuda::LaunchConfig, kreplay_cuda::CudaError> {
    let mut cfg = kreplay_cuda::LaunchConfig::new(d.grid, d.block, d.dynamic_shared_bytes);
    for a in &plan.attributes {
        if a.needs_event {
            cfg.event_attribute(a.id, &a.value, kreplay_cuda::Event::new()?)?;
        } else {
            cfg.attribute(a.id, &a.value)?;
        }
    }
    Ok(cfg)
}

/// Which code object runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CodePlan {
    pub source: CodeSource,
    pub image: Vec<u8>,
}

impl CodePlan {
    /// The `--module` variant, the captured cubin, or the captured PTX through the driver's
    /// JIT (on another architecture, or when asked with `--ptx`).
    pub fn choose(
        cap: &Capture<'_>,
        choice: &CodeChoice,
        target: &Target,
    ) -> Result<CodePlan, PlanError> {
        let (ptx_asked, variant) = match choice {
            CodeChoice::Variant(img) => (false, Some(img)),
            CodeChoice::Ptx => (true, None),
            CodeChoice::Captured => (false, None),
        };
        if let Some(img) = variant {
            return Ok(CodePlan {
                source: CodeSource::Variant,
                image: img.clone(),
            });
        }
        let d = &cap.dispatch;
        let m = cap
            .module(d.module_id)
            .ok_or(PlanError::NoModule(d.module_id))?;
        let ptx = cap
            .modules
            .iter()
            .find(|p| p.kind == ModuleKind::Ptx && ptx::defines_entry(&p.image, &d.kernel_name));
        let wrong_arch = m.kind == ModuleKind::Cubin && m.arch != 0 && m.arch != target.arch;
        if !(ptx_asked || wrong_arch) {
            return Ok(CodePlan {
                source: CodeSource::Cubin,
                image: m.image.clone(),
            });
        }
        match ptx {
            Some(p) if p.arch <= target.arch || p.arch == 0 => Ok(CodePlan {
                source: CodeSource::PtxJit,
                image: p.image.clone(),
            }),
            Some(p) => Err(PlanError::PtxTooNew {
                ptx: p.arch,
                device: target.arch,
                name: target.name.clone(),
            }),
            None if wrong_arch => Err(PlanError::WrongArch {
                captured: m.arch,
                device: target.arch,
                ordinal: target.ordinal,
                name: target.name.clone(),
            }),
            None => Err(PlanError::NoPtx(d.kernel_name.clone())),
        }
    }
}

/// Where memory goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryPlan {
    pub placement: Placement,
    /// (address, size) of every device region needed at its original address (module
    /// globals are placed by the driver, in the loaded module).
    pub fixed_ranges: Vec<(u64, u64)>,
    /// (address, size) of every host-mapped region: page-locked host memory at that address.
    pub host_ranges: Vec<(u64, u64)>,
    /// When moved: ranges that touch or overlap move together, so a buffer spanning them
    /// (VMM pieces, sub-allocations) stays contiguous. (old base, size), sorted.
    pub move_groups: Vec<(u64, u64)>,
    /// The same for the host-mapped ranges (moved into page-locked host memory).
    pub host_move_groups: Vec<(u64, u64)>,
    /// Why moving would not be exact (a pointer kreplay cannot rewrite), if it would not.
    pub relocation_blocker: Option<String>,
}

/// The device address ranges a capture needs at their original addresses.
pub fn fixed_ranges(cap: &Capture<'_>) -> Vec<(u64, u64)> {
    cap.regions
        .iter()
        .filter(|r| {
            r.role != RegionRole::Global
                && !matches!(r.kind, MemoryKind::HostMapped | MemoryKind::CudaArray)
        })
        .map(|r| (r.address, r.size))
        .collect()
}

/// The host-mapped ranges of a capture (CUDA arrays have no address: the player gives their
/// texels a device buffer of their own).
pub fn host_ranges(cap: &Capture<'_>) -> Vec<(u64, u64)> {
    cap.regions
        .iter()
        .filter(|r| r.kind == MemoryKind::HostMapped)
        .map(|r| (r.address, r.size))
        .collect()
}

/// Ranges that touch or overlap, merged: (base, size), sorted by base.
pub fn move_groups(ranges: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut sorted = ranges.to_vec();
    sorted.sort_unstable();
    let mut groups: Vec<(u64, u64)> = Vec::new();
    for (addr, size) in sorted {
        let end = addr.saturating_add(size);
        match groups.last_mut() {
            Some(g) if addr <= g.0 + g.1 => g.1 = g.1.max(end - g.0),
            _ => groups.push((addr, end - addr)),
        }
    }
    groups
}

impl MemoryPlan {
    pub fn new(cap: &Capture<'_>, placement: Placement) -> MemoryPlan {
        let fixed = fixed_ranges(cap);
        let host = host_ranges(cap);
        MemoryPlan {
            placement,
            move_groups: move_groups(&fixed),
            fixed_ranges: fixed,
            host_move_groups: move_groups(&host),
            host_ranges: host,
            relocation_blocker: relocate::blocker(cap),
        }
    }
}

/// Everything decided before the GPU is touched.
#[derive(Debug, Clone)]
pub struct ReplayPlan {
    pub launch: LaunchPlan,
    pub code: CodePlan,
    pub memory: MemoryPlan,
}

impl ReplayPlan {
    pub fn new(
        cap: &Capture<'_>,
        opts: &OpenOptions,
        target: &Target,
    ) -> Result<ReplayPlan, PlanError> {
        Ok(ReplayPlan {
            launch: LaunchPlan::new(cap)?,
            code: CodePlan::choose(cap, &opts.code, target)?,
            memory: MemoryPlan::new(cap, opts.placement),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testdata::capture;

    fn h200() -> Target {
        Target {
            ordinal: 0,
            name: "NVIDIA H200".into(),
            arch: 90,
        }
    }

    #[test]
    fn the_captured_cubin_runs_on_its_own_architecture() {
        capture("cuda-saxpy", |cap| {
            let p = ReplayPlan::new(cap, &OpenOptions::default(), &h200()).unwrap();
            assert_eq!(p.code.source, CodeSource::Cubin);
            assert_eq!(p.launch.layout.len(), cap.dispatch.params.len());
            assert_eq!(p.launch.max_dynamic_shared, None);
            assert!(!p.launch.non_portable_cluster);
            let globals = cap.regions.iter().filter(|r| r.role == RegionRole::Global);
            assert_eq!(
                p.memory.fixed_ranges.len() + globals.count(),
                cap.regions.len()
            );
            assert!(p.memory.relocation_blocker.is_none());
        });
    }

    /// The capture with the kernel's PTX (targeting sm_`arch`) added, as the recorder stores it.
    fn with_ptx<'a>(cap: &Capture<'a>, arch: u32) -> Capture<'a> {
        let mut c = cap.clone();
        let text = format!(
            ".version 8.0\n.target sm_{arch}\n.address_size 64\n.visible .entry {}(\n)\n{{\nret;\n}}\n",
            c.dispatch.kernel_name
        );
        c.modules.push(kreplay_format::ModuleImage {
            module_id: 99,
            kind: ModuleKind::Ptx,
            arch,
            image: text.into_bytes(),
        });
        c
    }

    #[test]
    fn another_architecture_takes_the_ptx_or_is_refused() {
        capture("cuda-saxpy", |cap| {
            let cap = &with_ptx(cap, 90);
            let sm100 = Target {
                arch: 100,
                name: "B200".into(),
                ..h200()
            };
            let p = CodePlan::choose(cap, &CodeChoice::Captured, &sm100).unwrap();
            assert_eq!(p.source, CodeSource::PtxJit);
            let older = Target {
                arch: 80,
                name: "A100".into(),
                ..h200()
            };
            // The PTX targets sm_90: too new for an sm_80 JIT.
            match CodePlan::choose(cap, &CodeChoice::Captured, &older) {
                Err(PlanError::PtxTooNew { ptx, device, .. }) => {
                    assert_eq!((ptx, device), (90, 80))
                }
                other => panic!("{other:?}"),
            }
            let p = CodePlan::choose(cap, &CodeChoice::Ptx, &h200()).unwrap();
            assert_eq!(p.source, CodeSource::PtxJit);
            let v = CodePlan::choose(cap, &CodeChoice::Variant(b"x".to_vec()), &older).unwrap();
            assert_eq!((v.source, v.image), (CodeSource::Variant, b"x".to_vec()));
        });
        // A capture without PTX (driver API, cubin only) on another GPU says so.
        capture("driver-extra", |cap| {
            let sm100 = Target {
                arch: 100,
                ..h200()
            };
            assert!(matches!(
                CodePlan::choose(cap, &CodeChoice::Captured, &sm100),
                Err(PlanError::WrongArch {
                    captured: 90,
                    device: 100,
                    ..
                })
            ));
            assert!(matches!(
                CodePlan::choose(cap, &CodeChoice::Ptx, &h200()),
                Err(PlanError::NoPtx(_))
            ));
        });
    }

    #[test]
    fn cluster_and_cooperative_launches_become_attributes() {
        capture("cuda-cluster", |cap| {
            let p = LaunchPlan::new(cap).unwrap();
            let cluster = p
                .attributes
                .iter()
                .find(|a| a.id == attr::CLUSTER_DIMENSION)
                .expect("cluster attribute");
            let dims: Vec<u32> = (0..3)
                .map(|i| u32::from_le_bytes(cluster.value[i * 4..i * 4 + 4].try_into().unwrap()))
                .collect();
            assert_eq!(
                dims,
                cap.dispatch
                    .cluster
                    .iter()
                    .map(|&c| c.max(1))
                    .collect::<Vec<_>>()
            );
        });
        capture("cuda-coop", |cap| {
            let p = LaunchPlan::new(cap).unwrap();
            let n = p
                .attributes
                .iter()
                .filter(|a| a.id == attr::COOPERATIVE)
                .count();
            assert_eq!(n, 1, "{:?}", p.attributes);
        });
    }

    #[test]
    fn a_salvaged_capture_whose_argument_memory_was_lost_is_refused_before_the_gpu() {
        capture("cuda-saxpy", |cap| {
            // As salvage leaves it when x's chunks were lost: region 0 dropped and recorded so.
            let mut lost = cap.clone();
            let x = lost.regions.remove(0);
            lost.salvage = Some(kreplay_format::SalvageRecord {
                dropped_regions: vec![x],
                ..Default::default()
            });
            let e = LaunchPlan::new(&lost).unwrap_err();
            assert!(matches!(e, PlanError::Unreplayable(_)), "{e}");
            assert!(e.to_string().contains("argument word at byte 8"), "{e}");
            assert!(e.to_string().contains("region 0"), "{e}");
            // The same record without the loss replays.
            let mut fine = cap.clone();
            fine.salvage = Some(kreplay_format::SalvageRecord::default());
            assert!(LaunchPlan::new(&fine).is_ok());
        });
    }

    #[test]
    fn a_capture_by_touched_pages_is_planned_like_any_other() {
        capture("cuda-saxpy", |cap| {
            // Region 0 as a recorder of touched pages leaves it: its first page present.
            let mut touched = cap.clone();
            let r = touched.regions[0].clone();
            touched.region_extents.insert(
                r.region_id,
                kreplay_format::RegionExtents {
                    region_id: r.region_id,
                    page_size: 4096,
                    present: vec![(0, 4096)],
                },
            );
            // Its absent pages are the session's to fill: the plan takes it as it is.
            assert!(LaunchPlan::new(&touched).is_ok());
            assert!(LaunchPlan::new(cap).is_ok());
        });
    }

    #[test]
    fn a_parameter_past_the_argument_bytes_is_refused_before_the_gpu() {
        capture("cuda-saxpy", |cap| {
            let mut cap = cap.clone();
            cap.dispatch.arg_bytes.truncate(4);
            let e = LaunchPlan::new(&cap).unwrap_err();
            assert!(e.to_string().starts_with("capture is damaged:"), "{e}");
            assert!(e.to_string().contains("argument bytes"), "{e}");
        });
    }

    #[test]
    fn a_graph_node_capture_plans_like_any_other() {
        capture("graph-node", |cap| {
            let p = ReplayPlan::new(cap, &OpenOptions::default(), &h200()).unwrap();
            assert_eq!(p.code.source, CodeSource::Cubin);
            assert!(p.launch.attributes.is_empty());
            assert_eq!(p.launch.layout, vec![(0, 8), (8, 8), (16, 4)]);
            assert!(cap.graph.is_some());
        });
    }

    #[test]
    fn arrays_and_host_memory_are_not_mapped_as_device_memory() {
        capture("surface", |cap| {
            let p = MemoryPlan::new(cap, Placement::Original);
            let arrays: Vec<u32> = cap.textures.arrays.iter().map(|a| a.region_id).collect();
            assert_eq!(arrays.len(), 2);
            assert!(p.fixed_ranges.iter().all(|&(a, _)| a != 0), "{p:?}");
            assert!(p.host_ranges.is_empty());
            // Only the surface's array is written: only it is synchronised around passes.
            let written: Vec<bool> = arrays
                .iter()
                .map(|&r| crate::arrays::written(cap, r))
                .collect();
            assert_eq!(written, vec![false, true]);
        });
        capture("host-mapped", |cap| {
            let p = MemoryPlan::new(cap, Placement::Original);
            assert_eq!(p.host_ranges.len(), 2);
            // The two 1 MiB pinned buffers are adjacent: they move together.
            let moved: u64 = p.host_move_groups.iter().map(|g| g.1).sum();
            assert_eq!(moved, p.host_ranges.iter().map(|r| r.1).sum::<u64>());
            assert_eq!(p.fixed_ranges.len(), 1, "the device buffer only");
            for (a, _) in &p.host_ranges {
                assert!(!p.fixed_ranges.iter().any(|(f, _)| f == a));
            }
        });
    }

    #[test]
    fn touching_ranges_move_together() {
        assert_eq!(
            move_groups(&[
                (0x3000, 0x100),
                (0x1000, 0x1000),
                (0x2000, 0x800),
                (0x1800, 0x10)
            ]),
            vec![(0x1000, 0x1800), (0x3000, 0x100)]
        );
        assert_eq!(move_groups(&[]), vec![]);
        // A range inside another adds nothing.
        assert_eq!(
            move_groups(&[(0x1000, 0x1000), (0x1100, 0x10)]),
            vec![(0x1000, 0x1000)]
        );
    }
}
