// Test applications for kreplay: one binary, one scenario per argument. Each prints a
// deterministic checksum of its results on stdout, so a run under `kreplay record` can be
// compared with a plain run.
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace cg = cooperative_groups;

#define CK(x)                                                                          \
  do {                                                                                 \
    cudaError_t e = (x);                                                               \
    if (e != cudaSuccess) {                                                            \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      exit(1);                                                                         \
    }                                                                                  \
  } while (0)

static double checksum(const std::vector<float>& v) {
  double s = 0;
  for (size_t i = 0; i < v.size(); ++i) s += v[i] * (1.0 + (i % 7));
  return s;
}

static std::vector<float> iota(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * (float)((i * 2654435761u) % 1000) / 1000.0f;
  return v;
}

// --- saxpy: in place, y = a*x + y --------------------------------------------------------
__global__ void saxpy(int n, float a, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

static int run_saxpy(int iters) {
  const int n = 1 << 22;
  auto hx = iota(n, 1.0f), hy = iota(n, 2.0f);
  float *x, *y;
  CK(cudaMalloc(&x, n * 4));
  CK(cudaMalloc(&y, n * 4));
  CK(cudaMemcpy(x, hx.data(), n * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(y, hy.data(), n * 4, cudaMemcpyHostToDevice));
  for (int it = 0; it < iters; ++it) saxpy<<<(n + 255) / 256, 256>>>(n, 0.5f + it, x, y);
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(hy.data(), y, n * 4, cudaMemcpyDeviceToHost));
  printf("saxpy %.6f\n", checksum(hy));
  return 0;
}

// --- sparse: a few pages written far apart in a large buffer (profile --memory touched) ------
// Block b adds x to the 16 KiB (4 pages) of y at b x 2 MiB + 1 MiB: 32 clusters written,
// 512 KiB in all, but every 4 MiB chunk of the 64 MiB buffer changed, and none where it
// starts (a put-back that judged a chunk by its first byte would undo the output). `+=` makes
// every pass need its restore: a page left unrestored changes the next pass's output.
__global__ void sparse_bump(const float* x, float* y, size_t stride) {
  float* at = y + blockIdx.x * stride + stride / 2;
  for (int j = threadIdx.x; j < 4096; j += blockDim.x) at[j] += x[j] * (float)(blockIdx.x + 1);
}

static int run_sparse(int iters) {
  const size_t n = (size_t)16 << 20, stride = (size_t)512 << 10;  // 64 MiB; 2 MiB apart
  auto hx = iota(4096, 1.0f), hy = iota(n, 2.0f);
  float *x, *y;
  CK(cudaMalloc(&x, 4096 * 4));
  CK(cudaMalloc(&y, n * 4));
  CK(cudaMemcpy(x, hx.data(), 4096 * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(y, hy.data(), n * 4, cudaMemcpyHostToDevice));
  for (int it = 0; it < iters; ++it) sparse_bump<<<32, 256>>>(x, y, stride);
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(hy.data(), y, n * 4, cudaMemcpyDeviceToHost));
  printf("sparse %.6f\n", checksum(hy));
  return 0;
}

// saxpy on buffers allocated and freed around each launch (a profiler that keeps a launch's
// memory for later must let it go before each free).
static int run_churn(int iters) {
  double sum = 0;
  for (int it = 0; it < iters; ++it) {
    const int n = (1 << 20) + it * 4096;
    auto hx = iota(n, 1.0f), hy = iota(n, 2.0f);
    float *x, *y;
    CK(cudaMalloc(&x, n * 4));
    CK(cudaMalloc(&y, n * 4));
    CK(cudaMemcpy(x, hx.data(), n * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(y, hy.data(), n * 4, cudaMemcpyHostToDevice));
    saxpy<<<(n + 255) / 256, 256>>>(n, 0.5f + it, x, y);
    CK(cudaMemcpy(hy.data(), y, n * 4, cudaMemcpyDeviceToHost));
    CK(cudaFree(x));
    CK(cudaFree(y));
    sum += checksum(hy);
  }
  printf("churn %.6f\n", sum);
  return 0;
}

// --- module globals: __constant__ coefficients and a __device__ counter ------------------
__constant__ float coef[4];
__device__ unsigned long long hits;
__device__ float bias = 0.25f;

__global__ void poly_globals(int n, const float* x, float* out) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float v = x[i];
    out[i] = coef[0] + v * (coef[1] + v * (coef[2] + v * coef[3])) + bias;
    if (v > 0.5f) atomicAdd(&hits, 1ull);
  }
}

