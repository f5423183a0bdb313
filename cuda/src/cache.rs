//! Emptying the L2 cache between passes, the way a profiler's cache control does: after the
//! flush, the replayed kernel finds none of its own data in L2 and no dirty lines that it
//! would have to write back on the kernel's time.
//!
//! A memset over a buffer larger than L2 evicts the kernel's lines but leaves L2 full of
//! *dirty* lines of that buffer, whose write-backs then land inside the next kernel (extra
//! DRAM writes in its counters, extra time in its duration). So the flush is a read-only sweep:
//! a tiny kernel, shipped as PTX and compiled by the driver at load time, reads a zeroed
//! buffer several times the size of L2. Dirty lines are written back during the sweep, and
//! L2 ends up holding only clean lines of the sweep buffer.
//!
//! A full L2, even of clean lines, is not the empty L2 a profiler's flush leaves: the kernel's
//! own lines then compete with them for replacement and more of its dirty output is evicted
//! (written to DRAM) inside the kernel. So on sm_80 and later a second kernel then discards the
//! sweep buffer's lines (`discard.global.L2`: invalidated, no write-back), leaving L2 empty.

use crate::error::CuResult;
use crate::launch::{launch, KernelArgs, LaunchConfig};
use crate::memory::DeviceBuffer;
use crate::module::{Function, Module};
use crate::stream::Stream;

/// The sweep kernel: XORs every 16-byte word of the buffer and stores the result only when
/// it equals a value a zeroed buffer never produces, so the loads cannot be optimised away
/// and nothing is written.
const SWEEP_PTX: &str = r#".version 7.0
.target sm_70
.address_size 64

.visible .entry kreplay_l2_sweep(
    .param .u64 p_buf,
    .param .u64 p_vectors,
    .param .u64 p_sink
)
{
    .reg .pred %p<3>;
    .reg .b32 %r<10>;
    .reg .b64 %rd<10>;

    ld.param.u64 %rd1, [p_buf];
    ld.param.u64 %rd2, [p_vectors];
    ld.param.u64 %rd3, [p_sink];
    cvta.to.global.u64 %rd1, %rd1;
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ntid.x;
    mov.u32 %r3, %tid.x;
    mov.u32 %r4, %nctaid.x;
    mul.wide.u32 %rd4, %r1, %r2;
    cvt.u64.u32 %rd5, %r3;
    add.u64 %rd4, %rd4, %rd5;
    mul.wide.u32 %rd6, %r4, %r2;
    mov.u32 %r5, 0;
    setp.ge.u64 %p1, %rd4, %rd2;
    @%p1 bra DONE;
LOOP:
    shl.b64 %rd7, %rd4, 4;
    add.u64 %rd8, %rd1, %rd7;
    ld.global.v4.u32 {%r6, %r7, %r8, %r9}, [%rd8];
    xor.b32 %r5, %r5, %r6;
    xor.b32 %r5, %r5, %r7;
    xor.b32 %r5, %r5, %r8;
    xor.b32 %r5, %r5, %r9;
    add.u64 %rd4, %rd4, %rd6;
    setp.lt.u64 %p2, %rd4, %rd2;
    @%p2 bra LOOP;
DONE:
    setp.ne.u32 %p1, %r5, -1640531527;
    @%p1 bra END;
    cvta.to.global.u64 %rd9, %rd3;
    st.global.u32 [%rd9], %r5;
END:
    ret;
}
"#;

/// The name the sweep kernel carries (it shows up in profilers that list every kernel).
pub const SWEEP_KERNEL: &str = "kreplay_l2_sweep";

/// Invalidates every 128-byte line of the buffer in L2 without writing it back. Its own
/// module: `discard` needs sm_80, and the sweep alone must still load on older GPUs.
const DISCARD_PTX: &str = r#".version 7.4
.target sm_80
.address_size 64

.visible .entry kreplay_l2_discard(
    .param .u64 p_buf,
    .param .u64 p_lines
)
{
    .reg .pred %p<2>;
    .reg .b32 %r<5>;
    .reg .b64 %rd<9>;

    ld.param.u64 %rd1, [p_buf];
    ld.param.u64 %rd2, [p_lines];
    cvta.to.global.u64 %rd1, %rd1;
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ntid.x;
    mov.u32 %r3, %tid.x;
    mov.u32 %r4, %nctaid.x;
    mul.wide.u32 %rd4, %r1, %r2;
    cvt.u64.u32 %rd5, %r3;
    add.u64 %rd4, %rd4, %rd5;
    mul.wide.u32 %rd6, %r4, %r2;
    setp.ge.u64 %p1, %rd4, %rd2;
    @%p1 bra DONE;
LOOP:
    shl.b64 %rd7, %rd4, 7;
    add.u64 %rd8, %rd1, %rd7;
    discard.global.L2 [%rd8], 128;
    add.u64 %rd4, %rd4, %rd6;
    setp.lt.u64 %p1, %rd4, %rd2;
    @%p1 bra LOOP;
DONE:
    ret;
}
"#;

/// The name of the discard kernel.
pub const DISCARD_KERNEL: &str = "kreplay_l2_discard";

