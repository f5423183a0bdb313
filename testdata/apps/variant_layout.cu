// A variant of variant_app.cu's scale_add with another parameter layout (n as a 64-bit
// integer: parameter 3 is 8 bytes, not 4), for `kreplay profile --variant` (issue 38): it is
// refused before any variant launch. Built with nvcc -cubin.
extern "C" __global__ void scale_add(float* out, const float* in, long long n, float alpha) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) out[i] = __fmaf_rn(alpha, in[i], (float)i * 0.001f);
}
