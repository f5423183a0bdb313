"""Range captures (issue 32, "Proof, in the GPU suite" and "Performance"): range_streams.cu's
two-stream sequence captured by --launch-range, --profiler-range and --nvtx-range and replayed
bit-exact; a layer of torch_block_app.py by --nvtx-range, replayed bit-exact and timed against
the application's own time; a variant of the middle kernel (--module) slower with the same
output, and one writing other values whose step --verify names; --save-step against a direct
capture of the same dispatch; the 30-kernel benchmark; a whole CUDA graph launch of
torch.cuda.CUDAGraph and of torch.compile(mode="reduce-overhead") by --graph-launch; `play
--metrics` of the profiler-range capture, counters per kernel step and the range's sums
(range-metrics). The verdicts are krrange.py's (tested on the CPU in test_helpers_cpu.py);
range-unsupported is a check case (cases.py)."""

from __future__ import annotations

import pytest

import cases as C
import krrange as R
import krsuite as S
from prepared import APPS_SRC

pytestmark = pytest.mark.gpu

TORCH_BLOCK = ["python3", str(APPS_SRC / "torch_block_app.py")]


def _json(cmd):
    return S.load_json(cmd.out_path)


def _done(row, why, kernel, play=None, info=None, **extra):
    play = play or {}
    extra.setdefault("original_us", (((info or {}).get("range") or {}).get("original_ns") or 0) / 1e3)
    row.update(kernel=kernel, median_us=(play.get("median_ns") or 0) / 1e3,
               matched=bool((play.get("verify") or {}).get("matched")),
               deterministic=(play.get("verify") or {}).get("deterministic"), why="; ".join(why), **extra)
    assert not why, "; ".join(why)


def _play(case, kr, w, name, *extra, passes=8, timeout=300):
    return case.run([kr, "play", w, "--passes", str(passes), "--verify", "--json", *extra], name=name, timeout=timeout)


def _shared_streams(captures, case) -> tuple:
    """The shared --profiler-range capture of range_streams (recorded once per run folder)."""
    r = captures.range_capture("range-streams-profiler")
    case.notes.extend(r.get("log", []))
    w = case.capture(r["krr"])
    if not r.get("has_capture"):
        pytest.fail("the range-streams-profiler capture was not recorded:\n" + "\n\n".join(r.get("log", [])),
                    pytrace=False)
    return r, w


@C.inline("range-streams-launch")
def test_range_streams_launch(case, row, kr, app):
    """`record --launch-range I:J` of range_streams' second ranged pass, I and J found with
    `list --json` (the app prints no launch index): nine steps from streams_produce to
    streams_finish, on two streams, replayed bit-exact 8 times."""
    argv = app(["{range_streams}"])
    base = case.run(argv, name="base")
    found, why = R.listed_streams_range(case.run, kr, argv)
    if found is None:
        _done(row, [why], "list")
    first, last = found
    w = case.capture(case.path("launch.krr"))
    rec = case.run([kr, "record", "--launch-range", f"{first}:{last}", "-o", w, "--force", "--"] + argv, name="rec")
    info = case.run([kr, "info", "--json", w], name="info")
    case.run([kr, "info", w], name="info-text")
    play = _play(case, kr, w, "play")
    why = R.streams_case_checks(rec.rc, base.out, rec.out, _json(info), play.rc, _json(play), R.STREAMS_LAUNCH_KINDS,
                                f"launch-range {first}:{last}", (first, last))
    _done(row, why, f"launches {first}:{last}: {len(R.STREAMS_LAUNCH_KINDS)} steps", _json(play), _json(info))


@C.inline("range-streams-profiler")
def test_range_streams_profiler(captures, case, row, kr):
    """`record --profiler-range` (the first cudaProfilerStart/Stop pair): the whole pass, ten
    steps ending with the copy to the host, replayed bit-exact 8 times, with per-step times."""
    r, w = _shared_streams(captures, case)
    play = _play(case, kr, w, "play", "--per-step")
    case.run([kr, "info", w], name="info-text")
    why = R.streams_case_checks(r.get("record_rc"), r.get("base_out", ""), r.get("rec_out", ""), r.get("info"), play.rc,
                                _json(play), R.STREAMS_FULL_KINDS, "profiler-range #1")
    why += R.per_step_checks(_json(play))
    _done(row, why, f"profiler-range #1: {len(R.STREAMS_FULL_KINDS)} steps", _json(play), r.get("info"))