/// The discard stage: its module and function.
struct Discard {
    function: Function,
}

/// A loaded sweep kernel and its buffer.
pub struct L2Flush {
    buf: DeviceBuffer,
    sink: DeviceBuffer,
    function: Function,
    grid: u32,
    discard: Option<Discard>,
}

// SAFETY: the module, function and buffers are driver handles valid in the context they were
// made in, from any thread that makes that context current; L2Flush has no thread affinity.
unsafe impl Send for L2Flush {}

impl L2Flush {
    /// Loads the sweep for the current context. `bytes` should be several times the L2 size.
    /// The discard stage is loaded where the GPU has it (sm_80 and later) unless
    /// `KREPLAY_DEBUG_FLUSH=sweep` (a measurement aid) asks for the sweep alone.
    pub fn new(bytes: usize, sm_count: u32) -> CuResult<L2Flush> {
        let module = Module::load(SWEEP_PTX.as_bytes())?;
        let function = module.function(SWEEP_KERNEL)?;
        let sweep_only = std::env::var_os("KREPLAY_DEBUG_FLUSH").is_some_and(|v| v == "sweep");
        // An older GPU (or driver) cannot compile `discard`: the sweep alone is the fallback.
        let discard = if sweep_only {
            None
        } else {
            Module::load(DISCARD_PTX.as_bytes())
                .and_then(|m| {
                    Ok(Discard {
                        function: m.function(DISCARD_KERNEL)?,
                    })
                })
                .ok()
        };
        let bytes = bytes.next_multiple_of(128);
        let buf = DeviceBuffer::new(bytes)?;
        let sink = DeviceBuffer::new(16)?;
        buf.fill(0)?;
        Ok(L2Flush {
            buf,
            sink,
            function,
            grid: sm_count.max(1) * 4,
            discard,
        })
    }

    /// Whether the flush ends with an empty L2 (the discard stage) rather than a full one.
    pub fn empties(&self) -> bool {
        self.discard.is_some()
    }

    /// Queues the sweep's read stage alone on `stream` (no discard): for sweeps that warm the
    /// GPU before others that end the flush. Each sweep's reads evict the lines the one before
    /// left (the buffer is several times L2), so a discard between them only costs (about 35
    /// us a sweep on an H100, session 23); the last sweep before a measurement must still be a
    /// whole one (`run`) to leave L2 empty.
    pub fn run_reads_only(&self, stream: &Stream) -> CuResult<()> {
        let vectors = (self.buf.len() / 16) as u64;
        // SAFETY: the sweep reads `vectors` 16-byte vectors of `buf` and writes 16 bytes of
        // `sink`, both allocations owned by `self`; freeing them (`cuMemFree`, on drop) waits
        // for the device, so the sweep never runs on freed memory.
        unsafe {
            self.launch(
                &self.function,
                &[self.buf.ptr(), vectors, self.sink.ptr()],
                stream,
            )
        }
    }

    /// Queues one sweep on `stream`. Returns the kernels queued (a profiler that makes one
    /// range per kernel sees each).
    pub fn run(&self, stream: &Stream) -> CuResult<u32> {
        self.run_reads_only(stream)?;
        if let Some(d) = &self.discard {
            let lines = (self.buf.len() / 128) as u64;
            // SAFETY: discards `lines` 128-byte lines of `buf`, owned by `self`; freeing it
            // waits for the device (as in `run_reads_only`).
            unsafe { self.launch(&d.function, &[self.buf.ptr(), lines], stream)? };
            return Ok(2);
        }
        Ok(1)
    }

    /// Queues one of the flush kernels (all take 64-bit parameters) over the whole GPU.
    ///
    /// # Safety
    /// As `crate::launch::launch`: the kernel run with `args` touches only this flush's buffers.
    unsafe fn launch(&self, function: &Function, args: &[u64], stream: &Stream) -> CuResult<()> {
        let cfg = LaunchConfig::new([self.grid, 1, 1], [512, 1, 1], 0);
        // SAFETY: forwarded: this function's contract is `launch`'s.
        unsafe { launch(function, &cfg, &mut KernelArgs::words(args), stream) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ptx_entries::entry_names;

    // The kernels are looked up by these names at load time; a mismatch would only show on a
    // GPU, as a flush that fails to load.
    #[test]
    fn each_ptx_module_defines_the_kernel_looked_up_in_it() {
        assert_eq!(entry_names(SWEEP_PTX), vec![SWEEP_KERNEL]);
        assert_eq!(entry_names(DISCARD_PTX), vec![DISCARD_KERNEL]);
    }

    // `discard` needs PTX ISA 7.4 and sm_80; the sweep must stay loadable on older GPUs.
    #[test]
    fn the_discard_stage_lives_in_its_own_sm80_module() {
        assert!(DISCARD_PTX.contains(".target sm_80"));
        assert!(DISCARD_PTX.contains("discard.global.L2"));
        assert!(SWEEP_PTX.contains(".target sm_70"));
        assert!(!SWEEP_PTX.contains("discard"));
    }
}
