//! The application's CUDA graphs, read from a callback: a graph's nodes, their kinds and
//! dependencies, the parameters of kernel, memset and memcpy nodes, child graphs. Graph and
//! node handles come from the application and enter only through `unsafe fn from_raw`.
//! Replaying a memset or memcpy node's parameters on a stream is here too.

use std::ptr;

use crate::error::{check, CuResult};
use crate::stream::AsStream;
use crate::sys;

/// A graph of the application (`CUgraph`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ForeignGraph(sys::CUgraph);

/// A node of an application graph (`CUgraphNode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ForeignNode(sys::CUgraphNode);

// SAFETY: graph and node handles are opaque tokens the driver accepts from any thread.
unsafe impl Send for ForeignGraph {}
// SAFETY: as above.
unsafe impl Send for ForeignNode {}

/// What a node does (`CUgraphNodeType`, read as the integer it is: a kind from a newer driver
/// must not become an invalid enum value).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NodeKind {
    Kernel,
    Memcpy,
    Memset,
    Host,
    Graph,
    Empty,
    WaitEvent,
    EventRecord,
    SemaphoreSignal,
    SemaphoreWait,
    MemAlloc,
    MemFree,
    BatchMemOp,
    Conditional,
    Other(u32),
}

impl NodeKind {
    pub fn from_raw(v: u32) -> NodeKind {
        match v {
            0 => NodeKind::Kernel,
            1 => NodeKind::Memcpy,
            2 => NodeKind::Memset,
            3 => NodeKind::Host,
            4 => NodeKind::Graph,
            5 => NodeKind::Empty,
            6 => NodeKind::WaitEvent,
            7 => NodeKind::EventRecord,
            8 => NodeKind::SemaphoreSignal,
            9 => NodeKind::SemaphoreWait,
            10 => NodeKind::MemAlloc,
            11 => NodeKind::MemFree,
            12 => NodeKind::BatchMemOp,
            13 => NodeKind::Conditional,
            v => NodeKind::Other(v),
        }
    }

    pub fn name(self) -> String {
        match self {
            NodeKind::Kernel => "kernel".into(),
            NodeKind::Memcpy => "memcpy".into(),
            NodeKind::Memset => "memset".into(),
            NodeKind::Host => "host function".into(),
            NodeKind::Graph => "child graph".into(),
            NodeKind::Empty => "empty".into(),
            NodeKind::WaitEvent => "event wait".into(),
            NodeKind::EventRecord => "event record".into(),
            NodeKind::SemaphoreSignal => "external semaphore signal".into(),
            NodeKind::SemaphoreWait => "external semaphore wait".into(),
            NodeKind::MemAlloc => "memory allocation".into(),
            NodeKind::MemFree => "memory free".into(),
            NodeKind::BatchMemOp => "batch memory operation".into(),
            NodeKind::Conditional => "conditional".into(),
            NodeKind::Other(v) => format!("node type {v}"),
        }
    }
}

/// A memset node's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemsetParams {
    pub dst: u64,
    pub pitch: u64,
    pub value: u32,
    /// 1, 2 or 4.
    pub element_size: u32,
    /// In elements.
    pub width: u64,
    pub height: u64,
}

/// A memcpy node's parameters, kept as the bytes the driver wrote. The struct holds enum
/// fields (memory types) without a zero value, so it is never zero-initialised as a Rust
/// value, and those fields are read as the integers they are.
#[derive(Clone, Copy)]
pub struct MemcpyParams(std::mem::MaybeUninit<sys::CUDA_MEMCPY3D>);

// SAFETY: plain data (host pointers inside are the application's, only handed back to the
// driver on the application's behalf).
unsafe impl Send for MemcpyParams {}

impl std::fmt::Debug for MemcpyParams {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "MemcpyParams({:?})", self.destination())
    }
}

/// Where a copy writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CopyDestination {
    /// Device memory from this address (the allocation holding it bounds the write).
    Device(u64),
    Host,
    Array,
}

impl MemcpyParams {
    /// `CUmemorytype` values.
    const DEVICE: u32 = 2;
    const ARRAY: u32 = 3;
    const UNIFIED: u32 = 4;

