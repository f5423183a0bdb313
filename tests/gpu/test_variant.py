"""`kreplay profile --variant` (issue 38): a variant kernel run beside the original at every
call site of a real run. Verdicts in krvariant.py (checked on the CPU by test_variant_cpu.py).

- variant-slow: variant_app's scale_add against variant_slow.cu (same math, slower): a row per
  call site, `identical`, speedup < 1; the app's results as in a plain run.
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
"""

from __future__ import annotations

import glob

import pytest

import cases as C
import krsuite as S
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
def test_variant_slow(case, row, kr, app):
    argv = app(["{variant_app}"])
    slow = app(["{variant_slow}"])[0]
    plain = case.run(argv, name="plain")
    prof, rows, summary = _profile(case, kr, "slow", argv, "-k", "scale_add", "--all", "--variant", slow)
    why = V.slow_checks(prof.rc, plain.out, prof.out, rows, summary)
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
    plain = case.run(argv, name="plain")
    # The loop's launches come after the three call sites': --nth 4 takes the loop's alone.
    sel = ["-k", "scale_add", "--nth", "4", "--all", "--passes", "3"]
    prof, prof_rows, _ = _profile(case, kr, "profile", argv, *sel)
    var, var_rows, _ = _profile(case, kr, "variant", argv, *sel, "--variant", same)
    why, figures = V.bench_figures(plain.secs, prof.secs, prof_rows, var.secs, var_rows, n)
    if plain.rc != 0 or prof.rc != 0 or var.rc != 0:
        why.append(f"exit statuses: plain {plain.rc}, profile {prof.rc}, variant {var.rc}")
    _done(row, why, "scale_add x 100", var_rows, figures=figures)
