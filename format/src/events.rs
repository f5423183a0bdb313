//! Event kinds (the registry in `docs/FORMAT.md`) and the metadata each one carries.

use serde::{Deserialize, Serialize};

/// Event kind ids. Ids are never reused; new kinds get new ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum EventKind {
    CaptureInfo = 1,
    Device = 2,
    Module = 3,
    Dispatch = 4,
    Region = 5,
    MemoryChunk = 6,
    ModuleGlobal = 7,
    Annotation = 8,
    Index = 9,
    End = 10,
    PointerSlots = 11,
    TimingConditions = 12,
    GraphOrigin = 13,
    Textures = 14,
    /// Since 1.1.
    Salvage = 15,
    Redaction = 16,
    /// Since 1.2: one kernel step of a range capture.
    Step = 17,
    /// Since 1.3: one step of a range capture that is not a kernel launch (a copy, a fill,
    /// an event record or wait, a host wait).
    StepOp = 18,
    /// Since 1.3: what a range capture is as a whole (origin, streams, in-app time, the
    /// digest of its memory after each step).
    Range = 19,
    /// Since 1.4: which bytes of a region the capture holds (the others are absent).
    RegionExtents = 20,
}

impl EventKind {
    pub fn from_u16(v: u16) -> Option<EventKind> {
        Some(match v {
            1 => EventKind::CaptureInfo,
            2 => EventKind::Device,
            3 => EventKind::Module,
            4 => EventKind::Dispatch,
            5 => EventKind::Region,
            6 => EventKind::MemoryChunk,
            7 => EventKind::ModuleGlobal,
            8 => EventKind::Annotation,
            9 => EventKind::Index,
            10 => EventKind::End,
            11 => EventKind::PointerSlots,
            12 => EventKind::TimingConditions,
            13 => EventKind::GraphOrigin,
            14 => EventKind::Textures,
            15 => EventKind::Salvage,
            16 => EventKind::Redaction,
            17 => EventKind::Step,
            18 => EventKind::StepOp,
            19 => EventKind::Range,
            20 => EventKind::RegionExtents,
            _ => return None,
        })
    }

    /// Whether a reader that lacks this kind must refuse the file. Everything replay needs
    /// is critical; descriptive events are not.
    pub fn is_critical(self) -> bool {
        !matches!(
            self,
            EventKind::CaptureInfo
                | EventKind::Device
                | EventKind::Annotation
                | EventKind::PointerSlots
                | EventKind::TimingConditions
                | EventKind::GraphOrigin
                | EventKind::Redaction
        )
    }

    pub fn name(self) -> &'static str {
        match self {
            EventKind::CaptureInfo => "capture info",
            EventKind::Device => "device",
            EventKind::Module => "module",
            EventKind::Dispatch => "dispatch",
            EventKind::Region => "memory region",
            EventKind::MemoryChunk => "memory chunk",
            EventKind::ModuleGlobal => "module global",
            EventKind::Annotation => "annotation",
            EventKind::Index => "index",
            EventKind::End => "END",
            EventKind::PointerSlots => "pointer slots",
            EventKind::TimingConditions => "timing conditions",
            EventKind::GraphOrigin => "graph origin",
            EventKind::Textures => "textures",
            EventKind::Salvage => "salvage record",
            EventKind::Redaction => "redaction",
            EventKind::Step => "step",
            EventKind::StepOp => "step operation",
            EventKind::Range => "range",
            EventKind::RegionExtents => "region extents",
        }
    }
}

/// How the recorder measured the original duration (`Dispatch::original_duration_ns`), so a
/// reader can tell whether the kernel started with an empty L2 and steady clocks, as
/// `kreplay play --cache flush` replays it.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TimingConditions {
    /// L2 read sweeps run before the measured launch (0 when they were skipped).
    pub settle_sweeps: u32,
    /// The last two sweeps took the same time: the clocks were up.
    pub clocks_steady: bool,
    /// L2 was empty when the kernel started (false: full of clean sweep lines, where the GPU
    /// cannot discard them, or not settled at all).
    pub l2_empty: bool,
    /// Why the sweeps were skipped, when they were.
    pub skipped: Option<String>,
}

/// Where a dispatch captured from a CUDA graph came from: which launch of which executable
/// graph, which of its kernel nodes.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct GraphOrigin {
    /// 1-based count of the launches of this executable graph, this one included.
    pub graph_launch: u64,
    /// The executable graph's handle in the recorded process (identifies it among captures
    /// of the same run).
    pub graph_exec: u64,
    /// 1-based position of the node among the graph's kernel nodes (child graphs included,
    /// dependencies first).
    pub kernel_node: u32,
    pub kernel_nodes: u32,
    /// All nodes of the graph (child graphs flattened).
    pub nodes: u32,
    /// Nodes the recorder ran before the captured one (its ancestors in the graph).
    pub ancestors_run: u32,
}

