// Ranges on two streams, for `kreplay record --launch-range / --profiler-range / --nvtx-range`
// (issue 32). One warm-up pass of the sequence outside any range (so lazy module loading and
// first-launch work happen before), then RANGES passes, each inside nvtxRangePushA("streams")
// and cudaProfilerStart/Stop:
//
//   s1: streams_produce(x -> a)   record ev1
//   s2: wait ev1   copy a -> b (device to device)   streams_middle(b -> c)   memset d (0x3f)
//       record ev2
//   s1: wait ev2   streams_finish(a, c, d -> x)   copy x -> pinned host (device to host)
//   host: cudaStreamSynchronize(s1), checksum of the copy
//
// x is rewritten by each pass, so every pass computes something else (`--nth` has meaning).
// The kernels are extern "C": the variant cubins (range_streams_slow.cu,
// range_streams_divergent.cu) define streams_middle under the same name. Prints one checksum
// line, so a run under kreplay can be compared with a plain run.
//
//   range_streams [RANGES]          the sequence (default 3 ranges)
//   range_streams hostfunc          cudaLaunchHostFunc inside each range (refused by a range capture)
//   range_streams mallocasync       cudaMallocAsync/cudaFreeAsync inside each range (refused)
//   range_streams bench [ROUNDS]    30 small kernels on one stream inside one range, then the
//                                   baseline: the same 30 launched back to back, timed with
//                                   events, best of ROUNDS (default 20); prints `figures` lines
#include <cuda_profiler_api.h>
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#define CK(x)                                                                          \
  do {                                                                                 \
    cudaError_t e = (x);                                                               \
    if (e != cudaSuccess) {                                                            \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      exit(1);                                                                         \
    }                                                                                  \
  } while (0)

extern "C" __global__ void streams_produce(int n, const float* x, float* a) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) a[i] = x[i] * 1.5f + 0.25f;
}

// The middle kernel: range_streams_slow.cu computes the same values slower,
// range_streams_divergent.cu different ones. Keep the three in step. The _rn intrinsics are
// never contracted into an FMA, so the variant cubins round exactly as this does.
extern "C" __global__ void streams_middle(int n, const float* b, float* c) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = __fsub_rn(__fmul_rn(__fmul_rn(b[i], b[i]), 0.5f), b[i]);
}

extern "C" __global__ void streams_finish(int n, const float* a, const float* c, const float* d, float* x) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = a[i] * 0.5f + c[i] * 0.25f + d[i] * 0.125f - 0.125f;
}

// Keeps the GPU busy for `ns` nanoseconds (one block a SM, by the global timer):
// RANGE_BENCH_WARM_MS of it before the timed instances lets the clocks settle after the
// recorder's capture.
__device__ static unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

extern "C" __global__ void bench_spin(unsigned long long ns) {
  unsigned long long t0 = global_ns();
  while (global_ns() - t0 < ns) {
  }
}

extern "C" __global__ void bench_step(int n, int iters, float mul, float add, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = y[i];
  for (int k = 0; k < iters; ++k) v = fmaf(v, mul, add);
  y[i] = v;
}

enum Extra { NONE, HOSTFUNC, MALLOCASYNC };

static int host_ticks = 0;

static void CUDART_CB host_tick(void* arg) { ++*static_cast<int*>(arg); }

struct Buffers {
  int n;
  size_t bytes;
  float *x, *a, *b, *c, *d;
  float* host;  // pinned: the device-to-host copy is asynchronous
  cudaStream_t s1, s2;
  cudaEvent_t ev1, ev2;
};

// One pass of the sequence (the ops the range holds, in issue order).
static void sequence(Buffers& m, Extra extra) {
  const int block = 256, grid = (m.n + block - 1) / block;
  streams_produce<<<grid, block, 0, m.s1>>>(m.n, m.x, m.a);
  CK(cudaGetLastError());
  CK(cudaEventRecord(m.ev1, m.s1));
  CK(cudaStreamWaitEvent(m.s2, m.ev1, 0));
  CK(cudaMemcpyAsync(m.b, m.a, m.bytes, cudaMemcpyDeviceToDevice, m.s2));
  streams_middle<<<grid, block, 0, m.s2>>>(m.n, m.b, m.c);
  CK(cudaGetLastError());
  if (extra == HOSTFUNC) CK(cudaLaunchHostFunc(m.s2, host_tick, &host_ticks));
  if (extra == MALLOCASYNC) {
    void* tmp = nullptr;
    CK(cudaMallocAsync(&tmp, m.bytes, m.s2));
    CK(cudaMemsetAsync(tmp, 0, m.bytes, m.s2));
    CK(cudaFreeAsync(tmp, m.s2));
  }
  CK(cudaMemsetAsync(m.d, 0x3f, m.bytes, m.s2));
  CK(cudaEventRecord(m.ev2, m.s2));
  CK(cudaStreamWaitEvent(m.s1, m.ev2, 0));
  streams_finish<<<grid, block, 0, m.s1>>>(m.n, m.a, m.c, m.d, m.x);
  CK(cudaGetLastError());
  CK(cudaMemcpyAsync(m.host, m.x, m.bytes, cudaMemcpyDeviceToHost, m.s1));
  CK(cudaStreamSynchronize(m.s1));
}

static double weighted_sum(const float* v, int n) {
  double sum = 0;
  for (int i = 0; i < n; ++i) sum += v[i] * (1.0 + (i % 7));
  return sum;
}

