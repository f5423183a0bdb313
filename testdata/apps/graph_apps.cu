// CUDA graph test applications for kreplay: one binary, one scenario per argument. Each prints
// a deterministic checksum of its results, and the number of times each kernel ran, so a run
// under `kreplay record` can be compared with a plain run and `kreplay list` with the truth.
//
//   graph_apps stream N     stream-captured graph (produce -> scale -> sum), launched N times
//                           on new inputs
//   graph_apps explicit N   graph API: produce -> memcpy -> consume (consume reads what produce
//                           wrote through a copy), plus a memset node; launched N times
//   graph_apps child N      produce -> [child graph: memset, consume] -> finish; N launches
//   graph_apps update N     one axpy node whose scalar and input buffer change between
//                           launches (cudaGraphExecKernelNodeSetParams); N launches
//   graph_apps whole N      produce -> axpy; from launch 3 on, the executable graph is updated
//                           from another graph of the same shape (cudaGraphExecUpdate: new
//                           scalar, other buffers)
//   graph_apps host N       a host-function node, then consume: the recorder cannot run the
//                           host node again, so it does not capture consume (and says so)
//   graph_apps cluster N    produce -> a kernel launched with 4-block clusters (its output
//                           depends on the cluster size), stream-captured; N launches
//   graph_apps bench N      a 20-node chain of tiny kernels launched N times; prints the time
//   graph_apps cond N       conditional nodes (CUDA 12.4+): set_cond -> IF{cond_body} ->
//                           WHILE{countdown, 3 rounds} -> finish, beside an independent axpy;
//                           set_cond and countdown call cudaGraphSetConditional, which faults
//                           outside the graph's launch. N launches
//
// A third argument sets the elements per buffer (default 1 Mi).
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define CK(x)                                                                          \
  do {                                                                                 \
    cudaError_t e = (x);                                                               \
    if (e != cudaSuccess) {                                                            \
      fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      exit(1);                                                                         \
    }                                                                                  \
  } while (0)

static double checksum(const std::vector<float>& v) {
  double s = 0;
  for (size_t i = 0; i < v.size(); ++i) s += v[i] * (1.0 + (i % 7));
  return s;
}

static std::vector<float> iota(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * (float)((i * 2654435761u) % 1000) / 1000.0f;
  return v;
}

__global__ void graph_produce(const float* x, float* tmp, int n, float k) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) tmp[i] = x[i] * k + 1.0f;
}

// Reads what an earlier node of the same launch wrote.
__global__ void graph_consume(const float* tmp, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = y[i] * 0.5f + tmp[i] * tmp[i];
}

__global__ void graph_finish(float* y, const float* z, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += z[i];
}

__global__ void graph_axpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}

// Each block adds the rank of its neighbour in the cluster: wrong without the cluster launch.
__global__ void graph_cluster(const float* tmp, float* y, int n) {
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  __shared__ float rank;
  if (threadIdx.x == 0) rank = (float)cluster.block_rank() + 10.0f * cluster.num_blocks();
  cluster.sync();
  float r = *cluster.map_shared_rank(&rank, (cluster.block_rank() + 1) % cluster.num_blocks());
  cluster.sync();
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = y[i] * 0.5f + tmp[i] + r;
}

__global__ void graph_tick(float* v) {
  if (threadIdx.x == 0) v[blockIdx.x] += 1.0f;
}

// Elements per buffer (third argument; default 1 Mi).
static int N = 1 << 20;
static unsigned BLOCKS = (N + 255) / 256;

