// Test applications for memory beyond linear device allocations (textures and surfaces,
// host-mapped memory, the device heap), context teardown right after the target kernel, and a
// kernel that prints. One binary, one scenario per argument; each prints a deterministic
// checksum of its results on stdout, so a run under `kreplay record` can be compared with a
// plain run.
#include <cuda.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(x)                                                                             \
  do {                                                                                    \
    cudaError_t ck_err = (x);                                                             \
    if (ck_err != cudaSuccess) {                                                          \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(ck_err)); \
      exit(1);                                                                            \
    }                                                                                     \
  } while (0)
#define CU(x)                                                               \
  do {                                                                      \
    CUresult cu_res = (x);                                                  \
    if (cu_res != CUDA_SUCCESS) {                                           \
      fprintf(stderr, "%s:%d %s: error %d\n", __FILE__, __LINE__, #x, cu_res); \
      exit(1);                                                              \
    }                                                                       \
  } while (0)

static double checksum(const float* v, size_t n) {
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += v[i] * (1.0 + (i % 7));
  return s;
}

static std::vector<float> iota(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * (float)((i * 2654435761u) % 1000) / 1000.0f;
  return v;
}

// --- device printf ------------------------------------------------------------------------
__global__ void print_scale(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = 2.0f * x[i] + 1.0f;
  if (i == 0) printf("print_scale: n = %d, x[0] = %f {\"not\": \"json\"}\n", n, x[0]);
}

static int run_printf() {
  const int n = 1 << 20;
  auto hx = iota(n, 1.0f);
  std::vector<float> hy(n);
  float *x, *y;
  CK(cudaMalloc(&x, n * 4));
  CK(cudaMalloc(&y, n * 4));
  CK(cudaMemcpy(x, hx.data(), n * 4, cudaMemcpyHostToDevice));
  print_scale<<<(n + 255) / 256, 256>>>(x, y, n);
  CK(cudaMemcpy(hy.data(), y, n * 4, cudaMemcpyDeviceToHost));
  printf("printf %.6f\n", checksum(hy.data(), n));
  return 0;
}

// --- context teardown right after the target ----------------------------------------------
__global__ void teardown_scale(const float* x, float* y, size_t n) {
  size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (i < n) y[i] = 0.5f * x[i] + (float)(i % 3);
}

// `how`: "ctxdestroy" (a created context, cuCtxDestroy), "devicereset" (cudaDeviceReset),
// "primaryreset" (cuDevicePrimaryCtxReset). 2 x 256 MiB, so the capture is still being written
// when the context goes.
static int run_teardown(const char* how) {
  const size_t n = (size_t)1 << 26;
  CUcontext ctx = nullptr;
  CUdevice dev;
  CU(cuInit(0));
  CU(cuDeviceGet(&dev, 0));
  if (!strcmp(how, "ctxdestroy")) {
#if CUDA_VERSION >= 13000
    CU(cuCtxCreate(&ctx, nullptr, 0, dev));
#else
    CU(cuCtxCreate(&ctx, 0, dev));
#endif
  }
  auto hx = iota(n, 3.0f);
  std::vector<float> hy(n);
  float *x, *y;
  CK(cudaMalloc(&x, n * 4));
  CK(cudaMalloc(&y, n * 4));
  CK(cudaMemcpy(x, hx.data(), n * 4, cudaMemcpyHostToDevice));
  teardown_scale<<<(unsigned)((n + 255) / 256), 256>>>(x, y, n);
  CK(cudaMemcpy(hy.data(), y, n * 4, cudaMemcpyDeviceToHost));
  printf("%s %.6f\n", how, checksum(hy.data(), n));
  fflush(stdout);
  if (ctx) {
    CU(cuCtxDestroy(ctx));
  } else if (!strcmp(how, "devicereset")) {
    CK(cudaDeviceReset());
  } else {
    CU(cuDevicePrimaryCtxReset(dev));
  }
  return 0;
}

// --- host-mapped memory: read and written by the kernel through device pointers -------------
__global__ void mapped_mix(const float* in, float* out, float* dev, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    float v = in[i] * 1.5f + 0.25f;
    out[i] = v;
    dev[i] += v;
  }
}

