//! The description of a capture shown by `kreplay info` and written by `kreplay extract`.
//! Its JSON form is a stable interface, documented in `docs/FORMAT.md` ("info --json").

use kreplay_format::{Capture, LaunchApi, MemoryKind, ModuleKind, RegionRole};
pub use kreplay_protocol::config::demangle;
use serde::Serialize;

#[derive(Serialize)]
pub struct Description {
    pub file: String,
    pub format_version: String,
    pub file_bytes: u64,
    pub kernel: Kernel,
    pub launch: Launch,
    pub params: Vec<ParamDesc>,
    pub regions: Vec<RegionDesc>,
    pub modules: Vec<ModuleDesc>,
    pub device: Option<DeviceDesc>,
    pub original_ns: Option<u64>,
    /// How the recorder measured `original_ns` (absent in older captures).
    pub timing: Option<kreplay_format::TimingConditions>,
    /// Where the dispatch came from when it ran as a node of a CUDA graph.
    pub graph: Option<kreplay_format::GraphOrigin>,
    /// Words in captured memory that point into captured regions (rewritten on relocation).
    pub pointer_slots: usize,
    /// Texture and surface objects the arguments hold.
    pub textures: Vec<TextureDesc>,
    pub recorder: Option<Recorder>,
    /// What the post-dispatch state holds: `recorded` (the application's output), `dropped`
    /// or `redacted` (by `kreplay pack`: only where the kernel writes), `partial` (salvage
    /// lost some of it: see the regions' `unknown_output_bytes`).
    pub reference: kreplay_format::Reference,
    /// What `kreplay verify --salvage` lost (null for a capture it did not rewrite).
    pub salvage: Option<SalvageDesc>,
    /// What `pack --redact` replaced and kept, field by field (null when not redacted, or
    /// redacted by a kreplay that did not list it).
    pub redaction: Option<Vec<kreplay_format::RedactedField>>,
    pub annotations: Vec<(String, String)>,
    /// A range capture's kernel steps in order (left out for a single dispatch, whose JSON
    /// is as before).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub steps: Vec<StepDesc>,
    /// What a range capture is as a whole (left out for a single dispatch).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub range: Option<RangeDesc>,
}

/// A range capture as a whole.
#[derive(Serialize)]
pub struct RangeDesc {
    /// How it was selected (`launch-range 3:5`, `nvtx-range layer.2 #1`, ...; `launch-range`
    /// for a 1.2 capture, which does not say).
    pub origin: String,
    /// Process launch indices of its first and last kernel steps, when known.
    pub launches: Option<(u64, u64)>,
    pub kernel_steps: usize,
    /// Streams the steps were issued on.
    pub streams: usize,
    /// In-app duration of the whole range (the sum of the kernel steps' where not measured).
    pub original_ns: Option<u64>,
    /// Whether the capture holds a digest of its memory after each step (so a diverging
    /// replay can name the step).
    pub step_digests: bool,
}

fn range_desc(cap: &Capture<'_>) -> Option<RangeDesc> {
    if !cap.is_range() {
        return None;
    }
    let info = cap.range.clone().unwrap_or_default();
    let mut streams: Vec<u64> = cap.steps.iter().map(|s| s.stream).collect();
    streams.sort_unstable();
    streams.dedup();
    Some(RangeDesc {
        origin: if info.origin.is_empty() {
            "launch-range".into()
        } else {
            info.origin
        },
        launches: info.launches,
        kernel_steps: cap.steps.iter().filter(|s| s.dispatch().is_some()).count(),
        streams: streams.len(),
        original_ns: crate::range::original_ns(cap),
        step_digests: !info.digests.is_empty() && info.digests.iter().all(Option::is_some),
    })
}

