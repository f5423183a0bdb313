"""A Triton application for the corpus benchmark (issue 33, scripts/gpu-bench-farm.sh): three
JIT-compiled Triton kernels (fused elementwise, row softmax, blocked row sum), each at three
sizes, each size run ROUNDS times, so `record --each-kernel --by shape --per-kernel N` yields
up to 9 x N captures. Prints a checksum of every result.

    python3 triton_corpus_app.py [ROUNDS]     (default 8)
"""
import sys

import torch
import triton
import triton.language as tl


@triton.jit
def fused_gelu_add(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    y = tl.load(y_ptr + offs, mask=m)
    # tanh(z) = 2 sigmoid(2z) - 1: tl.math.tanh is not in every Triton release.
    z = 0.7978845608 * (x + 0.044715 * x * x * x)
    g = 0.5 * x * (1.0 + (2.0 * tl.sigmoid(2.0 * z) - 1.0))
    tl.store(out_ptr + offs, g + y, mask=m)


@triton.jit
def row_softmax(x_ptr, out_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    m = offs < cols
    x = tl.load(x_ptr + row * cols + offs, mask=m, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    e = tl.exp(x)
    tl.store(out_ptr + row * cols + offs, e / tl.sum(e, axis=0), mask=m)


@triton.jit
def row_sum(x_ptr, out_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for start in range(0, cols, BLOCK):
        offs = start + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + row * cols + offs, mask=offs < cols, other=0.0)
    tl.store(out_ptr + row, tl.sum(acc, axis=0))


rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 8
g = torch.Generator(device="cuda").manual_seed(7)
total = 0.0
for _ in range(rounds):
    for rows, cols in ((256, 256), (512, 512), (1024, 1024)):
        n = rows * cols
        x = torch.randn(n, device="cuda", generator=g)
        y = torch.randn(n, device="cuda", generator=g)
        out = torch.empty_like(x)
        fused_gelu_add[(triton.cdiv(n, 1024),)](x, y, out, n, BLOCK=1024)
        sm = torch.empty_like(x)
        row_softmax[(rows,)](out, sm, cols, BLOCK=triton.next_power_of_2(cols))
        sums = torch.empty(rows, device="cuda")
        row_sum[(rows,)](sm, sums, cols, BLOCK=256)
        total += out.double().sum().item() + sums.double().sum().item()
torch.cuda.synchronize()
print(f"triton_corpus {rounds} rounds {total:.6f}")
