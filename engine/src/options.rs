//! The choices a replay is made with, as types: what to open (device, code, placement) apart
//! from how to run (passes, cache, verification).

use serde::Serialize;

/// Which code object to load.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum CodeChoice {
    /// The captured cubin; the captured PTX through the JIT when the GPU is another
    /// architecture.
    #[default]
    Captured,
    /// The captured PTX through the driver's JIT, even when the cubin fits (`--ptx`).
    Ptx,
    /// A replacement cubin holding a kernel of the same name and parameters (`--module`).
    Variant(Vec<u8>),
}

/// Where the captured memory goes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Placement {
    /// At the captured addresses; moved (pointers rewritten) only when they are taken.
    #[default]
    Original,
    /// Moved to new addresses with the known pointers rewritten, even when the originals are
    /// free (`--relocate`).
    Relocate,
}

/// How a capture is opened.
#[derive(Debug, Clone, Default)]
pub struct OpenOptions {
    pub device: i32,
    pub code: CodeChoice,
    pub placement: Placement,
}

/// What L2 holds when a pass starts.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CacheState {
    /// Whatever the previous pass (and the restore) left.
    #[default]
    Keep,
    /// Emptied before each pass (see `kreplay_cuda::cache`).
    Flush,
}

impl std::fmt::Display for CacheState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CacheState::Keep => "keep",
            CacheState::Flush => "flush",
        })
    }
}

/// Whether passes check their output.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Verification {
    #[default]
    Off,
    /// Against the reference (the recorded post-state) and across passes (determinism).
    Check,
}

/// How the pass loop runs.
#[derive(Debug, Clone)]
pub struct RunOptions {
    pub passes: u32,
    pub warmup: u32,
    pub cache: CacheState,
    pub verification: Verification,
    /// A range's kernel steps timed one by one too (`play --per-step`); no effect on one
    /// dispatch.
    pub per_step: bool,
    /// Keep where each timed pass's parts ran on the GPU (`play --trace`): the restore's,
    /// the flush's, the timed window's and the steps' events read against an origin event
    /// (`pass_trace`). The timed window is the same with it or without.
    pub trace: bool,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            passes: 1,
            warmup: 0,
            cache: CacheState::Keep,
            verification: Verification::Off,
            per_step: false,
            trace: false,
        }
    }
}

/// The code object a replay runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum CodeSource {
    /// The captured cubin.
    Cubin,
    /// The captured PTX, compiled by the driver's JIT for this GPU.
    PtxJit,
    /// A `--module` variant.
    Variant,
}

/// Where the captured pointers point in this process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AddressMode {
    /// Every region is mapped at its captured virtual address.
    Original,
    /// Pointers were rewritten to new addresses.
    Relocated,
}

/// Where the pristine copy of the write set lives (what each pass restores from).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PristineStore {
    /// In device memory (a device-to-device copy per pass).
    Device,
    /// In host memory (device memory was short).
    Host,
    /// The kernel writes nothing: nothing to restore.
    None,
}