@C.inline("range-streams-nvtx")
def test_range_streams_nvtx(case, row, kr, app):
    """`record --nvtx-range streams` of the C++ app's nvtxRangePushA (NVTX3, header-only):
    the same ten steps as the profiler range, replayed bit-exact 8 times."""
    argv = app(["{range_streams}"])
    base = case.run(argv, name="base")
    w = case.capture(case.path("nvtx.krr"))
    rec = case.run([kr, "record", "--nvtx-range", "streams", "-o", w, "--force", "--"] + argv, name="rec")
    info = case.run([kr, "info", "--json", w], name="info")
    play = _play(case, kr, w, "play")
    why = R.streams_case_checks(rec.rc, base.out, rec.out, _json(info), play.rc, _json(play), R.STREAMS_FULL_KINDS,
                                "nvtx-range streams #1")
    _done(row, why, "nvtx-range streams #1", _json(play), _json(info))


@C.inline("range-nvtx-torch")
def test_range_nvtx_torch(case, row, kr):
    """`record --nvtx-range layer.2 --nth 2` of the PyTorch block stack: replayed bit-exact,
    the application's output unchanged, and the replay's time against the in-app range time
    (first pass with --cache flush, and the median; target ±5 %: a stated check, the figures
    in the row either way). Timed: alone on the GPU, the capture recorded here too."""
    base = case.run(TORCH_BLOCK, name="base", timeout=900)
    w = case.capture(case.path("layer2.krr"))
    rec = case.run([kr, "record", "--nvtx-range", "layer.2", "--nth", str(R.TORCH_NTH), "-o", w, "--force", "--"]
                   + TORCH_BLOCK, name="rec", timeout=900)
    info = case.run([kr, "info", "--json", w], name="info")
    case.run([kr, "info", w], name="info-text")
    play = _play(case, kr, w, "play", timeout=600)
    flush = case.run([kr, "play", w, "--passes", "8", "--cache", "flush", "--json"], name="flush", timeout=600)
    why, figures = R.nvtx_torch_checks(rec.rc, base.out, rec.out, _json(info), play.rc, _json(play), _json(flush))
    rng = (_json(info) or {}).get("range") or {}
    _done(row, why, f"layer.2 #2: {rng.get('kernel_steps')} kernel steps", _json(play),
          original_us=(rng.get("original_ns") or 0) / 1e3, figures=figures)


@C.inline("range-module")
def test_range_module(captures, app, case, row, kr):
    """`play --module range_streams_slow` (streams_middle computing the same values, slower)
    on the profiler-range capture: the output still matches, the median is slower."""
    _, w = _shared_streams(captures, case)
    slow = app(["{range_streams_slow}"])[0]
    base = _play(case, kr, w, "play")
    var = _play(case, kr, w, "play-slow", "--module", slow)
    why = R.module_checks(_json(base), var.rc, _json(var))
    b, s = (_json(base) or {}).get("median_ns") or 0, (_json(var) or {}).get("median_ns") or 0
    _done(row, why, f"slow middle kernel: {s / 1e3:.1f} us vs {b / 1e3:.1f} us", _json(var),
          original_us=b / 1e3, figures=f"median {b / 1e3:.1f} us captured code, {s / 1e3:.1f} us with the slow variant")


@C.inline("range-metrics")
def test_range_metrics(captures, case, row, kr):
    """`play --metrics` on the profiler-range capture: counters per kernel step (CUPTI's automatic
    range per kernel, each counter pass the whole range on restored memory) and, for the
    additive metrics, the range's sum (krrange.range_metrics_checks)."""
    r, w = _shared_streams(captures, case)
    metrics = ",".join(R.RANGE_METRICS)
    play = case.run([kr, "play", w, "--passes", "2", "--metrics", metrics, "--json"], name="play-metrics",
                    timeout=300)
    case.run([kr, "play", w, "--passes", "1", "--metrics", metrics], name="play-metrics-text", timeout=300)
    kernels = sum(k == "kernel" for k in R.STREAMS_FULL_KINDS)
    why = R.range_metrics_checks(play.rc, _json(play), r.get("info"), kernels)
    totals = (_json(play) or {}).get("range_metrics") or {}
    _done(row, why, f"profiler-range #1: {kernels} kernel steps", _json(play), r.get("info"),
          figures=", ".join(f"{k} = {v:,.0f}" for k, v in sorted(totals.items())))