    pub fn destination(&self) -> CopyDestination {
        let p = self.0.as_ptr();
        // SAFETY: the driver filled the struct (`memcpy_params`); the memory type is a 4-byte
        // integer field and the device pointer a u64, read without forming enum values.
        let (kind, dst) = unsafe {
            (
                ptr::addr_of!((*p).dstMemoryType).cast::<u32>().read(),
                ptr::addr_of!((*p).dstDevice).read(),
            )
        };
        match kind {
            Self::DEVICE => CopyDestination::Device(dst),
            Self::UNIFIED if dst != 0 => CopyDestination::Device(dst),
            Self::ARRAY => CopyDestination::Array,
            _ => CopyDestination::Host,
        }
    }
}

/// `CUmemorytype` values, as a memcpy node's sides name them.
pub mod memory_type {
    pub const HOST: u32 = 1;
    pub const DEVICE: u32 = 2;
    pub const ARRAY: u32 = 3;
    pub const UNIFIED: u32 = 4;
}

/// One side of a memcpy node (`CUDA_MEMCPY3D`'s `src*` or `dst*` fields), as plain numbers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct CopySide {
    /// A `memory_type` value.
    pub memory_type: u32,
    pub host: u64,
    pub device: u64,
    /// Offsets into the side: bytes along a row, rows, slices; and the mipmap level.
    pub x: u64,
    pub y: u64,
    pub z: u64,
    pub lod: u64,
}

/// A memcpy node's copy as plain numbers: both sides and the extent (bytes per row, rows,
/// slices). A 1D copy has one row of one slice at offset 0 on both sides' y and z.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct CopyShape {
    pub src: CopySide,
    pub dst: CopySide,
    pub width: u64,
    pub height: u64,
    pub depth: u64,
}

impl MemcpyParams {
    /// The copy's sides and extent.
    pub fn shape(&self) -> CopyShape {
        let p = self.0.as_ptr();
        // SAFETY: the driver filled the struct (`memcpy_params`); every field is read through
        // its address as the integer (or pointer-sized integer) it is, memory types as u32,
        // without forming enum values.
        unsafe {
            let u = |v: *const usize| v.read() as u64;
            CopyShape {
                src: CopySide {
                    memory_type: ptr::addr_of!((*p).srcMemoryType).cast::<u32>().read(),
                    host: ptr::addr_of!((*p).srcHost).read() as u64,
                    device: ptr::addr_of!((*p).srcDevice).read(),
                    x: u(ptr::addr_of!((*p).srcXInBytes)),
                    y: u(ptr::addr_of!((*p).srcY)),
                    z: u(ptr::addr_of!((*p).srcZ)),
                    lod: u(ptr::addr_of!((*p).srcLOD)),
                },
                dst: CopySide {
                    memory_type: ptr::addr_of!((*p).dstMemoryType).cast::<u32>().read(),
                    host: ptr::addr_of!((*p).dstHost).read() as u64,
                    device: ptr::addr_of!((*p).dstDevice).read(),
                    x: u(ptr::addr_of!((*p).dstXInBytes)),
                    y: u(ptr::addr_of!((*p).dstY)),
                    z: u(ptr::addr_of!((*p).dstZ)),
                    lod: u(ptr::addr_of!((*p).dstLOD)),
                },
                width: u(ptr::addr_of!((*p).WidthInBytes)),
                height: u(ptr::addr_of!((*p).Height)),
                depth: u(ptr::addr_of!((*p).Depth)),
            }
        }
    }
}

/// A kernel node's parameters: the function and the argument pointers the driver holds for
/// the node (valid while the node exists).
#[derive(Clone, Copy, Debug)]
pub struct KernelNodeParams {
    pub function: sys::CUfunction,
    pub grid: [u32; 3],
    pub block: [u32; 3],
    pub shared_bytes: u32,
    pub kernel_params: *mut *mut std::ffi::c_void,
    pub extra: *mut *mut std::ffi::c_void,
}

impl KernelNodeParams {
    /// From the driver's struct (a kernel node's, or one passed to a set-params call).
    pub fn from_raw(p: &sys::CUDA_KERNEL_NODE_PARAMS) -> KernelNodeParams {
        KernelNodeParams {
            function: if p.func.is_null() {
                p.kern as sys::CUfunction
            } else {
                p.func
            },
            grid: [p.gridDimX, p.gridDimY, p.gridDimZ],
            block: [p.blockDimX, p.blockDimY, p.blockDimZ],
            shared_bytes: p.sharedMemBytes,
            kernel_params: p.kernelParams,
            extra: p.extra,
        }
    }
}

