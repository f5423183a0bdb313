// A CUDA C++ application for the corpus benchmark (issue 33, scripts/gpu-bench-farm.sh): four
// kernels (elementwise, reduction, transpose, stencil), each at three sizes, each size run
// ROUNDS times, so `record --each-kernel --by shape --per-kernel N` yields up to 12 x N
// captures of real, distinct dispatches. Prints a checksum of every result, so a run under
// `kreplay record` compares with a plain run.
//     corpus_app [ROUNDS]        (default 8)
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <vector>

#define CK(x)                                                                          \
  do {                                                                                 \
    cudaError_t e = (x);                                                               \
    if (e != cudaSuccess) {                                                            \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      exit(1);                                                                         \
    }                                                                                  \
  } while (0)

__global__ void axpby(int n, float a, const float* x, float b, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + b * y[i];
}

__global__ void block_sum(int n, const float* x, float* partial) {
  __shared__ float s[256];
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  s[threadIdx.x] = i < n ? x[i] : 0.0f;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k >>= 1) {
    if (threadIdx.x < k) s[threadIdx.x] += s[threadIdx.x + k];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = s[0];
}

__global__ void transpose(int rows, int cols, const float* in, float* out) {
  __shared__ float tile[32][33];
  int c = blockIdx.x * 32 + threadIdx.x, r = blockIdx.y * 32 + threadIdx.y;
  if (r < rows && c < cols) tile[threadIdx.y][threadIdx.x] = in[(size_t)r * cols + c];
  __syncthreads();
  c = blockIdx.y * 32 + threadIdx.x;
  r = blockIdx.x * 32 + threadIdx.y;
  if (r < cols && c < rows) out[(size_t)r * rows + c] = tile[threadIdx.x][threadIdx.y];
}

__global__ void stencil5(int n, const float* in, float* out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= 2 && i < n - 2)
    out[i] = 0.1f * in[i - 2] + 0.2f * in[i - 1] + 0.4f * in[i] + 0.2f * in[i + 1] + 0.1f * in[i + 2];
}

static double sum_of(const float* d, size_t n) {
  std::vector<float> h(n);
  CK(cudaMemcpy(h.data(), d, n * sizeof(float), cudaMemcpyDeviceToHost));
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += h[i] * (1.0 + (i % 5));
  return s;
}

int main(int argc, char** argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 8;
  const int sizes[3] = {1 << 16, 1 << 18, 1 << 20};
  const size_t most = 1 << 20;
  std::vector<float> h(most);
  for (size_t i = 0; i < most; ++i) h[i] = (float)((i * 2654435761u) % 1000) / 1000.0f;
  float *x, *y, *t;
  CK(cudaMalloc(&x, most * sizeof(float)));
  CK(cudaMalloc(&y, most * sizeof(float)));
  CK(cudaMalloc(&t, most * sizeof(float)));
  CK(cudaMemcpy(x, h.data(), most * sizeof(float), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(y, h.data(), most * sizeof(float), cudaMemcpyHostToDevice));
  double total = 0;
  for (int r = 0; r < rounds; ++r) {
    for (int s = 0; s < 3; ++s) {
      int n = sizes[s], blocks = (n + 255) / 256;
      axpby<<<blocks, 256>>>(n, 0.5f, x, 0.25f, y);
      block_sum<<<blocks, 256>>>(n, y, t);
      int side = 1 << (8 + s);  // 256, 512, 1024: n elements as side x (n / side)
      dim3 grid((n / side + 31) / 32, (side + 31) / 32), block(32, 32);
      transpose<<<grid, block>>>(side, n / side, y, t);
      stencil5<<<blocks, 256>>>(n, t, x);
      CK(cudaGetLastError());
    }
    CK(cudaDeviceSynchronize());
    total += sum_of(x, 1 << 16);
  }
  printf("corpus_app %d rounds: x %.4f y %.4f t %.4f running %.4f\n", rounds, sum_of(x, most),
         sum_of(y, most), sum_of(t, most), total);
  return 0;
}
