// An application that is itself a CUPTI user: it subscribes to CUPTI callbacks before its first
// CUDA call (as a tracer or an in-app profiler would), then runs saxpy. kreplay must leave it
// unharmed: same output, and a clear message when the one CUPTI subscriber slot is taken.
// Build: nvcc -O2 -arch=sm_90 -I/usr/local/cuda/extras/CUPTI/include cupti_app.cu -lcupti
#include <cstdio>
#include <vector>
#include <cuda_runtime.h>
#include <cupti.h>

__global__ void saxpy_traced(int n, float a, const float* x, float* y) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

static int launches_seen = 0;

static void CUPTIAPI on_callback(void*, CUpti_CallbackDomain, CUpti_CallbackId, const void* data) {
  auto* info = static_cast<const CUpti_CallbackData*>(data);
  if (info->callbackSite == CUPTI_API_ENTER) __atomic_add_fetch(&launches_seen, 1, __ATOMIC_RELAXED);
}

int main() {
  CUpti_SubscriberHandle sub;
  CUptiResult r = cuptiSubscribe(&sub, (CUpti_CallbackFunc)on_callback, nullptr);
  if (r == CUPTI_SUCCESS) {
    cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_RUNTIME_API);
  }
  // Diagnostics go to stderr: stdout must not depend on who holds CUPTI.
  const char* msg = nullptr;
  cuptiGetResultString(r, &msg);
  fprintf(stderr, "cupti_app: cuptiSubscribe: %s\n", msg ? msg : "?");
  const int n = 1 << 20;
  std::vector<float> hx(n), hy(n);
  for (int i = 0; i < n; ++i) { hx[i] = 0.5f * (i % 97); hy[i] = 1.0f + (i % 13); }
  float *x, *y;
  cudaMalloc(&x, n * 4);
  cudaMalloc(&y, n * 4);
  cudaMemcpy(x, hx.data(), n * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(y, hy.data(), n * 4, cudaMemcpyHostToDevice);
  for (int k = 0; k < 3; ++k) saxpy_traced<<<(n + 255) / 256, 256>>>(n, 1.5f, x, y);
  cudaMemcpy(hy.data(), y, n * 4, cudaMemcpyDeviceToHost);
  double sum = 0;
  for (float v : hy) sum += v;
  printf("cupti_app %.3f\n", sum);
  fprintf(stderr, "cupti_app: runtime callbacks seen: %d\n", launches_seen);
  if (r == CUPTI_SUCCESS) cuptiUnsubscribe(sub);
  return cudaGetLastError() == cudaSuccess ? 0 : 1;
}
