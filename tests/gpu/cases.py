"""The case table: every case of the bash GPU suite (tests/gpu/bash_cases.txt), by kind.

Placeholders in command lines: {kapps}, {ptrtable}, {driver_app}, {graph_apps}, {beyond_apps},
{cupti_app}, {touch_gather}, {range_app}, {range_streams}, {driver_kernel}, {range_streams_slow},
{range_streams_divergent}, {variant_app}, {variant_same}, {variant_slow}, {variant_wrong},
{variant_layout} (cubins but variant_app), {example_tool} (a shared library): the test apps,
built once per session by the `apps` fixture (conftest.py); {apps}: testdata/apps (the Python
apps' sources). `python3` is the machine's, as in the bash suite.

A case's `known` (a reason) makes it `xfail(strict=True)`: a fixed limitation shows as XPASS,
which fails the run. None of today's cases is a known limitation.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Callable

# Markers of cases that must not run beside others (conftest.py skips them under xdist):
# `timed` cases measure time, `counters` cases take the GPU's performance counters (ncu,
# CUPTI profiling: device-wide), `bench` cases are benchmarks.
SERIAL_MARKS = ("timed", "counters", "bench")


@dataclass(frozen=True)
class RunCase:
    """run_case: the app plain and under `record -k regex:REGEX --nth NTH`, then verify, info,
    play --passes 8 --verify, play --relocate, play --ptx (when there is PTX)."""

    name: str
    regex: str
    nth: int
    argv: tuple
    rec_extra: tuple = ()
    known: str = ""
    timeout: int = 900


@dataclass(frozen=True)
class CheckCase:
    """check_case: the app plain, then under `kreplay KARGS -- CMD`: kreplay's exit status,
    the app's stdout unchanged, stderr matching a pattern."""

    name: str
    kargs: tuple
    want_rc: int
    stderr: str
    argv: tuple
    known: str = ""
    timeout: int = 700


@dataclass(frozen=True)
class ProfileCase:
    """pcase: the app plain, then under `kreplay profile ARGS -o REPORT`; the output must be
    identical to a plain run's and the report's rows pass `check`."""

    name: str
    args: tuple
    argv: tuple
    check: Callable
    marks: tuple = ()
    known: str = ""
    timeout: int = 900


@dataclass(frozen=True)
class ShareCase:
    """share_case: `pack FLAGS --level 3` of another case's capture, replayed."""

    name: str
    source: str
    flags: tuple
    known: str = ""
    timeout: int = 600


@dataclass(frozen=True)
class EndingCase:
    """ending_case: the application ends (exec, _exit, its own SIGTERM) while a 1 GiB capture
    is being written."""

    name: str
    how: str
    known: str = ""
    timeout: int = 700


K, G, B = "{kapps}", "{graph_apps}", "{beyond_apps}"
PY = ("python3",)


def _py(app, *args):
    return PY + ("{apps}/" + app,) + args


HOST = ("env", "KREPLAY_DEBUG_SNAPSHOT=host")
VMM = ("env", "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")

