"""The GPU suite's own parts that need no GPU: the case table (every case of
the bash suite (bash_cases.txt) is here, names unique, each with a verdict rule), the verdict functions
(each issue-39 fix fails on the input that the old check let through), the summary table and
the command runner. Run here: python3 -m pytest tests/gpu -m "not gpu"."""

from __future__ import annotations

import importlib
import re
import sys
import time
from pathlib import Path

import pytest

import cases as C
import krsuite as S
from prepared import ROOT, Apps

TEST_MODULES = ("test_record_play", "test_robust", "test_tools", "test_profile")


def bash_case_names() -> set:
    """The case names the bash suite ran (frozen in bash_cases.txt when scripts/gpu-test.sh
    became a wrapper of this package): none may go missing from the table."""
    lines = (Path(__file__).parent / "bash_cases.txt").read_text().splitlines()
    return {l.strip() for l in lines if l.strip() and not l.startswith("#")}


def test_every_bash_case_is_in_the_table():
    bash = bash_case_names()
    assert len(bash) > 60, sorted(bash)  # the parse found the suite
    ours = set(C.all_case_names())
    # "repro" is the phase whose rows are repro:NAME; robust-disk-full-clean is part of
    # robust-disk-full here; profile-tool's `[[ =~ ]]` builds its tool (a pcase too).
    missing = sorted(n for n in bash - {"repro"} if n not in ours)
    assert not missing, f"cases of the bash suite not in the table: {missing}"
    assert any(n.startswith("repro:") for n in ours)


def test_case_names_are_unique():
    names = C.all_case_names()
    dup = sorted({n for n in names if names.count(n) > 1})
    assert not dup, dup


def test_every_case_has_a_verdict_rule():
    for m in TEST_MODULES:
        importlib.import_module(m)
    unregistered = sorted(set(C.INLINE_CASES) - set(C.REGISTERED))
    assert not unregistered, f"inline cases without a test function: {unregistered}"
    for c in C.PROFILE_CASES:
        assert callable(c.check), c.name
    for c in C.CHECK_CASES:
        re.compile(c.stderr)
        assert c.stderr and c.want_rc in (0, 2, 3), c.name
    for c in C.RUN_CASES:
        assert c.regex and c.nth >= 1 and c.argv, c.name
    for c in C.SHARE_CASES:
        assert c.source in C.run_case_names(), c.name
    for m in C.INLINE_CASES.values():
        assert set(m) <= {"mpi", "multigpu", *C.SERIAL_MARKS}, m


def test_known_limitations_have_reasons():
    for group in (C.RUN_CASES, C.CHECK_CASES, C.ENDING_CASES, C.SHARE_CASES, C.PROFILE_CASES):
        for c in group:
            assert isinstance(c.known, str), c.name


def test_every_placeholder_names_an_app():
    apps = Apps(Path("/nonexistent"), "sm_90", "/usr/local/cuda")
    used = set()
    for c in C.RUN_CASES + [C.TORCH_COMPILE]:
        used |= C.placeholders(c.argv)
    for c in C.CHECK_CASES:
        used |= C.placeholders(c.argv) | C.placeholders(c.kargs)
    for c in C.PROFILE_CASES:
        used |= C.placeholders(c.argv) | C.placeholders(c.args)
    for argv in C.SELF_MATCH_CASES.values():
        used |= C.placeholders(argv)
    for p in used - {"apps"}:
        sources, argv = apps.recipe(p)  # KeyError: an unknown app
        assert all(Path(s).is_file() for s in sources), p


def test_the_gpu_cases_carry_the_gpu_marker(request):
    for m in TEST_MODULES:
        mod = importlib.import_module(m)
        marks = getattr(mod, "pytestmark", None)
        assert marks is not None and "gpu" in [x.name for x in ([marks] if not isinstance(marks, list) else marks)], m


# -- verdicts ---------------------------------------------------------------------------------