/// A CUDA array (or mipmapped array) that a texture or surface object reads or writes. Its
/// texels are the region `region_id` (kind `CudaArray`): level after level (a plain array has
/// one), each level slice after slice (depth, layers, cube faces: as `cuMemcpy3D` counts them),
/// rows packed (`width x element size` bytes, no pitch).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArrayImage {
    pub region_id: u32,
    /// `CUDA_ARRAY3D_DESCRIPTOR` of level 0: height 0 for 1D, depth 0 for 1D/2D.
    pub width: u64,
    pub height: u64,
    pub depth: u64,
    /// `CUarray_format`.
    pub format: u32,
    pub channels: u32,
    /// `CUDA_ARRAY3D_*` flags (layered, cubemap, surface load/store, texture gather, ...).
    pub flags: u32,
    /// 0: a plain array; N: a mipmapped array of N levels.
    pub levels: u32,
}

/// What a texture or surface object views.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum TextureResource {
    /// `arrays[index]`, a plain array.
    Array { index: u32 },
    /// `arrays[index]`, a mipmapped array.
    Mipmapped { index: u32 },
    /// Linear device memory (captured as a region like any other).
    Linear {
        address: u64,
        format: u32,
        channels: u32,
        size: u64,
    },
    /// Pitched 2D device memory (captured as a region like any other).
    Pitch2D {
        address: u64,
        format: u32,
        channels: u32,
        width: u64,
        height: u64,
        pitch: u64,
    },
}

impl TextureResource {
    /// The device address of the linear memory it views (none for arrays).
    pub fn address(&self) -> Option<u64> {
        match *self {
            TextureResource::Linear { address, .. } | TextureResource::Pitch2D { address, .. } => {
                Some(address)
            }
            _ => None,
        }
    }
}

/// `CUDA_TEXTURE_DESC`, floats as their bits.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TextureSampling {
    pub address_mode: [u32; 3],
    pub filter_mode: u32,
    pub flags: u32,
    pub max_anisotropy: u32,
    pub mipmap_filter_mode: u32,
    pub mipmap_level_bias: u32,
    pub min_mipmap_level_clamp: u32,
    pub max_mipmap_level_clamp: u32,
    pub border_color: [u32; 4],
}

/// `CUDA_RESOURCE_VIEW_DESC`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TextureView {
    pub format: u32,
    pub width: u64,
    pub height: u64,
    pub depth: u64,
    pub first_mipmap_level: u32,
    pub last_mipmap_level: u32,
    pub first_layer: u32,
    pub last_layer: u32,
}

/// A texture or surface object the kernel's arguments hold (a 64-bit handle passed by value).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TextureObject {
    /// The handle in the recorded process.
    pub handle: u64,
    /// A surface object (`cuSurfObjectCreate`) rather than a texture object.
    pub surface: bool,
    pub resource: TextureResource,
    /// Texture objects only.
    pub sampling: Option<TextureSampling>,
    pub view: Option<TextureView>,
    /// Offsets of the argument words holding the handle (the player writes its own handle there).
    pub arg_words: Vec<u32>,
    /// (region id, offset) of words in captured memory holding the handle (a table of handles
    /// the kernel indexes); the player writes its own handle there too.
    pub memory_words: Vec<(u32, u64)>,
}

/// The texture and surface objects of the dispatch and the arrays behind them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Textures {
    pub arrays: Vec<ArrayImage>,
    pub objects: Vec<TextureObject>,
}

impl Textures {
    pub fn is_empty(&self) -> bool {
        self.arrays.is_empty() && self.objects.is_empty()
    }

    /// The device addresses of the linear memory the objects view (arrays have none).
    pub fn linear_addresses(&self) -> impl Iterator<Item = u64> + '_ {
        self.objects.iter().filter_map(|o| o.resource.address())
    }
}

/// Bytes per element of a `CUarray_format` (one channel), `None` for formats this version does
/// not know.
pub fn array_format_bytes(format: u32) -> Option<u64> {
    Some(match format {
        0x01 | 0x08 => 1,        // UNSIGNED_INT8, SIGNED_INT8
        0x02 | 0x09 | 0x10 => 2, // UNSIGNED_INT16, SIGNED_INT16, HALF
        0x03 | 0x0a | 0x20 => 4, // UNSIGNED_INT32, SIGNED_INT32, FLOAT
        _ => return None,
    })
}

