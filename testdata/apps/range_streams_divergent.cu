// A variant of range_streams.cu's middle kernel that writes a different value (one more than
// streams_middle's), for `kreplay play --module ... --verify` (issue 32): verification must
// fail and name this kernel's step as the first that diverges. Built as a cubin (nvcc
// -cubin); extern "C" keeps the name the range's kernel step has.
extern "C" __global__ void streams_middle(int n, const float* b, float* c) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = __fadd_rn(__fsub_rn(__fmul_rn(__fmul_rn(b[i], b[i]), 0.5f), b[i]), 1.0f);
}
