"""probe35 PyTorch app: an elementwise add on tensors that live inside one large caching-allocator
segment, and a matmul (cuBLAS, TMA kernels on Hopper). Each op runs ITERS times with CUDA-event
timing; run it under the probe with PROBE_KERNEL / PROBE_LAUNCH choosing which launch is
instrumented (run.sh: the add's 3rd launch, then the matmul's 3rd launch).

Expected touched pages: add = a, b, c of 4 MiB each = 3 x 1024 = 3072 pages (read 2048, written
1024) out of a 512 MiB segment (131072 pages); matmul 2048^3 fp16 = A, B, C of 8 MiB each =
3 x 2048 pages (read 4096, written 2048) -- if the Sanitizer API sees the kernel's loads/stores
(TMA loads are only patchable with the 2026.2+ Sanitizer API).
"""
import os
import sys

import torch

ITERS = int(os.environ.get("TORCH_ITERS", "6"))
MARK = int(os.environ.get("TORCH_MARK", "3"))


def p(*a):
    print("torch:", *a, flush=True)


def timed(fn):
    e0 = torch.cuda.Event(enable_timing=True)
    e1 = torch.cuda.Event(enable_timing=True)
    e0.record()
    fn()
    e1.record()
    e1.synchronize()
    return e0.elapsed_time(e1)


def segment_of(ptr):
    for s in torch.cuda.memory_snapshot():
        if s["address"] <= ptr < s["address"] + s["total_size"]:
            return s["address"], s["total_size"]
    return None, None


def summary(op, ms, same):
    rest = sorted(m for i, m in enumerate(ms) if i not in (0, MARK - 1))
    med = rest[len(rest) // 2] if rest else 0.0
    mk = ms[MARK - 1] if 0 < MARK <= len(ms) else 0.0
    p(f"SUMMARY op={op} iters={len(ms)} first_ms={ms[0]:.4f} median_other_ms={med:.4f} mark={MARK} "
      f"mark_ms={mk:.4f} slowdown={(mk / med if med else 0):.1f}x results_identical={'yes' if same else 'NO'}")


def main():
    if not torch.cuda.is_available():
        p("FAIL: torch.cuda.is_available() is False")
        return 2
    p(f"torch {torch.__version__} cuda {torch.version.cuda} device {torch.cuda.get_device_name(0)}")
    dev = "cuda"
    torch.manual_seed(0)

    # One large segment: allocate 512 MiB and free it; the caching allocator keeps the segment
    # and carves the following tensors out of it.
    big = torch.empty(512 << 20, dtype=torch.uint8, device=dev)
    big_ptr = big.data_ptr()
    del big
    n = 1 << 20  # 4 MiB of float32 each
    a = torch.randn(n, device=dev)
    b = torch.randn(n, device=dev)
    c = torch.empty_like(a)
    for name, t in (("a", a), ("b", b), ("c", c)):
        base, size = segment_of(t.data_ptr())
        p(f"tensor {name} ptr=0x{t.data_ptr():x} bytes={t.numel() * 4} segment=0x{(base or 0):x} "
          f"segment_bytes={size} inside_big_segment={base == big_ptr}")
    p(f"add expected touched_pages=3072 read_pages=2048 written_pages=1024 of segment pages={(512 << 20) // 4096}")

    torch.cuda.synchronize()
    ref = a + b  # add launch #1; iteration i is add launch #(i + 1): PROBE_LAUNCH = TORCH_MARK + 1
    torch.cuda.synchronize()
    ms, same = [], True
    for i in range(ITERS):
        ms.append(timed(lambda: torch.add(a, b, out=c)))
        same = same and bool(torch.equal(c, ref))
        p(f"add iter={i + 1} ms={ms[-1]:.4f}")
    summary("add", ms, same)

    M = 2048
    A = torch.randn(M, M, device=dev, dtype=torch.float16)
    B = torch.randn(M, M, device=dev, dtype=torch.float16)
    C = torch.empty(M, M, device=dev, dtype=torch.float16)
    p(f"matmul A=0x{A.data_ptr():x} B=0x{B.data_ptr():x} C=0x{C.data_ptr():x} "
      f"expected touched_pages=6144 read_pages=4096 written_pages=2048")
    refm = torch.mm(A, B)  # gemm launch #1 (if cuBLAS runs one kernel per mm): PROBE_LAUNCH = TORCH_MARK + 1
    torch.cuda.synchronize()
    ms, same = [], True
    for i in range(ITERS):
        ms.append(timed(lambda: torch.mm(A, B, out=C)))
        same = same and bool(torch.equal(C, refm))
        p(f"matmul iter={i + 1} ms={ms[-1]:.4f}")
    summary("matmul", ms, same)
    torch.cuda.synchronize()
    p("done")
    return 0


if __name__ == "__main__":
    sys.exit(main())