impl ArrayImage {
    /// Bytes of one element (all channels).
    pub fn element_bytes(&self) -> Option<u64> {
        array_format_bytes(self.format)?.checked_mul(self.channels as u64)
    }

    /// (width, height, slices) of each level, as `cuMemcpy3D` copies it (height and slices at
    /// least 1; mip levels halve width, height and, for 3D arrays, depth).
    pub fn level_extents(&self) -> Vec<(u64, u64, u64)> {
        let layered = self.flags & (ARRAY_LAYERED | ARRAY_CUBEMAP) != 0;
        let levels = self.levels.max(1);
        (0..levels)
            .map(|l| {
                let shrink = |v: u64| (v >> l).max(1);
                let w = shrink(self.width);
                let h = if self.height == 0 {
                    1
                } else {
                    shrink(self.height)
                };
                let d = match (self.depth, layered) {
                    (0, _) => 1,
                    (d, true) => d,
                    (d, false) => shrink(d),
                };
                (w, h, d)
            })
            .collect()
    }

    /// Bytes of the packed texels, `None` on overflow or an unknown format.
    pub fn texel_bytes(&self) -> Option<u64> {
        let e = self.element_bytes()?;
        self.level_extents()
            .iter()
            .try_fold(0u64, |acc, &(w, h, d)| {
                acc.checked_add(w.checked_mul(h)?.checked_mul(d)?.checked_mul(e)?)
            })
    }
}

/// `CUDA_ARRAY3D_LAYERED`.
pub const ARRAY_LAYERED: u32 = 0x01;
/// `CUDA_ARRAY3D_CUBEMAP`.
pub const ARRAY_CUBEMAP: u32 = 0x04;
/// Most mip levels an array can have (2^31 texels wide is beyond any device).
pub const MAX_MIP_LEVELS: u32 = 32;

/// Who recorded the capture, where and when.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CaptureInfo {
    pub tool_version: String,
    pub host: String,
    pub pid: u32,
    /// MPI / torchrun rank when the recorder found one.
    pub rank: Option<u32>,
    pub command_line: Vec<String>,
    /// Capture time, nanoseconds since the Unix epoch.
    pub time_unix_ns: u64,
    /// 1-based index of this dispatch among those matching the kernel filter.
    pub match_index: u64,
    /// 1-based index of this dispatch among all launches the process made.
    pub launch_index: u64,
    /// The kernel filter the user gave.
    pub kernel_filter: String,
}

/// The GPU the capture was recorded on.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeviceInfo {
    pub name: String,
    pub ordinal: u32,
    pub cc_major: u32,
    pub cc_minor: u32,
    pub uuid: [u8; 16],
    /// As `cuDriverGetVersion` reports it (e.g. 13000).
    pub driver_version: u32,
    pub total_memory: u64,
    pub sm_count: u32,
}

/// What a module image holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ModuleKind {
    /// ELF cubin for one SM architecture.
    Cubin,
    /// PTX text, JIT-compilable on other architectures.
    Ptx,
    /// A fatbinary with several images.
    Fatbin,
}

/// A code object the application loaded.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleImage {
    pub module_id: u32,
    pub kind: ModuleKind,
    /// SM architecture as major*10+minor (90 for sm_90), 0 when unknown (PTX).
    pub arch: u32,
    pub image: Vec<u8>,
}

/// The launch API the application used.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum LaunchApi {
    LaunchKernel,
    LaunchKernelEx,
    LaunchCooperativeKernel,
}

/// One kernel parameter, as `cuFuncGetParamInfo` describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Param {
    pub offset: u32,
    pub size: u32,
}

/// A launch attribute passed to `cuLaunchKernelEx`, kept as its raw value bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchAttribute {
    /// `CUlaunchAttributeID`.
    pub id: u32,
    /// The attribute's `CUlaunchAttributeValue` bytes.
    pub value: Vec<u8>,
}

/// The captured kernel launch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dispatch {
    /// Mangled kernel name, as the module's symbol table spells it.
    pub kernel_name: String,
    pub module_id: u32,
    pub api: LaunchApi,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    /// Cluster dimensions; `[0, 0, 0]` when none were requested.
    pub cluster: [u32; 3],
    pub dynamic_shared_bytes: u32,
    pub attributes: Vec<LaunchAttribute>,
    pub params: Vec<Param>,
    /// All kernel-argument bytes, laid out at the parameter offsets.
    pub arg_bytes: Vec<u8>,
    /// Byte offsets into `arg_bytes` of 8-byte words that hold device pointers.
    pub pointer_words: Vec<u32>,
    /// Duration of the original launch in the application, measured with CUDA events
    /// recorded on the launch stream around it.
    pub original_duration_ns: Option<u64>,
}

