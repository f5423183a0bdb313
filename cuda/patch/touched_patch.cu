// The patch module of `record --memory touched` (issue 35): device callbacks the Compute
// Sanitizer API calls at each global-memory access of the one launch being captured, marking
// the 4 KiB pages of the captured regions it reads and writes. Adapted from the probe
// (scripts/probes/sanitizer-cupti/probe_patch.cu), which measured it on the H200. Built by
// scripts/gen-patch.sh (nvcc --fatbin --compile-as-tools-patch, as NVIDIA's
// compute-sanitizer-samples build theirs) into touched_patch.fatbin, which ships.
//
// Signatures as in the CUDA 13.0 sanitizer_patching.h (instruction id -> callback type):
//   GLOBAL_MEMORY_ACCESS (3)             SanitizerCallbackMemoryAccess
//   MEMCPY_ASYNC (14)                    SanitizerCallbackMemcpyAsync
//   BULK_COPY_GLOBAL_TO_SHARED (30)      SanitizerCallbackBulkCopyGlobalToShared
//   BULK_COPY_SHARED_TO_GLOBAL (35)      SanitizerCallbackBulkCopySharedToGlobal
//   BULK_REDUCTION_SHARED_TO_GLOBAL (37) SanitizerCallbackBulkReductionSharedToGlobal
// Every callback first tests `userdata == NULL || !on`: a launch of a patched module that is
// not the captured one pays that (and the call), nothing else.
#include <sanitizer_patching.h>
#include "touched_state.h"

static __device__ __forceinline__ unsigned lane() {
  unsigned l;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(l));
  return l;
}

// The first active lane of the warp (bulk copies: every active thread has the same operands).
static __device__ __forceinline__ bool warp_leader() {
  return lane() == (unsigned)(__ffs(__activemask()) - 1);
}

// Index of the region holding addr, or -1.
static __device__ __forceinline__ int region_of(const TouchedState* s, uint64_t addr) {
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

static __device__ __forceinline__ void set_page(uint32_t* bits, uint64_t page) {
  uint32_t* w = bits + (page >> 5);
  const uint32_t b = 1u << (unsigned)(page & 31u);
  // Most accesses land on a page already marked: a plain read spares the atomic.
  if ((*(volatile uint32_t*)w & b) == 0u) atomicOr(w, b);
}

// Marks every page of [addr, addr + bytes) read and/or written.
static __device__ void mark(TouchedState* s, uint64_t addr, uint64_t bytes, bool rd, bool wr) {
  if (bytes == 0) bytes = 1;
  const uint64_t end = addr + bytes;
  if (end <= addr) {  // wraps past the top of the address space: in no region
    if (atomicAdd(&s->outside, 1ull) == 0ull) s->first_outside = addr;
    return;
  }
  uint64_t a = addr;
  // A range can span several regions (a bulk copy of up to 1 MiB over small allocations side
  // by side): each turn either returns or moves `a` to the end of one region, so the loop ends
  // after at most nregions turns. No other bound: one that stopped early would leave pages
  // of the range unmarked, and the capture would lack them without a word.
  while (a < end) {
    const int r = region_of(s, a);
    if (r < 0) {
      if (atomicAdd(&s->outside, 1ull) == 0ull) s->first_outside = a;
      return;
    }
    const TouchedRegion& R = s->regions[r];
    const uint64_t rend = R.base + R.size;
    const uint64_t stop = end < rend ? end : rend;
    const uint64_t last = (stop - 1 - R.base) >> TOUCHED_PAGE_SHIFT;
    for (uint64_t p = (a - R.base) >> TOUCHED_PAGE_SHIFT; p <= last; ++p) {
      if (rd) set_page(s->read_bits, R.first_page + p);
      if (wr) set_page(s->write_bits, R.first_page + p);
    }
    a = stop;
  }
}

// The slow paths stay out of line: the entry points then need no stack frame, so a launch
// whose userdata is NULL or off pays a load, a compare and a return per access.
static __device__ __noinline__ void global_slow(TouchedState* s, uint64_t addr, uint32_t size,
                                                uint32_t flags) {
  if (flags & SANITIZER_MEMORY_DEVICE_FLAG_PREFETCH) return;
  bool rd = (flags & SANITIZER_MEMORY_DEVICE_FLAG_READ) != 0;
  bool wr = (flags & SANITIZER_MEMORY_DEVICE_FLAG_WRITE) != 0;
  if (!rd && !wr) rd = wr = true;  // not said (atomics): both
  mark(s, addr, size, rd, wr);
}

// kind: 0 cp.async, 1 bulk global->shared, 2 bulk shared->global, 3 bulk reduce shared->global
static __device__ __noinline__ void range_slow(TouchedState* s, int kind, uint64_t addr,
                                               uint64_t bytes) {
  if (kind == 0) {
    if (addr) mark(s, addr, bytes, true, false);
    return;
  }
  if (!warp_leader()) return;
  mark(s, addr, bytes, kind != 2, kind != 1);
}

#define STATE_OR_RETURN(ud)                   \
  TouchedState* s = (TouchedState*)(ud);      \
  if (s == nullptr || s->on == 0u) return SANITIZER_PATCH_SUCCESS

extern "C" __device__ __noinline__ SanitizerPatchResult
KreplayTouchedGlobal(void* userdata, uint64_t pc, void* ptr, uint32_t accessSize, uint32_t flags,
                     const void* pData) {
  STATE_OR_RETURN(userdata);
  global_slow(s, (uint64_t)(uintptr_t)ptr, accessSize, flags);
  return SANITIZER_PATCH_SUCCESS;
}

// cp.async (global -> shared). src may be NULL when src-size is 0.
extern "C" __device__ __noinline__ SanitizerPatchResult
KreplayTouchedMemcpyAsync(void* userdata, uint64_t pc, void* src, uint32_t dst, uint32_t accessSize) {
  STATE_OR_RETURN(userdata);
  range_slow(s, 0, (uint64_t)(uintptr_t)src, accessSize);
  return SANITIZER_PATCH_SUCCESS;
}

// cp.async.bulk.shared::cluster.global: data bits 0:15 = number of 16-byte blocks.
extern "C" __device__ __noinline__ SanitizerPatchResult
KreplayTouchedBulkG2S(void* userdata, uint64_t pc, uint64_t src, uint32_t dst, uint32_t barrier,
                      uint32_t data, uint32_t isMulticast) {
  STATE_OR_RETURN(userdata);
  range_slow(s, 1, src, (uint64_t)(data & 0xffffu) * 16u);
  return SANITIZER_PATCH_SUCCESS;
}

// cp.async.bulk.global.shared::cta
extern "C" __device__ __noinline__ SanitizerPatchResult
KreplayTouchedBulkS2G(void* userdata, uint64_t pc, uint64_t dst, uint32_t src, uint32_t numBlocks) {
  STATE_OR_RETURN(userdata);
  range_slow(s, 2, dst, (uint64_t)numBlocks * 16u);
  return SANITIZER_PATCH_SUCCESS;
}

// cp.reduce.async.bulk.global.shared::cta: a read-modify-write of global memory.
extern "C" __device__ __noinline__ SanitizerPatchResult
KreplayTouchedBulkRedS2G(void* userdata, uint64_t pc, uint64_t dst, uint32_t src, uint32_t numBlocks) {
  STATE_OR_RETURN(userdata);
  range_slow(s, 3, dst, (uint64_t)numBlocks * 16u);
  return SANITIZER_PATCH_SUCCESS;
}
