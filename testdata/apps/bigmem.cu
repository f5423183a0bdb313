// Dispatches that reach model-scale memory, for the recorder and player benchmarks (#13):
//   bigmem floats GIB   bigmem_reduce reads GIB-1 GiB of float-like data (random f32 and bf16
//                       values in the ranges weights and activations take: not compressible
//                       like zeros) and writes 1 GiB
//   bigmem zeros GIB    the same shape over zeros
//   bigmem mixed GIB    the first 4 GiB float-like, the rest zeros (for sizes beyond free device
//                       memory: large, yet small on disk)
//   ... GIB OUT_MIB     GIB GiB in all, OUT_MIB of them written (1024 unless given; a divisor of
//                       GIB x 1024), the rest read: `bigmem zeros 4 64` for the stall benchmark
// Prints the output's checksum (the same with and without the recorder) and the dispatch's
// wall time as the application saw it.
#include <cuda_runtime.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(x)                                                                        \
  do {                                                                               \
    cudaError_t e_ = (x);                                                            \
    if (e_ != cudaSuccess) {                                                         \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

__device__ unsigned long long mix(unsigned long long z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// First half: f32 with exponents in [2^-8, 2^4) and random sign and mantissa; second half: pairs
// of bf16 in the same range (7 random mantissa bits each).
__global__ void fill_floats(unsigned* p, size_t words) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < words;
       i += (size_t)gridDim.x * blockDim.x) {
    unsigned long long r = mix(i);
    unsigned e1 = 119 + (unsigned)(r % 12), e2 = 119 + (unsigned)((r >> 8) % 12);
    if (i < words / 2) {
      p[i] = ((unsigned)(r >> 63) << 31) | (e1 << 23) | (unsigned)((r >> 16) & 0x7fffff);
    } else {
      unsigned lo = ((unsigned)(r >> 63) << 15) | (e1 << 7) | (unsigned)((r >> 16) & 0x7f);
      unsigned hi = ((unsigned)(r >> 62 & 1) << 15) | (e2 << 7) | (unsigned)((r >> 24) & 0x7f);
      p[i] = (hi << 16) | lo;
    }
  }
}

// out[j] = 0.5 * sum_k in[j + k * out_n] + 1 (reads all of `in`, writes all of `out`).
__global__ void bigmem_reduce(const float* in, size_t in_n, float* out, size_t out_n) {
  for (size_t j = (size_t)blockIdx.x * blockDim.x + threadIdx.x; j < out_n;
       j += (size_t)gridDim.x * blockDim.x) {
    float acc = 0.0f;
    for (size_t k = j; k < in_n; k += out_n) acc += in[k];
    out[j] = acc * 0.5f + 1.0f;
  }
}

int main(int argc, char** argv) {
  if (argc < 3 || (strcmp(argv[1], "floats") && strcmp(argv[1], "zeros") && strcmp(argv[1], "mixed"))) {
    fprintf(stderr, "usage: bigmem floats|zeros|mixed GIB [OUT_MIB]\n");
    return 2;
  }
  const size_t gib = strtoull(argv[2], nullptr, 0);
  if (gib < 2) {
    fprintf(stderr, "GIB must be at least 2\n");
    return 2;
  }
  const size_t out_mib = argc > 3 ? strtoull(argv[3], nullptr, 0) : 1024;
  if (out_mib == 0 || out_mib >= gib * 1024 || (gib * 1024) % out_mib) {
    fprintf(stderr, "OUT_MIB must divide GIB x 1024 and be less\n");
    return 2;
  }
  // 1 GiB written and GIB - 1 read by default: 2^18 floats a MiB.
  const size_t out_n = out_mib << 18, in_n = (gib << 28) - out_n;
  float *in, *out;
  CK(cudaMalloc(&in, in_n * 4));
  CK(cudaMalloc(&out, out_n * 4));
  if (!strcmp(argv[1], "floats")) {
    fill_floats<<<4096, 256>>>((unsigned*)in, in_n);
  } else if (!strcmp(argv[1], "mixed")) {
    const size_t floats = in_n < ((size_t)1 << 30) ? in_n : ((size_t)1 << 30);  // 4 GiB
    CK(cudaMemset(in, 0, in_n * 4));
    fill_floats<<<4096, 256>>>((unsigned*)in, floats);
  } else {
    CK(cudaMemset(in, 0, in_n * 4));
  }
  CK(cudaMemset(out, 0, out_n * 4));
  CK(cudaDeviceSynchronize());
  auto t0 = std::chrono::steady_clock::now();
  bigmem_reduce<<<4096, 256>>>(in, in_n, out, out_n);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::vector<float> h(out_n);
  CK(cudaMemcpy(h.data(), out, out_n * 4, cudaMemcpyDeviceToHost));
  double sum = 0;
  for (size_t j = 0; j < out_n; j += 97) sum += h[j];
  printf("bigmem %s %zu GiB: checksum %.6e, dispatch %.1f ms as the application saw it\n", argv[1],
         gib, sum, ms);
  return 0;
}
