"""PyTorch app of the #35 touched-pages probe.

One 256 MiB tensor `seg` (one cudaMalloc segment of the caching allocator: 65,536 pages of 4 KiB)
holds three 4 MiB slices a, b, c (1,024 pages each, page-aligned offsets); `torch.add(a, b,
out=c)` runs once as a warm-up (add launch #1), then ITERS (10) timed times (add launches #2 ..
#ITERS+1). Each iteration is timed with CUDA events (and the wall clock around a synchronize) and
its result checked against the CPU.

Expected under the probe, for the instrumented add launch, in the region of the 256 MiB segment:
pages_read=2048 pages_written=1024 of 65536 (another allocation the kernel touches: none).

TOUCH_MM=1 also runs a 2048^3 fp16 matmul the same way (cuBLAS; on Hopper its kernels load
through TMA): expected pages_read=4096 (A and B, 8 MiB each) and pages_written=2048 (C) if the
Sanitizer API sees those loads.
Exit status 0 only if every result matched.
"""
import os
import sys
import time

import torch

ITERS = int(os.environ.get("ITERS", "10"))
NTH = int(os.environ.get("PROBE_NTH", "1"))  # only to label the instrumented iteration


def p(*a):
    print("touch_torch:", *a, flush=True)


def timed(fn):
    e0 = torch.cuda.Event(enable_timing=True)
    e1 = torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    w0 = time.perf_counter()
    e0.record()
    fn()
    e1.record()
    torch.cuda.synchronize()
    return e0.elapsed_time(e1), (time.perf_counter() - w0) * 1e3


def summarize(op, ms):
    # iteration i is matching launch i+1 (the warm-up is launch 1)
    mark = NTH - 1
    rest = sorted(m for i, m in enumerate(ms, start=1) if i != mark)
    med = rest[len(rest) // 2] if rest else 0.0
    mk = ms[mark - 1] if 1 <= mark <= len(ms) else 0.0
    p(f"summary op={op} iters={len(ms)} median_other_ms={med:.4f} iter{mark}_ms={mk:.4f} "
      f"ratio={(mk / med if med else 0):.1f}x (iteration {mark} = matching launch {NTH})")


def main():
    if not torch.cuda.is_available():
        p("FAIL: torch.cuda.is_available() is False")
        return 2
    p(f"torch {torch.__version__} cuda {torch.version.cuda} device {torch.cuda.get_device_name(0)}")
    torch.manual_seed(0)
    dev = "cuda"
    ok = True

    n = 1 << 20  # floats: 4 MiB = 1024 pages
    seg = torch.zeros(64 << 20, dtype=torch.float32, device=dev)  # 256 MiB
    off_a, off_b, off_c = 3 << 20, 20 << 20, 41 << 20  # in floats, multiples of 1024 (page-aligned)
    a = seg[off_a:off_a + n]
    b = seg[off_b:off_b + n]
    c = seg[off_c:off_c + n]
    a.copy_(torch.randn(n, device=dev))
    b.copy_(torch.randn(n, device=dev))
    segs = [s for s in torch.cuda.memory_snapshot()
            if s["address"] <= seg.data_ptr() < s["address"] + s["total_size"]]
    seg_base, seg_size = (segs[0]["address"], segs[0]["total_size"]) if segs else (0, 0)
    p(f"segment base=0x{seg_base:x} bytes={seg_size} tensor seg=0x{seg.data_ptr():x} bytes={seg.numel() * 4} "
      f"a=0x{a.data_ptr():x} b=0x{b.data_ptr():x} c=0x{c.data_ptr():x} (4 MiB each)")
    p(f"add expected: region of the segment pages_read=2048 pages_written=1024 of {seg_size // 4096}")
    ref = (a.cpu() + b.cpu())

    torch.add(a, b, out=c)  # add launch #1 (warm-up)
    torch.cuda.synchronize()
    ok = ok and torch.equal(c.cpu(), ref)
    ms = []
    for i in range(ITERS):
        c.zero_()  # a fill kernel, not an add
        ev, wall = timed(lambda: torch.add(a, b, out=c))
        good = torch.equal(c.cpu(), ref)
        ok = ok and good
        ms.append(ev)
        p(f"add iter={i + 1} ms={ev:.4f} wall_ms={wall:.3f} {'ok' if good else 'WRONG'}")
    summarize("add", ms)

    if os.environ.get("TOUCH_MM") == "1":
        M = 2048
        A = torch.randn(M, M, device=dev, dtype=torch.float16)
        B = torch.randn(M, M, device=dev, dtype=torch.float16)
        C = torch.empty(M, M, device=dev, dtype=torch.float16)
        p(f"matmul A=0x{A.data_ptr():x} B=0x{B.data_ptr():x} C=0x{C.data_ptr():x} (8 MiB each) expected "
          f"pages_read=4096 pages_written=2048")
        refm = torch.mm(A, B)
        torch.cuda.synchronize()
        ms = []
        for i in range(ITERS):
            ev, wall = timed(lambda: torch.mm(A, B, out=C))
            good = torch.equal(C, refm)
            ok = ok and good
            ms.append(ev)
            p(f"matmul iter={i + 1} ms={ev:.4f} wall_ms={wall:.3f} {'ok' if good else 'WRONG'}")
        summarize("matmul", ms)

    torch.cuda.synchronize()
    p(f"result={'ok' if ok else 'WRONG'}")
    return 0 if ok else 3


if __name__ == "__main__":
    sys.exit(main())