GOOD_PLAY = {"durations_ns": [1000] * 8, "median_ns": 1000, "address_mode": "original",
             "verify": {"matched": True, "deterministic": True, "reference": "recorded"}}


def good_run(**kw):
    r = {"base_rc": 0, "record_rc": 0, "output_same": True, "has_capture": True, "verify_rc": 0, "play_rc": 0,
         "play": GOOD_PLAY, "relocated": "ok", "ptx": "ok"}
    r.update(kw)
    return r


def test_a_good_run_case_passes_and_each_fault_fails_it():
    assert S.run_case_checks(good_run()) == []
    for bad in (dict(base_rc=1), dict(record_rc=3), dict(output_same=False), dict(has_capture=False), dict(verify_rc=2),
                dict(play_rc=1), dict(play=None), dict(relocated="FAIL"), dict(ptx="FAIL"),
                dict(play={**GOOD_PLAY, "durations_ns": [1] * 7}),
                dict(play={**GOOD_PLAY, "verify": {"matched": False, "deterministic": True}}),
                dict(play={**GOOD_PLAY, "verify": {"matched": False, "deterministic": False}})):
        assert S.run_case_checks(good_run(**bad)), bad


def test_relocate_refusal_is_plays_own_message():
    """Issue 39 item 5: play --relocate says "cannot be moved to other addresses"."""
    msg = "kreplay: error: --relocate: the capture cannot be moved to other addresses: a pointer; replay it without --relocate"
    assert S.relocate_verdict(None, 2, msg) == "refused"
    assert S.relocate_verdict(None, 2, "the capture cannot be relocated: x") == "FAIL"  # the old pattern
    assert S.relocate_verdict(None, 101, msg) == "FAIL"  # a panic that printed it
    assert S.relocate_verdict({"verify": {"matched": True}}, 0, "") == "ok"
    assert S.relocate_verdict({"verify": {"matched": False, "deterministic": False}}, 0, "") == "FAIL"
    assert S.relocate_verdict(None, 0, "") == "FAIL"


def test_ptx_nondeterminism_passes_only_when_the_captured_code_is_nondeterministic():
    """Issue 39 item 5: "nondet" passed whatever the cubin replay said."""
    info = {"modules": [{"kind": "cubin"}, {"kind": "ptx"}]}
    nondet = {"code": "ptx-jit", "verify": {"matched": False, "deterministic": False}}
    assert S.ptx_verdict(info, nondet, play_deterministic=True) == "FAIL"
    assert S.ptx_verdict(info, nondet, play_deterministic=False) == "nondet"
    assert S.ptx_verdict(info, {"code": "ptx-jit", "verify": {"matched": True}}, True) == "ok"
    assert S.ptx_verdict(info, {"code": "cubin", "verify": {"matched": True}}, True) == "FAIL"
    assert S.ptx_verdict(info, None, True) == "FAIL"
    assert S.ptx_verdict({"modules": [{"kind": "cubin"}]}, None, True) == "none"


REFUSED = "kreplay: error: --relocate: the capture cannot be moved to other addresses: x; replay it without --relocate"
RX_OK = "addresses original\nverdict   matched\n"


