"""CuPy test app: an NVRTC-compiled RawKernel; prints a checksum."""
import cupy as cp

src = r"""
extern "C" __global__ void cupy_scale_add(const float* x, float* y, float s, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = s * x[i] + y[i] * y[i];
}
"""
k = cp.RawKernel(src, "cupy_scale_add")
n = 1 << 20
x = cp.arange(n, dtype=cp.float32) / n
y = cp.ones(n, dtype=cp.float32) * 0.5
k(((n + 255) // 256,), (256,), (x, y, cp.float32(2.5), cp.int32(n)))
cp.cuda.Device().synchronize()
print(f"cupy {float(y.astype(cp.float64).sum()):.4f}")