@C.inline("range-divergent")
def test_range_divergent(captures, app, case, row, kr):
    """`play --module range_streams_divergent --verify` (streams_middle writing other values):
    verification fails and names streams_middle's step as the first divergent one."""
    r, w = _shared_streams(captures, case)
    div = app(["{range_streams_divergent}"])[0]
    # A step is named only in a replay at the recorded addresses: one that had to relocate (its
    # addresses in use, as once among a dozen parallel cases) says so in divergence_note, and is
    # played again, at most twice more.
    for attempt in range(3):
        play = _play(case, kr, w, "play-divergent" + (f"-{attempt}" if attempt else ""), "--module", div,
                     passes=2)
        if (_json(play) or {}).get("address_mode") != "relocated":
            break
    case.run([kr, "play", w, "--passes", "1", "--verify", "--module", div], name="play-text")
    middle = R.middle_step(r.get("info"))
    why = R.divergent_checks(play.rc, _json(play), middle)
    p = _json(play) or {}
    row.update(kernel=f"first divergent step {R.first_divergent_step(p)} (streams_middle: {middle})",
               matched=not why, why="; ".join(why))
    assert not why, "; ".join(why)


@C.inline("range-save-step")
def test_range_save_step(case, row, kr):
    """`play --save-step K` of the layer.2 capture writes kernel step K as a single dispatch,
    which replays bit-exact and is the dispatch `record -k MANGLED --nth N` captures directly
    (krrange.save_step_checks says how they are compared: identity, replays, and the bytes
    each pointer argument points at, from `kreplay extract` of both). K is a kernel that runs once per
    layer and nowhere else, so N follows from the layer and iteration."""
    ls = case.run([kr, "list", "--json", "--"] + TORCH_BLOCK, name="list", timeout=900)
    w = case.capture(case.path("layer2.krr"))
    rec = case.run([kr, "record", "--nvtx-range", "layer.2", "--nth", str(R.TORCH_NTH), "-o", w, "--force", "--"]
                   + TORCH_BLOCK, name="rec", timeout=900)
    info = _json(case.run([kr, "info", "--json", w], name="info"))
    choice = R.save_step_choice(info, S.last_json_line(ls.out))
    if rec.rc != 0 or choice is None:
        _done(row, [f"record exits {rec.rc}; no kernel step runs once per layer (list exit {ls.rc})"], "save-step")
    k, mangled, nth = choice
    saved = case.capture(case.path(f"step{k}.krr"))
    sv = case.run([kr, "play", w, "--save-step", str(k), saved], name="save-step", timeout=600)
    splay = _play(case, kr, saved, "play-saved")
    direct = case.capture(case.path("direct.krr"))
    dr = case.run([kr, "record", "-k", mangled, "--nth", str(nth), "-o", direct, "--force", "--"] + TORCH_BLOCK,
                  name="direct", timeout=900)
    dplay = _play(case, kr, direct, "play-direct")
    sinfo = _json(case.run([kr, "info", "--json", saved], name="info-saved"))
    dinfo = _json(case.run([kr, "info", "--json", direct], name="info-direct"))
    for c, d in ((saved, "saved-x"), (direct, "direct-x")):
        case.run([kr, "extract", c, "-o", case.path(d), "--force"], name="extract-" + d, timeout=600)
    windows, windows_why = R.param_windows(sinfo, dinfo)
    compared = R.compare_windows(windows, case.path("saved-x"), case.path("direct-x"))
    why = R.save_step_checks(sv.rc, sinfo, _json(splay), dr.rc, dinfo, _json(dplay), compared, windows_why)
    _done(row, why, f"step {k} = {mangled[:60]} #{nth}", _json(splay),
          figures=f"step {k}: {R.base_name((sinfo or {}).get('kernel'))} #{nth}; memory of {len(compared)} pointer "
                  f"argument(s) compared before and after the kernel: "
                  f"{sum(c['pre_same'] and c['post_same'] for c in compared)} the same")