/// One step of a range capture.
#[derive(Serialize)]
pub struct StepDesc {
    /// 0-based, in issue order.
    pub index: usize,
    /// `kernel`, `copy-dtod`, `copy-htod`, `copy-dtoh`, `fill`, `event-record`, `event-wait`
    /// or `host-wait`.
    pub kind: &'static str,
    /// The kernel of a kernel step (null otherwise).
    pub kernel: Option<Kernel>,
    pub grid: Option<[u32; 3]>,
    pub block: Option<[u32; 3]>,
    /// Bytes a copy or fill step moves or sets (null for other steps).
    pub bytes: Option<u64>,
    /// The application's event handle value an event step or event wait names.
    pub event: Option<u64>,
    /// The application's stream handle value it was issued on.
    pub stream: u64,
    /// In-app duration (kernel steps).
    pub original_ns: Option<u64>,
}

fn step_descs(cap: &Capture<'_>) -> Vec<StepDesc> {
    use kreplay_format::{Action, HostWait, Op};
    cap.steps
        .iter()
        .enumerate()
        .map(|(index, s)| {
            let mut desc = StepDesc {
                index,
                kind: s.kind(),
                kernel: None,
                grid: None,
                block: None,
                bytes: None,
                event: None,
                stream: s.stream,
                original_ns: None,
            };
            match &s.action {
                Action::Kernel(d) => {
                    desc.kernel = Some(Kernel {
                        name: demangle(&d.kernel_name),
                        mangled: d.kernel_name.clone(),
                    });
                    desc.grid = Some(d.grid);
                    desc.block = Some(d.block);
                    desc.original_ns = d.original_duration_ns;
                }
                Action::Op(
                    Op::RecordEvent { event }
                    | Op::WaitEvent { event }
                    | Op::HostWait(HostWait::Event(event)),
                ) => desc.event = Some(*event),
                Action::Op(Op::HostWait(_)) => {}
                Action::Op(op) => desc.bytes = Some(op.bytes()),
            }
            desc
        })
        .collect()
}

#[derive(Serialize)]
pub struct SalvageDesc {
    /// Byte of the damaged file from which everything was lost (a cut), if any.
    pub lost_from: Option<u64>,
    /// Damaged events skipped: (byte offset in the damaged file, event kind).
    pub lost_events: Vec<(u64, String)>,
    /// Regions dropped because their memory was lost.
    pub dropped_regions: Vec<u32>,
    /// Chunks whose output is unknown (determinism-only for `play --verify`).
    pub unknown_output_chunks: usize,
    pub textures_dropped: bool,
    /// Why the capture cannot be replayed; empty when it can.
    pub replay_blockers: Vec<String>,
}

#[derive(Serialize)]
pub struct TextureDesc {
    /// The handle in the recorded process.
    pub handle: u64,
    /// `texture` or `surface`.
    pub kind: &'static str,
    /// What it views, in words.
    pub resource: String,
    /// The region holding the texels (arrays) or the memory viewed (linear, pitch 2D).
    pub region: Option<u32>,
    /// Argument offsets holding the handle.
    pub arg_offsets: Vec<u32>,
    /// (region, offset) of words in captured memory holding the handle (handle tables).
    pub memory_words: Vec<(u32, u64)>,
}

/// A `CUarray_format` in words.
fn array_format(format: u32) -> String {
    match format {
        0x01 => "u8".into(),
        0x02 => "u16".into(),
        0x03 => "u32".into(),
        0x08 => "i8".into(),
        0x09 => "i16".into(),
        0x0a => "i32".into(),
        0x10 => "f16".into(),
        0x20 => "f32".into(),
        f => format!("format {f:#x}"),
    }
}

