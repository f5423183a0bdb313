// A paged-attention-like gather (issue 35): a pool of POOL_MIB MiB of 4 KiB pages, a block
// table selecting PERMILLE / 1000 of them (distinct, a fixed seed), and `gather_pages`, which
// reads only the selected pages into a small output. A capture of the whole pool is almost all
// bytes the kernel never reads; a capture by touched pages holds the selected pages.
//
//   touch_gather POOL_MIB PERMILLE [PAGES_FILE]
//
// PAGES_FILE gets the pool's page indices the kernel reads, one per line (what a capture by
// touched pages must hold of the pool). The kernel runs 3 times; the output is checked
// against the host's own computation and printed as a checksum.
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <vector>

#define CK(x)                                                                       \
  do {                                                                              \
    cudaError_t e_ = (x);                                                           \
    if (e_ != cudaSuccess) {                                                        \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(3);                                                                      \
    }                                                                               \
  } while (0)

static const int PAGE_FLOATS = 1024;  // 4 KiB

__host__ __device__ static inline float pool_value(uint64_t i) {
  uint64_t x = i * 0x9E3779B97F4A7C15ull;
  x ^= x >> 29;
  x *= 0xBF58476D1CE4E5B9ull;
  x ^= x >> 32;
  return (float)(x & 0xFFFFFF) / 16777216.0f;
}

extern "C" __global__ void fill_pool(float* pool, uint64_t n) {
  for (uint64_t i = blockIdx.x * (uint64_t)blockDim.x + threadIdx.x; i < n;
       i += (uint64_t)gridDim.x * blockDim.x)
    pool[i] = pool_value(i);
}

// One block a selected page: out[b] = 2 * pool[table[b]] + 1, page by page.
extern "C" __global__ void gather_pages(const float* pool, const int* table, int pages, float* out) {
  int b = blockIdx.x;
  if (b >= pages) return;
  const float* src = pool + (uint64_t)table[b] * PAGE_FLOATS;
  for (int t = threadIdx.x; t < PAGE_FLOATS; t += blockDim.x) out[(uint64_t)b * PAGE_FLOATS + t] = 2.0f * src[t] + 1.0f;
}

int main(int argc, char** argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: touch_gather POOL_MIB PERMILLE [PAGES_FILE]\n");
    return 2;
  }
  const uint64_t pool_mib = strtoull(argv[1], nullptr, 10);
  const int permille = atoi(argv[2]);
  const uint64_t pool_pages = pool_mib * 256, n = pool_pages * PAGE_FLOATS;
  int pages = (int)(pool_pages * permille / 1000);
  if (pages < 1) pages = 1;
  // The selected pages: a partial Fisher-Yates shuffle with a fixed LCG.
  std::vector<int> all(pool_pages);
  for (uint64_t i = 0; i < pool_pages; ++i) all[i] = (int)i;
  uint64_t s = 12345;
  for (int i = 0; i < pages; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    uint64_t j = i + (s >> 33) % (pool_pages - i);
    int t = all[i]; all[i] = all[j]; all[j] = t;
  }
  std::vector<int> table(all.begin(), all.begin() + pages);
  if (argc > 3) {
    FILE* f = fopen(argv[3], "w");
    if (!f) { perror(argv[3]); return 2; }
    for (int p : table) fprintf(f, "%d\n", p);
    fclose(f);
  }
  float *pool, *out;
  int* dtable;
  CK(cudaMalloc(&pool, n * sizeof(float)));
  CK(cudaMalloc(&dtable, pages * sizeof(int)));
  CK(cudaMalloc(&out, (uint64_t)pages * PAGE_FLOATS * sizeof(float)));
  fill_pool<<<1024, 256>>>(pool, n);
  CK(cudaMemcpy(dtable, table.data(), pages * sizeof(int), cudaMemcpyHostToDevice));
  CK(cudaMemset(out, 0, (uint64_t)pages * PAGE_FLOATS * sizeof(float)));
  for (int r = 0; r < 3; ++r) gather_pages<<<pages, 256>>>(pool, dtable, pages, out);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  std::vector<float> host((uint64_t)pages * PAGE_FLOATS);
  CK(cudaMemcpy(host.data(), out, host.size() * sizeof(float), cudaMemcpyDeviceToHost));
  double sum = 0;
  uint64_t bad = 0;
  for (int b = 0; b < pages; ++b)
    for (int t = 0; t < PAGE_FLOATS; ++t) {
      float want = 2.0f * pool_value((uint64_t)table[b] * PAGE_FLOATS + t) + 1.0f;
      float got = host[(uint64_t)b * PAGE_FLOATS + t];
      if (got != want) ++bad;
      sum += got * (1 + (t % 7));
    }
  printf("touch_gather: pool %llu MiB, %d of %llu pages read (%.1f %%), output %.1f MiB\n",
         (unsigned long long)pool_mib, pages, (unsigned long long)pool_pages, 100.0 * pages / pool_pages,
         pages * 4096.0 / (1 << 20));
  printf("touch_gather checksum %.3f, %llu wrong\n", sum, (unsigned long long)bad);
  return bad ? 1 : 0;
}
