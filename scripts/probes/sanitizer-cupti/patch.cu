// Device patch functions for probe35 (issue #35 feasibility).
// Build (official flags, Sanitizer API guide "Writing a Patch"; MemoryTracker Makefile):
//   nvcc --fatbin --compile-as-tools-patch -gencode arch=compute_90,code=sm_90 \
//        -I<compute-sanitizer>/include -o patch.fatbin -c patch.cu
//
// Every callback starts with the off-path test: `userdata == NULL || !enabled` -> return.
// Patching is module-wide (all launches of a patched module run these callbacks), so this
// early return is the whole cost of a patched-but-not-instrumented launch.
#include <sanitizer_patching.h>
#include "probe_shared.h"

static __device__ __forceinline__ uint32_t lane_id()
{
    uint32_t l;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(l));
    return l;
}

// warp-aggregated counter: one atomic per warp instead of one per thread
static __device__ __forceinline__ void warp_count(unsigned long long* c)
{
    const uint32_t m = __activemask();
    if (lane_id() == (uint32_t)(__ffs(m) - 1))
        atomicAdd(c, (unsigned long long)__popc(m));
}

// last range with base <= addr, or -1
static __device__ __forceinline__ int find_range(const ProbeState* s, uint64_t addr)
{
    int lo = 0, hi = (int)s->nranges - 1, found = -1;
    while (lo <= hi) {
        const int mid = (lo + hi) >> 1;
        if (s->ranges[mid].base <= addr) { found = mid; lo = mid + 1; }
        else hi = mid - 1;
    }
    if (found >= 0 && addr - s->ranges[found].base < s->ranges[found].size) return found;
    return -1;
}

static __device__ __forceinline__ void set_bit(uint32_t* bits, uint64_t page)
{
    uint32_t* w = bits + (page >> 5);
    const uint32_t b = 1u << (uint32_t)(page & 31u);
    // read first: most accesses hit a page whose bit is already set, skip the atomic then
    if ((*(volatile uint32_t*)w & b) == 0u) atomicOr(w, b);
}

// mark [addr, addr+bytes) as read and/or written
static __device__ void mark(ProbeState* s, uint64_t addr, uint64_t bytes, bool rd, bool wr)
{
    if (bytes == 0) bytes = 1;
    uint64_t a = addr;
    const uint64_t end = addr + bytes;
    int guard = 0;
    while (a < end && guard++ < 4096) {   // bulk copies are at most a few 100 KiB
        const int r = find_range(s, a);
        if (r < 0) {
            atomicAdd(&s->outside, 1ull);
            return;
        }
        const ProbeRange& R = s->ranges[r];
        const uint64_t rend = R.base + R.size;
        const uint64_t stop = end < rend ? end : rend;
        uint64_t p = (a - R.base) >> PROBE_PAGE_SHIFT;
        const uint64_t plast = (stop - 1 - R.base) >> PROBE_PAGE_SHIFT;
        for (; p <= plast; ++p) {
            if (rd) set_bit(s->readBits, R.firstPage + p);
            if (wr) set_bit(s->writeBits, R.firstPage + p);
        }
        a = stop;
    }
}

#define PROBE_OFF(ud) \
    ProbeState* s = (ProbeState*)(ud); \
    if (s == nullptr || s->enabled == 0u) return SANITIZER_PATCH_SUCCESS;

// SANITIZER_INSTRUCTION_GLOBAL_MEMORY_ACCESS: SanitizerCallbackMemoryAccess
extern "C" __device__ __noinline__ SanitizerPatchResult
ProbeGlobalAccess(void* userdata, uint64_t pc, void* ptr, uint32_t accessSize,
                  uint32_t flags, const void* pData)
{
    PROBE_OFF(userdata);
    if (s->count) warp_count(&s->accesses);
    if (flags & SANITIZER_MEMORY_DEVICE_FLAG_PREFETCH) {
        atomicAdd(&s->prefetch, 1ull);
        return SANITIZER_PATCH_SUCCESS;
    }
    bool rd = (flags & SANITIZER_MEMORY_DEVICE_FLAG_READ) != 0;
    bool wr = (flags & SANITIZER_MEMORY_DEVICE_FLAG_WRITE) != 0;
    if (!rd && !wr) { rd = true; wr = true; }   // unknown kind (atomics report both): be safe
    mark(s, (uint64_t)ptr, accessSize, rd, wr);
    return SANITIZER_PATCH_SUCCESS;
}

