// What the driver calls a capture makes cost on this machine, each timed alone (median of many):
// a pointer table's capture makes about sixty of them while the application waits (#34), and a
// virtual machine's system calls can make each dearer than the host work around it.
//   nvcc -O2 -o costs costs.cu -lcuda && ./costs
#include <cuda.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/resource.h>
#include <algorithm>
#include <vector>

#define CK(x)                                                              \
  do {                                                                     \
    CUresult r_ = (x);                                                     \
    if (r_ != CUDA_SUCCESS) {                                              \
      fprintf(stderr, "%s:%d: %s failed: %d\n", __FILE__, __LINE__, #x, r_); \
      exit(1);                                                             \
    }                                                                      \
  } while (0)

static double now_us() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}

template <class F>
static void timed(const char* what, int n, F f) {
  std::vector<double> v;
  for (int i = 0; i < n; i++) {
    double t = now_us();
    f();
    v.push_back(now_us() - t);
  }
  std::sort(v.begin(), v.end());
  printf("%-52s median %8.2f us  min %8.2f us  (%d runs)\n", what, v[n / 2], v[0], n);
}

__global__ void empty() {}

int main() {
  CK(cuInit(0));
  cudaFree(0);  // the primary context, as an application makes it
  CUstream s, s2;
  CK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
  CK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
  timed("clock_gettime", 1000, [] { now_us(); });
  timed("getrusage(RUSAGE_THREAD)", 200, [] {
    rusage u;
    getrusage(RUSAGE_THREAD, &u);
  });
  timed("cuCtxGetCurrent", 200, [] {
    CUcontext c;
    cuCtxGetCurrent(&c);
  });
  timed("cuMemGetInfo", 200, [] {
    size_t f, t;
    cuMemGetInfo(&f, &t);
  });
  timed("cuPointerGetAttribute (range start)", 200, [] {
    static CUdeviceptr p = 0;
    if (!p) cuMemAlloc(&p, 4096);
    CUdeviceptr b;
    cuPointerGetAttribute(&b, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, p + 8);
  });
  timed("cuStreamCreate + cuStreamDestroy", 100, [] {
    CUstream x;
    cuStreamCreate(&x, CU_STREAM_NON_BLOCKING);
    cuStreamDestroy(x);
  });
  timed("cuEventCreate(disable timing) + destroy", 100, [] {
    CUevent e;
    cuEventCreate(&e, CU_EVENT_DISABLE_TIMING);
    cuEventDestroy(e);
  });
  CUevent ev;
  CK(cuEventCreate(&ev, CU_EVENT_DISABLE_TIMING));
  timed("cuEventRecord + cuStreamWaitEvent", 200, [&] {
    cuEventRecord(ev, s2);
    cuStreamWaitEvent(s, ev, 0);
  });
  timed("cuStreamSynchronize (idle stream)", 200, [&] { cuStreamSynchronize(s); });
  timed("cuCtxSynchronize (idle)", 200, [] { cuCtxSynchronize(); });
  timed("empty<<<1,1>>> launch + stream sync", 200, [&] {
    empty<<<1, 1, 0, (cudaStream_t)s>>>();
    cuStreamSynchronize(s);
  });
  timed("empty<<<1,1>>> launch only", 200, [&] { empty<<<1, 1, 0, (cudaStream_t)s>>>(); });
  cuStreamSynchronize(s);
  timed("cuMemsetD8Async 64 KiB", 200, [&] {
    static CUdeviceptr p = 0;
    if (!p) cuMemAlloc(&p, 1 << 16);
    cuMemsetD8Async(p, 0, 1 << 16, s);
  });
  cuStreamSynchronize(s);
  for (size_t mib : {1, 4, 36, 64}) {
    char what[64];
    snprintf(what, sizeof what, "cuMemAlloc %zu MiB + cuMemFree", mib);
    timed(what, 20, [&] {
      CUdeviceptr p;
      cuMemAlloc(&p, mib << 20);
      cuMemFree(p);
    });
    snprintf(what, sizeof what, "cuMemAlloc %zu MiB alone", mib);
    std::vector<CUdeviceptr> held;
    timed(what, 20, [&] {
      CUdeviceptr p;
      cuMemAlloc(&p, mib << 20);
      held.push_back(p);
    });
    for (auto p : held) cuMemFree(p);
  }
  CUdeviceptr dev;
  CK(cuMemAlloc(&dev, 4 << 20));
  void* pinned;
  CK(cuMemHostAlloc(&pinned, 4 << 20, 0));
  std::vector<char> pageable(4 << 20, 1);
  for (size_t kib : {16, 80, 240, 320}) {
    char what[64];
    snprintf(what, sizeof what, "DtoH %zu KiB pageable", kib);
    timed(what, 50, [&] { cuMemcpyDtoH(pageable.data(), dev, kib << 10); });
    snprintf(what, sizeof what, "DtoH %zu KiB pinned", kib);
    timed(what, 50, [&] { cuMemcpyDtoH(pinned, dev, kib << 10); });
    snprintf(what, sizeof what, "HtoDAsync %zu KiB pageable (+sync)", kib);
    timed(what, 50, [&] {
      cuMemcpyHtoDAsync(dev, pageable.data(), kib << 10, s);
      cuStreamSynchronize(s);
    });
    snprintf(what, sizeof what, "HtoDAsync %zu KiB pinned (+sync)", kib);
    timed(what, 50, [&] {
      cuMemcpyHtoDAsync(dev, pinned, kib << 10, s);
      cuStreamSynchronize(s);
    });
  }
  return 0;
}