impl KernelNodeParams {
    /// From the older struct (`cuGraphExecKernelNodeSetParams`, no `kern`/`ctx` fields).
    pub fn from_v1(p: &sys::CUDA_KERNEL_NODE_PARAMS_v1) -> KernelNodeParams {
        KernelNodeParams {
            function: p.func,
            grid: [p.gridDimX, p.gridDimY, p.gridDimZ],
            block: [p.blockDimX, p.blockDimY, p.blockDimZ],
            shared_bytes: p.sharedMemBytes,
            kernel_params: p.kernelParams,
            extra: p.extra,
        }
    }
}

impl ForeignGraph {
    /// # Safety
    /// `raw` must be a live graph of the application, used only while the application keeps
    /// it (during the callback that named it).
    pub unsafe fn from_raw(raw: sys::CUgraph) -> ForeignGraph {
        ForeignGraph(raw)
    }

    /// Every node, in the order the driver lists them.
    pub fn nodes(&self) -> CuResult<Vec<ForeignNode>> {
        let g = self.0;
        // SAFETY: the graph is live; `fill` passes a null array (count only) or one of n handles.
        handles("cuGraphGetNodes", |array, n| unsafe {
            sys::cuGraphGetNodes(g, array, n)
        })
    }
}

/// The driver's two-call pattern for a list of node handles: ask for the count, then fill an
/// array of that many. A count of 0 is answered without the second call (the driver refuses
/// an array with a count of 0).
fn handles(
    call: &'static str,
    fill: impl Fn(*mut sys::CUgraphNode, &mut usize) -> sys::CUresult,
) -> CuResult<Vec<ForeignNode>> {
    let mut n = 0usize;
    check(fill(ptr::null_mut(), &mut n), call)?;
    if n == 0 {
        return Ok(Vec::new());
    }
    let mut v = vec![ptr::null_mut(); n];
    check(fill(v.as_mut_ptr(), &mut n), call)?;
    v.truncate(n);
    Ok(v.into_iter().map(ForeignNode).collect())
}

impl ForeignNode {
    /// The handle as a number, to key nodes by.
    pub fn id(&self) -> usize {
        self.0 as usize
    }

    /// # Safety
    /// `raw` must be a node of a live graph of the application.
    pub unsafe fn from_raw(raw: sys::CUgraphNode) -> ForeignNode {
        ForeignNode(raw)
    }

    pub fn kind(&self) -> CuResult<NodeKind> {
        let mut v: u32 = u32::MAX;
        check(
            // SAFETY: the driver writes one 4-byte enum value; read as u32 (see NodeKind).
            unsafe { sys::cuGraphNodeGetType(self.0, &mut v as *mut u32 as *mut _) },
            "cuGraphNodeGetType",
        )?;
        Ok(NodeKind::from_raw(v))
    }

    /// The nodes this one depends on.
    pub fn dependencies(&self) -> CuResult<Vec<ForeignNode>> {
        let node = self.0;
        // SAFETY: a node of a live graph; no edge data is asked for.
        handles("cuGraphNodeGetDependencies", |array, n| unsafe {
            sys::cuGraphNodeGetDependencies_v2(node, array, ptr::null_mut(), n)
        })
    }

    pub fn kernel_params(&self) -> CuResult<KernelNodeParams> {
        // SAFETY: plain data; zero is valid for every field.
        let mut p: sys::CUDA_KERNEL_NODE_PARAMS = unsafe { std::mem::zeroed() };
        check(
            // SAFETY: writes one parameter struct for a kernel node.
            unsafe { sys::cuGraphKernelNodeGetParams_v2(self.0, &mut p) },
            "cuGraphKernelNodeGetParams",
        )?;
        Ok(KernelNodeParams::from_raw(&p))
    }

    /// The launch attributes set on a kernel node among `ids`, as (id, 64 value bytes); an
    /// attribute whose value is all zero (not set) or that the node cannot hold is left out.
    pub fn kernel_attributes(&self, ids: &[u32]) -> Vec<(u32, [u8; 64])> {
        let mut out = Vec::new();
        for &id in ids {
            let Some(attr) = crate::launch::attribute_id(id) else {
                continue;
            };
            let mut v = std::mem::MaybeUninit::<sys::CUkernelNodeAttrValue>::zeroed();
            // SAFETY: writes one attribute value (a union of plain data) for a kernel node.
            let r = unsafe { sys::cuGraphKernelNodeGetAttribute(self.0, attr, v.as_mut_ptr()) };
            if r != sys::CUresult::CUDA_SUCCESS {
                continue;
            }
            let mut bytes = [0u8; 64];
            let n = 64.min(std::mem::size_of::<sys::CUkernelNodeAttrValue>());
            // SAFETY: the union's first n bytes, zeroed and then written by the driver.
            unsafe { ptr::copy_nonoverlapping(v.as_ptr().cast::<u8>(), bytes.as_mut_ptr(), n) };
            if bytes.iter().any(|&b| b != 0) {
                out.push((id, bytes));
            }
        }
        out
    }