def test_repro_rows_need_a_real_comparison():
    """Issue 39 item 4: no "-" == "-", no agreeing mismatches, the real refusal messages."""
    reloc = {"verify": {"matched": True, "deterministic": True, "reference": "recorded"}}
    ok = S.repro_checks(GOOD_PLAY, reloc, 0, "", 0, RX_OK, 0, "verdict   matched\n", "")
    assert ok[4] == [] and ok[:4] == ("matched", "matched", "matched", "matched")
    refused = S.repro_checks(GOOD_PLAY, None, 2, REFUSED, 0, RX_OK, 2, "", "repro: the capture cannot be relocated: x\n")
    assert refused[4] == [] and refused[1] == refused[3] == "refused"
    # play --relocate wrote nothing and did not refuse: was "-" == "-", a pass
    assert S.repro_checks(GOOD_PLAY, None, 2, "kreplay: error: other", 0, RX_OK, 0, "", "")[4]
    # the old pattern only
    assert S.repro_checks(GOOD_PLAY, None, 2, "cannot be relocated", 0, RX_OK, 2, "", "cannot be relocated")[4]
    # both sides mismatch
    bad = {**GOOD_PLAY, "verify": {"matched": False, "deterministic": True, "reference": "recorded"}}
    assert S.repro_checks(bad, {"verify": bad["verify"]}, 1, "", 1, "verdict   mismatch\n", 1, "verdict   mismatch\n", "")[4]
    # both sides nondeterministic
    nd = {**GOOD_PLAY, "verify": {"matched": False, "deterministic": False, "reference": "recorded"}}
    assert S.repro_checks(nd, {"verify": nd["verify"]}, 0, "", 0, "verdict   nondeterministic\n", 0,
                          "verdict   nondeterministic\n", "")[4]
    # no play JSON at all
    assert S.repro_checks(None, None, None, "", 0, RX_OK, 0, RX_OK, "")[4]
    # the reproducer disagrees, or crashed after printing its verdict
    assert S.repro_checks(GOOD_PLAY, reloc, 0, "", 0, "verdict   mismatch\n", 0, "verdict   matched\n", "")[4]
    assert S.repro_checks(GOOD_PLAY, reloc, 0, "", 139, RX_OK, 0, "verdict   matched\n", "")[4]
    # a redacted capture: deterministic is the good verdict
    red = {"verify": {"matched": True, "deterministic": True, "reference": "redacted"}}
    assert S.repro_checks(red, red, 0, "", 0, "verdict   deterministic\n", 0, "verdict   deterministic\n", "")[4] == []


LIST_TABLE = ("   count in graph    first  grid             block          kernel\n"
              "       3        0        1  (4096,1,1)       (256,1,1)      saxpy(int, float, float const*, float*)\n")


def test_robust_list_needs_the_table_row():
    """Issue 39 item 2: the app's own "saxpy ..." line passed the old check."""
    base = "saxpy 12.000000\n"
    k = "saxpy(int, float, float const*, float*)"
    assert S.list_output_checks(base, base + LIST_TABLE, k, 3) == []
    assert S.list_output_checks(base, base, k, 3)  # the app's line only: was a pass
    assert S.list_output_checks(base, base + LIST_TABLE.replace("       3 ", "       2 "), k, 3)
    assert S.list_output_checks(base, "saxpy 0.0\n" + LIST_TABLE, k, 3)
    assert S.list_output_checks("", LIST_TABLE, k, 3)


def test_the_tool_case_checks_that_three_passes_agree():
    """Issue 39 item 10."""
    rows = [{"launch_index": i, "durations_ns": [900, 1000, 1010, 1020], "stopped_by_tool": True, "capped": False}
            for i in (1, 2, 3)]
    said = [f"example_tool: saxpy(int, float, float const*, float*) launch {i}: 4 passes, settled at 1.0 us, deterministic"
            for i in (1, 2, 3)]
    assert S.tool_checks(rows, said) == []
    spread = [dict(r, durations_ns=[1000, 1000, 1200, 1000]) for r in rows]
    assert S.tool_checks(spread, said)
    assert S.tool_checks(rows, [s.replace("4 passes", "5 passes") for s in said])
    assert S.tool_checks([dict(r, stopped_by_tool=False, capped=True) for r in rows], said)
    assert S.tool_checks([dict(r, durations_ns=[1000, 1000]) for r in rows], [s.replace("4 p", "2 p") for s in said])


