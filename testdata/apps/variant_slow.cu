// A slower variant of variant_app.cu's scale_add, for `kreplay profile --variant` (issue 38):
// the same value, bit for bit, computed 4096 times over in a dependent chain (the empty asm
// takes the previous result and may "change" the input, so the compiler can neither fold the
// loop nor drop its earlier steps). Built with nvcc -cubin.
extern "C" __global__ void scale_add(float* out, const float* in, int n, float alpha) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = in[i], r = 0.0f;
    for (int k = 0; k < 4096; ++k) {
        asm volatile("" : "+f"(v) : "f"(r));
        r = __fmaf_rn(alpha, v, (float)i * 0.001f);
    }
    out[i] = r;
}