fn texture_desc(cap: &Capture<'_>, o: &kreplay_format::TextureObject) -> TextureDesc {
    use kreplay_format::{TextureResource, ARRAY_CUBEMAP, ARRAY_LAYERED};
    let region_at = |addr: u64| {
        cap.regions
            .iter()
            .find(|r| addr >= r.address && addr - r.address < r.size.max(1))
            .map(|r| r.region_id)
    };
    let (resource, region) = match &o.resource {
        TextureResource::Array { index } | TextureResource::Mipmapped { index } => {
            match cap.textures.arrays.get(*index as usize) {
                Some(a) => {
                    let shape = if a.flags & ARRAY_CUBEMAP != 0 {
                        format!("cubemap {}x{} x{} faces", a.width, a.height, a.depth)
                    } else if a.flags & ARRAY_LAYERED != 0 {
                        format!(
                            "layered {}x{} x{} layers",
                            a.width,
                            a.height.max(1),
                            a.depth
                        )
                    } else if a.depth > 0 {
                        format!("3D {}x{}x{}", a.width, a.height, a.depth)
                    } else if a.height > 0 {
                        format!("2D {}x{}", a.width, a.height)
                    } else {
                        format!("1D {}", a.width)
                    };
                    let mips = if a.levels > 0 {
                        format!(", {} mip levels", a.levels)
                    } else {
                        String::new()
                    };
                    (
                        format!(
                            "array {shape} {} x{}{mips}",
                            array_format(a.format),
                            a.channels
                        ),
                        Some(a.region_id),
                    )
                }
                None => (format!("array {index} (missing)"), None),
            }
        }
        TextureResource::Linear {
            address,
            format,
            channels,
            size,
        } => (
            format!(
                "linear {} x{} at {address:#x}, {}",
                array_format(*format),
                channels,
                bytes(*size)
            ),
            region_at(*address),
        ),
        TextureResource::Pitch2D {
            address,
            format,
            channels,
            width,
            height,
            pitch,
        } => (
            format!(
                "pitch 2D {width}x{height} {} x{channels} at {address:#x}, pitch {pitch} B",
                array_format(*format)
            ),
            region_at(*address),
        ),
    };
    TextureDesc {
        handle: o.handle,
        kind: if o.surface { "surface" } else { "texture" },
        resource,
        region,
        arg_offsets: o.arg_words.clone(),
        memory_words: o.memory_words.clone(),
    }
}

pub use crate::kernel_name::Kernel;

#[derive(Serialize)]
pub struct Launch {
    pub api: &'static str,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub cluster: [u32; 3],
    pub dynamic_shared_bytes: u32,
    pub attributes: Vec<u32>,
}

#[derive(Serialize)]
pub struct ParamDesc {
    pub index: usize,
    pub offset: u32,
    pub size: u32,
    pub pointer: bool,
    /// Little-endian bytes as hex.
    pub value_hex: String,
    /// The C++ type, from the demangled signature (absent for kernels without one).
    pub r#type: Option<String>,
    /// The value read as that type (absent for structs and unknown types: see `value_hex`).
    pub value: Option<String>,
    /// For pointers: the region they point into.
    pub region: Option<u32>,
    /// For pointers: how far into that region.
    pub region_offset: Option<u64>,
}

#[derive(Serialize)]
pub struct RegionDesc {
    pub id: u32,
    pub address: u64,
    pub size: u64,
    pub stored_bytes: u64,
    pub role: &'static str,
    pub kind: &'static str,
    pub written: bool,
    pub global: Option<String>,
    /// Bytes whose output salvage lost (0 unless `reference` is `partial`).
    pub unknown_output_bytes: u64,
    /// Bytes the capture holds (`size` unless captured by touched pages).
    pub present_bytes: u64,
    /// Which bytes are present, for a region captured by touched pages; none: all of them.
    pub extents: Option<ExtentsDesc>,
}

/// The extents of a region captured by touched pages (REGION_EXTENTS).
#[derive(Serialize)]
pub struct ExtentsDesc {
    /// Bytes per page of the extents.
    pub page_size: u32,
    /// (offset, length) in bytes of each present range; every other byte is absent.
    pub present: Vec<(u64, u64)>,
}

#[derive(Serialize)]
pub struct ModuleDesc {
    pub id: u32,
    pub kind: &'static str,
    pub arch: u32,
    pub size: u64,
}

#[derive(Serialize)]
pub struct DeviceDesc {
    pub name: String,
    pub compute_capability: String,
    pub uuid: String,
    pub driver_version: String,
    pub sm_count: u32,
    pub total_memory: u64,
}

