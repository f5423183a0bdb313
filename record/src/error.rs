//! What can go wrong inside the recorder. None of it reaches the application: each error is
//! reported (stderr and the process report) and the application continues.

use kreplay_cuda::cupti::CuptiError;
use kreplay_cuda::CudaError;
use kreplay_format::FormatError;

use crate::walk::WalkError;

#[derive(Debug, thiserror::Error)]
pub enum RecordError {
    #[error("the graph node cannot be captured: {0}")]
    GraphNode(String),
    #[error("cannot query the launch stream: {0}")]
    StreamQuery(CudaError),
    #[error("the kernel's code object was not seen being loaded (was CUPTI attached before the module loaded?)")]
    ModuleNotSeen,
    #[error("the launch passed neither kernelParams nor a usable extra buffer")]
    NoArguments,
    #[error("{during}: {source}")]
    Cuda {
        during: &'static str,
        source: CudaError,
    },
    #[error(transparent)]
    Walk(#[from] WalkError),
    #[error("a region of {0} bytes does not fit in this process's address space")]
    RegionTooLarge(u64),
    #[error("reading {size} bytes at {addr:#x}: {source}")]
    Read {
        addr: u64,
        size: u64,
        source: CudaError,
    },
    #[error("the kernel failed: {0}")]
    KernelFailed(CudaError),
    #[error("no device memory left for the post-dispatch copy of {0} bytes")]
    NoPostScratch(u64),
    #[error("finding the dispatch's write set on the GPU: {0}")]
    WriteSet(String),
    #[error("no CUDA context to read the snapshots back")]
    NoContext,
    #[error("the application's CUDA context is gone: {0}")]
    ContextGone(CudaError),
    #[error("reading a snapshot back: {0}")]
    ReadBack(CudaError),
    #[error("{0}")]
    Format(#[from] FormatError),
    #[error("{0}")]
    Io(#[from] std::io::Error),
    #[error("internal error in the writer (caught)")]
    WriterPanicked,
    #[error("{0}")]
    Config(String),
    /// A range capture met something it does not capture yet.
    #[error("{0}")]
    Range(String),
    #[error("libcupti.so could not be loaded: add CUDA's CUPTI directory (e.g. /usr/local/cuda/lib64 or extras/CUPTI/lib64) to LD_LIBRARY_PATH")]
    NoCupti,
    #[error("another profiler or tracer already holds CUPTI in this process (only one CUPTI subscriber is allowed on this driver); run without it to record")]
    CuptiTaken,
    #[error("{0}")]
    Cupti(CuptiError),
}

impl RecordError {
    /// A driver error, with what the recorder was doing.
    pub fn cuda(during: &'static str) -> impl Fn(CudaError) -> RecordError + Copy {
        move |source| RecordError::Cuda { during, source }
    }
}

impl From<CuptiError> for RecordError {
    fn from(e: CuptiError) -> Self {
        if e.is_multiple_subscribers() {
            RecordError::CuptiTaken
        } else {
            RecordError::Cupti(e)
        }
    }
}