RUN_CASES = [
    RunCase("cuda-saxpy", "^saxpy", 2, (K, "saxpy", "3")),
    RunCase("cuda-globals", "poly_globals", 1, (K, "globals")),
    RunCase("cuda-pointers", "gather_sum", 1, (K, "pointers")),
    # A table of 2,000 small allocations (#34's pointer-table stall case, smaller): every one
    # reached through the table, captured and replayed bit-exact.
    RunCase("cuda-ptrtable", "ptrtable_sum", 1, ("{ptrtable}", "2000", "4")),
    RunCase("cuda-bigsmem", "smem_reverse", 1, (K, "bigsmem")),
    RunCase("cuda-threads", "scale_rows", 5, (K, "threads")),
    RunCase("cuda-cluster", "cluster_scale", 1, (K, "cluster")),
    RunCase("cuda-coop", "coop_normalize", 1, (K, "coop")),
    RunCase("cuda-stencil", "stencil_iter", 1, (K, "stencil")),
    RunCase("driver-extra", "^axpb$", 1, ("{driver_app}", "{driver_kernel}")),
    RunCase("torch-gemm", "gemm|xmma|cutlass", 1, _py("torch_app.py")),
    RunCase("torch-elementwise", "sigmoid", 1, _py("torch_app.py")),
    RunCase("triton", "fused_axpy_relu", 1, _py("triton_app.py")),
    RunCase("cupy", "cupy_scale_add", 1, _py("cupy_app.py")),
    RunCase("jax", "fusion|tanh", 1, _py("jax_app.py")),
    RunCase("cuda-async", "^saxpy", 1, (K, "async")),
    RunCase("torch-vmm", "sigmoid", 1, VMM + _py("torch_app.py")),
    # No device scratch: regions go to the file during the stall, the write set found by GPU
    # digests (#13).
    RunCase("spill-saxpy", "^saxpy", 2, HOST + (K, "saxpy", "3")),
    RunCase("spill-pointers", "gather_sum", 1, HOST + (K, "pointers")),
    RunCase("spill-torch-gemm", "gemm|xmma|cutlass", 1, HOST + _py("torch_app.py")),
    # The app under its own profiler (Kineto, a CUPTI user): recording wins the CUPTI slot.
    RunCase("torch-profiler", "sigmoid", 1, _py("torch_profiler_app.py")),
    # cuFFT's table through the module global `lut_sp`: module globals are pointer-walk roots.
    RunCase("torch-fft", "regular_fft", 1, _py("fft_app.py")),
    # A child forked after CUDA work exits through exit(3), its output unflushed: neither hung
    # nor crashed, its output and status as in a plain run (the parent prints the status).
    RunCase("robust-fork", "^saxpy", 1, ("timeout", "120", K, "fork")),
    # The same on the Sanitizer front end, whose child the recorder ends itself (it hung).
    RunCase("robust-fork-touched", "^saxpy", 1, ("timeout", "120", K, "fork"), rec_extra=("--memory", "touched")),
    RunCase("cuda-async-all", "^saxpy", 1, (K, "async"), rec_extra=("--memory", "all")),
    RunCase("torch-vmm-all", "sigmoid", 1, VMM + _py("torch_app.py"), rec_extra=("--memory", "all")),
    # Beyond linear device memory (issue 19).
    RunCase("beyond-printf", "print_scale", 1, (B, "printf")),
    RunCase("beyond-ctxdestroy", "teardown_scale", 1, ("timeout", "300", B, "ctxdestroy")),
    RunCase("beyond-devicereset", "teardown_scale", 1, ("timeout", "300", B, "devicereset")),
    RunCase("beyond-primaryreset", "teardown_scale", 1, ("timeout", "300", B, "primaryreset")),
    RunCase("beyond-mapped", "mapped_mix", 1, (B, "mapped")),
    RunCase("beyond-registered", "mapped_mix", 1, (B, "registered")),
    RunCase("beyond-tex2d", "tex2d_read", 1, (B, "tex2d")),
    RunCase("beyond-texlayered", "tex_layered_read", 1, (B, "texlayered")),
    RunCase("beyond-texcube", "tex_cube_read", 1, (B, "texcube")),
    RunCase("beyond-texpitch", "tex2d_read", 1, (B, "texpitch")),
    RunCase("beyond-texmip", "tex_mip_read", 1, (B, "texmip")),
    RunCase("beyond-surface", "surf_write", 1, (B, "surface")),
    RunCase("beyond-textable", "tex_table_read", 1, (B, "textable")),
    # Kernels inside CUDA graphs: each node execution counts.
    RunCase("graph-saxpy", "^saxpy", 2, (K, "graph")),
    RunCase("graph-stream", "graph_consume", 4, (G, "stream", "5")),
    RunCase("graph-explicit", "graph_consume", 3, (G, "explicit", "4")),
    RunCase("graph-child", "graph_consume", 2, (G, "child", "3")),
    RunCase("graph-update", "graph_axpy", 4, (G, "update", "5")),
    RunCase("graph-exec-update", "graph_axpy", 4, (G, "whole", "5")),
    RunCase("graph-cluster", "graph_cluster", 2, (G, "cluster", "3")),
    RunCase("torch-cudagraph", "Gelu", 3, _py("torch_graph_app.py", "cudagraph", "3")),
]

# torch-compile is a run case whose kernel and --nth come from `kreplay list` at run time
# (the last execution of a Triton kernel that ran in a CUDA graph): prepared.py resolves it.
TORCH_COMPILE = RunCase("torch-compile", "", 0, _py("torch_graph_app.py", "compile", "3"))

