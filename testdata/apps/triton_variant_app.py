"""Triton test app for `kreplay profile --variant` (issue 38): a PyTorch program whose Triton
kernel, axpy_tiles, runs at three call sites of different sizes and prints a checksum.

Each program of the grid covers PER_PROGRAM elements in tiles of BLOCK, so BLOCK can change
without changing the launch (grid = cdiv(n, PER_PROGRAM), block = 32 x num_warps): profile
runs a variant with the original's grid, block and arguments. `TRITON_VARIANT_BLOCK=256` (with
a fresh TRITON_CACHE_DIR) builds the variant: the GPU suite runs this app so, then takes
`axpy_tiles.cubin` from that cache folder.
"""
import os

import torch
import triton
import triton.language as tl

PER_PROGRAM = 4096
BLOCK = int(os.environ.get("TRITON_VARIANT_BLOCK", "1024"))


@triton.jit
def axpy_tiles(x_ptr, y_ptr, out_ptr, n, alpha, PER_PROGRAM: tl.constexpr, BLOCK: tl.constexpr):
    base = tl.program_id(0) * PER_PROGRAM
    for start in range(0, PER_PROGRAM, BLOCK):
        offs = base + start + tl.arange(0, BLOCK)
        m = offs < n
        x = tl.load(x_ptr + offs, mask=m)
        y = tl.load(y_ptr + offs, mask=m)
        tl.store(out_ptr + offs, tl.maximum(alpha * x + y, 0.0), mask=m)


g = torch.Generator(device="cuda").manual_seed(1)
total = 0.0
for n in (1 << 20, 1 << 22, 3 << 16):
    x = torch.randn(n, device="cuda", generator=g)
    y = torch.randn(n, device="cuda", generator=g)
    out = torch.empty_like(x)
    axpy_tiles[(triton.cdiv(n, PER_PROGRAM),)](x, y, out, n, 0.75, PER_PROGRAM=PER_PROGRAM, BLOCK=BLOCK,
                                                 num_warps=4)
    torch.cuda.synchronize()
    s = out.double().sum().item()
    total += s
    print(f"n={n} sum={s:.6f}")
print(f"triton-variant {total:.6f}")