#[derive(Serialize)]
pub struct Recorder {
    pub version: String,
    pub host: String,
    pub pid: u32,
    pub rank: Option<u32>,
    pub command_line: Vec<String>,
    pub time_unix_ns: u64,
    pub time: String,
    pub match_index: u64,
    pub launch_index: u64,
    pub kernel_filter: String,
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Unix nanoseconds as an ISO-8601 UTC time (civil-from-days, no time-zone data needed).
pub fn iso_time(ns: u64) -> String {
    let secs = (ns / 1_000_000_000) as i64;
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

pub fn api_name(a: LaunchApi) -> &'static str {
    match a {
        LaunchApi::LaunchKernel => "cuLaunchKernel",
        LaunchApi::LaunchKernelEx => "cuLaunchKernelEx",
        LaunchApi::LaunchCooperativeKernel => "cuLaunchCooperativeKernel",
    }
}

fn role_name(r: RegionRole) -> &'static str {
    match r {
        RegionRole::Argument => "argument",
        RegionRole::Indirect => "indirect",
        RegionRole::Global => "global",
        RegionRole::Allocation => "allocation",
    }
}

fn kind_name(k: MemoryKind) -> &'static str {
    match k {
        MemoryKind::Device => "device",
        MemoryKind::Async => "async",
        MemoryKind::Vmm => "vmm",
        MemoryKind::Managed => "managed",
        MemoryKind::ModuleGlobal => "module-global",
        MemoryKind::Unknown => "unknown",
        MemoryKind::HostMapped => "host-mapped",
        MemoryKind::CudaArray => "cuda-array",
    }
}

pub fn describe(file: &str, cap: &Capture<'_>) -> Description {
    let d = &cap.dispatch;
    let params = param_descs(cap);
    let regions = region_descs(cap);
    Description {
        file: file.to_string(),
        format_version: format!("{}.{}", cap.header.major, cap.header.minor),
        file_bytes: cap.bytes().len() as u64,
        kernel: Kernel {
            name: demangle(&d.kernel_name),
            mangled: d.kernel_name.clone(),
        },
        launch: Launch {
            api: api_name(d.api),
            grid: d.grid,
            block: d.block,
            cluster: d.cluster,
            dynamic_shared_bytes: d.dynamic_shared_bytes,
            attributes: d.attributes.iter().map(|a| a.id).collect(),
        },
        params,
        regions,
        modules: cap.modules.iter().map(module_desc).collect(),
        device: cap.device.as_ref().map(device_desc),
        original_ns: d.original_duration_ns,
        timing: cap.timing.clone(),
        graph: cap.graph.clone(),
        pointer_slots: cap.pointer_slots.len(),
        textures: cap
            .textures
            .objects
            .iter()
            .map(|o| texture_desc(cap, o))
            .collect(),
        recorder: cap.info.as_ref().map(recorder_desc),
        reference: cap.reference(),
        salvage: cap.salvage.as_ref().map(|s| salvage_desc(cap, s)),
        redaction: cap.redaction.as_ref().map(|r| r.fields.clone()),
        annotations: cap
            .annotations
            .iter()
            .map(|a| (a.key.clone(), a.value.clone()))
            .collect(),
        steps: step_descs(cap),
        range: range_desc(cap),
    }
}

/// Each kernel parameter: its bytes, its type when the signature names every parameter, and
/// the region it points into.
fn param_descs(cap: &Capture<'_>) -> Vec<ParamDesc> {
    let d = &cap.dispatch;
    // Types from the signature, when it names exactly the captured parameters.
    let types = crate::params::signature_types(&demangle(&d.kernel_name))
        .filter(|t| t.len() == d.params.len());
    d.params
        .iter()
        .enumerate()
        .map(|(i, p)| param_desc(cap, types.as_deref(), i, p))
        .collect()
}