COND = "conditional node.*the application continues"
CHECK_CASES = [
    CheckCase("robust-no-match", ("record", "-k", "no_such_kernel_xyz"), 3, "no dispatch matched.*saxpy", (K, "saxpy", "3")),
    # The recorder's own kernels are never the application's (issue 29).
    CheckCase("robust-own-kernels", ("record", "-k", "regex:kreplay|digest|chunk"), 3, "no dispatch matched.*saxpy",
              (K, "saxpy", "3")),
    CheckCase("graph-host", ("record", "-k", "graph_consume", "--nth", "2"), 3, "host function.*the application continues",
              (G, "host", "3")),
    CheckCase("graph-cond-set", ("record", "-k", "graph_set_cond"), 3, COND, (G, "cond", "3")),
    CheckCase("graph-cond-after", ("record", "-k", "graph_finish"), 3, COND, (G, "cond", "3")),
    CheckCase("graph-cond-beside", ("record", "-k", "graph_axpy"), 3, COND, (G, "cond", "3")),
    CheckCase("graph-cond-body", ("record", "-k", "graph_countdown"), 3,
              "bodies run a data-dependent number of times.*no dispatch matched", (G, "cond", "3")),
    # An allocation inside a --launch-range refuses the range, naming the call (issue 32; a
    # copy there is a step).
    CheckCase("range-refuse", ("record", "--launch-range", "1:3"), 3,
              r"launches 1:3 abandoned: cuMemAlloc\w* was called inside the range.*the application continues",
              ("{range_app}", "malloc")),
    # A call a range cannot hold, inside a --profiler-range: refused naming it, before it runs;
    # the application's call runs and its output is unchanged (issue 32, proof 6).
    CheckCase("range-unsupported", ("record", "--profiler-range"), 3,
              r"abandoned: cuLaunchHostFunc\w* was called inside the range.*the application continues",
              ("{range_streams}", "hostfunc")),
    CheckCase("range-unsupported-alloc", ("record", "--profiler-range"), 3,
              r"abandoned: cuMemAlloc\w*Async\w* was called inside the range.*the application continues",
              ("{range_streams}", "mallocasync")),
    # --graph-launch (issue 32): a graph with a host-function node is refused naming the node
    # before anything runs; a match outside any graph (the eager warm-up) is not captured.
    CheckCase("range-graph-launch-host", ("record", "-k", "graph_consume", "--nth", "2", "--graph-launch"), 3,
              r"graph launch holding graph_consume.*host function node.*the application continues",
              (G, "host", "3")),
    CheckCase("range-graph-launch-eager", ("record", "-k", "regex:Gelu", "--graph-launch"), 3,
              r"match 1.*not inside a graph launch \(--graph-launch needs a kernel that runs in a CUDA graph\)",
              _py("torch_graph_app.py", "cudagraph", "3")),
    CheckCase("robust-cupti-user", ("record", "-k", "saxpy_traced"), 3,
              "another profiler or tracer already holds CUPTI.*nothing captured", ("{cupti_app}",)),
]
# robust-list was a check_case too (verb list); its check is list_output_checks (issue 39 item 2).

# Range captures several cases replay, recorded once per run folder (prepared.py
# Captures.range_capture): name -> (record arguments, app argv).
RANGE_CAPTURES = {
    "range-streams-profiler": (("--profiler-range",), ("{range_streams}",)),
}

SELF_MATCH_CASES = {
    "self-match-cuda": (K, "churn", "10"),
    "self-match-torch": _py("torch_train_app.py", "1"),
}

ENDING_CASES = [EndingCase("robust-exec", "exec"), EndingCase("robust-exit", "exit"),
                EndingCase("robust-term-self", "term")]

SHARE_CASES = [
    ShareCase("share-redact-gemm", "torch-gemm", ("--redact",)),
    ShareCase("share-redact-elementwise", "torch-elementwise", ("--redact",)),
    ShareCase("share-redact-saxpy", "cuda-saxpy", ("--redact",)),
    ShareCase("share-drop-post", "cuda-saxpy", ("--drop-post",)),
]


# -- kreplay profile: the row checks (were Python strings run through exec) --------------------


def check_profile_saxpy(prof, skipped, rows, err):
    """saxpy, three launches: five timed passes each, deterministic, 16 MiB written (y)."""
    why = []
    if len(prof) != 3:
        why.append(f"{len(prof)} rows, expected 3")
    for r in prof:
        d = r["durations_ns"]
        if len(d) != 5 or r["median_ns"] <= 0:
            why.append(f"passes {d}")
        if r["deterministic"] is not True:
            why.append("not deterministic")
        if r["write_set_bytes"] != 16 << 20:
            why.append(f"write set {r['write_set_bytes']}")
        if r["restore_median_ns"] <= 0 or r["pass_overhead_ns"] <= 0:
            why.append("no restore or overhead time")
    return why