@C.inline("range-bench")
def test_range_bench(case, row, kr, app):
    """30 small kernels on one stream inside a --profiler-range: replay median vs in-app range
    time (target ±5 %), and kreplay's launch overhead per step against the app's own C++ loop
    launching the same 30 kernels back to back (target <= 2 us). Figures in the row either
    way, as graph-bench's."""
    argv = app(["{range_streams}", "bench"])
    base = case.run(argv, name="base")
    passes = 20
    rounds = []
    for i in range(R.BENCH_ROUNDS):
        w = case.capture(case.path(f"bench-{i}.krr"))
        rec = case.run([kr, "record", "--profiler-range", "-o", w, "--force", "--"] + argv, name=f"rec-{i}")
        info = case.run([kr, "info", "--json", w], name=f"info-{i}")
        play = _play(case, kr, w, f"play-{i}", passes=passes)
        rounds.append((rec, _json(info), play))
    pairs = [(((inf or {}).get("range") or {}).get("original_ns") or 0, (_json(p) or {}).get("median_ns") or 0)
             for _, inf, p in rounds]
    rec, info, play = rounds[R.median_round(pairs)]
    why, figures = R.bench_checks(base.out, rec.rc, rec.out, info, play.rc, _json(play), passes)
    # Every round must have recorded and replayed; the timing is the median round's.
    why += [f"round {i}: record exits {r.rc}, play exits {p.rc}" for i, (r, _, p) in enumerate(rounds)
            if r.rc != 0 or p.rc != 0]
    figures += "; rounds (replay vs in-app): " + ", ".join(f"{R.pct(m, o):+.1f} %" for o, m in pairs)
    rng = (info or {}).get("range") or {}
    _done(row, why, figures, _json(play), original_us=(rng.get("original_ns") or 0) / 1e3, figures=figures)


def _graph_launch(case, row, kr, mode: str):
    """`record -k ^K$ --graph-launch --nth N` of torch_graph_app.py MODE: K a kernel of the
    graph found with `list --json` at its last execution (a graph node's), the whole launch as
    steps, the application's output unchanged, 8 passes bit-exact (krrange.graph_launch_checks)."""
    argv = ["python3", str(APPS_SRC / "torch_graph_app.py"), mode, "3"]
    if mode == "compile":
        # A first run fills Inductor's cache, so the listing and the recording compile alike.
        case.run(argv, name="warm", timeout=900)
    ls = case.run([kr, "list", "--json", "--"] + argv, name="list", timeout=900)
    choice = R.graph_launch_choice(S.last_json_line(ls.out), R.GRAPH_LAUNCH_KERNEL[mode])
    if choice is None:
        _done(row, [f"list (exit {ls.rc}) shows no {R.GRAPH_LAUNCH_KERNEL[mode]} kernel inside a CUDA graph"], mode)
    mangled, nth = choice
    base = case.run(argv, name="base", timeout=900)
    w = case.capture(case.path(f"{mode}.krr"))
    rec = case.run([kr, "record", "-k", mangled, "--graph-launch", "--nth", str(nth), "-o", w, "--force",
                    "--"] + argv, name="rec", timeout=900)
    info = case.run([kr, "info", "--json", w], name="info")
    case.run([kr, "info", w], name="info-text")
    play = _play(case, kr, w, "play")
    why = R.graph_launch_checks(rec.rc, base.out, rec.out, _json(info), play.rc, _json(play), mangled)
    rng = (_json(info) or {}).get("range") or {}
    _done(row, why, f"{rng.get('origin')}: {len((_json(info) or {}).get('steps') or [])} steps", _json(play),
          _json(info))


@C.inline("range-graph-launch")
def test_range_graph_launch(case, row, kr):
    """A torch.cuda.CUDAGraph replay (gelu(x) * 2 + b) captured whole with --graph-launch."""
    _graph_launch(case, row, kr, "cudagraph")


@C.inline("range-graph-launch-compile")
def test_range_graph_launch_compile(case, row, kr):
    """A torch.compile(mode="reduce-overhead") call's CUDA graph captured whole with
    --graph-launch (from a Triton kernel of it)."""
    _graph_launch(case, row, kr, "compile")


@C.inline("range-stall-bench")
def test_range_stall_bench(case, row, kr, app):
    """The capture stall of the 30-kernel --profiler-range of range_streams bench against the
    stalls of capturing its 30 kernels one by one (`record -k bench_step --nth N`, N the
    range's launches): the issue's target is range <= sum. Figures either way."""
    argv = app(["{range_streams}", "bench", "1"])
    w = case.capture(case.path("range.krr"))
    rec = case.run([kr, "record", "--profiler-range", "-o", w, "--force", "--"] + argv, name="rec")
    singles = []
    for i in range(R.BENCH_KERNELS):
        one = case.capture(case.path(f"k{i}.krr"))
        r = case.run([kr, "record", "-k", "bench_step", "--nth", str(R.BENCH_FIRST_IN_RANGE + i), "-o", one,
                      "--force", "--"] + argv, name=f"single-{i}")
        singles.append((r.rc, r.err))
    why, figures = R.stall_checks(rec.rc, rec.err, singles)
    _done(row, why, figures, figures=figures)
