// A range of three dependent kernels on the default stream, for `kreplay record
// --launch-range`: launch 1 (range_first) reads a and writes b, launch 2 (range_second) reads
// b, a and a module global and writes c, launch 3 (range_third) reads c and rewrites b in
// place; launch 4 (range_outside) combines b and c after the range. Prints a checksum of the
// result, so a run under kreplay can be compared with a plain run.
//
//   range_app           the four launches, nothing else between them
//   range_app malloc    a cudaMalloc between launches 1 and 2 (inside a --launch-range 1:3,
//                       which must refuse the capture naming the call; copies there are steps)
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(x)                                                                          \
  do {                                                                                 \
    cudaError_t e = (x);                                                               \
    if (e != cudaSuccess) {                                                            \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      exit(1);                                                                         \
    }                                                                                  \
  } while (0)

__device__ float range_bias = 0.25f;

__global__ void range_first(int n, const float* a, float* b) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) b[i] = a[i] * 2.0f + 1.0f;
}

__global__ void range_second(int n, const float* a, const float* b, float* c) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = b[i] * b[i] - a[i] + range_bias;
}

__global__ void range_third(int n, const float* c, float* b) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) b[i] = c[i] + b[i] * 0.5f;
}

__global__ void range_outside(int n, const float* b, const float* c, float* d) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) d[i] = b[i] - 0.125f * c[i];
}

int main(int argc, char** argv) {
  bool with_malloc = argc > 1 && strcmp(argv[1], "malloc") == 0;
  const int n = 1 << 20;
  const size_t bytes = n * sizeof(float);
  std::vector<float> host(n);
  for (int i = 0; i < n; ++i) host[i] = (float)((i * 2654435761u) % 1000) / 1000.0f;
  float *a, *b, *c, *d, *spare;
  CK(cudaMalloc(&a, bytes));
  CK(cudaMalloc(&b, bytes));
  CK(cudaMalloc(&c, bytes));
  CK(cudaMalloc(&d, bytes));
  CK(cudaMalloc(&spare, bytes));
  CK(cudaMemcpy(a, host.data(), bytes, cudaMemcpyHostToDevice));
  CK(cudaMemset(b, 0, bytes));
  CK(cudaMemset(c, 0, bytes));
  CK(cudaDeviceSynchronize());
  const int block = 256, grid = (n + block - 1) / block;
  range_first<<<grid, block>>>(n, a, b);
  float* extra = nullptr;
  if (with_malloc) CK(cudaMalloc(&extra, bytes));
  range_second<<<grid, block>>>(n, a, b, c);
  range_third<<<grid, block>>>(n, c, b);
  range_outside<<<grid, block>>>(n, b, c, d);
  CK(cudaGetLastError());
  CK(cudaMemcpy(host.data(), d, bytes, cudaMemcpyDeviceToHost));
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += host[i] * (1.0 + (i % 7));
  printf("range checksum %.6f\n", sum);
  if (extra) CK(cudaFree(extra));
  return 0;
}
