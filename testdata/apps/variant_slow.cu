// A slower variant of variant_app.cu's scale_add, for `kreplay profile --variant` (issue 38):
// the same value, bit for bit, after a dependent chain of 4096 FMAs the result never uses. The
// chain feeds a select the compiler cannot prove false (it does no range analysis on floats),
// so neither nvcc nor ptxas can drop it. (An empty `asm volatile` as the dependency, tried
// first, emits no PTX instruction, and ptxas folded the loop away: no slower on the H200.)
// Built with nvcc -cubin.
extern "C" __global__ void scale_add(float* out, const float* in, int n, float alpha) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float v = in[i];
    float r = __fmaf_rn(alpha, v, (float)i * 0.001f);
    float chain = v;
    for (int k = 0; k < 4096; ++k) chain = __fmaf_rn(chain, 0.999f, 0.001f);
    // chain stays between min(v, 1) and max(v, 1): the select always takes r.
    out[i] = chain > 1e30f ? chain : r;
}
