//! Owner of the code objects seen: the loaded modules that hold a wanted kernel (their image
//! and globals) and where the PTX of wanted kernels is; and what a capture of a kernel needs
//! from them, the device and the allocations.

use std::cell::Cell;
use std::sync::Arc;

use kreplay_cuda::cupti_events::{ApiCall, LoadedHandle, Site};
use kreplay_cuda::{Device, ForeignFunction};
use kreplay_format::{cubin, DeviceInfo};
use kreplay_protocol::config::{MemoryScope, Mode};

use super::locking::lock;
use super::marks;
use super::module_book::{
    candidate_handle, choose_module, is_own_module, settle_keys, ModuleChoice, ModuleKey,
    StoredModule,
};
use super::state::Recorder;
use crate::capture::{CaptureData, CodeObject};
use crate::error::RecordError;
use crate::ptx;

thread_local! {
    /// Inside what the driver reports a module load on this thread now: a load call (its
    /// handle comes at EXIT) or a launch (lazy loading, inside the recorder's first query of
    /// the launched kernel). Set around those calls, read by the MODULE_LOADED callback.
    static LOAD_SITE: Cell<ModuleKey> = const { Cell::new(ModuleKey::Unknown) };
    /// A module was stored inside the launch now marked by `LaunchLoadSite` (so that the
    /// launches that loaded nothing, nearly all, do not take the modules' lock).
    static LOADED_IN_LAUNCH: Cell<bool> = const { Cell::new(false) };
    /// Likewise for the load call now marked (most of cudart's start-up library loads store
    /// nothing).
    static LOADED_IN_CALL: Cell<bool> = const { Cell::new(false) };
}

/// Marks this thread's module loads as made inside the launch of a function until dropped;
/// then gives the modules loaded meanwhile the handle of that function's module (asked once
/// the lazy load is over, while the launch keeps the function valid, before the modules'
/// lock is taken: the query may load code, whose MODULE_LOADED callback takes that lock).
pub(super) struct LaunchLoadSite<'a> {
    recorder: &'a Recorder,
    key: ModuleKey,
    function: usize,
    before: ModuleKey,
}

impl<'a> LaunchLoadSite<'a> {
    pub(super) fn enter(
        recorder: &'a Recorder,
        function: usize,
        correlation: u32,
    ) -> LaunchLoadSite<'a> {
        let key = ModuleKey::LaunchedFunction(function, correlation);
        let before = LOAD_SITE.replace(key);
        LaunchLoadSite {
            recorder,
            key,
            function,
            before,
        }
    }
}

impl Drop for LaunchLoadSite<'_> {
    fn drop(&mut self) {
        LOAD_SITE.set(self.before);
        if !LOADED_IN_LAUNCH.replace(false) {
            return;
        }
        // SAFETY: the handle of the launch whose ENTER this guard spans, on this thread:
        // the application's launch keeps it valid until the call returns.
        let function =
            unsafe { ForeignFunction::from_launch(self.function as kreplay_cuda::sys::CUfunction) };
        let handle = function
            .module()
            .map_or(ModuleKey::Unknown, |m| ModuleKey::Module(m.handle()));
        settle_keys(&mut lock(&self.recorder.modules).modules, self.key, handle);
    }
}

/// What a capture of one kernel needs besides the launch.
pub(super) struct Target {
    pub module: CodeObject,
    pub objects: Vec<(String, u64)>,
    pub allocations: Vec<(u64, u64, kreplay_format::MemoryKind)>,
    pub device: DeviceInfo,
}

impl Recorder {
    pub(super) fn on_module_loaded(&self, bytes: &[u8]) {
        // Profile mode needs the module's globals (what a dispatch can reach), record mode
        // also its image.
        // (Not gated on SELF_CALLS: under lazy loading the application's module is loaded
        // inside the recorder's own first query of its kernel.)
        if self.config.mode == Mode::List {
            return;
        }
        let Some(syms) = cubin::symbols(bytes) else {
            return;
        };
        // Keep only modules that hold a kernel the user asked for: PyTorch loads thousands;
        // the recorder's own (chunk kernels, L2 sweeps, heap probe) are never the user's.
        // With --graph-launch every node of the graph becomes a step, whatever its kernel
        // (measured on the H200: a torch CUDA graph's other kernels' modules were missing).
        let wanted = !is_own_module(&syms.functions)
            && (self.config.graph_launch
                || syms
                    .functions
                    .iter()
                    .any(|f| self.kernels.matches(&self.config, f).0));
        if !wanted {
            return;
        }
        let mut m = lock(&self.modules);
        let id = m.next_module_id;
        m.next_module_id += 1;
        m.modules.push(StoredModule {
            id,
            image: Arc::new(bytes.to_vec()),
            functions: syms.functions,
            objects: syms.objects,
            key: LOAD_SITE.get(),
        });
        match LOAD_SITE.get() {
            ModuleKey::LaunchedFunction(..) => LOADED_IN_LAUNCH.set(true),
            ModuleKey::Loading(_) => LOADED_IN_CALL.set(true),
            _ => {}
        }
    }

