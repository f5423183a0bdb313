// Driver-API application: cuModuleLoadData on a cubin file, cuLaunchKernel with `extra`
// (CU_LAUNCH_PARAM_BUFFER_POINTER) instead of kernelParams.
#include <cuda.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(x)                                                             \
  do {                                                                    \
    CUresult r = (x);                                                     \
    if (r != CUDA_SUCCESS) {                                              \
      const char* s;                                                      \
      cuGetErrorName(r, &s);                                              \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, s);       \
      exit(1);                                                            \
    }                                                                     \
  } while (0)

int main(int argc, char** argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: driver_app KERNEL.cubin\n");
    return 2;
  }
  FILE* f = fopen(argv[1], "rb");
  if (!f) { perror(argv[1]); return 1; }
  std::vector<char> image;
  char buf[65536];
  size_t k;
  while ((k = fread(buf, 1, sizeof buf, f)) > 0) image.insert(image.end(), buf, buf + k);
  fclose(f);
  CK(cuInit(0));
  CUdevice dev;
  CK(cuDeviceGet(&dev, 0));
  CUcontext ctx;
  CK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CK(cuCtxSetCurrent(ctx));
  CUmodule mod;
  CK(cuModuleLoadData(&mod, image.data()));
  CUfunction fn;
  CK(cuModuleGetFunction(&fn, mod, "axpb"));
  const int n = 1 << 20;
  std::vector<float> hx(n), hy(n);
  for (int i = 0; i < n; ++i) hx[i] = (float)(i % 977) / 977.0f;
  CUdeviceptr x, y;
  CK(cuMemAlloc(&x, n * 4));
  CK(cuMemAlloc(&y, n * 4));
  CK(cuMemcpyHtoD(x, hx.data(), n * 4));
  CK(cuMemsetD8(y, 0, n * 4));
  // Laid out as the kernel's parameters: y@0, x@8, a@16, b@20, n@24 (28 bytes).
  struct __attribute__((packed)) Args {
    CUdeviceptr y, x;
    float a, b;
    int n;
  } args = {y, x, 3.0f, 0.5f, n};
  size_t size = sizeof args;
  static_assert(sizeof(Args) == 28, "parameter buffer layout");
  void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &args, CU_LAUNCH_PARAM_BUFFER_SIZE, &size,
                   CU_LAUNCH_PARAM_END};
  CK(cuLaunchKernel(fn, (n + 255) / 256, 1, 1, 256, 1, 1, 0, 0, nullptr, extra));
  CK(cuCtxSynchronize());
  CK(cuMemcpyDtoH(hy.data(), y, n * 4));
  double s = 0;
  for (int i = 0; i < n; ++i) s += hy[i] * (1 + i % 7);
  printf("driver %.6f\n", s);
  return 0;
}