static int run_globals(int reps) {
  const int n = 1 << 20;
  auto hx = iota(n, 1.0f);
  float c[4] = {1.0f, -2.0f, 0.5f, 3.0f};
  CK(cudaMemcpyToSymbol(coef, c, sizeof c));
  unsigned long long zero = 0;
  CK(cudaMemcpyToSymbol(hits, &zero, 8));
  float *x, *o;
  CK(cudaMalloc(&x, n * 4));
  CK(cudaMalloc(&o, n * 4));
  CK(cudaMemcpy(x, hx.data(), n * 4, cudaMemcpyHostToDevice));
  for (int r = 0; r < reps; ++r) poly_globals<<<(n + 255) / 256, 256>>>(n, x, o);
  CK(cudaDeviceSynchronize());
  std::vector<float> ho(n);
  unsigned long long h;
  CK(cudaMemcpy(ho.data(), o, n * 4, cudaMemcpyDeviceToHost));
  CK(cudaMemcpyFromSymbol(&h, hits, 8));
  printf("globals %.6f hits %llu\n", checksum(ho), h);
  return 0;
}

// --- pointers stored in device memory ----------------------------------------------------
struct Batch {
  int count;
  int n;
  const float* const* inputs;  // device array of device pointers
  float* out;
};

__global__ void gather_sum(Batch b) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < b.n) {
    float s = 0;
    for (int k = 0; k < b.count; ++k) s += b.inputs[k][i] * (k + 1);
    b.out[i] = s;
  }
}

static int run_pointers() {
  const int n = 1 << 18, count = 5;
  std::vector<float*> bufs(count);
  for (int k = 0; k < count; ++k) {
    CK(cudaMalloc(&bufs[k], n * 4));
    auto h = iota(n, 1.0f + k);
    CK(cudaMemcpy(bufs[k], h.data(), n * 4, cudaMemcpyHostToDevice));
  }
  float** table;
  CK(cudaMalloc(&table, count * sizeof(float*)));
  CK(cudaMemcpy(table, bufs.data(), count * sizeof(float*), cudaMemcpyHostToDevice));
  float* out;
  CK(cudaMalloc(&out, n * 4));
  gather_sum<<<(n + 255) / 256, 256>>>(Batch{count, n, table, out});
  CK(cudaDeviceSynchronize());
  std::vector<float> ho(n);
  CK(cudaMemcpy(ho.data(), out, n * 4, cudaMemcpyDeviceToHost));
  printf("pointers %.6f\n", checksum(ho));
  return 0;
}

// --- dynamic shared memory above 48 KiB --------------------------------------------------
__global__ void smem_reverse(const float* in, float* out, int per_block) {
  extern __shared__ float tile[];
  const float* src = in + (size_t)blockIdx.x * per_block;
  for (int i = threadIdx.x; i < per_block; i += blockDim.x) tile[i] = src[i];
  __syncthreads();
  for (int i = threadIdx.x; i < per_block; i += blockDim.x)
    out[(size_t)blockIdx.x * per_block + i] = tile[per_block - 1 - i] * 2.0f;
}

