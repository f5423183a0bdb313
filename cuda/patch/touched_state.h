// The state one instrumented launch's patch callbacks receive as `userdata`
// (touched_patch.cu), shared with the host (cuda/src/touched_patch.rs repeats it as repr(C)
// structs, its tests check the layout). Plain C, no CUDA types.
#pragma once
#include <stdint.h>

#define TOUCHED_PAGE_SHIFT 12u  // 4 KiB pages: the format's smallest extent page

// One region the capture holds, sorted by base, disjoint. `first_page` indexes the bitmaps
// (every region's pages back to back).
struct TouchedRegion {
    uint64_t base;
    uint64_t size;
    uint64_t first_page;
};

struct TouchedState {
    // Set by the host before the launch, read-only on the device.
    uint32_t on;  // 0: every callback returns at once (a launch of a patched module not captured)
    uint32_t nregions;
    const struct TouchedRegion* regions;
    uint32_t* read_bits;   // one bit per page
    uint32_t* write_bits;
    // Written by the callbacks: accesses in no region (the walk missed memory the kernel
    // reads: the capture is incomplete), and the first such address.
    unsigned long long outside;
    unsigned long long first_outside;
};