static int run_streams(int ranges, Extra extra) {
  Buffers m;
  m.n = 1 << 20;
  m.bytes = m.n * sizeof(float);
  float** bufs[] = {&m.x, &m.a, &m.b, &m.c, &m.d};
  for (float** p : bufs) CK(cudaMalloc(p, m.bytes));
  CK(cudaMallocHost(&m.host, m.bytes));
  for (int i = 0; i < m.n; ++i) m.host[i] = (float)((i * 2654435761u) % 1000) / 1000.0f;
  CK(cudaMemcpy(m.x, m.host, m.bytes, cudaMemcpyHostToDevice));
  CK(cudaMemset(m.a, 0, m.bytes));
  CK(cudaMemset(m.b, 0, m.bytes));
  CK(cudaMemset(m.c, 0, m.bytes));
  CK(cudaMemset(m.d, 0, m.bytes));
  CK(cudaStreamCreateWithFlags(&m.s1, cudaStreamNonBlocking));
  CK(cudaStreamCreateWithFlags(&m.s2, cudaStreamNonBlocking));
  CK(cudaEventCreateWithFlags(&m.ev1, cudaEventDisableTiming));
  CK(cudaEventCreateWithFlags(&m.ev2, cudaEventDisableTiming));
  CK(cudaDeviceSynchronize());
  sequence(m, NONE);  // warm-up, outside any range
  double sum = weighted_sum(m.host, m.n);
  for (int r = 0; r < ranges; ++r) {
    nvtxRangePushA("streams");
    CK(cudaProfilerStart());
    sequence(m, extra);
    CK(cudaProfilerStop());
    nvtxRangePop();
    sum += weighted_sum(m.host, m.n) * (r + 2);
  }
  CK(cudaDeviceSynchronize());
  printf("streams checksum %.6f over %d ranges\n", sum, ranges);
  if (extra == HOSTFUNC) printf("host functions ran %d\n", host_ticks);
  return 0;
}

static const int BENCH_KERNELS = 30;
static const int BENCH_ITERS = 64;

static void bench_kernels(int n, float* y, cudaStream_t s) {
  const int block = 256, grid = (n + block - 1) / block;
  for (int k = 0; k < BENCH_KERNELS; ++k)
    bench_step<<<grid, block, 0, s>>>(n, BENCH_ITERS, 0.999f - 0.001f * k, 0.001f * (k + 1), y);
}

static float elapsed_us(cudaEvent_t t0, cudaEvent_t t1) {
  float ms = 0;
  CK(cudaEventElapsedTime(&ms, t0, t1));
  return ms * 1000.0f;
}

static int run_bench(int rounds) {
  const int n = 1 << 18;
  const size_t bytes = n * sizeof(float);
  float* y;
  CK(cudaMalloc(&y, bytes));
  float* host = (float*)malloc(bytes);
  for (int i = 0; i < n; ++i) host[i] = (float)(i % 1000) / 1000.0f;
  CK(cudaMemcpy(y, host, bytes, cudaMemcpyHostToDevice));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t t0, t1;
  CK(cudaEventCreate(&t0));
  CK(cudaEventCreate(&t1));
  for (int w = 0; w < 2; ++w) bench_kernels(n, y, s);  // warm-up
  CK(cudaStreamSynchronize(s));
  // The range: the timing events stay outside it (they are not its steps).
  CK(cudaEventRecord(t0, s));
  nvtxRangePushA("bench");
  CK(cudaProfilerStart());
  bench_kernels(n, y, s);
  CK(cudaProfilerStop());
  nvtxRangePop();
  CK(cudaEventRecord(t1, s));
  CK(cudaEventSynchronize(t1));
  float in_app = elapsed_us(t0, t1);
  // Further instances of the range, undisturbed: what `record --profiler-range` times as the
  // range's in-app time (the median of up to five; the first, captured, instance runs with the
  // recorder's stalls).
  if (const char* warm = getenv("RANGE_BENCH_WARM_MS")) {
    bench_spin<<<132, 128, 0, s>>>((unsigned long long)(atof(warm) * 1e6));
    CK(cudaStreamSynchronize(s));
  }
  for (int again = 0; again < 5; ++again) {
    nvtxRangePushA("bench");
    CK(cudaProfilerStart());
    bench_kernels(n, y, s);
    CK(cudaProfilerStop());
    nvtxRangePop();
    CK(cudaStreamSynchronize(s));
  }
  // The baseline: the same launches from a minimal loop, back to back.
  float best = 1e30f;
  for (int r = 0; r < rounds; ++r) {
    CK(cudaEventRecord(t0, s));
    bench_kernels(n, y, s);
    CK(cudaEventRecord(t1, s));
    CK(cudaEventSynchronize(t1));
    float us = elapsed_us(t0, t1);
    if (us < best) best = us;
  }
  CK(cudaMemcpy(host, y, bytes, cudaMemcpyDeviceToHost));
  printf("bench checksum %.6f\n", weighted_sum(host, n));
  printf("figures in-app range: %.2f us (%d kernels, events around the range, one run)\n", in_app, BENCH_KERNELS);
  printf("figures baseline: %.2f us best of %d rounds (%d kernels launched back to back from a C++ loop, %.3f us per kernel)\n",
         best, rounds, BENCH_KERNELS, best / BENCH_KERNELS);
  free(host);
  return 0;
}

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  if (!strcmp(mode, "bench")) return run_bench(argc > 2 ? atoi(argv[2]) : 20);
  if (!strcmp(mode, "hostfunc")) return run_streams(3, HOSTFUNC);
  if (!strcmp(mode, "mallocasync")) return run_streams(3, MALLOCASYNC);
  int ranges = argc > 1 ? atoi(argv[1]) : 3;
  if (ranges < 1) {
    fprintf(stderr, "usage: range_streams [RANGES] | hostfunc | mallocasync | bench [ROUNDS]\n");
    return 2;
  }
  return run_streams(ranges, NONE);
}