static int run_bigsmem(int reps) {
  const int per_block = 24 * 1024;  // 96 KiB of floats
  const int blocks = 264;
  const size_t n = (size_t)per_block * blocks;
  CK(cudaFuncSetAttribute(smem_reverse, cudaFuncAttributeMaxDynamicSharedMemorySize, per_block * 4));
  auto h = iota(n, 1.0f);
  float *in, *out;
  CK(cudaMalloc(&in, n * 4));
  CK(cudaMalloc(&out, n * 4));
  CK(cudaMemcpy(in, h.data(), n * 4, cudaMemcpyHostToDevice));
  for (int r = 0; r < reps; ++r) smem_reverse<<<blocks, 256, per_block * 4>>>(in, out, per_block);
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(h.data(), out, n * 4, cudaMemcpyDeviceToHost));
  printf("bigsmem %.6f\n", checksum(h));
  return 0;
}

// --- several host threads, each on its own non-default stream -----------------------------
__global__ void scale_rows(float* data, int n, float s) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] = data[i] * s + 1.0f;
}

static int run_threads() {
  const int n = 1 << 20, threads = 4;
  std::vector<double> sums(threads);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([t, n, &sums] {
      cudaStream_t s;
      CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
      float* d;
      CK(cudaMalloc(&d, n * 4));
      auto h = iota(n, 1.0f + t);
      CK(cudaMemcpyAsync(d, h.data(), n * 4, cudaMemcpyHostToDevice, s));
      for (int k = 0; k < 3; ++k) scale_rows<<<(n + 255) / 256, 256, 0, s>>>(d, n, 1.5f + t);
      CK(cudaMemcpyAsync(h.data(), d, n * 4, cudaMemcpyDeviceToHost, s));
      CK(cudaStreamSynchronize(s));
      sums[t] = checksum(h);
    });
  }
  for (auto& th : pool) th.join();
  double s = 0;
  for (double v : sums) s += v;
  printf("threads %.6f\n", s);
  return 0;
}

// --- thread-block cluster launch (sm_90) -------------------------------------------------
__global__ void cluster_scale(const float* in, float* out, int n) {
  cg::cluster_group cluster = cg::this_cluster();
  __shared__ float peer;
  if (threadIdx.x == 0) peer = (float)cluster.block_rank();
  cluster.sync();
  float* remote = cluster.map_shared_rank(&peer, (cluster.block_rank() + 1) % cluster.num_blocks());
  float r = *remote;
  cluster.sync();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * 2.0f + r;
}

static int run_cluster() {
  const int n = 1 << 20;
  auto h = iota(n, 1.0f);
  float *in, *out;
  CK(cudaMalloc(&in, n * 4));
  CK(cudaMalloc(&out, n * 4));
  CK(cudaMemcpy(in, h.data(), n * 4, cudaMemcpyHostToDevice));
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(n / 256);
  cfg.blockDim = dim3(256);
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 4;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  CK(cudaLaunchKernelEx(&cfg, cluster_scale, (const float*)in, out, n));
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(h.data(), out, n * 4, cudaMemcpyDeviceToHost));
  printf("cluster %.6f\n", checksum(h));
  return 0;
}

// --- cooperative launch with a grid-wide barrier ------------------------------------------
__global__ void coop_normalize(float* data, float* partial, int n) {
  cg::grid_group grid = cg::this_grid();
  float s = 0;
  for (int i = grid.thread_rank(); i < n; i += grid.size()) s += data[i];
  __shared__ float red[256];
  red[threadIdx.x] = s;
  __syncthreads();
  for (int k = blockDim.x / 2; k > 0; k /= 2) {
    if (threadIdx.x < k) red[threadIdx.x] += red[threadIdx.x + k];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = red[0];
  grid.sync();
  float total = 0;
  for (int b = 0; b < gridDim.x; ++b) total += partial[b];
  for (int i = grid.thread_rank(); i < n; i += grid.size()) data[i] = data[i] / total;
}

static int run_coop(int reps) {
  const int n = 1 << 20;
  int dev = 0, sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  int blocks = sms;
  auto h = iota(n, 1.0f);
  float *d, *partial;
  CK(cudaMalloc(&d, n * 4));
  CK(cudaMalloc(&partial, blocks * 4));
  CK(cudaMemcpy(d, h.data(), n * 4, cudaMemcpyHostToDevice));
  int nn = n;
  void* args[] = {&d, &partial, &nn};
  for (int r = 0; r < reps; ++r)
    CK(cudaLaunchCooperativeKernel((void*)coop_normalize, blocks, 256, args, 0, 0));
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(h.data(), d, n * 4, cudaMemcpyDeviceToHost));
  printf("coop %.6f\n", checksum(h) * 1e3);
  return 0;
}