impl Dispatch {
    /// A `cuLaunchKernel` of `kernel_name` (module 0) with no parameters, one block of one
    /// thread: where a capture made by hand (a test, a tool) starts from.
    pub fn of_kernel(kernel_name: &str) -> Dispatch {
        Dispatch {
            kernel_name: kernel_name.into(),
            module_id: 0,
            api: LaunchApi::LaunchKernel,
            grid: [1; 3],
            block: [1; 3],
            cluster: [0; 3],
            dynamic_shared_bytes: 0,
            attributes: Vec::new(),
            params: Vec::new(),
            arg_bytes: Vec::new(),
            pointer_words: Vec::new(),
            original_duration_ns: None,
        }
    }
}

/// Kind of device memory a region came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MemoryKind {
    /// `cuMemAlloc` / `cudaMalloc`.
    Device,
    /// Stream-ordered allocation (`cuMemAllocAsync`).
    Async,
    /// Virtual memory management (`cuMemCreate` + `cuMemMap`).
    Vmm,
    /// Managed (unified) memory.
    Managed,
    /// A module `__device__` / `__constant__` variable.
    ModuleGlobal,
    Unknown,
    /// The texels of a CUDA array (or mipmapped array) behind a texture or surface object,
    /// packed (see `ArrayImage`). Not addressable: the region's address is 0.
    CudaArray,
    /// Page-locked host memory the kernel reads or writes through a device pointer
    /// (`cudaHostAlloc(..., Mapped)`, `cudaHostRegister`). Under unified addressing the device
    /// address is the host address; the player maps host memory there (or moves it).
    HostMapped,
}

/// Why a region is in the capture.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RegionRole {
    /// A kernel argument points into it.
    Argument,
    /// Reached through a pointer stored in another captured region.
    Indirect,
    /// A module global variable.
    Global,
    /// Captured because `--memory all` took every live allocation.
    Allocation,
}

/// One contiguous range of device memory.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Region {
    pub region_id: u32,
    /// Device virtual address in the recorded process.
    pub address: u64,
    pub size: u64,
    pub kind: MemoryKind,
    pub role: RegionRole,
    /// Bytes per memory chunk (the last chunk may be shorter).
    pub chunk_size: u64,
}

/// A module global variable, backed by a region.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ModuleGlobal {
    pub module_id: u32,
    pub name: String,
    pub region_id: u32,
}

/// 8-byte words inside captured memory that hold device pointers into captured regions
/// (found by the recorder while following pointers). Replay rewrites them when it cannot map
/// memory at the original addresses.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PointerSlots {
    /// (region id, byte offset inside the region).
    pub slots: Vec<(u32, u64)>,
}

/// The annotation key under which the recorder says which words of the dispatch point into
/// the device heap (not captured); the player names it when the replay fails.
pub const DEVICE_HEAP_ANNOTATION: &str = "device-heap";

/// The annotation key under which `pack` says the capture holds no reference output (value
/// `redacted` or `dropped`); absent, the post-dispatch chunks are the recorded output.
pub const REFERENCE_ANNOTATION: &str = "reference";

/// What a capture's post-dispatch chunks hold.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Reference {
    /// The bytes the kernel wrote in the recorded process: `play --verify` compares with them.
    #[default]
    Recorded,
    /// `pack --drop-post`: only where the kernel writes (the write set), not what.
    Dropped,
    /// `pack --redact`: the memory was replaced by pseudo-random data, and the output with it.
    Redacted,
    /// `verify --salvage` lost part of the output: the post chunks that survived are the
    /// recorded output, those the SALVAGE event names (`SalvageRecord::unknown_output`) only
    /// mark where the kernel may have written.
    Partial,
}

impl Reference {
    pub fn name(self) -> &'static str {
        match self {
            Reference::Recorded => "recorded",
            Reference::Dropped => "dropped",
            Reference::Redacted => "redacted",
            Reference::Partial => "partial",
        }
    }

    /// The reference an annotation value names; an unknown value counts as no reference
    /// (a newer packer's reason: the post chunks are not the recorded output either).
    pub fn from_annotation(value: &str) -> Reference {
        match value {
            "redacted" => Reference::Redacted,
            _ => Reference::Dropped,
        }
    }
}

