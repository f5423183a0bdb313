// Per-chunk facts about device memory, computed where the memory is (the recorder's write set
// and zero detection, #13), and the reachable-memory walk's pointer scan (#34). Source of
// `chunks.ptx`, which is what ships (the driver compiles it at load time, so kreplay needs no
// nvcc). Regenerate after an edit with
//   scripts/gen-ptx.sh        (nvcc -ptx, then the PTX version lowered to 7.0 for old drivers)
//
// Every buffer is 16-byte aligned (device scratch, or an allocation's base); `bytes` need not
// be a multiple of 16. A chunk is 1 << chunk_shift bytes; flags are one u32 per chunk, set to 1
// (never cleared: the caller zeroes them first).

typedef unsigned long long u64;

#define SPAN_BYTES 65536
#define THREADS 256

// kreplay_chunk_scan: nonzero[c] = 1 when chunk c of `pre` holds a nonzero byte; when `post` is
// not null, changed[c] = 1 when chunk c of `post` differs from `pre`. A block ORs the flags of
// a 64 KiB span (chunks are multiples of it) and stores once per span: a store per warp would
// put tens of millions of stores on the same few flag words for a large region.
extern "C" __global__ void __launch_bounds__(THREADS)
    kreplay_chunk_scan(const uint4* pre, const uint4* post, u64 bytes, unsigned chunk_shift,
                       unsigned* nonzero, unsigned* changed) {
  const u64 spans = (bytes + SPAN_BYTES - 1) / SPAN_BYTES;
  const u64 vectors = bytes >> 4;
  for (u64 s = blockIdx.x; s < spans; s += gridDim.x) {
    int nz = 0, diff = 0;
    const u64 v0 = s * (SPAN_BYTES / 16);
    const u64 v1 = v0 + SPAN_BYTES / 16 < vectors ? v0 + SPAN_BYTES / 16 : vectors;
#pragma unroll 4
    for (u64 v = v0 + threadIdx.x; v < v1; v += THREADS) {
      const uint4 a = pre[v];
      nz |= (a.x | a.y | a.z | a.w) != 0;
      if (post) {
        const uint4 b = post[v];
        diff |= (a.x != b.x) | (a.y != b.y) | (a.z != b.z) | (a.w != b.w);
      }
    }
    // The bytes past the last vector belong to the last span.
    if (s == spans - 1 && threadIdx.x == 0) {
      const unsigned char* p = (const unsigned char*)pre;
      const unsigned char* q = (const unsigned char*)post;
      for (u64 k = vectors << 4; k < bytes; ++k) {
        nz |= p[k] != 0;
        if (q) diff |= q[k] != p[k];
      }
    }
    nz = __syncthreads_or(nz);
    diff = __syncthreads_or(diff);
    if (threadIdx.x == 0) {
      const u64 c = (s * SPAN_BYTES) >> chunk_shift;
      if (nz) nonzero[c] = 1;
      if (diff) changed[c] = 1;
    }
  }
}