def test_the_python_package_needs_every_gpu_test(tmp_path):
    """Issue 39 item 9: every GPU test skipped passed the old `>= 12 passed`."""
    def junit(name, tests, skipped=0, failures=0):
        p = tmp_path / name
        p.write_text(f'<?xml version="1.0"?><testsuites><testsuite name="pytest" errors="0" failures="{failures}" '
                     f'skipped="{skipped}" tests="{tests}"></testsuite></testsuites>')
        return S.junit_counts(p)

    cpu = junit("cpu.xml", 16)
    assert cpu["passed"] == 16
    assert S.python_package_checks(cpu, junit("gpu.xml", 4)) == []
    assert S.python_package_checks(cpu, junit("gpu-skip.xml", 4, skipped=4))
    assert S.python_package_checks(cpu, junit("gpu-one-skip.xml", 4, skipped=1))
    assert S.python_package_checks(cpu, junit("gpu-none.xml", 0))
    assert S.python_package_checks(junit("cpu-f.xml", 16, failures=1), junit("gpu2.xml", 4))
    assert S.python_package_checks(cpu, None)
    assert S.junit_counts(tmp_path / "missing.xml") is None


def test_two_play_reports_differ_only_outside_their_timing():
    """python-cli-same-report: timing figures never count, every other field does, by name."""
    a = {"kernel": "saxpy", "durations_ns": [5, 6, 7], "min_ns": 5, "median_ns": 6, "max_ns": 7,
         "restore_median_ns": 1, "setup_ms": 3.5, "passes": 3, "address_mode": "original",
         "verify": {"matched": True, "deterministic": True, "mismatched_bytes": 0}}
    timed_otherwise = dict(a, durations_ns=[9, 9, 9], min_ns=9, median_ns=9, max_ns=9, restore_median_ns=2,
                           setup_ms=8.0)
    assert S.play_report_differences(a, timed_otherwise) == []
    assert S.play_report_differences(a, dict(a, durations_ns=[5, 6])) == ["durations_ns (count)"]
    assert S.play_report_differences(a, dict(a, verify=dict(a["verify"], matched=False))) == ["verify.matched"]
    assert S.play_report_differences(a, dict(a, passes=8, kernel="k")) == ["kernel", "passes"]
    assert S.play_report_differences(a, {k: v for k, v in a.items() if k != "setup_ms"}) == ["setup_ms"]
    assert S.play_report_differences(dict(a, metrics={"x": 1.0}), a) == ["metrics"]
    assert S.play_report_differences(a, None) == ["(not a JSON object)"]


def test_other_pure_checks():
    import test_record_play as R
    import test_robust as B
    import test_tools as T
    import test_profile as P

    assert B.check_verdict(3, 3, "a", "a", "no dispatch matched: saxpy", "no dispatch matched.*saxpy") == []
    assert B.check_verdict(0, 3, "a", "a", "no dispatch matched: saxpy", "no dispatch matched.*saxpy")
    assert B.check_verdict(3, 3, "a", "b", "no dispatch matched: saxpy", "no dispatch matched.*saxpy")
    assert T.bench_ms("graph bench: 12.5 ms") == 12.5 and T.bench_ms("") is None
    assert T.ncu_inst("smsp__inst_executed.sum   inst   1,234") == 1234
    listed = {a: [{"demangled": s + "(float*)", "count": cg[0], "in_graphs": cg[1]} for s, cg in want.items() if cg]
              for a, want in T.GRAPH_COUNTS.items()}
    assert T.graph_list_checks(listed) == []
    listed["cond"].append({"demangled": "graph_countdown(int*)", "count": 3, "in_graphs": 3})
    assert T.graph_list_checks(listed)
    assert T.graph_list_checks({})
    assert R.texture_checks({}) and len(R.texture_checks({})) == len(R.TEXTURES)
    assert P.profile_verdict(0, "x\n", "x\n", [], "", lambda *a: []) == []
    assert P.profile_verdict(0, "", "", [], "", lambda *a: [])  # empty output is no proof
    assert P.profile_verdict(1, "x\n", "x\n", [], "", lambda *a: [])
    rows = [{"skipped": None, "durations_ns": [1] * 5, "median_ns": 1, "deterministic": True, "write_set_bytes": 16 << 20,
             "restore_median_ns": 1, "pass_overhead_ns": 1}] * 3
    assert C.check_profile_saxpy(rows, [], rows, "") == []
    assert C.check_profile_saxpy(rows[:2], [], rows, "")
    assert C.check_profile_graph([], [{"skipped": "a graph kernel node"}], [], "") == []
    assert C.check_profile_graph([], [], [], "")
    sel = T.select_checks({"plain": 0, "sc": 0, "li": 0, "none": 3, "quiet": 0, "csv": 0},
                          {"plain": {"recorder": {"match_index": 1}}, "sc-2": {"recorder": {"match_index": 2}},
                           "sc-3": {"recorder": {"match_index": 3}}, "li": {"recorder": {"launch_index": 3}}},
                          1, "no match; try regex:sax; closest kernels: saxpy", True, "",
                          [{"median_ns": "5", "verify_matched": "true"}],
                          [{"name": "_Z5saxpyifPKfPf", "count": "3", "first_launch": "1"}], False)
    assert all(ok for _, ok in sel), sel
    assert P.profile_2ranks_checks({}, "rank 0\nrank 1\n", "rank 0\nrank 1\n")