/// What `verify --salvage` lost from the damaged capture it rewrote (the SALVAGE event,
/// critical: a reader that does not know it would take the zero holes of `unknown_output` for
/// the kernel's output). Written after every memory chunk, at most once.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SalvageRecord {
    /// Where the damaged file stopped being readable (its byte offset): every event that
    /// followed was lost. None when salvage read on to the END event.
    pub lost_from: Option<u64>,
    /// Damaged events salvage skipped and read on after: (byte offset in the damaged file,
    /// event kind).
    pub lost_events: Vec<(u64, u16)>,
    /// Regions dropped because some of their pre-dispatch chunks were lost, as they were
    /// declared (nothing of their memory is in the capture).
    pub dropped_regions: Vec<Region>,
    /// POST chunks that stand for lost output, (region id, offset), sorted: each is a zero
    /// hole (ZERO) that marks a chunk the kernel may have written, so replay restores it
    /// between passes and `play --verify` checks it for determinism only.
    pub unknown_output: Vec<(u32, u64)>,
    /// The dispatch's texture and surface objects were dropped with their arrays' memory.
    pub textures_dropped: bool,
}

impl SalvageRecord {
    /// Whether the POST chunk at (`region_id`, `offset`) stands for lost output.
    pub fn output_unknown(&self, region_id: u32, offset: u64) -> bool {
        self.unknown_output
            .binary_search(&(region_id, offset))
            .is_ok()
    }
}

/// What `kreplay pack --redact` did to each field of the capture (REDACTION): which fields
/// were replaced, and which were kept because a replay needs them, so `kreplay info` can list
/// both. Written by the packer, not recomputed by readers: a file says what its own packer did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Redaction {
    pub fields: Vec<RedactedField>,
}

/// One field of a redacted capture.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RedactedField {
    /// The field, as `kreplay info` names it (`host`, `argument 1 (float)`, `region 0`, ...).
    pub field: String,
    /// Kept as recorded (a replay needs it, or it holds nothing of the application's);
    /// false: replaced.
    pub kept: bool,
    /// What it holds now, or why it was kept.
    pub note: String,
}

impl Redaction {
    pub fn replaced(&mut self, field: impl Into<String>, note: impl Into<String>) {
        self.fields.push(RedactedField {
            field: field.into(),
            kept: false,
            note: note.into(),
        });
    }

    pub fn kept(&mut self, field: impl Into<String>, note: impl Into<String>) {
        self.fields.push(RedactedField {
            field: field.into(),
            kept: true,
            note: note.into(),
        });
    }
}

/// A free-form note attached to a capture.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Annotation {
    pub key: String,
    pub value: String,
}

/// One entry of the index: where an event starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexEntry {
    pub kind: u16,
    /// Offset of the event frame.
    pub offset: u64,
}

/// The END event's payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct EndMark {
    /// Number of events before END.
    pub event_count: u32,
    pub index_offset: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn array(width: u64, height: u64, depth: u64, flags: u32, levels: u32) -> ArrayImage {
        ArrayImage {
            region_id: 0,
            width,
            height,
            depth,
            format: 0x20, // float
            channels: 1,
            flags,
            levels,
        }
    }

    #[test]
    fn texel_bytes_follow_cuda_extents() {
        assert_eq!(array(256, 0, 0, 0, 0).texel_bytes(), Some(1024)); // 1D
        assert_eq!(array(256, 192, 0, 0, 0).texel_bytes(), Some(256 * 192 * 4));
        assert_eq!(
            array(256, 192, 5, ARRAY_LAYERED, 0).texel_bytes(),
            Some(256 * 192 * 5 * 4)
        );
        assert_eq!(
            array(128, 128, 6, ARRAY_CUBEMAP, 0).texel_bytes(),
            Some(128 * 128 * 6 * 4)
        );
        // Mip levels halve every dimension of a 3D array, never below 1; layers stay.
        assert_eq!(
            array(8, 4, 2, 0, 4).level_extents(),
            vec![(8, 4, 2), (4, 2, 1), (2, 1, 1), (1, 1, 1)]
        );
        assert_eq!(
            array(8, 4, 3, ARRAY_LAYERED, 2).level_extents(),
            vec![(8, 4, 3), (4, 2, 3)]
        );
        let mut rgba8 = array(16, 16, 0, 0, 0);
        rgba8.format = 0x01;
        rgba8.channels = 4;
        assert_eq!(rgba8.texel_bytes(), Some(16 * 16 * 4));
    }

    #[test]
    fn unknown_formats_and_overflow_have_no_size() {
        let mut a = array(16, 16, 0, 0, 0);
        a.format = 0xb0; // NV12: planar, not supported
        assert_eq!(a.texel_bytes(), None);
        assert_eq!(array(u64::MAX, u64::MAX, 0, 0, 0).texel_bytes(), None);
    }
}
