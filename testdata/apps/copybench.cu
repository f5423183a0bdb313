// Baseline for the recorder's stall benchmark: a bare pinned device-to-host copy.
//   copybench BYTES
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>

int main(int argc, char** argv) {
  size_t n = argc > 1 ? strtoull(argv[1], nullptr, 0) : (size_t)4 << 30;
  void *d, *h;
  if (cudaMalloc(&d, n) != cudaSuccess || cudaMallocHost(&h, n) != cudaSuccess) {
    fprintf(stderr, "allocation of %zu bytes failed\n", n);
    return 1;
  }
  cudaMemset(d, 1, n);
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  float best = 1e30f;
  for (int i = 0; i < 3; ++i) {
    cudaEventRecord(a);
    cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost);
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms;
    cudaEventElapsedTime(&ms, a, b);
    if (ms < best) best = ms;
  }
  printf("bare pinned DtoH of %zu bytes: %.2f ms (%.1f GB/s)\n", n, best, n / best / 1e6);
  return 0;
}