__device__ __forceinline__ u64 mix64(u64 z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// kreplay_chunk_digest: a 128-bit digest per chunk (digest[2c], digest[2c+1], zeroed by the
// caller), for memory that has no copy to compare with: the digest before the launch against
// the digest after it says which chunks changed. Each 8-byte word contributes two mixes of
// (word, position) to two sums, so any change to a chunk changes its digest except with
// probability about 2^-128. Also sets nonzero[c] like the scan. A block sums a span of 64 KiB
// and adds it with one atomic per half.
extern "C" __global__ void __launch_bounds__(THREADS)
    kreplay_chunk_digest(const uint4* p, u64 bytes, unsigned chunk_shift, u64* digest,
                         unsigned* nonzero) {
  __shared__ u64 sh1[THREADS / 32], sh2[THREADS / 32];
  __shared__ unsigned shz[THREADS / 32];
  const u64 spans = (bytes + SPAN_BYTES - 1) / SPAN_BYTES;
  const u64 vectors = bytes >> 4;
  const unsigned lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (u64 s = blockIdx.x; s < spans; s += gridDim.x) {
    u64 h1 = 0, h2 = 0;
    unsigned nz = 0;
    const u64 v0 = s * (SPAN_BYTES / 16);
    for (u64 v = v0 + threadIdx.x; v < v0 + SPAN_BYTES / 16 && v < vectors; v += THREADS) {
      const uint4 a = p[v];
      const u64 w0 = ((u64)a.y << 32) | a.x, w1 = ((u64)a.w << 32) | a.z;
      const u64 k = v << 1;
      h1 += mix64(w0 ^ (k * 0x9e3779b97f4a7c15ull)) + mix64(w1 ^ ((k + 1) * 0x9e3779b97f4a7c15ull));
      h2 += mix64(w0 + k * 0xd6e8feb86659fd93ull + 0x632be59bd9b4e019ull) +
            mix64(w1 + (k + 1) * 0xd6e8feb86659fd93ull + 0x632be59bd9b4e019ull);
      nz |= a.x | a.y | a.z | a.w;
    }
    // The bytes past the last vector belong to the last span.
    if (s == spans - 1 && threadIdx.x == 0) {
      const unsigned char* b = (const unsigned char*)p;
      for (u64 k = vectors << 4; k < bytes; ++k) {
        h1 += mix64((u64)b[k] ^ ((k | (1ull << 62)) * 0x9e3779b97f4a7c15ull));
        h2 += mix64((u64)b[k] + (k | (1ull << 62)) * 0xd6e8feb86659fd93ull);
        nz |= b[k];
      }
    }
    for (int o = 16; o > 0; o >>= 1) {
      h1 += __shfl_xor_sync(0xffffffffu, h1, o);
      h2 += __shfl_xor_sync(0xffffffffu, h2, o);
      nz |= __shfl_xor_sync(0xffffffffu, nz, o);
    }
    if (lane == 0) {
      sh1[warp] = h1;
      sh2[warp] = h2;
      shz[warp] = nz;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      u64 t1 = 0, t2 = 0;
      unsigned z = 0;
      for (int w = 0; w < THREADS / 32; ++w) {
        t1 += sh1[w];
        t2 += sh2[w];
        z |= shz[w];
      }
      const u64 c = (s * SPAN_BYTES) >> chunk_shift;
      atomicAdd(&digest[2 * c], t1);
      atomicAdd(&digest[2 * c + 1], t2);
      if (z) nonzero[c] = 1;
    }
    __syncthreads();
  }
}

// kreplay_pointer_scan: the reachable-memory walk's pointer scan (record/src/walk.rs), where the
// memory is: each 8-byte word w[i] of `words` (8-byte aligned, `nwords` of them) that lies in
// the device heap [heap_lo, heap_hi), or else is nonzero and inside the pointer window
// [lo, hi), is a hit: (i | HEAP_BIT when in the heap, w[i]) goes to out[2k], out[2k + 1] for
// k = atomicAdd(count, 1) when k < cap. `count` ends as the number of hits, also past `cap`
// (the caller then scans again with room for all). Hits come in no order; the host sorts them.
// A warp takes its slots with one atomic: pointer tables hit on every word. When `copy` is not
// null, every word also goes to copy[i]: the snapshot's copy of a large region made by the
// walk's read of it (one pass over the memory instead of two, #34).
#define HEAP_BIT (1ull << 63)
extern "C" __global__ void __launch_bounds__(THREADS)
    kreplay_pointer_scan(const u64* words, u64 nwords, u64 lo, u64 hi, u64 heap_lo, u64 heap_hi,
                         u64* out, unsigned cap, unsigned* count, u64* copy) {
  const unsigned lane = threadIdx.x & 31;
  const u64 stride = (u64)gridDim.x * THREADS;
  // Every lane of a warp runs the same number of rounds, so the ballot sees them all.
  const u64 rounds = (nwords + stride - 1) / stride;
  u64 i = (u64)blockIdx.x * THREADS + threadIdx.x;
  for (u64 r = 0; r < rounds; ++r, i += stride) {
    u64 w = 0, key = 0;
    bool hit = false;
    if (i < nwords) {
      w = words[i];
      if (copy) copy[i] = w;
      if (w >= heap_lo && w < heap_hi) {
        hit = true;
        key = i | HEAP_BIT;
      } else if (w != 0 && w >= lo && w < hi) {
        hit = true;
        key = i;
      }
    }
    const unsigned hits = __ballot_sync(0xffffffffu, hit);
    if (hits == 0) continue;
    const int leader = __ffs(hits) - 1;
    unsigned first = 0;
    if (lane == leader) first = atomicAdd(count, __popc(hits));
    first = __shfl_sync(0xffffffffu, first, leader);
    if (hit) {
      const unsigned k = first + __popc(hits & ((1u << lane) - 1));
      if (k < cap) {
        out[2 * (u64)k] = key;
        out[2 * (u64)k + 1] = w;
      }
    }
  }
}

// The "many" kernels take a table of pieces instead of one range, so that a dispatch reaching
// thousands of small allocations costs one launch, not thousands (#34's pointer table). A block
// takes one piece at a time (pieces are at most 64 KiB: the host cuts regions into them). Each
// piece is a row of u64 words; the rows' layouts are in the comment of each kernel.

// kreplay_copy_many: row (dst, src, bytes). 16-byte vectors where both ends are aligned, bytes
// past the last vector (or the whole piece where they are not) one by one.
extern "C" __global__ void __launch_bounds__(THREADS)
    kreplay_copy_many(const u64* rows, u64 n) {
  for (u64 p = blockIdx.x; p < n; p += gridDim.x) {
    unsigned char* dst = (unsigned char*)rows[3 * p];
    const unsigned char* src = (const unsigned char*)rows[3 * p + 1];
    const u64 bytes = rows[3 * p + 2];
    u64 head = 0;
    if ((((u64)dst | (u64)src) & 15) == 0) {
      const u64 vectors = bytes >> 4;
      for (u64 v = threadIdx.x; v < vectors; v += THREADS)
        ((uint4*)dst)[v] = ((const uint4*)src)[v];
      head = vectors << 4;
    }
    for (u64 k = head + threadIdx.x; k < bytes; k += THREADS) dst[k] = src[k];
  }
}

// kreplay_scan_many: row (pre, post, bytes, flag): nonzero[flag] = 1 when the piece of `pre`
// holds a nonzero byte; when `post` is not null, changed[flag] = 1 when it differs from `pre`
// (the flags of kreplay_chunk_scan, for many pieces; several pieces may share a flag).
extern "C" __global__ void __launch_bounds__(THREADS)
    kreplay_scan_many(const u64* rows, u64 n, unsigned* nonzero, unsigned* changed) {
  for (u64 p = blockIdx.x; p < n; p += gridDim.x) {
    const unsigned char* pre = (const unsigned char*)rows[4 * p];
    const unsigned char* post = (const unsigned char*)rows[4 * p + 1];
    const u64 bytes = rows[4 * p + 2];
    const u64 flag = rows[4 * p + 3];
    int nz = 0, diff = 0;
    u64 head = 0;
    if ((((u64)pre | (u64)post) & 15) == 0) {
      const u64 vectors = bytes >> 4;
      for (u64 v = threadIdx.x; v < vectors; v += THREADS) {
        const uint4 a = ((const uint4*)pre)[v];
        nz |= (a.x | a.y | a.z | a.w) != 0;
        if (post) {
          const uint4 b = ((const uint4*)post)[v];
          diff |= (a.x != b.x) | (a.y != b.y) | (a.z != b.z) | (a.w != b.w);
        }
      }
      head = vectors << 4;
    }
    for (u64 k = head + threadIdx.x; k < bytes; k += THREADS) {
      nz |= pre[k] != 0;
      if (post) diff |= post[k] != pre[k];
    }
    nz = __syncthreads_or(nz);
    diff = __syncthreads_or(diff);
    if (threadIdx.x == 0) {
      if (nz) nonzero[flag] = 1;
      if (diff) changed[flag] = 1;
    }
  }
}

// kreplay_pointer_scan_many: row (words, nwords, tag, first): kreplay_pointer_scan over each
// piece (8-byte aligned), a hit written as three words (tag, (first + i) | HEAP_BIT when in the
// heap, w[i]) at out[3k] for k = atomicAdd(count, 1) when k < cap. Also shape[p] |= 1 when a
// word of the piece is above `max_handle` (it cannot be a table of texture handles), |= 2 when
// a word is nonzero: the host reads only a small region whose pieces all say 2 and none 1, to
// take it for a handle table.
extern "C" __global__ void __launch_bounds__(THREADS)
    kreplay_pointer_scan_many(const u64* rows, u64 n, u64 lo, u64 hi, u64 heap_lo, u64 heap_hi,
                              u64 max_handle, u64* out, unsigned cap, unsigned* count,
                              unsigned* shape) {
  const unsigned lane = threadIdx.x & 31;
  for (u64 p = blockIdx.x; p < n; p += gridDim.x) {
    const u64* words = (const u64*)rows[4 * p];
    const u64 nwords = rows[4 * p + 1];
    const u64 tag = rows[4 * p + 2];
    const u64 first = rows[4 * p + 3];
    int big = 0, any = 0;
    // Every lane of a warp runs the same number of rounds, so the ballot sees them all.
    const u64 rounds = (nwords + THREADS - 1) / THREADS;
    u64 i = threadIdx.x;
    for (u64 r = 0; r < rounds; ++r, i += THREADS) {
      u64 w = 0, key = 0;
      bool hit = false;
      if (i < nwords) {
        w = words[i];
        big |= w > max_handle;
        any |= w != 0;
        if (w >= heap_lo && w < heap_hi) {
          hit = true;
          key = (first + i) | HEAP_BIT;
        } else if (w != 0 && w >= lo && w < hi) {
          hit = true;
          key = first + i;
        }
      }
      const unsigned hits = __ballot_sync(0xffffffffu, hit);
      if (hits == 0) continue;
      const int leader = __ffs(hits) - 1;
      unsigned at = 0;
      if (lane == leader) at = atomicAdd(count, __popc(hits));
      at = __shfl_sync(0xffffffffu, at, leader);
      if (hit) {
        const unsigned k = at + __popc(hits & ((1u << lane) - 1));
        if (k < cap) {
          out[3 * (u64)k] = tag;
          out[3 * (u64)k + 1] = key;
          out[3 * (u64)k + 2] = w;
        }
      }
    }
    big = __syncthreads_or(big);
    any = __syncthreads_or(any);
    if (threadIdx.x == 0) shape[p] = (big ? 1u : 0u) | (any ? 2u : 0u);
  }
}
