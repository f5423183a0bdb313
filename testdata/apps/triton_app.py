"""Triton test app: a JIT-compiled kernel launched by Triton's launcher; prints a checksum."""
import torch
import triton
import triton.language as tl


@triton.jit
def fused_axpy_relu(x_ptr, y_ptr, out_ptr, n, alpha, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    x = tl.load(x_ptr + offs, mask=m)
    y = tl.load(y_ptr + offs, mask=m)
    tl.store(out_ptr + offs, tl.maximum(alpha * x + y, 0.0), mask=m)


n = 1 << 22
g = torch.Generator(device="cuda").manual_seed(1)
x = torch.randn(n, device="cuda", generator=g)
y = torch.randn(n, device="cuda", generator=g)
out = torch.empty_like(x)
fused_axpy_relu[(triton.cdiv(n, 1024),)](x, y, out, n, 0.75, BLOCK=1024)
torch.cuda.synchronize()
print(f"triton {out.double().sum().item():.4f}")
