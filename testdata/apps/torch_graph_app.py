"""PyTorch CUDA graphs for kreplay: `cudagraph` captures y = gelu(x) * 2 + b with
torch.cuda.CUDAGraph and replays it on new inputs; `compile` runs a function compiled with
torch.compile(mode="reduce-overhead") (CUDA graph trees). Prints checksums and how many
times the graph was replayed."""
import sys

import torch

mode = sys.argv[1] if len(sys.argv) > 1 else "cudagraph"
replays = int(sys.argv[2]) if len(sys.argv) > 2 else 3
torch.manual_seed(0)
dev = "cuda"

if mode == "cudagraph":
    x = torch.randn(1 << 20, device=dev)
    b = torch.randn(1 << 20, device=dev)
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        y = torch.nn.functional.gelu(x) * 2 + b  # warm-up, eager
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        y = torch.nn.functional.gelu(x) * 2 + b
    total = 0.0
    for i in range(replays):
        x.copy_(torch.randn(1 << 20, device=dev) + i)
        g.replay()
        total += float(y.double().sum())
    torch.cuda.synchronize()
    print(f"cudagraph {replays} replays {total:.6f}")
else:
    w = torch.randn(512, 512, device=dev)

    def f(x):
        return torch.relu(x @ w) * 0.5 + torch.sin(x)

    cf = torch.compile(f, mode="reduce-overhead")
    total = 0.0
    for i in range(replays + 3):
        x = torch.randn(256, 512, device=dev) + i
        total += float(cf(x).double().sum())
    torch.cuda.synchronize()
    print(f"compile {replays + 3} calls {total:.4f}")
