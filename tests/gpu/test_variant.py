"""`kreplay profile --variant` (issue 38): a variant kernel run beside the original at every
call site of a real run. Verdicts in krvariant.py (checked on the CPU by test_variant_cpu.py).

- variant-slow: variant_app's scale_add against variant_slow.cu (same math, slower): a row per
  call site, `identical`, speedup < 1; the app's results as in a plain run; with `--trace`,
  each variant pass a slice of its own beside the original's (issue 40).
- variant-wrong: against variant_wrong.cu (element 7 wrong): `differs` at every call site, the
  first differing byte at element 7 of the output; the app's results unchanged.
- variant-wrong-keep: the same with --keep variant: the app's checksum moved by exactly
  element 7's change at every call site (computed from the plain run's output).
- variant-layout: against variant_layout.cu (n as 64 bits): refused before any variant launch,
  naming parameter 3; profile exits 3; the app's results unchanged.
- variant-triton: a Triton kernel in a PyTorch app against the same kernel compiled with another
  BLOCK, taken from Triton's own cache (a fresh TRITON_CACHE_DIR): speedup reported, `identical`
  or `within tolerance`, the app's output unchanged.
- variant-bench: 100 dispatches: overhead per dispatch beyond the passes, beside profile's own
  fixed cost (the baseline), in ms.
- variant-graph: variant_app's scale_add also inside a CUDA graph: the call sites compared, the
  graph's dispatches skipped with the reason, the app's results unchanged.
- variant-bench-train: the same figures on 100 dispatches of a GEMM of a PyTorch training step,
  the variant being the GEMM's own code taken out of a capture.
"""

from __future__ import annotations

import glob

import pytest

import cases as C
import krsuite as S
import krtrace as T
import krvariant as V
from prepared import ROOT

pytestmark = pytest.mark.gpu

TRITON_APP = ["python3", str(ROOT / "testdata" / "apps" / "triton_variant_app.py")]


def _profile(case, kr, name, argv, *extra, timeout=600):
    """`kreplay profile -k scale_add --all --variant ... --json -o NAME.json -- argv`: (cmd, rows,
    summary)."""
    report = case.path(f"{name}.json")
    cmd = case.run([kr, "profile", *extra, "--json", "-o", report, "--"] + argv, name=name, timeout=timeout)
    rows, summary = V.report(S.read(report))
    return cmd, rows, summary


def _done(row, why, kernel, rows, **extra):
    r0 = rows[0] if rows else {}
    row.update(kernel=kernel, regions=len(rows), median_us=r0.get("median_ns", 0) / 1e3,
               address_mode="in place", why="; ".join(why), **extra)
    assert not why, "; ".join(why)


@C.inline("variant-slow")
def test_variant_slow(case, row, kr, app, run_dir):
    argv = app(["{variant_app}"])
    slow = app(["{variant_slow}"])[0]
    plain = case.run(argv, name="plain")
    t = case.path("variant-slow.trace.json")
    prof, rows, summary = _profile(case, kr, "slow", argv, "-k", "scale_add", "--all", "--variant", slow,
                                   "--trace", t, "--force")
    why = V.slow_checks(prof.rc, plain.out, prof.out, rows, summary)
    check = case.run([kr, "verify-trace", t], name="verify-trace")
    why += T.variant_trace_checks(rows, check.rc, S.last_json_line(check.out))
    T.publish([t], run_dir)
    _done(row, why, "scale_add vs variant_slow", rows,
          figures=f"geometric-mean speedup {(summary or {}).get('geomean_speedup')}")


@C.inline("variant-wrong")
def test_variant_wrong(case, row, kr, app):
    argv = app(["{variant_app}"])
    wrong = app(["{variant_wrong}"])[0]
    plain = case.run(argv, name="plain")
    prof, rows, summary = _profile(case, kr, "wrong", argv, "-k", "scale_add", "--all", "--variant", wrong)
    why = V.wrong_checks(prof.rc, plain.out, prof.out, rows, summary, keep=False)
    _done(row, why, "scale_add vs variant_wrong", rows)


