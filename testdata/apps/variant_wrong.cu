// A wrong variant of variant_app.cu's scale_add, for `kreplay profile --variant` (issue 38):
// element 7 gets 12345.0 instead of its value (the GPU suite expects its first differing byte
// at offset 28 of the output, and with --keep variant the app's checksum moved by exactly that
// element's change). Built with nvcc -cubin.
extern "C" __global__ void scale_add(float* out, const float* in, int n, float alpha) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    out[i] = i == 7 ? 12345.0f : __fmaf_rn(alpha, in[i], (float)i * 0.001f);
}
