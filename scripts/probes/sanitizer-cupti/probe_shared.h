// Shared by probe_inject.cpp (host) and probe_patch.cu (device): the state one instrumented
// launch's patch callbacks receive as `userdata`. Plain C layout, no CUDA types.
#pragma once
#include <stdint.h>

#define PROBE_PAGE_SHIFT 12u   // 4 KiB pages
#define PROBE_SAMPLES 8u

// One tracked allocation. `firstPage` indexes the bitmaps (all regions back to back).
struct ProbeRegion {
    uint64_t base;
    uint64_t size;
    uint64_t firstPage;
};

struct ProbeDevState {
    // Set by the host before the launch, read-only on the device.
    uint32_t on;          // 0: every callback returns at once
    uint32_t count;       // 1: also count global accesses (one atomic per warp per access)
    uint32_t nregions;    // sorted by base, non-overlapping
    uint32_t pad0;
    const ProbeRegion* regions;
    uint32_t* readBits;   // one bit per 4 KiB page
    uint32_t* writeBits;
    // Written by the callbacks.
    unsigned long long globalAccesses;  // only when count = 1
    unsigned long long outside;         // accesses (or bulk ranges) in no tracked region
    unsigned long long prefetch;        // prefetch-only accesses (not marked)
    unsigned long long memcpyAsync;     // cp.async global->shared
    unsigned long long bulkG2S;         // cp.async.bulk global->shared
    unsigned long long bulkS2G;         // cp.async.bulk shared->global
    unsigned long long bulkRedS2G;      // cp.reduce.async.bulk shared->global
    unsigned long long tmaLoad;         // cp.async.bulk.tensor loads (Sanitizer API 13.3+ only)
    unsigned int outsideN;              // samples taken of `outside`
    unsigned int tmaN;                  // samples taken of `tmaLoad`
    unsigned long long outsideAddr[PROBE_SAMPLES];
    unsigned long long tmaMap[PROBE_SAMPLES];      // tensor map address
    unsigned long long tmaCoord[PROBE_SAMPLES];    // coord0 | coord1 << 32
    unsigned long long tmaDimMode[PROBE_SAMPLES];  // dim | loadMode << 32
};