// `how`: "mapped" (cudaHostAlloc(..., Mapped)) or "registered" (cudaHostRegister on malloc).
static int run_mapped(const char* how) {
  const int n = 1 << 18;
  float *in, *out, *dev;
  void *raw_in = nullptr, *raw_out = nullptr;
  if (!strcmp(how, "mapped")) {
    CK(cudaHostAlloc((void**)&in, n * 4, cudaHostAllocMapped));
    CK(cudaHostAlloc((void**)&out, n * 4, cudaHostAllocMapped));
  } else {
    raw_in = aligned_alloc(4096, n * 4);
    raw_out = aligned_alloc(4096, n * 4);
    in = (float*)raw_in;
    out = (float*)raw_out;
    CK(cudaHostRegister(in, n * 4, cudaHostRegisterMapped));
    CK(cudaHostRegister(out, n * 4, cudaHostRegisterMapped));
  }
  auto hx = iota(n, 5.0f);
  memcpy(in, hx.data(), n * 4);
  memset(out, 0, n * 4);
  float *din, *dout;
  CK(cudaHostGetDevicePointer((void**)&din, in, 0));
  CK(cudaHostGetDevicePointer((void**)&dout, out, 0));
  CK(cudaMalloc(&dev, n * 4));
  CK(cudaMemcpy(dev, hx.data(), n * 4, cudaMemcpyHostToDevice));
  mapped_mix<<<(n + 255) / 256, 256>>>(din, dout, dev, n);
  CK(cudaDeviceSynchronize());
  std::vector<float> hd(n);
  CK(cudaMemcpy(hd.data(), dev, n * 4, cudaMemcpyDeviceToHost));
  printf("%s %.6f %.6f\n", how, checksum(out, n), checksum(hd.data(), n));
  return 0;
}

// --- device heap: rows allocated with malloc inside a kernel, read by the target ----------
__global__ void heap_build(float** rows, int nrows, int len) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= nrows) return;
  float* row = (float*)malloc(len * sizeof(float));
  for (int k = 0; k < len; ++k) row[k] = (float)((r * 31 + k * 7) % 101) * 0.125f;
  rows[r] = row;
}

__global__ void heap_sum(float* const* rows, float* out, int nrows, int len) {
  int r = blockIdx.x * blockDim.x + threadIdx.x;
  if (r >= nrows) return;
  float s = 0;
  for (int k = 0; k < len; ++k) s += rows[r][k] * (1.0f + k);
  out[r] = s;
  rows[r][0] += 1.0f;  // the heap is written too
}

static int run_heap() {
  const int nrows = 512, len = 64;
  float** rows;
  float* out;
  CK(cudaMalloc(&rows, nrows * sizeof(float*)));
  CK(cudaMalloc(&out, nrows * 4));
  heap_build<<<(nrows + 127) / 128, 128>>>(rows, nrows, len);
  heap_sum<<<(nrows + 127) / 128, 128>>>(rows, out, nrows, len);
  std::vector<float> h(nrows);
  CK(cudaMemcpy(h.data(), out, nrows * 4, cudaMemcpyDeviceToHost));
  printf("heap %.6f\n", checksum(h.data(), nrows));
  return 0;
}

// --- textures and surfaces ----------------------------------------------------------------
__global__ void tex2d_read(cudaTextureObject_t t, float* out, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x < w && y < h) out[y * w + x] = tex2D<float>(t, x + 0.5f, y + 0.5f) * 2.0f +
                                       tex2D<float>(t, x + 0.75f, y + 0.25f);
}

__global__ void tex_layered_read(cudaTextureObject_t t, float* out, int w, int h, int layers) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= w || y >= h) return;
  float s = 0;
  for (int l = 0; l < layers; ++l) s += tex2DLayered<float>(t, x + 0.5f, y + 0.5f, l) * (l + 1);
  out[y * w + x] = s;
}

__global__ void tex_cube_read(cudaTextureObject_t t, float* out, int w) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= w || y >= w) return;
  float u = (x + 0.5f) / w * 2.0f - 1.0f, v = (y + 0.5f) / w * 2.0f - 1.0f;
  out[y * w + x] = texCubemap<float>(t, 1.0f, u, v) + 2.0f * texCubemap<float>(t, u, -1.0f, v) +
                   3.0f * texCubemap<float>(t, u, v, 1.0f);
}

__global__ void tex_mip_read(cudaTextureObject_t t, float* out, int w, int levels) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= w || y >= w) return;
  float s = 0;
  for (int l = 0; l < levels; ++l)
    s += tex2DLod<float>(t, (x + 0.5f) / w, (y + 0.5f) / w, (float)l) * (l + 1);
  out[y * w + x] = s;
}

__global__ void tex_table_read(const cudaTextureObject_t* texs, int n, float* out, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x >= w || y >= h) return;
  float s = 0;
  for (int i = 0; i < n; ++i) s += tex2D<float>(texs[i], x + 0.5f, y + 0.5f) * (i + 1);
  out[y * w + x] = s;
}

