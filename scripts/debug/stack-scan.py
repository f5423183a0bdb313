#!/usr/bin/env python3
# Usage: python3 scripts/debug/stack-scan.py PID  (on the GPU machine, as root)
# For a hung process that cuda-gdb cannot attach to (a forked child of a CUDA app: cuda-gdb hung
# on one for 600 s in session 14): the syscall it waits in, the mapping its futex word lies in,
# and every word of its stack that points into executable code, as library + offset (+ the
# nearest symbol by nm, where nm is at hand). Bound it: timeout -s KILL 30 python3 ...
import bisect, subprocess, sys
pid = int(sys.argv[1])
maps = []
for l in open(f"/proc/{pid}/maps"):
    p = l.split()
    a, b = [int(x, 16) for x in p[0].split("-")]
    maps.append((a, b, p[1], int(p[2], 16), p[5] if len(p) > 5 else ""))
def where(v):
    for a, b, perm, off, name in maps:
        if a <= v < b:
            return perm, name, v - a + off
    return None
syms = {}
def sym(lib, off):
    if lib not in syms:
        try:
            out = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True, timeout=20).stdout
            out += subprocess.run(["nm", "--defined-only", lib], capture_output=True, text=True, timeout=20).stdout
            t = sorted((int(x.split()[0], 16), x.split()[2]) for x in out.splitlines() if len(x.split()) == 3 and x.split()[1] in "tTwWiI")
        except Exception:
            t = []
        syms[lib] = t
    t = syms[lib]
    i = bisect.bisect_right(t, (off, "\xff")) - 1
    return f"{t[i][1]}+{off - t[i][0]:#x}" if i >= 0 else "?"
sc = open(f"/proc/{pid}/syscall").read().split()
print("syscall", sc)
if len(sc) > 3:
    ua, sp, pc = int(sc[1], 16), int(sc[-2], 16), int(sc[-1], 16)
    print("futex word in", where(ua))
    print("pc in", where(pc))
    end = next((b for a, b, _, _, _ in maps if a <= sp < b), sp + 4096)
    mem = open(f"/proc/{pid}/mem", "rb")
    mem.seek(sp)
    data = mem.read(min(65536, end - sp))
    for i in range(0, len(data) - 7, 8):
        v = int.from_bytes(data[i:i + 8], "little")
        w = where(v)
        if w and "x" in w[0]:
            print(f"sp+{i:#06x} {w[1]} {w[2]:#x} {sym(w[1], w[2])}")