/// One parameter; `types` is the signature's, one per parameter.
fn param_desc(
    cap: &Capture<'_>,
    types: Option<&[String]>,
    i: usize,
    p: &kreplay_format::Param,
) -> ParamDesc {
    let d = &cap.dispatch;
    let end = (p.offset as usize + p.size as usize).min(d.arg_bytes.len());
    let bytes = d.arg_bytes.get(p.offset as usize..end).unwrap_or(&[]);
    let pointer = d
        .pointer_words
        .iter()
        .any(|&w| w >= p.offset && (w as u64) < p.offset as u64 + p.size as u64);
    let target = if pointer && bytes.len() >= 8 {
        let v = u64::from_le_bytes(bytes[..8].try_into().unwrap_or([0; 8]));
        cap.regions
            .iter()
            .find(|r| v >= r.address && v - r.address < r.size.max(1))
            .map(|r| (r.region_id, v - r.address))
    } else {
        None
    };
    let ty = types.map(|t| t[i].clone());
    ParamDesc {
        index: i,
        offset: p.offset,
        size: p.size,
        pointer,
        value_hex: hex(bytes),
        value: ty
            .as_deref()
            .and_then(|t| crate::params::decode_value(t, bytes))
            // Without a signature, a word the recorder found to be a device pointer.
            .or_else(|| {
                (ty.is_none() && pointer && p.size == 8)
                    .then(|| crate::params::decode_value("void*", bytes))
                    .flatten()
            }),
        r#type: ty,
        region: target.map(|t| t.0),
        region_offset: target.map(|t| t.1),
    }
}

fn region_descs(cap: &Capture<'_>) -> Vec<RegionDesc> {
    cap.regions
        .iter()
        .map(|r| RegionDesc {
            id: r.region_id,
            address: r.address,
            size: r.size,
            stored_bytes: cap.stored_bytes(r.region_id),
            role: role_name(r.role),
            kind: kind_name(r.kind),
            written: cap.is_written(r.region_id),
            global: cap
                .globals
                .iter()
                .find(|g| g.region_id == r.region_id)
                .map(|g| g.name.clone()),
            unknown_output_bytes: cap.unknown_output_bytes(r.region_id),
            present_bytes: cap.present_bytes(r.region_id),
            extents: cap.extents(r.region_id).map(|e| ExtentsDesc {
                page_size: e.page_size,
                present: e.present.clone(),
            }),
        })
        .collect()
}

fn module_desc(m: &kreplay_format::ModuleImage) -> ModuleDesc {
    ModuleDesc {
        id: m.module_id,
        kind: match m.kind {
            ModuleKind::Cubin => "cubin",
            ModuleKind::Ptx => "ptx",
            ModuleKind::Fatbin => "fatbin",
        },
        arch: m.arch,
        size: m.image.len() as u64,
    }
}

fn device_desc(v: &kreplay_format::DeviceInfo) -> DeviceDesc {
    DeviceDesc {
        name: v.name.clone(),
        compute_capability: format!("{}.{}", v.cc_major, v.cc_minor),
        uuid: hex(&v.uuid),
        driver_version: format!(
            "{}.{}",
            v.driver_version / 1000,
            v.driver_version % 1000 / 10
        ),
        sm_count: v.sm_count,
        total_memory: v.total_memory,
    }
}

fn recorder_desc(i: &kreplay_format::CaptureInfo) -> Recorder {
    Recorder {
        version: i.tool_version.clone(),
        host: i.host.clone(),
        pid: i.pid,
        rank: i.rank,
        command_line: i.command_line.clone(),
        time_unix_ns: i.time_unix_ns,
        time: iso_time(i.time_unix_ns),
        match_index: i.match_index,
        launch_index: i.launch_index,
        kernel_filter: i.kernel_filter.clone(),
    }
}

