"""The verdicts of the corpus case (issue 33, `record --each-kernel`), as pure functions over
what the commands left (corpus.json parsed, `list --json`, stdout, each capture's SHA-256 and
play verdict), so that test_corpus_cpu.py checks them on the CPU: each good input passes,
each fault fails.

corpus.json (README "Capture a corpus"): {version, device, driver, host, command,
captures: [{file, kernel, mangled, grid, block, launch_index, nvtx, graph, bytes_stored,
in_app_us, sha256}], left_out: [{kernel, mangled, why}]}.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Optional

from krrange import list_kernels


def sha256_of(path: Path) -> Optional[str]:
    """The file's SHA-256 (lowercase hex), None when it cannot be read."""
    h = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    except OSError:
        return None
    return h.hexdigest()


def manifest_checks(manifest) -> list:
    """The manifest's own shape: the run's fields and every capture's."""
    if not isinstance(manifest, dict):
        return ["no corpus.json (or not JSON)"]
    bad = [f"corpus.json lacks {k}" for k in ("version", "device", "driver", "host", "command", "captures", "left_out")
           if k not in manifest]
    if manifest.get("version") != 1:
        bad.append(f"version {manifest.get('version')!r}, 1 expected")
    for c in manifest.get("captures") or []:
        missing = [k for k in ("file", "kernel", "mangled", "grid", "block", "launch_index", "nvtx", "graph",
                               "bytes_stored", "in_app_us", "sha256") if k not in c]
        if missing:
            bad.append(f"{c.get('file')}: lacks {', '.join(missing)}")
    return bad


def run_checks(rec_rc: int, base_out: str, rec_out: str, manifest, under: str) -> list:
    """What every corpus run must hold, whatever it was for: record exited 0, the application's
    output is unchanged (and not empty) `under` the recording, and the manifest has its shape."""
    bad = [] if rec_rc == 0 else [f"record exit {rec_rc}"]
    if base_out != rec_out or not base_out:
        bad.append(f"the application's output changed under {under}")
    return bad + manifest_checks(manifest)


def corpus_checks(rec_rc: int, base_out: str, rec_out: str, manifest, listed, sums: dict, plays: dict) -> list:
    """One capture per distinct kernel `list --json` saw (per_kernel 1, by name), each file there
    with the manifest's SHA-256 (`sums`: file -> its SHA-256 or None) and replayed matched
    (`plays`: file -> `play --verify --json` parsed); the application's output unchanged."""
    bad = run_checks(rec_rc, base_out, rec_out, manifest, "record --each-kernel")
    if manifest_checks(manifest):
        return bad
    caps = manifest["captures"]
    names = [c["mangled"] for c in caps]
    if len(set(names)) != len(names):
        bad.append(f"{len(names) - len(set(names))} kernel(s) captured twice with --per-kernel 1")
    want = {k.get("name") for k in list_kernels(listed)}
    if not want:
        bad.append("list --json listed no kernel")
    elif set(names) != want:
        bad.append(f"kernels listed but not captured: {sorted(want - set(names))[:5]}; "
                   f"captured but not listed: {sorted(set(names) - want)[:5]}")
    if manifest.get("left_out"):
        bad.append(f"left out without --max-bytes: {manifest['left_out'][:3]}")
    for c in caps:
        got = sums.get(c["file"])
        if got is None:
            bad.append(f"{c['file']}: no such file")
        elif got != c["sha256"]:
            bad.append(f"{c['file']}: SHA-256 {got[:12]}... is not the manifest's {c['sha256'][:12]}...")
        verify = (plays.get(c["file"]) or {}).get("verify") or {}
        if verify.get("matched") is not True:
            bad.append(f"{c['file']} ({c['kernel']}): play --verify did not match")
    return bad


def bounded_checks(rec_rc: int, base_out: str, rec_out: str, manifest, max_bytes: int, sums: dict) -> list:
    """`--max-bytes`: the corpus holds at most that many bytes, some kernels are left out, each
    with a reason, every file listed is there with its SHA-256, the output unchanged."""
    bad = run_checks(rec_rc, base_out, rec_out, manifest, "--max-bytes")
    if manifest_checks(manifest):
        return bad
    caps, left = manifest["captures"], manifest["left_out"]
    stored = sum(c["bytes_stored"] for c in caps)
    if stored > max_bytes:
        bad.append(f"{stored} bytes stored, over --max-bytes {max_bytes}")
    if not caps:
        bad.append("nothing kept under --max-bytes")
    if not left:
        bad.append("no kernel left out under --max-bytes")
    if any(not l.get("why") for l in left):
        bad.append("a kernel left out without a reason")
    for c in caps:
        if sums.get(c["file"]) != c["sha256"]:
            bad.append(f"{c['file']}: missing or not the manifest's SHA-256")
    return bad


def max_bytes_for(sizes: list) -> Optional[int]:
    """A bound that keeps the largest capture of a first run (with room for a capture's size
    changing a little between runs) and not all of them: None when the corpus is too small to
    make one."""
    if len(sizes) < 3:
        return None
    bound = int(max(sizes) * 1.2)
    return bound if bound < sum(sizes) // 2 else None


def specialization_checks(rec_rc: int, base_out: str, rec_out: str, manifest, modules: dict, plays: dict,
                          shapes: int, per_shape: int) -> list:
    """Triton compiles one module per specialization, each defining a kernel of the same name:
    every capture keeps the module its launch ran. `modules`: file -> the module sizes
    `info --json` lists; `plays`: file -> `play --verify --json`. The captures of one grid
    share one module, the grids' modules differ, every capture replays matched, and the
    application's output is unchanged."""
    bad = run_checks(rec_rc, base_out, rec_out, manifest, "record")
    if manifest_checks(manifest):
        return bad
    caps = manifest["captures"]
    if len(caps) != shapes * per_shape:
        bad.append(f"{len(caps)} captures, {shapes * per_shape} expected ({shapes} grids x {per_shape})")
    by_grid = {}
    for c in caps:
        by_grid.setdefault(tuple(c["grid"]), set()).add(tuple(modules.get(c["file"]) or ()))
        verify = (plays.get(c["file"]) or {}).get("verify") or {}
        if verify.get("matched") is not True:
            bad.append(f"{c['file']}: play --verify did not match (another specialization's code?)")
    for grid, mods in sorted(by_grid.items()):
        if len(mods) != 1:
            bad.append(f"grid {list(grid)}: its captures hold {len(mods)} different modules {sorted(mods)}")
    firsts = [next(iter(m)) for m in by_grid.values() if len(m) == 1]
    if len(set(firsts)) != len(firsts):
        bad.append(f"two grids' captures hold the same module ({firsts}): a specialization's code was not kept")
    return bad