    pub fn memset_params(&self) -> CuResult<MemsetParams> {
        // SAFETY: plain data.
        let mut p: sys::CUDA_MEMSET_NODE_PARAMS = unsafe { std::mem::zeroed() };
        check(
            // SAFETY: writes one parameter struct for a memset node.
            unsafe { sys::cuGraphMemsetNodeGetParams(self.0, &mut p) },
            "cuGraphMemsetNodeGetParams",
        )?;
        Ok(MemsetParams {
            dst: p.dst,
            pitch: p.pitch as u64,
            value: p.value,
            element_size: p.elementSize,
            width: p.width as u64,
            height: p.height as u64,
        })
    }

    pub fn memcpy_params(&self) -> CuResult<MemcpyParams> {
        // Zeroed bytes, not a zeroed value: see `MemcpyParams`.
        let mut p = std::mem::MaybeUninit::<sys::CUDA_MEMCPY3D>::zeroed();
        check(
            // SAFETY: writes one parameter struct for a memcpy node into p's bytes.
            unsafe { sys::cuGraphMemcpyNodeGetParams(self.0, p.as_mut_ptr()) },
            "cuGraphMemcpyNodeGetParams",
        )?;
        Ok(MemcpyParams(p))
    }

    /// The graph a child-graph node runs.
    pub fn child_graph(&self) -> CuResult<ForeignGraph> {
        let mut g = ptr::null_mut();
        check(
            // SAFETY: writes one graph handle for a child-graph node.
            unsafe { sys::cuGraphChildGraphNodeGetGraph(self.0, &mut g) },
            "cuGraphChildGraphNodeGetGraph",
        )?;
        Ok(ForeignGraph(g))
    }
}

/// Queues a memset node's work on `stream`.
///
/// # Safety
/// The rows `p` names (`height` rows of `width` elements, `pitch` bytes apart, from `dst`) are
/// *writable* (`crate::memory`'s contract) until the memset completes: `MemsetParams` has public
/// fields, so nothing but the caller vouches for `dst`. A live memset node's own parameters,
/// replayed where the application's graph would run them, qualify.
pub unsafe fn memset_async(p: &MemsetParams, stream: &impl AsStream) -> CuResult<()> {
    let s = stream.raw_stream();
    let (w, h, pitch) = (p.width as usize, p.height.max(1) as usize, p.pitch as usize);
    let pitch = if h == 1 {
        w * p.element_size.max(1) as usize
    } else {
        pitch
    };
    // SAFETY: the rows are writable by this function's contract; the stream is borrowed.
    let r = unsafe {
        match p.element_size {
            1 => sys::cuMemsetD2D8Async(p.dst, pitch, p.value as u8, w, h, s),
            2 => sys::cuMemsetD2D16Async(p.dst, pitch, p.value as u16, w, h, s),
            _ => sys::cuMemsetD2D32Async(p.dst, pitch, p.value, w, h, s),
        }
    };
    check(r, "cuMemsetD2DAsync")
}

/// Queues a memcpy node's work on `stream`.
///
/// # Safety
/// The copy's source is *readable* and its destination *writable* (`crate::memory`'s
/// contracts) until it completes: the parameters hold the application's raw host and device
/// pointers, which are valid only while the node (and the memory it names) lives, i.e. when
/// replaying a live node where the application's graph would run it.
pub unsafe fn memcpy_async(p: &MemcpyParams, stream: &impl AsStream) -> CuResult<()> {
    // SAFETY: the parameters are as the driver wrote them for a node (so well-formed), and the
    // memory they name is usable by this function's contract.
    check(
        unsafe { sys::cuMemcpy3DAsync_v2(p.0.as_ptr(), stream.raw_stream()) },
        "cuMemcpy3DAsync",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_kinds_from_newer_drivers_stay_integers() {
        assert_eq!(NodeKind::from_raw(0), NodeKind::Kernel);
        assert_eq!(NodeKind::from_raw(4), NodeKind::Graph);
        assert_eq!(NodeKind::from_raw(13), NodeKind::Conditional);
        assert_eq!(NodeKind::from_raw(99), NodeKind::Other(99));
        assert_eq!(NodeKind::from_raw(99).name(), "node type 99");
    }
}
