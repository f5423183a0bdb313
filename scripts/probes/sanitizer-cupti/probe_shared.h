// Shared between probe.cpp (host) and patch.cu (device): the per-launch state the
// patch callbacks receive as `userdata`.
#pragma once
#include <stdint.h>

#define PROBE_PAGE_SHIFT 12u          // 4 KiB pages
#define PROBE_MAX_RANGES 4096u

struct ProbeRange {
    uint64_t base;       // first byte of the tracked allocation
    uint64_t size;       // bytes
    uint64_t firstPage;  // index of this range's first page in the bitmaps
};

struct ProbeState {
    // --- read-only during the launch ---
    uint32_t enabled;    // 0: every callback returns at once (the "off" path)
    uint32_t count;      // 1: also count callback invocations (costs an atomic per warp)
    uint32_t nranges;    // sorted by base, non-overlapping
    uint32_t pad;
    const ProbeRange* ranges;
    uint32_t* readBits;  // one bit per page, all ranges concatenated
    uint32_t* writeBits;
    // --- written by the callbacks ---
    unsigned long long accesses;      // global memory access callbacks (when count=1)
    unsigned long long outside;       // accesses/bytes outside every tracked range (always)
    unsigned long long memcpyAsync;   // cp.async callbacks (when count=1)
    unsigned long long bulkG2S;       // cp.async.bulk global->shared (always)
    unsigned long long bulkS2G;       // cp.async.bulk shared->global (always)
    unsigned long long bulkRed;       // cp.reduce.async.bulk shared->global (always)
    unsigned long long tmaLoad;       // cp.async.bulk.tensor loads (13.2+ API only, always)
    unsigned long long prefetch;      // prefetch-only accesses, not marked (always)
};
