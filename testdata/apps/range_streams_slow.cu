// A variant of range_streams.cu's middle kernel for `kreplay play --module` (issue 32): the
// same values as streams_middle (the same _rn intrinsics, so the same rounding), written 256
// times through a volatile pointer (stores the compiler may not drop), so the range replays
// slower with the same output. Built as a cubin (nvcc -cubin); extern "C" keeps the name the
// range's kernel step has.
extern "C" __global__ void streams_middle(int n, const float* b, float* c) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = __fsub_rn(__fmul_rn(__fmul_rn(b[i], b[i]), 0.5f), b[i]);
  volatile float* out = c;
  for (int k = 0; k < 256; ++k) out[i] = v;
}