    /// A code image is handed to the driver: at ENTER, note where its PTX is, if it has
    /// any, and that loads now come from this call; at EXIT, give the modules it loaded the
    /// handle it returned.
    pub(super) fn on_image_load(&self, call: &ApiCall<'_>) {
        if marks::self_calls() {
            return;
        }
        let loading = ModuleKey::Loading(call.correlation);
        if call.site == Site::Exit {
            if LOAD_SITE.replace(ModuleKey::Unknown) != loading || !LOADED_IN_CALL.replace(false) {
                return;
            }
            let key = match call.loaded_handle() {
                Some(LoadedHandle::Module(h)) => ModuleKey::Module(h),
                // A library's module per context would be asked through the library handle,
                // which the recorder cannot tell is still loaded (it does not follow unloads):
                // such a module stays unknown.
                Some(LoadedHandle::Library(_)) | None => ModuleKey::Unknown,
            };
            settle_keys(&mut lock(&self.modules).modules, loading, key);
            return;
        }
        LOAD_SITE.set(loading);
        if self.config.mode != Mode::Record {
            return;
        }
        let Some(image) = call.image() else {
            return;
        };
        let wanted = |name: &str| self.kernels.matches(&self.config, name).0;
        // SAFETY: image is what the application passes to this load call, inside its callback.
        if let Some(src) = unsafe { ptx::inspect(image, &wanted) } {
            lock(&self.modules).ptx_sources.push(src);
        }
    }

    /// What a capture of kernel `name`, launched as `function` (when known), needs from the
    /// recorder's state and the driver.
    pub(super) fn target(
        &self,
        name: &str,
        function: Option<&ForeignFunction>,
    ) -> Result<Target, RecordError> {
        // The candidates are copied out so that the driver is asked with the lock released
        // (a query may load code, whose MODULE_LOADED callback takes that lock).
        let defining: Vec<Candidate> = lock(&self.modules)
            .modules
            .iter()
            .filter(|m| m.functions.iter().any(|f| f == name))
            .map(|m| Candidate {
                image: m.image.clone(),
                key: m.key,
                objects: m.objects.clone(),
                id: m.id,
            })
            .collect();
        let chosen = match pick_module(&defining, function) {
            ModuleChoice::Chosen(i) => i,
            ModuleChoice::None => return Err(RecordError::ModuleNotSeen),
            ModuleChoice::Ambiguous { latest, candidates } => {
                self.warn_ambiguous_module(name, candidates);
                latest
            }
        };
        let mut defining = defining;
        let Candidate {
            image,
            objects,
            id: module_id,
            ..
        } = defining.swap_remove(chosen);
        let device = Device::current().map_err(RecordError::cuda("finding the device"))?;
        let props = device.props().clone();
        let allocations = if self.config.memory == MemoryScope::All {
            lock(&self.allocations).list()
        } else {
            Vec::new()
        };
        Ok(Target {
            module: CodeObject {
                module_id,
                arch: props.arch(),
                image,
            },
            objects,
            allocations,
            device: DeviceInfo {
                name: props.name,
                ordinal: props.ordinal as u32,
                cc_major: props.cc_major,
                cc_minor: props.cc_minor,
                uuid: props.uuid,
                driver_version: kreplay_cuda::driver_version().unwrap_or(0),
                total_memory: props.total_memory,
                sm_count: props.sm_count,
            },
        })
    }

    /// Says once per kernel that its capture keeps the latest loaded of several modules that
    /// define it with different code, since nothing told which one the launch runs.
    fn warn_ambiguous_module(&self, name: &str, candidates: usize) {
        if !lock(&self.modules)
            .warned_ambiguous
            .insert(name.to_string())
        {
            return;
        }
        use kreplay_protocol::config::{demangle, short_kernel_name};
        crate::diag!(
            "kreplay: warning: {}: {candidates} loaded modules define it with different code and the driver did not say which one its launch runs: the capture keeps the latest loaded (check it with `kreplay play --verify`)",
            short_kernel_name(&demangle(name))
        );
    }

    /// Completes a capture's description: its indices, the PTX sources known, its device.
    pub(super) fn describe(
        &self,
        data: &mut CaptureData,
        index: u64,
        launch_index: u64,
        device: DeviceInfo,
    ) {
        data.match_index = index;
        data.launch_index = launch_index;
        data.ptx_sources = lock(&self.modules).ptx_sources.clone();
        data.device = Some(device);
        data.nvtx = crate::nvtx::innermost();
    }
}

/// A stored module defining the kernel being captured, copied out of the modules' lock.
struct Candidate {
    image: Arc<Vec<u8>>,
    key: ModuleKey,
    objects: Vec<(String, u64)>,
    id: u32,
}

/// Which of `defining` (the stored modules defining a kernel, in load order)
/// the launch of `function` runs: asks the driver for module handles only when their code
/// differs.
fn pick_module(defining: &[Candidate], function: Option<&ForeignFunction>) -> ModuleChoice {
    // The same code everywhere (or one candidate, or none): nothing to tell apart, and no
    // image compared a second time in `choose_module`.
    if defining.windows(2).all(|w| w[0].image == w[1].image) {
        return match defining.len() {
            0 => ModuleChoice::None,
            n => ModuleChoice::Chosen(n - 1),
        };
    }
    let ask = function.is_some();
    let launched = function.and_then(|f| f.module().ok()).map(|m| m.handle());
    // A module loaded inside this very launch's ENTER (lazily, by the recorder's first query
    // of its kernel) is the launch's own.
    let this_launch = LOAD_SITE.get();
    let candidates: Vec<(&[u8], Option<usize>)> = defining
        .iter()
        .map(|c| {
            let handle = if ask {
                candidate_handle(c.key, this_launch, launched)
            } else {
                None
            };
            (c.image.as_slice(), handle)
        })
        .collect();
    choose_module(&candidates, launched)
}