// --- a kernel of 20+ microseconds, for timing comparisons -------------------------------
__global__ void stencil_iter(const float* in, float* out, int n, int reps) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i > 0 && i < n - 1) {
    float v = in[i];
    for (int r = 0; r < reps; ++r) v = 0.25f * in[i - 1] + 0.5f * v + 0.25f * in[i + 1] + 1e-3f * r;
    out[i] = v;
  }
}

static int run_stencil() {
  const int n = 1 << 26;
  float *a, *b;
  CK(cudaMalloc(&a, (size_t)n * 4));
  CK(cudaMalloc(&b, (size_t)n * 4));
  auto h = iota(n, 1.0f);
  CK(cudaMemcpy(a, h.data(), (size_t)n * 4, cudaMemcpyHostToDevice));
  CK(cudaMemset(b, 0, (size_t)n * 4));
  for (int k = 0; k < 5; ++k) stencil_iter<<<(n + 255) / 256, 256>>>(a, b, n, 8);
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(h.data(), b, (size_t)n * 4, cudaMemcpyDeviceToHost));
  printf("stencil %.3f\n", checksum(h));
  return 0;
}

// --- a 1 GiB dispatch, for replay set-up time ---------------------------------------------
__global__ void big_scale(const float* in, float* out, size_t n) {
  size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * 1.5f + 0.25f;
}

static int run_big(size_t n) {
  float *in, *out;
  CK(cudaMalloc(&in, n * 4));
  CK(cudaMalloc(&out, n * 4));
  auto h = iota(n, 1.0f);
  CK(cudaMemcpy(in, h.data(), n * 4, cudaMemcpyHostToDevice));
  CK(cudaMemset(out, 0, n * 4));
  big_scale<<<(unsigned)((n + 255) / 256), 256>>>(in, out, n);
  CK(cudaDeviceSynchronize());
  CK(cudaMemcpy(h.data(), out, n * 4, cudaMemcpyDeviceToHost));
  printf("big %.3f\n", checksum(h));
  return 0;
}