# -- the table and the runner -------------------------------------------------------------------


def test_the_table_has_every_column_and_counts():
    rows = [{"case": "cuda-saxpy", "kernel": "saxpy" * 20, "regions": 2, "bytes": 100, "original_us": 1.5,
             "median_us": 1.25, "matched": True, "address_mode": "original", "relocated": "ok", "ptx": "none",
             "result": "PASS"},
            {"case": "robust-x", "result": "FAIL", "why": "rc 1\nstderr"},
            {"case": "robust-disk-full", "result": "SKIP: needs root"},
            {"case": "known", "result": "XFAIL"}]
    lines = S.format_table(rows)
    assert lines[0].split()[:3] == ["case", "kernel", "regions"] and "ptx jit" in lines[0]
    assert "cuda-saxpy" in lines[1] and "saxpysaxpy" in lines[1] and "..." in lines[1] and lines[1].endswith("PASS")
    assert "    why: rc 1 / stderr" in lines
    assert S.count_line(rows) == "1 passed, 1 failed, 2 skipped"
    t = S.table_row(rows[0])
    assert set(S.COLUMNS) <= set(t) and t["verified"] == "yes"
    assert S.table_row({"deterministic": False})["verified"] == "nondet"
    assert S.table_row({})["verified"] == "no"


def test_the_runner_keeps_exit_status_output_and_kills_on_timeout(tmp_path):
    r = S.Runner(tmp_path)
    c = r.run(["sh", "-c", "echo out; echo err >&2; exit 3"], name="x")
    assert (c.rc, c.out, c.err) == (3, "out\n", "err\n")
    c = r.run(["sh", "-c", "kill -TERM $$"], name="sig")
    assert c.rc == 143
    t0 = time.monotonic()
    c = r.run(["sh", "-c", "sleep 30 & sleep 30"], name="hang", timeout=1)
    assert c.timed_out and time.monotonic() - t0 < 10
    c = r.run(["/nonexistent/binary"], name="missing")
    assert c.rc == 127 and "cannot start" in c.err
    text = r.report()
    assert "$ sh -c 'echo out; echo err >&2; exit 3'" in text and "exit 3" in text and "timed out" in text
    r.notes.append("a note")
    r.capture(tmp_path / "none.krr")
    assert "(no such file)" in r.report(info=lambda p: "info") and "a note" in r.report()


