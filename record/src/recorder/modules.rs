//! Owner of the code objects seen: the loaded modules that hold a wanted kernel (their image
//! and globals) and where the PTX of wanted kernels is; and what a capture of a kernel needs
//! from them, the device and the allocations.

use std::sync::Arc;

use kreplay_cuda::cupti_events::{ApiCall, Site};
use kreplay_cuda::Device;
use kreplay_format::{cubin, DeviceInfo};
use kreplay_protocol::config::{MemoryScope, Mode};

use super::locking::lock;
use super::marks;
use super::module_book::{is_own_module, StoredModule};
use super::state::Recorder;
use crate::capture::{CaptureData, CodeObject};
use crate::error::RecordError;
use crate::ptx;

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
        });
    }

    /// A code image is about to be loaded: note where its PTX is, if it has any.
    pub(super) fn on_image_load(&self, call: &ApiCall<'_>) {
        if self.config.mode != Mode::Record || call.site != Site::Enter || marks::self_calls() {
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

    /// What a capture of kernel `name` needs from the recorder's state and the driver.
    pub(super) fn target(&self, name: &str) -> Result<Target, RecordError> {
        let (image, objects, module_id) = {
            let m = lock(&self.modules);
            let m = m
                .modules
                .iter()
                .rev()
                .find(|m| m.functions.iter().any(|f| f == name))
                .ok_or(RecordError::ModuleNotSeen)?;
            (m.image.clone(), m.objects.clone(), m.id)
        };
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