def warps_exact(prof, extra=None):
    """Counters of three saxpy launches: each row has counters, warps launched is exact (grid x
    block / 32); `extra(row, metrics, why)` adds checks per row."""
    why = []
    if len(prof) != 3:
        why.append(f"{len(prof)} rows, expected 3")
    for r in prof:
        m = {x["name"]: x["value"] for x in r.get("metrics", [])}
        warps = r["grid"][0] * r["block"][0] // 32
        if r.get("metrics_error"):
            why.append("no counters: " + r["metrics_error"])
        got = m.get("smsp__warps_launched.sum")
        if not r.get("metrics_error") and got != warps:
            why.append(f"warps {got} != {warps}")
        if extra:
            extra(r, m, why)
    return why


def check_profile_metrics(prof, skipped, rows, err):
    """Counters batched, counted at the process's exit: also instructions and DRAM reads."""

    def extra(r, m, why):
        if not m.get("smsp__inst_executed.sum", 0) > 0:
            why.append("no instructions")
        if not m.get("dram__bytes_read.sum", 0) > 0:
            why.append("no DRAM reads")
        if r.get("counter_passes", 0) < 1:
            why.append("no counter passes")
        if len(r["durations_ns"]) != 1:
            why.append("--metrics times the application launch alone by default")

    return warps_exact(prof, extra)


def check_profile_metrics_free(prof, skipped, rows, err):
    """Buffers freed right after each launch: the batch counted before each free."""
    return warps_exact(prof)


def check_profile_tool(prof, skipped, rows, err):
    """The example C tool decides the passes: until three agree (issue 39 item 10: checked)."""
    from krsuite import tool_checks

    why = []
    if len(prof) != 3:
        why.append(f"{len(prof)} rows, expected 3")
    said = [l for l in err.splitlines() if l.startswith("example_tool:")]
    if len(said) != 3:
        why.append(f"{len(said)} lines from the tool, expected 3")
    for r in prof:
        n = len(r["durations_ns"])
        if not 3 <= n <= 1000:
            why.append(f"{n} passes")
    return why + tool_checks(prof, said)


def check_play_tool(report: dict, err: str, tool_path: str | None = None) -> list:
    """play-tool: the example C tool decided the player's passes (`play --tool`): it said so
    once on stderr, its count is the report's `passes` and `tool.passes`, it stopped the loop
    itself, its path is the library given (`tool_path`, when known), and its last three passes
    agree within 5 % (the rule of `tool_checks`)."""
    from krsuite import tool_checks

    said = [l for l in err.splitlines() if l.startswith("example_tool:")]
    tool = report.get("tool") or {}
    why = []
    if len(said) != 1:
        why.append(f"{len(said)} lines from the tool, expected 1")
    if tool.get("passes") != report.get("passes"):
        why.append(f"tool.passes {tool.get('passes')}, passes {report.get('passes')}")
    if not tool.get("path") or (tool_path is not None and tool.get("path") != str(tool_path)):
        why.append(f"tool.path {tool.get('path')!r}")
    row = {"durations_ns": report.get("durations_ns"), "launch_index": None,
           "stopped_by_tool": tool.get("stopped_by_tool"), "capped": tool.get("capped")}
    # The tool names the recorded launch; the report's one row takes the tool's line's index.
    m = re.match(r"^example_tool: .* launch (\d+):", said[0]) if said else None
    if m:
        row["launch_index"] = int(m.group(1))
    return why + tool_checks([row], said)


def check_profile_train(prof, skipped, rows, err):
    """A PyTorch training step, every GEMM profiled (8 per step, 3 steps)."""
    why = []
    if len(prof) < 24:
        why.append(f"{len(prof)} GEMMs profiled, expected 8 per step")
    if skipped:
        why.append(f"{len(skipped)} skipped: {skipped[0]['skipped']}")
    for r in prof:
        if r["deterministic"] is not True:
            why.append(r["short_name"] + " not deterministic")
        if len(r["durations_ns"]) != 3:
            why.append("passes")
    return why