def test_children_are_found_from_proc():
    import subprocess

    p = subprocess.Popen(["sh", "-c", "sleep 5 & wait"])
    try:
        for _ in range(50):
            kids = S.children_of(p.pid)
            if kids:
                break
            time.sleep(0.05)
        assert kids and all(S.alive(k) for k in kids)
    finally:
        kids = S.children_of(p.pid)
        p.kill()
        p.wait()
        for k in kids:
            subprocess.run(["kill", "-9", str(k)])
    assert not S.alive(p.pid)


def test_tail_marks_a_cut():
    assert S.tail("abc", 5) == "abc"
    assert S.tail("x" * 10, 4) == "[...]xxxx"
    assert S.last_json_line("app\n[1, 2]\n") == [1, 2]
    assert S.last_json_line("app\n") is None


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))


def test_play_tool_verdict_wants_the_tools_own_count_and_stop():
    line = "example_tool: saxpy(int, float, float const*, float*) launch 2: 4 passes, settled at 1.0 us, deterministic"
    ok = {"passes": 4, "durations_ns": [3000, 1000, 1010, 1000],
          "tool": {"path": "/x/libexample_tool.so", "passes": 4, "stopped_by_tool": True, "capped": False}}
    assert C.check_play_tool(ok, line + "\n") == []
    assert C.check_play_tool(ok, line, ok["tool"]["path"]) == []
    assert C.check_play_tool(ok, line, "/elsewhere/other_tool")  # not the library given
    assert C.check_play_tool(ok, "")  # the tool said nothing
    assert C.check_play_tool(ok, line.replace("4 passes", "5 passes"))
    assert C.check_play_tool(dict(ok, tool=dict(ok["tool"], passes=3)), line)
    assert C.check_play_tool(dict(ok, tool=dict(ok["tool"], stopped_by_tool=False, capped=True)), line)
    assert C.check_play_tool(dict(ok, durations_ns=[1000, 1000, 1000, 1300]), line)
    assert C.check_play_tool({k: v for k, v in ok.items() if k != "tool"}, line)


def _range_info():
    step = lambda i, name: {"index": i, "kernel": {"name": f"{name}(int, float const*, float*)"},
                            "grid": [4096, 1, 1], "block": [256, 1, 1], "original_ns": 5000}
    return {"steps": [step(0, "range_first"), step(1, "range_second"), step(2, "range_third")]}


def test_range_launch_verdict_wants_three_steps_a_verified_replay_and_a_refusing_pack():
    play = {"durations_ns": [1000] * 8, "verify": {"matched": True, "deterministic": True}}
    refusal = "kreplay: error: this is a range capture (3 steps): range captures are not supported by `pack` yet"
    good = dict(rec_rc=0, base_out="range checksum 1\n", rec_out="range checksum 1\n", info=_range_info(),
                play_rc=0, play=play, pack_rc=1, pack_err=refusal)
    assert S.range_checks(**good) == []
    two = _range_info()
    two["steps"].pop()
    faults = [dict(rec_rc=3), dict(rec_out="range checksum 2\n"), dict(info=two), dict(info=None),
              dict(play_rc=1), dict(play={**play, "durations_ns": [1000] * 7}),
              dict(play={**play, "verify": {"matched": False, "deterministic": True}}),
              dict(play={**play, "verify": {"matched": True, "deterministic": False}}),
              dict(pack_rc=0, pack_err=""), dict(pack_err="some other failure")]
    for f in faults:
        assert S.range_checks(**{**good, **f}), f


def test_range_refuse_pattern_matches_the_recorders_message():
    case = next(c for c in C.CHECK_CASES if c.name == "range-refuse")
    said = ("kreplay: range capture of launches 1:3 abandoned: cuMemAlloc_v2 was called inside the range "
            "(after 1 steps); range captures cannot hold it; the application continues\n")
    assert re.search(case.stderr, said, re.S)
    assert not re.search(case.stderr, said.replace("cuMemAlloc_v2", "cuMemFree_v2"), re.S)
