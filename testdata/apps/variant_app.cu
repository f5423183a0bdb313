// Test app for `kreplay profile --variant` (issue 38): one kernel, scale_add, called at three
// call sites of different sizes on buffers of their own, then (with `loop N`) N more times, or
// (with `graph N`) once more inside a CUDA graph (stream capture) that is launched N times.
// Prints, per call site, the output's device address, its element 7's bits and the sum of its
// elements' bit patterns (an exact checksum: a change of one element changes it by exactly
// that element's change in bits), and the total. variant_slow.cu, variant_wrong.cu and
// variant_layout.cu are variants of scale_add; built as this file with -cubin it is an
// identical one.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cstdint>
#include <vector>
#include <cuda_runtime.h>

extern "C" __global__ void scale_add(float* out, const float* in, int n, float alpha) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) out[i] = __fmaf_rn(alpha, in[i], (float)i * 0.001f);
}

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
    fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e)); exit(1); } } while (0)

static uint64_t bitsum(const std::vector<float>& v) {
    uint64_t s = 0;
    for (float f : v) { uint32_t b; memcpy(&b, &f, 4); s += b; }
    return s;
}

int main(int argc, char** argv) {
    int loops = (argc > 2 && strcmp(argv[1], "loop") == 0) ? atoi(argv[2]) : 0;
    int graphs = (argc > 2 && strcmp(argv[1], "graph") == 0) ? atoi(argv[2]) : 0;
    const int sizes[3] = {1 << 16, 1 << 20, 3000};
    uint64_t total = 0;
    for (int site = 0; site < 3; ++site) {
        int n = sizes[site];
        std::vector<float> h(n);
        for (int i = 0; i < n; ++i) h[i] = (float)((i * 37 + site * 11) % 1000) * 0.25f - 50.0f;
        float *in, *out;
        CK(cudaMalloc(&in, n * sizeof(float)));
        CK(cudaMalloc(&out, n * sizeof(float)));
        CK(cudaMemcpy(in, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
        CK(cudaMemset(out, 0, n * sizeof(float)));
        int block = 256, grid = (n + block - 1) / block;
        scale_add<<<grid, block>>>(out, in, n, 1.5f + site);
        CK(cudaGetLastError());
        CK(cudaDeviceSynchronize());
        std::vector<float> r(n);
        CK(cudaMemcpy(r.data(), out, n * sizeof(float), cudaMemcpyDeviceToHost));
        uint32_t e7; memcpy(&e7, &r[7], 4);
        uint64_t s = bitsum(r);
        total += s;
        printf("site %d n=%d grid=%d out=%p e7=0x%08x bitsum=%llu\n", site, n, grid, (void*)out, e7,
               (unsigned long long)s);
        CK(cudaFree(in));
        CK(cudaFree(out));
    }
    if (loops > 0) {
        int n = 1 << 20;
        float *in, *out;
        CK(cudaMalloc(&in, n * sizeof(float)));
        CK(cudaMalloc(&out, n * sizeof(float)));
        std::vector<float> ones(n, 1.0f);
        CK(cudaMemcpy(in, ones.data(), n * sizeof(float), cudaMemcpyHostToDevice));
        // Another alpha each time, so that every launch changes its output (a write set).
        for (int k = 0; k < loops; ++k) scale_add<<<(n + 255) / 256, 256>>>(out, in, n, 1.0f + k);
        CK(cudaDeviceSynchronize());
        std::vector<float> r(n);
        CK(cudaMemcpy(r.data(), out, n * sizeof(float), cudaMemcpyDeviceToHost));
        total += bitsum(r);
        printf("loop %d bitsum=%llu\n", loops, (unsigned long long)bitsum(r));
    }
    if (graphs > 0) {
        int n = 1 << 18;
        float *in, *out;
        CK(cudaMalloc(&in, n * sizeof(float)));
        CK(cudaMalloc(&out, n * sizeof(float)));
        std::vector<float> h(n);
        for (int i = 0; i < n; ++i) h[i] = (float)(i % 977) * 0.5f;
        CK(cudaMemcpy(in, h.data(), n * sizeof(float), cudaMemcpyHostToDevice));
        cudaStream_t s;
        CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        cudaGraph_t g;
        cudaGraphExec_t ge;
        CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
        scale_add<<<(n + 255) / 256, 256, 0, s>>>(out, in, n, 0.75f);
        CK(cudaStreamEndCapture(s, &g));
        CK(cudaGraphInstantiate(&ge, g, 0));
        for (int k = 0; k < graphs; ++k) CK(cudaGraphLaunch(ge, s));
        CK(cudaStreamSynchronize(s));
        std::vector<float> r(n);
        CK(cudaMemcpy(r.data(), out, n * sizeof(float), cudaMemcpyDeviceToHost));
        total += bitsum(r);
        printf("graph %d bitsum=%llu\n", graphs, (unsigned long long)bitsum(r));
        CK(cudaGraphExecDestroy(ge));
        CK(cudaGraphDestroy(g));
        CK(cudaStreamDestroy(s));
    }
    printf("checksum %llu\n", (unsigned long long)total);
    return 0;
}