def check_profile_graph(prof, skipped, rows, err):
    """Graph kernel nodes are not replayed in place yet: each says so in a skipped row."""
    why = []
    if prof:
        why.append("a graph node was profiled")
    if len(skipped) < 1 or not all("graph" in r["skipped"] for r in skipped):
        why.append("no skipped graph rows")
    return why


def check_profile_self_match(prof, skipped, rows, err):
    """Every launch profiled (-k 'regex:.'): only the application's three saxpy launches, none
    of kreplay's own passes, L2 sweeps or chunk kernels (issue 29)."""
    why = []
    if len(rows) != 3:
        why.append(f"{len(rows)} rows, expected 3: " + ", ".join(str(r.get("short_name")) for r in rows))
    why += ["profiled " + str(r.get("short_name")) for r in rows if r.get("short_name") != "saxpy"]
    return why


SPARSE_WRITTEN = 32 * 16 << 10  # kapps sparse: 32 clusters of 4 pages
SPARSE_BUFFER = 64 << 20


def check_sparse_rows(rows, label, write_set, chunk, metrics=(), passes=5) -> list:
    """kapps sparse profiled (three launches, `passes` passes each): each row deterministic
    (its `+=` needs every restore), `write_set` bytes restored, found in `chunk`-byte chunks;
    with `metrics`, each named counter collected."""
    why = []
    prof = [r for r in rows if not r.get("skipped")]
    if len(prof) != 3:
        why.append(f"{label}: {len(prof)} profiled rows, expected 3")
    for r in prof:
        if r.get("deterministic") is not True:
            why.append(f"{label}: not deterministic (a restore missed a page)")
        if r.get("write_set_bytes") != write_set:
            why.append(f"{label}: write set {r.get('write_set_bytes')} bytes, expected {write_set}")
        if r.get("restore_chunk_bytes") != chunk:
            why.append(f"{label}: restore chunk {r.get('restore_chunk_bytes')} bytes, expected {chunk}")
        if len(r.get("durations_ns") or []) != passes:
            why.append(f"{label}: passes {r.get('durations_ns')}")
        got = {m["name"]: m["value"] for m in r.get("metrics") or []}
        if metrics and (r.get("metrics_error") or any(not got.get(m) for m in metrics)):
            why.append(f"{label}: counters {got}, error {r.get('metrics_error')}")
    return why


def profile_touched_verdict(plain_out, runs) -> list:
    """`runs`: (label, rc, stdout, rows, write set, chunk, metrics) of each profile of kapps
    sparse, five passes each; each must leave the application's output as a plain run's."""
    why = []
    if not plain_out:
        why.append("the plain run printed nothing")
    for label, rc, out, rows, write_set, chunk, metrics in runs:
        if rc != 0:
            why.append(f"{label}: exit {rc}")
        if out != plain_out:
            why.append(f"{label}: the application's output differs from a plain run")
        why += check_sparse_rows(rows, label, write_set, chunk, metrics)
    return why


PROFILE_CASES = [
    ProfileCase("profile-self-match", ("-k", "regex:.", "--all", "--passes", "3"), (K, "saxpy", "3"),
                check_profile_self_match),
    ProfileCase("profile-saxpy", ("-k", "saxpy", "--all", "--passes", "5"), (K, "saxpy", "3"), check_profile_saxpy),
    ProfileCase("profile-metrics", ("-k", "saxpy", "--all", "--metrics",
                                    "smsp__warps_launched.sum,smsp__inst_executed.sum,dram__bytes_read.sum"),
                (K, "saxpy", "3"), check_profile_metrics, marks=("counters",)),
    ProfileCase("profile-metrics-free", ("-k", "saxpy", "--all", "--metrics",
                                         "smsp__warps_launched.sum,smsp__inst_executed.sum"),
                (K, "churn", "3"), check_profile_metrics_free, marks=("counters",)),
    # Three passes within 5 %: timing, so alone on the GPU.
    ProfileCase("profile-tool", ("-k", "saxpy", "--all", "--tool", "{example_tool}"), (K, "saxpy", "3"),
                check_profile_tool, marks=("timed",)),
    ProfileCase("profile-train", ("-k", "regex:gemm|xmma|cutlass", "--all", "--passes", "3"),
                _py("torch_train_app.py", "3"), check_profile_train),
    ProfileCase("profile-graph", ("-k", "saxpy", "--all"), (K, "graph"), check_profile_graph),
]