__global__ void surf_write(cudaTextureObject_t src, cudaSurfaceObject_t dst, int w, int h) {
  int x = blockIdx.x * blockDim.x + threadIdx.x, y = blockIdx.y * blockDim.y + threadIdx.y;
  if (x < w && y < h) {
    float v = tex2D<float>(src, x + 0.5f, y + 0.5f);
    float old = surf2Dread<float>(dst, x * 4, y);
    surf2Dwrite(v * 3.0f + old, dst, x * 4, y);
  }
}

static cudaTextureObject_t make_tex(const cudaResourceDesc& rd, bool linear, bool normalized) {
  cudaTextureDesc td;
  memset(&td, 0, sizeof td);
  td.addressMode[0] = td.addressMode[1] = td.addressMode[2] = cudaAddressModeClamp;
  td.filterMode = linear ? cudaFilterModeLinear : cudaFilterModePoint;
  td.readMode = cudaReadModeElementType;
  td.normalizedCoords = normalized;
  cudaTextureObject_t t;
  CK(cudaCreateTextureObject(&t, &rd, &td, nullptr));
  return t;
}

static cudaResourceDesc array_resource(cudaArray_t a) {
  cudaResourceDesc rd;
  memset(&rd, 0, sizeof rd);
  rd.resType = cudaResourceTypeArray;
  rd.res.array.array = a;
  return rd;
}

