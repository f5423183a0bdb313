// A dispatch whose argument points at a table of N pointers to small allocations (the stall
// benchmark's pointer table, #34):
//   ptrtable N KIB      N allocations of KIB KiB each (default 10000 of 4), a device table of
//                       their addresses; ptrtable_sum writes each allocation's sum to out[i]
// Prints the output's checksum (the same with and without the recorder).
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                        \
  do {                                                                               \
    cudaError_t e_ = (x);                                                            \
    if (e_ != cudaSuccess) {                                                         \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
      exit(1);                                                                       \
    }                                                                                \
  } while (0)

__global__ void fill(float* p, size_t n, float v) {
  for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
    p[i] = v + (float)(i % 7);
}

// One block per table entry: out[i] = sum of the allocation table[i] points at.
__global__ void ptrtable_sum(const float* const* table, int n, size_t each, float* out) {
  __shared__ float part[256];
  for (int i = blockIdx.x; i < n; i += gridDim.x) {
    const float* p = table[i];
    float acc = 0.0f;
    for (size_t k = threadIdx.x; k < each; k += blockDim.x) acc += p[k];
    part[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
      if (threadIdx.x < s) part[threadIdx.x] += part[threadIdx.x + s];
      __syncthreads();
    }
    if (threadIdx.x == 0) out[i] = part[0];
    __syncthreads();
  }
}

int main(int argc, char** argv) {
  const int n = argc > 1 ? atoi(argv[1]) : 10000;
  const size_t kib = argc > 2 ? strtoull(argv[2], nullptr, 0) : 4;
  if (n < 1 || kib < 1) {
    fprintf(stderr, "usage: ptrtable [N] [KIB]\n");
    return 2;
  }
  const size_t each = kib * 256;  // floats per allocation
  std::vector<float*> ptrs(n);
  for (int i = 0; i < n; i++) {
    CK(cudaMalloc(&ptrs[i], each * 4));
    fill<<<4, 256>>>(ptrs[i], each, (float)(i % 13));
  }
  float** table;
  float* out;
  CK(cudaMalloc(&table, n * sizeof(float*)));
  CK(cudaMalloc(&out, n * 4));
  CK(cudaMemcpy(table, ptrs.data(), n * sizeof(float*), cudaMemcpyHostToDevice));
  CK(cudaMemset(out, 0, n * 4));
  CK(cudaDeviceSynchronize());
  ptrtable_sum<<<1024, 256>>>(table, n, each, out);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  std::vector<float> h(n);
  CK(cudaMemcpy(h.data(), out, n * 4, cudaMemcpyDeviceToHost));
  double sum = 0;
  for (int i = 0; i < n; i++) sum += h[i];
  printf("ptrtable %d x %zu KiB: checksum %.6e\n", n, kib, sum);
  return 0;
}
