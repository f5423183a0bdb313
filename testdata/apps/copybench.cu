// Baselines for the recorder and player benchmarks: a bare copy of BYTES, best of 3.
//   copybench BYTES [dtoh|htod|dtod]     (default dtoh: pinned device-to-host)
// Prints e.g. "bare pinned DtoH of 1073741824 bytes: 19.41 ms (55.3 GB/s)"; for dtod the rate
// counts bytes copied (each read once and written once).
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>

int main(int argc, char** argv) {
  size_t n = argc > 1 ? strtoull(argv[1], nullptr, 0) : (size_t)4 << 30;
  const char* mode = argc > 2 ? argv[2] : "dtoh";
  void *d, *h;
  bool dtod = !strcmp(mode, "dtod");
  if (cudaMalloc(&d, n) != cudaSuccess ||
      (dtod ? cudaMalloc(&h, n) : cudaMallocHost(&h, n)) != cudaSuccess) {
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
    if (!strcmp(mode, "htod")) cudaMemcpy(d, h, n, cudaMemcpyHostToDevice);
    else if (dtod) cudaMemcpy(h, d, n, cudaMemcpyDeviceToDevice);
    else cudaMemcpy(h, d, n, cudaMemcpyDeviceToHost);
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms;
    cudaEventElapsedTime(&ms, a, b);
    if (ms < best) best = ms;
  }
  const char* what = !strcmp(mode, "htod") ? "pinned HtoD" : dtod ? "DtoD" : "pinned DtoH";
  printf("bare %s of %zu bytes: %.2f ms (%.1f GB/s)\n", what, n, best, n / best / 1e6);
  return 0;
}