@C.inline("variant-wrong-keep")
def test_variant_wrong_keep(case, row, kr, app):
    argv = app(["{variant_app}"])
    wrong = app(["{variant_wrong}"])[0]
    plain = case.run(argv, name="plain")
    prof, rows, summary = _profile(case, kr, "keep", argv, "-k", "scale_add", "--all", "--variant", wrong,
                                   "--keep", "variant")
    why = V.wrong_checks(prof.rc, plain.out, prof.out, rows, summary, keep=True)
    _done(row, why, "scale_add vs variant_wrong, --keep variant", rows,
          figures=f"checksum {V.checksum(prof.out)} (plain {V.checksum(plain.out)})")


@C.inline("variant-layout")
def test_variant_layout(case, row, kr, app):
    argv = app(["{variant_app}"])
    other = app(["{variant_layout}"])[0]
    plain = case.run(argv, name="plain")
    prof, rows, _ = _profile(case, kr, "layout", argv, "-k", "scale_add", "--all", "--variant", other)
    why = V.layout_checks(prof.rc, plain.out, prof.out, prof.err, rows)
    _done(row, why, "scale_add vs variant_layout (refused)", rows)


@C.inline("variant-triton")
def test_variant_triton(case, row, kr):
    """The variant: the same Triton kernel with BLOCK 256 (the app's is 1024), compiled by
    running the app with a fresh TRITON_CACHE_DIR, its cubin taken from there."""
    cache = case.path("triton-cache")
    build = case.run(TRITON_APP, name="build-variant", env={"TRITON_CACHE_DIR": str(cache),
                                                            "TRITON_VARIANT_BLOCK": "256"}, timeout=600)
    found = sorted(glob.glob(f"{cache}/*/axpy_tiles.cubin"))
    if build.rc != 0 or not found:
        _done(row, [f"building the variant: exit {build.rc}, cubins {found}"], "axpy_tiles", [])
    plain = case.run(TRITON_APP, name="plain", timeout=600)
    prof, rows, summary = _profile(case, kr, "triton", TRITON_APP, "-k", "axpy_tiles", "--all", "--variant",
                                   found[0], "--tolerance", "f32:1e-6,1e-6")
    why = V.triton_checks(prof.rc, plain.out, prof.out, rows, summary)
    _done(row, why, "axpy_tiles BLOCK 1024 vs 256", rows,
          figures=f"geometric-mean speedup {(summary or {}).get('geomean_speedup')}")


@C.inline("variant-bench")
def test_variant_bench(case, row, kr, app):
    """100 dispatches of scale_add (variant_app loop 100, 4 MiB written each): wall time beyond
    a plain run and beyond the passes, per dispatch, for profile and for profile --variant
    (the kernel itself as the variant), 3 passes each. A timed case: alone on the GPU."""
    n = 100
    argv = app(["{variant_app}", "loop", str(n)])
    same = app(["{variant_same}"])[0]
    # The loop's launches come after the three call sites': --nth 4 takes the loop's alone.
    sel = ["-k", "scale_add", "--nth", "4", "--all", "--passes", "3"]
    # Each run whole-process timed (start-up moves by tens of ms, a few per dispatch): three
    # of each, interleaved, and each kind's median run taken (one run gave a negative
    # baseline on the H200).
    runs = {"plain": [], "profile": [], "variant": []}
    for i in range(3):
        runs["plain"].append((case.run(argv, name=f"plain-{i}"), [], None))
        runs["profile"].append(_profile(case, kr, f"profile-{i}", argv, *sel))
        runs["variant"].append(_profile(case, kr, f"variant-{i}", argv, *sel, "--variant", same))
    (plain, _, _), (prof, prof_rows, _), (var, var_rows, _) = (V.median_run(runs[k]) for k in
                                                               ("plain", "profile", "variant"))
    why, figures = V.bench_figures(plain.secs, prof.secs, prof_rows, var.secs, var_rows, n)
    figures += " (median of 3 runs each: " + ", ".join(
        f"{k} {' / '.join(f'{r[0].secs:.3f}' for r in v)} s" for k, v in runs.items()) + ")"
    if plain.rc != 0 or prof.rc != 0 or var.rc != 0:
        why.append(f"exit statuses: plain {plain.rc}, profile {prof.rc}, variant {var.rc}")
    _done(row, why, "scale_add x 100", var_rows, figures=figures)