struct Buffers {
  float *x, *tmp, *tmp2, *y, *z;
  std::vector<float> hx, hy;
  Buffers() : hx(iota(N, 1.0f)), hy(iota(N, 2.0f)) {
    for (float** p : {&x, &tmp, &tmp2, &y, &z}) CK(cudaMalloc(p, N * 4));
    CK(cudaMemcpy(x, hx.data(), N * 4, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(y, hy.data(), N * 4, cudaMemcpyHostToDevice));
    CK(cudaMemset(tmp, 0, N * 4));
    CK(cudaMemset(tmp2, 0, N * 4));
    CK(cudaMemset(z, 0, N * 4));
  }
  // New input for the next launch.
  void next_input(int launch, cudaStream_t s) {
    for (int i = 0; i < N; i += 4097) hx[i] = (float)(launch * 3 + i % 11);
    CK(cudaMemcpyAsync(x, hx.data(), N * 4, cudaMemcpyHostToDevice, s));
    CK(cudaStreamSynchronize(s));
  }
  void print(const char* what, int launches) {
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(hy.data(), y, N * 4, cudaMemcpyDeviceToHost));
    printf("%s %d launches %.6f\n", what, launches, checksum(hy));
  }
};

static cudaGraphNode_t kernel_node(cudaGraph_t g, const cudaGraphNode_t* deps, size_t ndeps,
                                   void* fn, void** args) {
  cudaKernelNodeParams p = {};
  p.func = fn;
  p.gridDim = dim3(BLOCKS);
  p.blockDim = dim3(256);
  p.kernelParams = args;
  cudaGraphNode_t node;
  CK(cudaGraphAddKernelNode(&node, g, deps, ndeps, &p));
  return node;
}

// Launches the executable graph `launches` times, each on a new input, and prints the result.
static int launch_all(cudaGraphExec_t ge, cudaStream_t s, Buffers& b, int launches, const char* what) {
  for (int i = 0; i < launches; ++i) {
    b.next_input(i, s);
    CK(cudaGraphLaunch(ge, s));
  }
  b.print(what, launches);
  return 0;
}

// A node that zeroes `dst` (N floats).
static cudaGraphNode_t zero_node(cudaGraph_t g, float* dst) {
  cudaMemsetParams ms = {};
  ms.dst = dst;
  ms.value = 0;
  ms.elementSize = 4;
  ms.width = N;
  ms.height = 1;
  cudaGraphNode_t node;
  CK(cudaGraphAddMemsetNode(&node, g, nullptr, 0, &ms));
  return node;
}