// SANITIZER_INSTRUCTION_MEMCPY_ASYNC (cp.async global->shared): SanitizerCallbackMemcpyAsync
extern "C" __device__ __noinline__ SanitizerPatchResult
ProbeMemcpyAsync(void* userdata, uint64_t pc, void* src, uint32_t dst, uint32_t accessSize)
{
    PROBE_OFF(userdata);
    if (s->count) warp_count(&s->memcpyAsync);
    if (src) mark(s, (uint64_t)src, accessSize, true, false);
    return SANITIZER_PATCH_SUCCESS;
}

// SANITIZER_INSTRUCTION_BULK_COPY_GLOBAL_TO_SHARED: SanitizerCallbackBulkCopyGlobalToShared
// data bits 0:15 = number of 16-byte blocks
extern "C" __device__ __noinline__ SanitizerPatchResult
ProbeBulkG2S(void* userdata, uint64_t pc, uint64_t src, uint32_t dst, uint32_t barrier,
             uint32_t data, uint32_t isMulticast)
{
    PROBE_OFF(userdata);
    atomicAdd(&s->bulkG2S, 1ull);
    mark(s, src, (uint64_t)(data & 0xffffu) * 16u, true, false);
    return SANITIZER_PATCH_SUCCESS;
}

// SANITIZER_INSTRUCTION_BULK_COPY_SHARED_TO_GLOBAL: SanitizerCallbackBulkCopySharedToGlobal
extern "C" __device__ __noinline__ SanitizerPatchResult
ProbeBulkS2G(void* userdata, uint64_t pc, uint64_t dst, uint32_t src, uint32_t numBlocks)
{
    PROBE_OFF(userdata);
    atomicAdd(&s->bulkS2G, 1ull);
    mark(s, dst, (uint64_t)numBlocks * 16u, false, true);
    return SANITIZER_PATCH_SUCCESS;
}

// SANITIZER_INSTRUCTION_BULK_REDUCTION_SHARED_TO_GLOBAL: SanitizerCallbackBulkReductionSharedToGlobal
extern "C" __device__ __noinline__ SanitizerPatchResult
ProbeBulkRedS2G(void* userdata, uint64_t pc, uint64_t dst, uint32_t src, uint32_t numBlocks)
{
    PROBE_OFF(userdata);
    atomicAdd(&s->bulkRed, 1ull);
    mark(s, dst, (uint64_t)numBlocks * 16u, true, true);
    return SANITIZER_PATCH_SUCCESS;
}

#if defined(PROBE_HAVE_TMA)
// SANITIZER_INSTRUCTION_TMA_LOAD (Sanitizer API 2026.2 / CUDA 13.2+ headers only):
// SanitizerCallbackTensorMemoryLoad. The callback gets the tensor map's address and the box
// coordinates, not the global bytes: mapping them to pages needs the host to decode the
// tensor map (recorded from cuTensorMapEncode*);
// the probe only counts them, to prove the callback fires.
extern "C" __device__ __noinline__ SanitizerPatchResult
ProbeTmaLoad(void* userdata, uint64_t pc, uint64_t pTensorMap, uint32_t dst, uint32_t barrier,
             int32_t c0, int32_t c1, int32_t c2, int32_t c3, int32_t c4, uint32_t dim,
             uint32_t isMulticast, uint32_t maskAndIm2ColArgs, uint32_t loadMode)
{
    PROBE_OFF(userdata);
    atomicAdd(&s->tmaLoad, 1ull);
    return SANITIZER_PATCH_SUCCESS;
}
#endif