static int run_texture(const char* how) {
  const int w = 256, h = 192;
  float* out;
  CK(cudaMalloc(&out, w * h * 4));
  CK(cudaMemset(out, 0, w * h * 4));
  // A texture created first and destroyed, so live handles do not start at 1.
  cudaChannelFormatDesc cd = cudaCreateChannelDesc<float>();
  dim3 block(16, 16), grid((w + 15) / 16, (h + 15) / 16);
  if (!strcmp(how, "tex2d") || !strcmp(how, "surface")) {
    cudaArray_t a, b;
    CK(cudaMallocArray(&a, &cd, w, h));
    auto src = iota((size_t)w * h, 4.0f);
    CK(cudaMemcpy2DToArray(a, 0, 0, src.data(), w * 4, w * 4, h, cudaMemcpyHostToDevice));
    cudaTextureObject_t gone = make_tex(array_resource(a), false, false);
    CK(cudaDestroyTextureObject(gone));
    cudaTextureObject_t t = make_tex(array_resource(a), true, false);
    if (!strcmp(how, "tex2d")) {
      tex2d_read<<<grid, block>>>(t, out, w, h);
    } else {
      CK(cudaMallocArray(&b, &cd, w, h, cudaArraySurfaceLoadStore));
      auto init = iota((size_t)w * h, 1.0f);
      CK(cudaMemcpy2DToArray(b, 0, 0, init.data(), w * 4, w * 4, h, cudaMemcpyHostToDevice));
      cudaSurfaceObject_t s;
      cudaResourceDesc rb = array_resource(b);
      CK(cudaCreateSurfaceObject(&s, &rb));
      cudaTextureObject_t tp = make_tex(array_resource(a), false, false);
      surf_write<<<grid, block>>>(tp, s, w, h);
      CK(cudaMemcpy2DFromArray(out, w * 4, b, 0, 0, w * 4, h, cudaMemcpyDeviceToDevice));
    }
  } else if (!strcmp(how, "texlayered")) {
    const int layers = 5;
    cudaArray_t a;
    CK(cudaMalloc3DArray(&a, &cd, make_cudaExtent(w, h, layers), cudaArrayLayered));
    auto src = iota((size_t)w * h * layers, 2.0f);
    cudaMemcpy3DParms p;
    memset(&p, 0, sizeof p);
    p.srcPtr = make_cudaPitchedPtr(src.data(), w * 4, w, h);
    p.dstArray = a;
    p.extent = make_cudaExtent(w, h, layers);
    p.kind = cudaMemcpyHostToDevice;
    CK(cudaMemcpy3D(&p));
    cudaTextureObject_t t = make_tex(array_resource(a), false, false);
    tex_layered_read<<<grid, block>>>(t, out, w, h, layers);
  } else if (!strcmp(how, "texcube")) {
    const int edge = 128;
    cudaArray_t a;
    CK(cudaMalloc3DArray(&a, &cd, make_cudaExtent(edge, edge, 6), cudaArrayCubemap));
    auto src = iota((size_t)edge * edge * 6, 7.0f);
    cudaMemcpy3DParms p;
    memset(&p, 0, sizeof p);
    p.srcPtr = make_cudaPitchedPtr(src.data(), edge * 4, edge, edge);
    p.dstArray = a;
    p.extent = make_cudaExtent(edge, edge, 6);
    p.kind = cudaMemcpyHostToDevice;
    CK(cudaMemcpy3D(&p));
    cudaTextureObject_t t = make_tex(array_resource(a), true, true);
    tex_cube_read<<<dim3(edge / 16, edge / 16), block>>>(t, out, edge);
  } else if (!strcmp(how, "texmip")) {
    const int edge = 128, levels = 4;
    cudaMipmappedArray_t m;
    CK(cudaMallocMipmappedArray(&m, &cd, make_cudaExtent(edge, edge, 0), levels));
    for (int l = 0; l < levels; ++l) {
      cudaArray_t lvl;
      CK(cudaGetMipmappedArrayLevel(&lvl, m, l));
      int lw = edge >> l;
      auto src = iota((size_t)lw * lw, 3.0f + l);
      CK(cudaMemcpy2DToArray(lvl, 0, 0, src.data(), lw * 4, lw * 4, lw, cudaMemcpyHostToDevice));
    }
    cudaResourceDesc rd;
    memset(&rd, 0, sizeof rd);
    rd.resType = cudaResourceTypeMipmappedArray;
    rd.res.mipmap.mipmap = m;
    cudaTextureDesc td;
    memset(&td, 0, sizeof td);
    td.addressMode[0] = td.addressMode[1] = cudaAddressModeClamp;
    td.filterMode = cudaFilterModeLinear;
    td.mipmapFilterMode = cudaFilterModePoint;
    td.maxMipmapLevelClamp = levels - 1;
    td.readMode = cudaReadModeElementType;
    td.normalizedCoords = 1;
    cudaTextureObject_t t;
    CK(cudaCreateTextureObject(&t, &rd, &td, nullptr));
    tex_mip_read<<<dim3(edge / 16, edge / 16), block>>>(t, out, edge, levels);
  } else if (!strcmp(how, "textable")) {
    // Three textures reached through a table in device memory, not the arguments. Three
    // others stay alive unused, so the table's handles are not the ones a fresh process (the
    // player) hands out: the player must rewrite the table.
    const int n = 3;
    cudaTextureObject_t hs[n];
    for (int i = 0; i < 2 * n; ++i) {
      cudaArray_t a;
      CK(cudaMallocArray(&a, &cd, w, h));
      auto src = iota((size_t)w * h, 2.0f + i);
      CK(cudaMemcpy2DToArray(a, 0, 0, src.data(), w * 4, w * 4, h, cudaMemcpyHostToDevice));
      cudaTextureObject_t t = make_tex(array_resource(a), i % 2 == 1, false);
      if (i >= n) hs[i - n] = t;
    }
    cudaTextureObject_t* table;
    CK(cudaMalloc(&table, sizeof hs));
    CK(cudaMemcpy(table, hs, sizeof hs, cudaMemcpyHostToDevice));
    tex_table_read<<<grid, block>>>(table, n, out, w, h);
  } else if (!strcmp(how, "texpitch")) {
    float* img;
    size_t pitch;
    CK(cudaMallocPitch(&img, &pitch, w * 4, h));
    auto src = iota((size_t)w * h, 6.0f);
    CK(cudaMemcpy2D(img, pitch, src.data(), w * 4, w * 4, h, cudaMemcpyHostToDevice));
    cudaResourceDesc rd;
    memset(&rd, 0, sizeof rd);
    rd.resType = cudaResourceTypePitch2D;
    rd.res.pitch2D.devPtr = img;
    rd.res.pitch2D.desc = cd;
    rd.res.pitch2D.width = w;
    rd.res.pitch2D.height = h;
    rd.res.pitch2D.pitchInBytes = pitch;
    cudaTextureObject_t t = make_tex(rd, true, false);
    tex2d_read<<<grid, block>>>(t, out, w, h);
  } else {
    fprintf(stderr, "unknown texture scenario %s\n", how);
    return 2;
  }
  std::vector<float> ho((size_t)w * h);
  CK(cudaMemcpy(ho.data(), out, w * h * 4, cudaMemcpyDeviceToHost));
  printf("%s %.6f\n", how, checksum(ho.data(), ho.size()));
  return 0;
}

int main(int argc, char** argv) {
  const char* m = argc > 1 ? argv[1] : "printf";
  if (!strcmp(m, "printf")) return run_printf();
  if (!strcmp(m, "ctxdestroy") || !strcmp(m, "devicereset") || !strcmp(m, "primaryreset"))
    return run_teardown(m);
  if (!strcmp(m, "mapped") || !strcmp(m, "registered")) return run_mapped(m);
  if (!strcmp(m, "heap")) return run_heap();
  if (!strncmp(m, "tex", 3) || !strcmp(m, "surface")) return run_texture(m);
  fprintf(stderr, "unknown scenario %s\n", m);
  return 2;
}