fn salvage_desc(cap: &Capture<'_>, s: &kreplay_format::SalvageRecord) -> SalvageDesc {
    SalvageDesc {
        lost_from: s.lost_from,
        lost_events: s
            .lost_events
            .iter()
            .map(|&(off, kind)| {
                let name = kreplay_format::EventKind::from_u16(kind)
                    .map_or_else(|| format!("kind {kind}"), |k| k.name().to_string());
                (off, name)
            })
            .collect(),
        dropped_regions: s.dropped_regions.iter().map(|r| r.region_id).collect(),
        unknown_output_chunks: s.unknown_output.len(),
        textures_dropped: s.textures_dropped,
        replay_blockers: kreplay_format::replay_blockers(cap),
    }
}

pub use kreplay_format::units::bytes;

/// Where a graph node came from, in words.
pub fn graph_origin(g: &kreplay_format::GraphOrigin) -> String {
    format!(
        "kernel node {} of {} ({} nodes in all) in launch {} of executable graph {:#x}; the recorder ran the {} node(s) before it",
        g.kernel_node, g.kernel_nodes, g.nodes, g.graph_launch, g.graph_exec, g.ancestors_run
    )
}

/// How the original duration was measured, in words.
pub fn timing_conditions(t: &kreplay_format::TimingConditions) -> String {
    match &t.skipped {
        Some(why) => format!("measured without settling L2 ({why})"),
        None => format!(
            "measured after {} L2 read sweeps ({}; {}); compare with play --cache flush",
            t.settle_sweeps,
            if t.clocks_steady {
                "clocks steady"
            } else {
                "clocks had not settled"
            },
            if t.l2_empty {
                "empty L2"
            } else {
                "L2 full of clean lines: this GPU cannot discard them"
            }
        ),
    }
}

/// Human-readable duration.
pub fn duration(ns: u64) -> String {
    if ns < 10_000 {
        format!("{:.2} us", ns as f64 / 1e3)
    } else if ns < 10_000_000 {
        format!("{:.1} us", ns as f64 / 1e3)
    } else {
        format!("{:.2} ms", ns as f64 / 1e6)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_range_lists_its_steps_and_a_single_capture_has_no_steps_field() {
        let bytes = crate::testdata::bytes("cuda-saxpy");
        let mut cap = crate::testdata::parse(&bytes);
        let single = serde_json::to_value(describe("s.krr", &cap)).expect("json");
        assert!(
            single.get("steps").is_none(),
            "single captures' JSON is as before"
        );
        let mut second = cap.dispatch.clone();
        second.grid = [7, 1, 1];
        second.original_duration_ns = Some(1500);
        cap.steps = vec![
            kreplay_format::Step::kernel(0, cap.dispatch.clone()),
            kreplay_format::Step::op(
                0,
                kreplay_format::Op::Fill {
                    dst: 0,
                    value: 0,
                    element_bytes: 4,
                    count: 16,
                },
            ),
            kreplay_format::Step::kernel(0, second),
        ];
        let range = serde_json::to_value(describe("r.krr", &cap)).expect("json");
        let steps = range["steps"].as_array().expect("steps");
        assert_eq!(steps.len(), 3);
        assert_eq!(steps[2]["index"], 2);
        assert_eq!(steps[2]["kind"], "kernel");
        assert_eq!(steps[2]["grid"], serde_json::json!([7, 1, 1]));
        assert_eq!(steps[2]["original_ns"], 1500);
        assert_eq!(steps[1]["kind"], "fill");
        assert_eq!(steps[1]["bytes"], 64);
        assert!(steps[1]["kernel"].is_null());
        assert_eq!(range["range"]["kernel_steps"], 2);
        assert_eq!(range["range"]["streams"], 1);
        assert_eq!(
            steps[0]["kernel"]["mangled"],
            cap.dispatch.kernel_name.as_str()
        );
    }

    #[test]
    fn iso_time_known_values() {
        assert_eq!(iso_time(0), "1970-01-01T00:00:00Z");
        assert_eq!(iso_time(1_700_000_000_000_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(iso_time(951_782_400_000_000_000), "2000-02-29T00:00:00Z");
    }

    #[test]
    fn human_units() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(3 << 20), "3.0 MiB");
        assert_eq!(duration(4321), "4.32 us");
        assert_eq!(duration(25_000_000), "25.00 ms");
    }
}
