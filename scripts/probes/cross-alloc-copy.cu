// Does the driver copy a range that crosses two cudaMalloc allocations lying end to end?
// (record/src/spans.rs keeps spans only where the chunk kernels copy them; this probe says
// whether a driver copy across allocations would fail, for the next step.)
//   nvcc -O2 -o /tmp/cross scripts/probes/cross-alloc-copy.cu && /tmp/cross
#include <cstdio>
#include <cuda.h>
#include <cuda_runtime.h>

int main() {
    const size_t n = 4096;
    char *a = nullptr, *b = nullptr, *dst = nullptr;
    cudaMalloc(&a, n);
    cudaMalloc(&b, n);
    cudaMalloc(&dst, 2 * n);
    printf("a %p, b %p: %s\n", (void *)a, (void *)b, b == a + n ? "end to end" : "apart");
    if (b != a + n) return 0;
    cudaMemset(a, 1, n);
    cudaMemset(b, 2, n);
    cudaError_t dtod = cudaMemcpy(dst, a, 2 * n, cudaMemcpyDeviceToDevice);
    printf("cudaMemcpy DtoD across both: %s\n", cudaGetErrorString(dtod));
    static char host[2 * 4096];
    cudaError_t dtoh = cudaMemcpy(host, a, 2 * n, cudaMemcpyDeviceToHost);
    printf("cudaMemcpy DtoH across both: %s (bytes %d and %d)\n", cudaGetErrorString(dtoh), host[0], host[n]);
    CUresult r = cuMemcpyDtoD((CUdeviceptr)dst, (CUdeviceptr)a, 2 * n);
    const char *s = nullptr;
    cuGetErrorString(r, &s);
    printf("cuMemcpyDtoD across both: %s\n", s ? s : "?");
    return 0;
}