// --- a kernel inside a CUDA graph (stream capture), launched through the graph -----------
static int run_graph() {
  const int n = 1 << 20;
  auto hx = iota(n, 1.0f), hy = iota(n, 2.0f);
  float *x, *y;
  CK(cudaMalloc(&x, n * 4));
  CK(cudaMalloc(&y, n * 4));
  CK(cudaMemcpy(x, hx.data(), n * 4, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(y, hy.data(), n * 4, cudaMemcpyHostToDevice));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  saxpy<<<(n + 255) / 256, 256, 0, s>>>(n, 2.0f, x, y);
  CK(cudaStreamEndCapture(s, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  for (int i = 0; i < 3; ++i) CK(cudaGraphLaunch(ge, s));
  CK(cudaStreamSynchronize(s));
  CK(cudaMemcpy(hy.data(), y, n * 4, cudaMemcpyDeviceToHost));
  printf("graph %.6f\n", checksum(hy));
  return 0;
}

// --- stream-ordered allocations (cudaMallocAsync) ----------------------------------------
static int run_async() {
  const int n = 1 << 20;
  auto hx = iota(n, 1.0f), hy = iota(n, 2.0f);
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  float *x, *y, *unused;
  CK(cudaMallocAsync(&x, n * 4, s));
  CK(cudaMallocAsync(&y, n * 4, s));
  CK(cudaMallocAsync(&unused, 1 << 20, s));  // not reachable: only --memory all takes it
  CK(cudaMemcpyAsync(x, hx.data(), n * 4, cudaMemcpyHostToDevice, s));
  CK(cudaMemcpyAsync(y, hy.data(), n * 4, cudaMemcpyHostToDevice, s));
  CK(cudaMemsetAsync(unused, 7, 1 << 20, s));
  saxpy<<<(n + 255) / 256, 256, 0, s>>>(n, 3.0f, x, y);
  CK(cudaMemcpyAsync(hy.data(), y, n * 4, cudaMemcpyDeviceToHost, s));
  CK(cudaFreeAsync(x, s));
  CK(cudaFreeAsync(y, s));
  CK(cudaFreeAsync(unused, s));
  CK(cudaStreamSynchronize(s));
  printf("async %.6f\n", checksum(hy));
  return 0;
}

// --- how the process ends: the recorder must cope with exec, _exit, a signal and fork ------
// The big capture (1 GiB) keeps the recorder's writer busy for a while after the launch, so
// the process ends while the capture is still being written.
static int run_ending(const char* how) {
  if (run_big((size_t)1 << 27)) return 1;
  fflush(stdout);
  if (!strcmp(how, "exec")) {
    execl("/bin/echo", "echo", "exec-ok", (char*)nullptr);
    perror("exec");
    return 1;
  }
  if (!strcmp(how, "exit")) _exit(0);
  if (!strcmp(how, "term")) raise(SIGTERM);
  if (!strcmp(how, "sleep")) sleep(60);
  return 0;
}

// A child forked after CUDA work: it does no CUDA, prints without flushing and exits through
// exit(3) (so exit handlers run in the child, and its output and status reach the parent only
// if its exit flushes its streams and keeps its status: under --memory touched the recorder
// ends such a child itself).
static int run_fork() {
  if (run_saxpy(3)) return 1;
  fflush(stdout);
  pid_t p = fork();
  if (p == 0) {
    printf("child ok\n");
    exit(3);
  }
  int st = 0;
  waitpid(p, &st, 0);
  printf("parent saw child exit %d\n", WIFEXITED(st) ? WEXITSTATUS(st) : -1);
  return 0;
}

int main(int argc, char** argv) {
  const char* m = argc > 1 ? argv[1] : "saxpy";
  if (!strcmp(m, "saxpy")) return run_saxpy(argc > 2 ? atoi(argv[2]) : 3);
  if (!strcmp(m, "churn")) return run_churn(argc > 2 ? atoi(argv[2]) : 3);
  if (!strcmp(m, "sparse")) return run_sparse(argc > 2 ? atoi(argv[2]) : 3);
  // globals, bigsmem, coop: an optional repeat count (default 1) for timing benchmarks.
  const int reps = argc > 2 ? atoi(argv[2]) : 1;
  if (!strcmp(m, "globals")) return run_globals(reps);
  if (!strcmp(m, "pointers")) return run_pointers();
  if (!strcmp(m, "bigsmem")) return run_bigsmem(reps);
  if (!strcmp(m, "threads")) return run_threads();
  if (!strcmp(m, "cluster")) return run_cluster();
  if (!strcmp(m, "coop")) return run_coop(reps);
  if (!strcmp(m, "stencil")) return run_stencil();
  if (!strcmp(m, "graph")) return run_graph();
  if (!strcmp(m, "async")) return run_async();
  if (!strcmp(m, "big")) return run_big((size_t)1 << 27);     // 2 x 512 MiB
  if (!strcmp(m, "big4g")) return run_big((size_t)1 << 29);   // 2 x 2 GiB
  if (!strcmp(m, "end")) return run_ending(argc > 2 ? argv[2] : "");
  if (!strcmp(m, "fork")) return run_fork();
  fprintf(stderr, "unknown scenario %s\n", m);
  return 2;
}
