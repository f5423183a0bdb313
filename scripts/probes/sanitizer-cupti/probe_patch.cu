// Device patch functions of the #35 touched-pages probe. Signatures as in the CUDA 13.0
// sanitizer_patching.h (Sanitizer_InstructionId -> callback type):
//   GLOBAL_MEMORY_ACCESS (3)             SanitizerCallbackMemoryAccess
//   MEMCPY_ASYNC (14)                    SanitizerCallbackMemcpyAsync
//   BULK_COPY_GLOBAL_TO_SHARED (30)      SanitizerCallbackBulkCopyGlobalToShared
//   BULK_COPY_SHARED_TO_GLOBAL (35)      SanitizerCallbackBulkCopySharedToGlobal
//   BULK_REDUCTION_SHARED_TO_GLOBAL (37) SanitizerCallbackBulkReductionSharedToGlobal
//   TMA_LOAD (43, headers 13.3+ only)    SanitizerCallbackTensorMemoryLoad (declared here by hand)
// Built as NVIDIA's compute-sanitizer-samples do (MemoryTracker/Makefile):
//   nvcc --fatbin --compile-as-tools-patch -gencode arch=compute_90,code=sm_90 -I<sanitizer>/include ...
//
// Every callback first tests `userdata == NULL || !on`: a launch of a patched module that is
// not the chosen one pays exactly that (plus the call), nothing else.
#include <sanitizer_patching.h>
#include "probe_shared.h"

static __device__ __forceinline__ unsigned lane()
{
    unsigned l;
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(l));
    return l;
}

// One atomic per warp instead of one per thread.
static __device__ __forceinline__ void count_warp(unsigned long long* c)
{
    const unsigned m = __activemask();
    if (lane() == (unsigned)(__ffs(m) - 1)) atomicAdd(c, (unsigned long long)__popc(m));
}

// The first active lane of the warp.
static __device__ __forceinline__ bool warp_leader()
{
    return lane() == (unsigned)(__ffs(__activemask()) - 1);
}