@C.inline("variant-graph")
def test_variant_graph(case, row, kr, app):
    """variant_app `graph 2` against variant_slow: the three call sites compared, the kernel
    node of its CUDA graph (launched twice) skipped at each launch, saying why."""
    graphs = 2
    argv = app(["{variant_app}", "graph", str(graphs)])
    slow = app(["{variant_slow}"])[0]
    plain = case.run(argv, name="plain")
    prof, rows, summary = _profile(case, kr, "graph", argv, "-k", "scale_add", "--all", "--variant", slow)
    why = V.graph_checks(prof.rc, plain.out, prof.out, rows, summary, graphs)
    if "graph" not in prof.err:
        why.append("stderr does not say why the graph's dispatches were skipped")
    _done(row, why, "scale_add vs variant_slow, 2 graph launches", rows,
          figures=f"skipped {(summary or {}).get('skipped')}")


TRAIN_APP = ["python3", str(ROOT / "testdata" / "apps" / "torch_train_app.py")]
GEMM = "gemm|xmma|cutlass"


@C.inline("variant-bench-train")
def test_variant_bench_train(case, row, kr):
    """100 dispatches of one GEMM of a PyTorch training step (torch_train_app.py: an MLP's
    forward, backward and SGD update): the variant is the GEMM's own code, taken out of a
    capture of it (`kreplay extract`), so every verdict is `identical` and the figures are the
    overhead alone: per dispatch beyond a plain run and beyond the passes, for profile and for
    profile --variant, 3 passes each. Times are the training loop's own (its `train loop`
    line: every step but the first, which the 100 dispatches skip with --nth), so Python's and
    torch's start, which move by a second between runs, stay out. A timed case: alone on the GPU."""
    n, listed = 100, 3
    listing = case.run([kr, "list", "--json", "--"] + TRAIN_APP + [str(listed)], name="list", timeout=600)
    found = V.train_bench_kernel(V.kernel_listing(listing.out), listed, n, GEMM)
    if listing.rc != 0 or found is None:
        _done(row, [f"kreplay list: exit {listing.rc}, no GEMM that runs every step"], "GEMM", [])
    kernel, per_step, steps = found
    cap = case.path("gemm.krr")
    rec = case.run([kr, "record", "-k", kernel, "-o", cap, "--"] + TRAIN_APP + ["1"], name="record", timeout=600)
    ext = case.run([kr, "extract", cap, "-o", case.path("gemm")], name="extract")
    modules = sorted(glob.glob(f"{case.path('gemm')}/module-*"))
    if rec.rc != 0 or ext.rc != 0 or not modules:
        _done(row, [f"the variant: record exit {rec.rc}, extract exit {ext.rc}, modules {modules}"], kernel, [])
    argv = TRAIN_APP + [str(steps)]
    plain = case.run(argv, name="plain", timeout=600)
    # The first step's launches are left out: the loop's time starts after it.
    sel = ["-k", kernel, "--nth", str(per_step + 1), "--count", str(n), "--passes", "3"]
    prof, prof_rows, _ = _profile(case, kr, "profile", argv, *sel)
    var, var_rows, summary = _profile(case, kr, "variant", argv, *sel, "--variant", modules[0])
    loops = [V.train_loop_s(c.err) for c in (plain, prof, var)]
    if None in loops:
        _done(row, [f"no `train loop` time: {loops}"], kernel, var_rows)
    why, figures = V.bench_figures(loops[0], loops[1], prof_rows, loops[2], var_rows, n)
    if plain.rc != 0 or prof.rc != 0 or var.rc != 0:
        why.append(f"exit statuses: plain {plain.rc}, profile {prof.rc}, variant {var.rc}")
    if plain.out != var.out:
        why.append("the training step's output (losses, weights checksum) differs under --variant")
    s = summary or {}
    if s.get("identical") != n:
        why.append(f"the GEMM's own code as its variant: {s.get('identical')} of {n} identical ({s})")
    figures += (f"; {per_step} a step, {steps} steps, loop {loops[0]:.3f} / {loops[1]:.3f} / {loops[2]:.3f} s "
                f"(plain / profile / --variant); verdicts: {s.get('identical')} identical, "
                f"{s.get('within_tolerance')} within tolerance, {s.get('differ')} differ")
    _done(row, why, f"{kernel[:40]} x {n}", var_rows, figures=figures)