# Cases written out as one test function each (test_*.py registers them with `inline`):
# name -> markers.
INLINE_CASES = {
    "beyond-heap": (),
    "beyond-textures-info": (),
    "robust-list": (),
    "robust-unwritable": (),
    "salvage-play": (),
    "robust-disk-full": (),
    "graph-small": (),
    "graph-list": (),
    "graph-bench": ("bench", "timed"),
    "record-count": (),
    "play-tools": ("counters",),
    "play-tool": ("timed",),
    "robust-module": (),
    "select-forms": (),
    "diff-replay": (),
    "nvtx-select": (),
    "robust-sigterm": (),
    "hostile-play": (),
    "touched-replay": (),
    "touched-record": (),
    "touched-sanitizer": (),
    "touched-torch": (),
    "touched-range": (),
    "touched-suite-bench": ("bench",),
    "capture-times-bench": ("bench", "timed"),
    "table-check": (),
    "cupti-versions": ("counters",),
    "robust-stderr-full": (),
    "chunk-kernels": (),
    "python-package": ("counters",),
    "python-cli-same-report": (),
    "range-launch": (),
    # Issue 32's proofs (test_range.py; verdicts in krrange.py).
    "range-streams-launch": (),
    "range-streams-profiler": (),
    "range-streams-nvtx": (),
    "range-nvtx-torch": ("timed",),
    "range-module": ("timed",),
    "range-divergent": (),
    "range-metrics": ("counters",),
    "range-save-step": (),
    "range-bench": ("bench", "timed"),
    "range-stall-bench": ("bench", "timed"),
    "range-graph-launch": (),
    "range-graph-launch-compile": (),
    # Issue 40: play --trace (test_trace.py; verdicts in krtrace.py).
    "trace-play-metrics": ("counters",),
    "trace-range-per-step": (),
    "trace-profile": ("counters",),
    # Issue 33: many captures through the farm (test_tools.py; verdict in krfarm.py).
    "farm-play": ("timed",),
    # Issue 33 review: --devices past the visible GPUs refused; --no-timing records: no 0 µs.
    "farm-devices-no-timing": (),
    # Issue 33: record --each-kernel (test_corpus.py; verdicts in krcorpus.py).
    "corpus-each-kernel": (),
    "corpus-triton-specializations": (),
    "mpi-2ranks": ("mpi",),
    "profile-2ranks": ("mpi",),
    # Issue 35: profile --memory touched (test_profile.py; verdict profile_touched_verdict).
    "profile-touched": (),
    "profile-touched-metrics": ("counters",),
    # Issue 38: profile --variant (test_variant.py; verdicts in krvariant.py).
    "variant-slow": ("timed",),
    "variant-wrong": (),
    "variant-wrong-keep": (),
    "variant-layout": (),
    "variant-triton": ("timed",),
    "variant-bench": ("bench", "timed"),
    "variant-graph": (),
    "variant-bench-train": ("bench", "timed"),
}

# Which apps the inline cases build, so that a failed build fails them at setup.
PLACEHOLDER = re.compile(r"\{(\w+)\}")


def placeholders(argv) -> set:
    return {m for a in argv for m in PLACEHOLDER.findall(str(a))}


def run_case_names():
    return [c.name for c in RUN_CASES] + [TORCH_COMPILE.name]


def repro_sources():
    """Captures the repro phase reproduces: every run case's and every share case's (the bash
    suite took every NAME.play.json in its folder but the MPI ranks')."""
    return run_case_names() + [c.name for c in SHARE_CASES]


def all_case_names():
    """Every case's name, as the bash suite named its rows (repro:NAME for reproducers)."""
    names = run_case_names() + [c.name for c in CHECK_CASES] + list(SELF_MATCH_CASES)
    names += [c.name for c in ENDING_CASES] + [c.name for c in SHARE_CASES] + [c.name for c in PROFILE_CASES]
    names += list(INLINE_CASES)
    names += ["repro:" + n for n in repro_sources()]
    return names


def inline(name: str):
    """Registers a test function as the inline case `name`, with its markers from INLINE_CASES."""
    import pytest

    marks = INLINE_CASES[name]

    def wrap(fn):
        fn.case_name = name
        REGISTERED[name] = fn
        for m in marks:
            fn = getattr(pytest.mark, m)(fn)
        return fn

    return wrap


REGISTERED: dict = {}


def known_of(name: str) -> str:
    for group in (RUN_CASES, CHECK_CASES, ENDING_CASES, SHARE_CASES, PROFILE_CASES):
        for c in group:
            if c.name == name:
                return c.known
    return ""
