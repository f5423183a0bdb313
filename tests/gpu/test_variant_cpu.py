"""CPU self-tests of the profile --variant cases' verdicts (krvariant.py): each good input
passes, each fault fails."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import cases as C
import krvariant as V
from prepared import ROOT, Apps

E7 = [0x3F800000, 0x40000000, 0x40400000]
OUTS = [0x7F0000000000, 0x7F0000400000, 0x7F0000800000]
GRIDS = [256, 4096, 12]


def app_out(outs=OUTS, e7=E7, sums=(1000, 2000, 3000)) -> str:
    lines = [f"site {k} n={n} grid={g} out={o:#x} e7=0x{e:08x} bitsum={s}"
             for k, (n, g, o, e, s) in enumerate(zip((1 << 16, 1 << 20, 3000), GRIDS, outs, e7, sums))]
    return "\n".join(lines + [f"checksum {sum(sums)}"]) + "\n"


def row(k, verdict="identical", speedup=0.4, **variant):
    v = {"kernel": "scale_add", "median_ns": 25000, "verdict": verdict, "element": "f32", "kept": False,
         "differing_elements": 0, "first_difference": None}
    v.update(variant)
    return {"short_name": "scale_add", "launch_index": k + 1, "grid": [GRIDS[k], 1, 1], "median_ns": 10000,
            "durations_ns": [11000, 10000, 10000], "speedup": speedup, "variant": v}


SLOW = [row(k) for k in range(3)]
SLOW_SUMMARY = {"compared": 3, "identical": 3, "within_tolerance": 0, "differ": 0, "geomean_speedup": 0.4}


def wrong_rows(outs=OUTS, kept=False):
    return [row(k, "differs", 1.0, differing_elements=1, kept=kept,
                first_difference={"region_address": outs[k], "offset": 28}) for k in range(3)]


WRONG_SUMMARY = {"compared": 3, "differ": 3, "geomean_speedup": 1.0}


def test_the_app_output_is_read_site_by_site_without_its_addresses():
    s = V.sites(app_out())
    assert [x["grid"] for x in s] == GRIDS and s[1]["out"] == OUTS[1] and s[2]["e7"] == E7[2]
    assert V.checksum(app_out()) == 6000
    assert V.results(app_out()) == V.results(app_out(outs=[1, 2, 3]))
    assert V.results(app_out()) != V.results(app_out(sums=(1, 2, 3)))


def test_the_kept_checksum_moves_by_element_7_at_every_site():
    want = 6000 + sum(V.float_bits(12345.0) - e for e in E7)
    assert V.expected_kept_checksum(app_out()) == want
    assert V.float_bits(1.0) == 0x3F800000
    assert V.expected_kept_checksum("") is None


def test_a_report_splits_rows_and_summary():
    text = "\n".join(json.dumps(r) for r in SLOW) + "\n" + json.dumps({"summary": SLOW_SUMMARY}) + "\nnot json\n"
    rows, summary = V.report(text)
    assert rows == SLOW and summary == SLOW_SUMMARY


def test_the_slow_variant_passes_and_each_fault_fails():
    assert V.slow_checks(0, app_out(), app_out(outs=[9, 9, 9]), SLOW, SLOW_SUMMARY) == []
    faults = []
    for k, change in (("verdict", "differs"), ("speedup", 1.3), ("speedup", None)):
        rs = copy.deepcopy(SLOW)
        if k == "verdict":
            rs[1]["variant"]["verdict"] = change
        else:
            rs[1]["speedup"] = change
        faults.append((0, app_out(), app_out(), rs, SLOW_SUMMARY))
    faults.append((0, app_out(), app_out(), SLOW[:2], SLOW_SUMMARY))
    faults.append((1, app_out(), app_out(), SLOW, SLOW_SUMMARY))
    faults.append((0, app_out(), app_out(sums=(1, 2, 3)), SLOW, SLOW_SUMMARY))
    faults.append((0, app_out(), app_out(), SLOW, dict(SLOW_SUMMARY, differ=1)))
    faults.append((0, app_out(), app_out(), SLOW, dict(SLOW_SUMMARY, geomean_speedup=1.2)))
    faults.append((0, app_out(), app_out(), SLOW, None))
    for f in faults:
        assert V.slow_checks(*f), f


def test_the_wrong_variant_passes_with_and_without_keep_and_each_fault_fails():
    plain, prof = app_out(outs=[1, 2, 3]), app_out()
    assert V.wrong_checks(0, plain, prof, wrong_rows(), WRONG_SUMMARY, keep=False) == []
    kept_sum = V.expected_kept_checksum(plain)
    kept = prof.replace("checksum 6000", f"checksum {kept_sum}")
    assert V.wrong_checks(0, plain, kept, wrong_rows(kept=True), WRONG_SUMMARY, keep=True) == []
    assert V.wrong_checks(0, plain, prof, wrong_rows(kept=True), WRONG_SUMMARY, keep=True), "checksum unchanged"
    assert V.wrong_checks(0, plain, kept, wrong_rows(), WRONG_SUMMARY, keep=False), "results changed"
    off = wrong_rows()
    off[2]["variant"]["first_difference"]["offset"] = 32
    assert V.wrong_checks(0, plain, prof, off, WRONG_SUMMARY, keep=False)
    ok_verdict = wrong_rows()
    ok_verdict[0]["variant"]["verdict"] = "identical"
    assert V.wrong_checks(0, plain, prof, ok_verdict, WRONG_SUMMARY, keep=False)
    many = wrong_rows()
    many[1]["variant"]["differing_elements"] = 2
    assert V.wrong_checks(0, plain, prof, many, WRONG_SUMMARY, keep=False)
    assert V.wrong_checks(0, plain, prof, wrong_rows()[:2], WRONG_SUMMARY, keep=False)
    assert V.wrong_checks(3, plain, prof, wrong_rows(), WRONG_SUMMARY, keep=False)


def test_the_refused_layout_passes_and_each_fault_fails():
    why = "the variant scale_add was refused, no variant launch made: parameter 3 differs: ..."
    rows = [{"launch_index": k, "variant_error": why, "median_ns": 1000} for k in (1, 2, 3)]
    err = f"variant: 3 dispatch(es) skipped: variant not run: {why}\n"
    assert V.layout_checks(3, app_out(), app_out(), err, rows) == []
    assert V.layout_checks(0, app_out(), app_out(), err, rows)
    assert V.layout_checks(3, app_out(), app_out(sums=(1, 2, 3)), err, rows)
    assert V.layout_checks(3, app_out(), app_out(), "", rows)
    ran = copy.deepcopy(rows)
    ran[0]["variant"] = {"verdict": "identical"}
    assert V.layout_checks(3, app_out(), app_out(), err, ran)
    other = copy.deepcopy(rows)
    other[1]["variant_error"] = "parameter 2 differs"
    assert V.layout_checks(3, app_out(), app_out(), err, other)


def test_the_triton_variant_passes_and_each_fault_fails():
    rows = [row(k, "within tolerance" if k else "identical", 1.1) for k in range(3)]
    out = "n=1 sum=2\ntriton-variant 2\n"
    assert V.triton_checks(0, out, out, rows, {"geomean_speedup": 1.1}) == []
    bad = copy.deepcopy(rows)
    bad[2]["variant"]["verdict"] = "differs"
    assert V.triton_checks(0, out, out, bad, {"geomean_speedup": 1.1})
    assert V.triton_checks(0, out, "triton-variant 3\n", rows, {"geomean_speedup": 1.1})
    assert V.triton_checks(0, out, out, rows[:1], {"geomean_speedup": 1.1})
    assert V.triton_checks(0, out, out, rows, None)


def test_the_graph_case_passes_and_each_fault_fails():
    graph = "a kernel node of a CUDA graph: not replayed in place yet"
    rows = SLOW + [{"short_name": "scale_add", "launch_index": 4 + k, "skipped": graph} for k in range(2)]
    summary = dict(SLOW_SUMMARY, skipped=[[f"not profiled: {graph}", 2]])
    plain = app_out().replace("checksum", "graph 2 bitsum=77\nchecksum")
    assert V.graph_checks(0, plain, plain, rows, summary, 2) == []
    assert V.graph_checks(3, plain, plain, rows, summary, 2), "exit 3"
    assert V.graph_checks(0, plain, plain.replace("bitsum=77", "bitsum=78"), rows, summary, 2), "graph output"
    assert V.graph_checks(0, plain, plain, rows[:4], summary, 2), "a graph launch without its row"
    assert V.graph_checks(0, plain, plain, rows, dict(summary, skipped=[]), 2), "the summary is silent"
    other = copy.deepcopy(rows)
    other[4]["skipped"] = "no reason"
    assert V.graph_checks(0, plain, plain, other, summary, 2), "a reason without the graph"
    ran = copy.deepcopy(rows)
    ran[3] = row(0)
    assert V.graph_checks(0, plain, plain, ran, summary, 2), "a graph node profiled"
    assert V.graph_checks(0, app_out(), app_out(), rows, summary, 2), "no graph in the app"


def test_the_listing_is_found_among_the_apps_own_output():
    out = 'step 0 loss 1.0e+00\n[{"name": "k", "count": 2}]\nweights checksum 3\n'
    assert V.kernel_listing(out) == [{"name": "k", "count": 2}]
    assert V.kernel_listing("step 0 loss 1\n[not json\n") == []
    assert V.kernel_listing("") == []


def test_the_training_loop_time_is_read_from_stderr():
    assert V.train_loop_s("x\ntrain loop 0.6512 s\n") == 0.6512
    assert V.train_loop_s("train loop fast\n") is None
    assert V.train_loop_s("") is None


def test_the_training_step_bench_finds_its_kernel_and_steps():
    listing = [{"name": "relu", "demangled": "relu", "count": 30},
               {"name": "_Z6gemm_bv", "demangled": "gemm_b()", "count": 10},
               {"name": "gemm_c", "demangled": "gemm_c", "count": 10}]
    # The most frequent GEMM (the first of equals), its launches a step, and the steps that
    # make 100 of them after the first step (left out of the loop's time) with two to spare.
    assert V.train_bench_kernel(listing, 5, 100, "gemm") == ("_Z6gemm_bv", 2, 53)
    assert V.train_bench_kernel(listing, 5, 100, "relu") == ("relu", 6, 20)
    assert V.train_bench_kernel([], 5, 100, "gemm") is None
    assert V.train_bench_kernel([{"name": "gemm", "demangled": "gemm", "count": 4}], 5, 100, "gemm") is None


def test_the_bench_figures_subtract_the_passes_and_state_both_costs():
    rows = [{"durations_ns": [5_000_000, 1_000_000, 1_000_000]} for _ in range(2)]
    var_rows = [dict(r, variant={"durations_ns": [1_000_000, 1_000_000, 1_000_000]}) for r in rows]
    # profile: 2 dispatches, 10 ms beyond plain, 4 ms of extra passes: 3 ms each.
    # variant: 16 ms beyond plain, 4 ms of original and 6 ms of variant passes: 3 ms each.
    why, figures = V.bench_figures(1.0, 1.010, rows, 1.016, var_rows, 2)
    assert why == [] and "adds 0.000 ms" in figures and "(3.000 ms in all)" in figures, figures
    assert "fixed cost 3.000 ms" in figures
    why, _ = V.bench_figures(1.0, 1.010, rows, 1.050, var_rows, 2)
    assert why, "17 ms a dispatch beyond the passes adds 14 ms to profile's 3 ms"
    why, _ = V.bench_figures(1.0, 1.010, rows[:1], 1.018, var_rows, 2)
    assert why


def test_every_variant_case_is_registered_with_its_apps():
    import test_variant  # noqa: F401

    for name in ("variant-slow", "variant-wrong", "variant-wrong-keep", "variant-layout", "variant-triton",
                 "variant-bench", "variant-graph", "variant-bench-train"):
        assert name in C.REGISTERED and name in C.all_case_names(), name
    assert {"bench"} <= set(C.INLINE_CASES["variant-bench"])
    assert {"bench"} <= set(C.INLINE_CASES["variant-bench-train"])
    apps = Apps(Path("/nonexistent"), "sm_90", "/usr/local/cuda")
    for name in ("variant_app", "variant_same", "variant_slow", "variant_wrong", "variant_layout"):
        sources, argv = apps.recipe(name)
        assert all(Path(s).is_file() for s in sources), name
        assert ("-cubin" in argv) == (name != "variant_app"), name
    assert (ROOT / "testdata/apps/triton_variant_app.py").is_file()


def test_the_median_run_is_taken_not_the_first_or_the_fastest():
    class Run:
        def __init__(self, secs):
            self.secs = secs

    runs = [(Run(3.0), ["c"]), (Run(1.0), ["a"]), (Run(2.0), ["b"])]
    assert V.median_run(runs)[1] == ["b"]
    assert V.median_run(runs[:1])[1] == ["c"]