static int run_stream(int launches) {
  Buffers b;
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  graph_produce<<<BLOCKS, 256, 0, s>>>(b.x, b.tmp, N, 2.0f);
  graph_consume<<<BLOCKS, 256, 0, s>>>(b.tmp, b.y, N);
  graph_finish<<<BLOCKS, 256, 0, s>>>(b.y, b.tmp, N);
  CK(cudaStreamEndCapture(s, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  CK(cudaGraphDestroy(g));  // as PyTorch does: only the executable graph stays
  return launch_all(ge, s, b, launches, "stream");
}

static int run_explicit(int launches) {
  Buffers b;
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t g;
  CK(cudaGraphCreate(&g, 0));
  int n = N;
  float k = 3.0f;
  void* pargs[] = {&b.x, &b.tmp, &n, &k};
  cudaGraphNode_t produce = kernel_node(g, nullptr, 0, (void*)graph_produce, pargs);
  cudaGraphNode_t copy;
  CK(cudaGraphAddMemcpyNode1D(&copy, g, &produce, 1, b.tmp2, b.tmp, N * 4, cudaMemcpyDeviceToDevice));
  cudaGraphNode_t zero = zero_node(g, b.z);
  cudaGraphNode_t deps[] = {copy, zero};
  void* cargs[] = {&b.tmp2, &b.y, &n};
  cudaGraphNode_t consume = kernel_node(g, deps, 2, (void*)graph_consume, cargs);
  void* fargs[] = {&b.y, &b.z, &n};
  kernel_node(g, &consume, 1, (void*)graph_finish, fargs);
  cudaGraphExec_t ge;
  CK(cudaGraphInstantiate(&ge, g, 0));
  return launch_all(ge, s, b, launches, "explicit");
}

static int run_child(int launches) {
  Buffers b;
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int n = N;
  float k = 0.5f;
  cudaGraph_t child;
  CK(cudaGraphCreate(&child, 0));
  cudaGraphNode_t zero = zero_node(child, b.z);
  void* cargs[] = {&b.tmp, &b.y, &n};
  kernel_node(child, &zero, 1, (void*)graph_consume, cargs);
  cudaGraph_t g;
  CK(cudaGraphCreate(&g, 0));
  void* pargs[] = {&b.x, &b.tmp, &n, &k};
  cudaGraphNode_t produce = kernel_node(g, nullptr, 0, (void*)graph_produce, pargs);
  cudaGraphNode_t sub;
  CK(cudaGraphAddChildGraphNode(&sub, g, &produce, 1, child));
  void* fargs[] = {&b.y, &b.tmp, &n};
  kernel_node(g, &sub, 1, (void*)graph_finish, fargs);
  cudaGraphExec_t ge;
  CK(cudaGraphInstantiate(&ge, g, 0));
  return launch_all(ge, s, b, launches, "child");
}

static int run_update(int launches) {
  Buffers b;
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t g;
  CK(cudaGraphCreate(&g, 0));
  int n = N;
  float a = 1.0f;
  void* args[] = {&a, &b.x, &b.y, &n};
  cudaGraphNode_t node = kernel_node(g, nullptr, 0, (void*)graph_axpy, args);
  cudaGraphExec_t ge;
  CK(cudaGraphInstantiate(&ge, g, 0));
  CK(cudaMemcpy(b.tmp, b.hy.data(), N * 4, cudaMemcpyHostToDevice));
  for (int i = 0; i < launches; ++i) {
    // Each launch runs with another scalar, and every other one reads another buffer.
    float na = 0.25f * (float)(i + 1);
    float* src = (i % 2) ? b.tmp : b.x;
    void* nargs[] = {&na, &src, &b.y, &n};
    cudaKernelNodeParams p = {};
    p.func = (void*)graph_axpy;
    p.gridDim = dim3(BLOCKS);
    p.blockDim = dim3(256);
    p.kernelParams = nargs;
    CK(cudaGraphExecKernelNodeSetParams(ge, node, &p));
    CK(cudaGraphLaunch(ge, s));
  }
  b.print("update", launches);
  return 0;
}

static cudaGraph_t produce_axpy(Buffers& b, int* n, float* k, float* a, float** src, float** dst) {
  cudaGraph_t g;
  CK(cudaGraphCreate(&g, 0));
  void* pargs[] = {&b.x, src, n, k};
  cudaGraphNode_t produce = kernel_node(g, nullptr, 0, (void*)graph_produce, pargs);
  void* aargs[] = {a, src, dst, n};
  kernel_node(g, &produce, 1, (void*)graph_axpy, aargs);
  return g;
}

static int run_whole_update(int launches) {
  Buffers b;
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int n = N;
  float k1 = 2.0f, a1 = 1.0f, k2 = 3.0f, a2 = -0.5f;
  cudaGraph_t g1 = produce_axpy(b, &n, &k1, &a1, &b.tmp, &b.y);
  cudaGraph_t g2 = produce_axpy(b, &n, &k2, &a2, &b.tmp2, &b.y);
  cudaGraphExec_t ge;
  CK(cudaGraphInstantiate(&ge, g1, 0));
  for (int i = 0; i < launches; ++i) {
    if (i == 2) {
      cudaGraphExecUpdateResultInfo info;
      CK(cudaGraphExecUpdate(ge, g2, &info));
    }
    b.next_input(i, s);
    CK(cudaGraphLaunch(ge, s));
  }
  b.print("whole", launches);
  return 0;
}

static int run_cluster(int launches) {
  Buffers b;
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  graph_produce<<<BLOCKS, 256, 0, s>>>(b.x, b.tmp, N, 2.0f);
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3((BLOCKS + 3) / 4 * 4);
  cfg.blockDim = dim3(256);
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 4;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  CK(cudaLaunchKernelEx(&cfg, graph_cluster, (const float*)b.tmp, b.y, N));
  CK(cudaStreamEndCapture(s, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  return launch_all(ge, s, b, launches, "cluster");
}

// Conditional nodes: the condition is set on the device, inside the graph's launch.
__global__ void graph_set_cond(cudaGraphConditionalHandle h, const float* x) {
  if (blockIdx.x == 0 && threadIdx.x == 0) cudaGraphSetConditional(h, x[0] >= 0.0f ? 1u : 0u);
}

__global__ void graph_cond_body(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = y[i] * 0.5f + x[i];
}

// One round of a while loop: adds 1 to y; the last round clears the condition.
__global__ void graph_countdown(cudaGraphConditionalHandle h, int* rounds, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] += 1.0f;
  if (i == 0) {
    int left = --*rounds;
    cudaGraphSetConditional(h, left > 0 ? 1u : 0u);
  }
}

static cudaGraphNode_t add_node(cudaGraph_t g, const cudaGraphNode_t* deps, size_t ndeps,
                                cudaGraphNodeParams* p) {
  cudaGraphNode_t node;
#if CUDART_VERSION >= 13000
  CK(cudaGraphAddNode(&node, g, deps, nullptr, ndeps, p));
#else
  CK(cudaGraphAddNode(&node, g, deps, ndeps, p));
#endif
  return node;
}

// A conditional node of `type` on `h` after `deps`; returns its body graph in *body.
static cudaGraphNode_t conditional_node(cudaGraph_t g, const cudaGraphNode_t* deps, size_t ndeps,
                                        cudaGraphConditionalHandle h, cudaGraphConditionalNodeType type,
                                        cudaGraph_t* body) {
  cudaGraphNodeParams p = {};
  p.type = cudaGraphNodeTypeConditional;
  p.conditional.handle = h;
  p.conditional.type = type;
  p.conditional.size = 1;
  cudaGraphNode_t node = add_node(g, deps, ndeps, &p);
  *body = p.conditional.phGraph_out[0];
  return node;
}

static int run_cond(int launches) {
  Buffers b;
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int* rounds;
  CK(cudaMalloc(&rounds, sizeof(int)));
  cudaGraph_t g;
  CK(cudaGraphCreate(&g, 0));
  cudaGraphConditionalHandle if_h, while_h;
  CK(cudaGraphConditionalHandleCreate(&if_h, g, 0, cudaGraphCondAssignDefault));
  CK(cudaGraphConditionalHandleCreate(&while_h, g, 1, cudaGraphCondAssignDefault));
  int n = N;
  void* sargs[] = {&if_h, &b.x};
  cudaGraphNode_t set = kernel_node(g, nullptr, 0, (void*)graph_set_cond, sargs);
  cudaGraph_t if_body;
  cudaGraphNode_t if_node = conditional_node(g, &set, 1, if_h, cudaGraphCondTypeIf, &if_body);
  void* bargs[] = {&b.x, &b.y, &n};
  kernel_node(if_body, nullptr, 0, (void*)graph_cond_body, bargs);
  // Three rounds of the while loop in every launch.
  cudaMemsetParams ms = {};
  ms.dst = rounds;
  ms.value = 3;
  ms.elementSize = 4;
  ms.width = 1;
  ms.height = 1;
  cudaGraphNode_t reset;
  CK(cudaGraphAddMemsetNode(&reset, g, nullptr, 0, &ms));
  cudaGraphNode_t before_while[] = {if_node, reset};
  cudaGraph_t while_body;
  cudaGraphNode_t while_node =
      conditional_node(g, before_while, 2, while_h, cudaGraphCondTypeWhile, &while_body);
  void* cargs[] = {&while_h, &rounds, &b.y, &n};
  kernel_node(while_body, nullptr, 0, (void*)graph_countdown, cargs);
  void* fargs[] = {&b.y, &b.z, &n};
  kernel_node(g, &while_node, 1, (void*)graph_finish, fargs);
  float a = 0.25f;
  void* aargs[] = {&a, &b.x, &b.tmp, &n};
  kernel_node(g, nullptr, 0, (void*)graph_axpy, aargs);
  cudaGraphExec_t ge;
  CK(cudaGraphInstantiate(&ge, g, 0));
  int r = launch_all(ge, s, b, launches, "cond");
  std::vector<float> t(N);
  CK(cudaMemcpy(t.data(), b.tmp, N * 4, cudaMemcpyDeviceToHost));
  printf("cond axpy %.6f\n", checksum(t));
  return r;
}

static int host_calls = 0;
static void CUDART_CB count_call(void*) { ++host_calls; }

static int run_host(int launches) {
  Buffers b;
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t g;
  CK(cudaGraphCreate(&g, 0));
  cudaHostNodeParams hp = {};
  hp.fn = count_call;
  cudaGraphNode_t host;
  CK(cudaGraphAddHostNode(&host, g, nullptr, 0, &hp));
  int n = N;
  void* cargs[] = {&b.x, &b.y, &n};
  kernel_node(g, &host, 1, (void*)graph_consume, cargs);
  cudaGraphExec_t ge;
  CK(cudaGraphInstantiate(&ge, g, 0));
  for (int i = 0; i < launches; ++i) CK(cudaGraphLaunch(ge, s));
  CK(cudaStreamSynchronize(s));
  printf("host node ran %d times\n", host_calls);
  b.print("host", launches);
  return 0;
}

static int run_bench(int launches) {
  float* v;
  CK(cudaMalloc(&v, 64 * 4));
  CK(cudaMemset(v, 0, 64 * 4));
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  for (int i = 0; i < 20; ++i) graph_tick<<<64, 32, 0, s>>>(v);
  CK(cudaStreamEndCapture(s, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  CK(cudaGraphLaunch(ge, s));  // warm
  CK(cudaStreamSynchronize(s));
  // Three rounds in one run; the best one is reported (the others show the noise).
  double best = 1e30, round_ms[3];
  for (int r = 0; r < 3; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < launches; ++i) CK(cudaGraphLaunch(ge, s));
    CK(cudaStreamSynchronize(s));
    round_ms[r] = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (round_ms[r] < best) best = round_ms[r];
  }
  std::vector<float> h(64);
  CK(cudaMemcpy(h.data(), v, 64 * 4, cudaMemcpyDeviceToHost));
  printf("bench %d launches of a 20-node graph, best of 3 rounds: %.3f ms (%.2f us per launch; rounds %.1f, %.1f, %.1f ms), v[0] %.0f\n",
         launches, best, best * 1e3 / launches, round_ms[0], round_ms[1], round_ms[2], h[0]);
  return 0;
}

int main(int argc, char** argv) {
  const char* m = argc > 1 ? argv[1] : "";
  int launches = argc > 2 ? atoi(argv[2]) : 5;
  if (argc > 3) {
    N = atoi(argv[3]);
    BLOCKS = (N + 255) / 256;
  }
  if (!strcmp(m, "stream")) return run_stream(launches);
  if (!strcmp(m, "explicit")) return run_explicit(launches);
  if (!strcmp(m, "child")) return run_child(launches);
  if (!strcmp(m, "update")) return run_update(launches);
  if (!strcmp(m, "whole")) return run_whole_update(launches);
  if (!strcmp(m, "cluster")) return run_cluster(launches);
  if (!strcmp(m, "host")) return run_host(launches);
  if (!strcmp(m, "bench")) return run_bench(launches);
  if (!strcmp(m, "cond")) return run_cond(launches);
  fprintf(stderr, "usage: graph_apps stream|explicit|child|update|whole|host|cluster|bench|cond [N [ELEMENTS]]\n");
  return 2;
}