// Index of the region holding addr, or -1 (regions sorted by base, disjoint).
static __device__ __forceinline__ int region_of(const ProbeDevState* s, uint64_t addr)
{
    int lo = 0, hi = (int)s->nregions - 1, hit = -1;
    while (lo <= hi) {
        const int mid = (lo + hi) >> 1;
        if (s->regions[mid].base <= addr) {
            hit = mid;
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    if (hit >= 0 && addr - s->regions[hit].base < s->regions[hit].size) return hit;
    return -1;
}

static __device__ __forceinline__ void set_page(uint32_t* bits, uint64_t page)
{
    uint32_t* w = bits + (page >> 5);
    const uint32_t b = 1u << (unsigned)(page & 31u);
    // Most accesses land on a page already marked: a plain read spares the atomic.
    if ((*(volatile uint32_t*)w & b) == 0u) atomicOr(w, b);
}

static __device__ void note_outside(ProbeDevState* s, uint64_t addr)
{
    atomicAdd(&s->outside, 1ull);
    const unsigned i = atomicAdd(&s->outsideN, 1u);
    if (i < PROBE_SAMPLES) s->outsideAddr[i] = addr;
}

// Marks every page of [addr, addr + bytes) read and/or written.
static __device__ void mark(ProbeDevState* s, uint64_t addr, uint64_t bytes, bool rd, bool wr)
{
    if (bytes == 0) bytes = 1;
    const uint64_t end = addr + bytes;
    uint64_t a = addr;
    for (int guard = 0; a < end && guard < 64; ++guard) {   // a range can span a few regions
        const int r = region_of(s, a);
        if (r < 0) {
            note_outside(s, a);
            return;
        }
        const ProbeRegion& R = s->regions[r];
        const uint64_t rend = R.base + R.size;
        const uint64_t stop = end < rend ? end : rend;
        const uint64_t last = (stop - 1 - R.base) >> PROBE_PAGE_SHIFT;
        for (uint64_t p = (a - R.base) >> PROBE_PAGE_SHIFT; p <= last; ++p) {
            if (rd) set_page(s->readBits, R.firstPage + p);
            if (wr) set_page(s->writeBits, R.firstPage + p);
        }
        a = stop;
    }
}

// The slow paths stay out of line: the entry points below then need no stack frame, so a
// launch whose userdata is NULL or off pays a load, a compare and a return per access.
static __device__ __noinline__ void global_slow(ProbeDevState* s, uint64_t addr, uint32_t accessSize, uint32_t flags)
{
    if (s->count) count_warp(&s->globalAccesses);
    if (flags & SANITIZER_MEMORY_DEVICE_FLAG_PREFETCH) {
        atomicAdd(&s->prefetch, 1ull);
        return;
    }
    bool rd = (flags & SANITIZER_MEMORY_DEVICE_FLAG_READ) != 0;
    bool wr = (flags & SANITIZER_MEMORY_DEVICE_FLAG_WRITE) != 0;
    if (!rd && !wr) rd = wr = true;   // not said: count it both ways
    mark(s, addr, accessSize, rd, wr);
}

// kind: 0 cp.async, 1 bulk global->shared, 2 bulk shared->global, 3 bulk reduce shared->global
static __device__ __noinline__ void range_slow(ProbeDevState* s, int kind, uint64_t addr, uint64_t bytes)
{
    if (kind == 0) {
        count_warp(&s->memcpyAsync);
        if (addr) mark(s, addr, bytes, true, false);
        return;
    }
    // every active thread of the warp has the same arguments: one lane is enough
    if (!warp_leader()) return;
    if (kind == 1) {
        atomicAdd(&s->bulkG2S, 1ull);
        mark(s, addr, bytes, true, false);
    } else if (kind == 2) {
        atomicAdd(&s->bulkS2G, 1ull);
        mark(s, addr, bytes, false, true);
    } else {
        atomicAdd(&s->bulkRedS2G, 1ull);
        mark(s, addr, bytes, true, true);
    }
}

static __device__ __noinline__ void tma_slow(ProbeDevState* s, uint64_t map, int32_t c0, int32_t c1, uint32_t dim,
                                             uint32_t mode)
{
    if (!warp_leader()) return;
    atomicAdd(&s->tmaLoad, 1ull);
    const unsigned i = atomicAdd(&s->tmaN, 1u);
    if (i < PROBE_SAMPLES) {
        s->tmaMap[i] = map;
        s->tmaCoord[i] = (unsigned long long)(uint32_t)c0 | ((unsigned long long)(uint32_t)c1 << 32);
        s->tmaDimMode[i] = (unsigned long long)dim | ((unsigned long long)mode << 32);
    }
}

#define PROBE_STATE_OR_RETURN(ud)                                  \
    ProbeDevState* s = (ProbeDevState*)(ud);                       \
    if (s == nullptr || s->on == 0u) return SANITIZER_PATCH_SUCCESS

extern "C" __device__ __noinline__ SanitizerPatchResult
ProbeGlobalAccess(void* userdata, uint64_t pc, void* ptr, uint32_t accessSize, uint32_t flags,
                  const void* pData)
{
    PROBE_STATE_OR_RETURN(userdata);
    global_slow(s, (uint64_t)(uintptr_t)ptr, accessSize, flags);
    return SANITIZER_PATCH_SUCCESS;
}

// cp.async (global -> shared). src may be NULL when src-size is 0.
extern "C" __device__ __noinline__ SanitizerPatchResult
ProbeMemcpyAsync(void* userdata, uint64_t pc, void* src, uint32_t dst, uint32_t accessSize)
{
    PROBE_STATE_OR_RETURN(userdata);
    range_slow(s, 0, (uint64_t)(uintptr_t)src, accessSize);
    return SANITIZER_PATCH_SUCCESS;
}

// cp.async.bulk.shared::cluster.global: data bits 0:15 = number of 16-byte blocks.
extern "C" __device__ __noinline__ SanitizerPatchResult
ProbeBulkG2S(void* userdata, uint64_t pc, uint64_t src, uint32_t dst, uint32_t barrier, uint32_t data,
             uint32_t isMulticast)
{
    PROBE_STATE_OR_RETURN(userdata);
    range_slow(s, 1, src, (uint64_t)(data & 0xffffu) * 16u);
    return SANITIZER_PATCH_SUCCESS;
}

// cp.async.bulk.global.shared::cta
extern "C" __device__ __noinline__ SanitizerPatchResult
ProbeBulkS2G(void* userdata, uint64_t pc, uint64_t dst, uint32_t src, uint32_t numBlocks)
{
    PROBE_STATE_OR_RETURN(userdata);
    range_slow(s, 2, dst, (uint64_t)numBlocks * 16u);
    return SANITIZER_PATCH_SUCCESS;
}

// cp.reduce.async.bulk.global.shared::cta: a read-modify-write of global memory.
extern "C" __device__ __noinline__ SanitizerPatchResult
ProbeBulkRedS2G(void* userdata, uint64_t pc, uint64_t dst, uint32_t src, uint32_t numBlocks)
{
    PROBE_STATE_OR_RETURN(userdata);
    range_slow(s, 3, dst, (uint64_t)numBlocks * 16u);
    return SANITIZER_PATCH_SUCCESS;
}

// SANITIZER_INSTRUCTION_TMA_LOAD (43) exists from the 13.3 headers on; its callback type
// (SanitizerCallbackTensorMemoryLoad) is copied here so one fatbin serves both libraries. The
// callback names the tensor map and box coordinates, not the global bytes: turning them into
// pages needs the tensor map's contents from the host (cuTensorMapEncode*). The probe only
// counts and samples them, to learn whether they fire. (TMA_STORE, 44, is named in the 13.4
// header but its callback type is not defined there.)
extern "C" __device__ __noinline__ SanitizerPatchResult
ProbeTmaLoad(void* userdata, uint64_t pc, uint64_t pTensorMap, uint32_t dst, uint32_t barrier,
             int32_t coord0, int32_t coord1, int32_t coord2, int32_t coord3, int32_t coord4, uint32_t dim,
             uint32_t isMulticast, uint32_t maskAndIm2ColArgs, uint32_t loadMode)
{
    PROBE_STATE_OR_RETURN(userdata);
    tma_slow(s, pTensorMap, coord0, coord1, dim, loadMode);
    return SANITIZER_PATCH_SUCCESS;
}
