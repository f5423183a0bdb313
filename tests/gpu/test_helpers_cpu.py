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

TEST_MODULES = ("test_record_play", "test_robust", "test_tools", "test_profile", "test_range", "test_corpus", "test_trace")


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
                dict(record_panics=["thread '<unnamed>' (630) panicked at library/std/src/thread/local.rs:479:25:"]),
                dict(play={**GOOD_PLAY, "durations_ns": [1] * 7}),
                dict(play={**GOOD_PLAY, "verify": {"matched": False, "deterministic": True}}),
                dict(play={**GOOD_PLAY, "verify": {"matched": False, "deterministic": False}})):
        assert S.run_case_checks(good_run(**bad)), bad


def test_recorder_panics_are_found_in_stderr_and_nothing_else_is():
    err = ("saxpy 1.0\nkreplay: captured saxpy (match 1) -> c.krr\n\n"
           "thread '<unnamed>' (630) panicked at /rustc/x/library/std/src/thread/local.rs:479:25:\n"
           "cannot access a Thread Local Storage value during or after destruction: AccessError\n"
           "kreplay: internal error in the recorder (caught); the application continues\n")
    found = S.recorder_panics(err)
    assert len(found) == 2 and "panicked at" in found[0] and "internal error" in found[1], found
    assert S.recorder_panics("kreplay: captured saxpy (match 1)\nchild ok\n") == []
    assert S.recorder_panics(None) == []


def test_a_cases_record_and_profile_commands_are_searched_for_panics(tmp_path):
    def cmd(argv, err):
        e = tmp_path / f"{len(list(tmp_path.iterdir()))}.err"
        e.write_text(err)
        return S.Cmd(argv=argv, out_path=tmp_path / "none.out", err_path=e)

    bad = "thread '<unnamed>' (7) panicked at src/x.rs:1:1:\n"
    log = [cmd(["/d/kreplay", "record", "-k", "x", "--", "app"], "kreplay: captured x\n"),
           cmd(["/d/kreplay", "profile", "-k", "x", "--", "app"], bad),
           cmd(["/d/kreplay", "play", "c.krr"], bad),
           cmd(["app", "record"], bad)]
    found = S.runner_panics(log)
    assert found == ["thread '<unnamed>' (7) panicked at src/x.rs:1:1:"], found
    assert S.runner_panics(log[:1]) == []


def test_a_command_whose_stderr_is_a_device_reads_as_empty(tmp_path):
    """robust-stderr-full points the application's stderr at /dev/full, which reads as endless
    zeros: the panic search read it whole and the pytest worker died of it on the H200."""
    full = S.Cmd(argv=["/d/kreplay", "record", "-k", "x", "--", "app"], out_path=Path("/dev/null"),
                 err_path=Path("/dev/full"))
    t0 = time.monotonic()
    assert full.err == "" and full.out == ""
    assert S.runner_panics([full]) == []
    assert "/dev/full" not in full.describe()
    assert time.monotonic() - t0 < 5
    real = tmp_path / "a.err"
    real.write_text("kreplay: captured x\n")
    assert S.read(real) == "kreplay: captured x\n" and S.read(tmp_path / "missing") == ""


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
    # Figures show whether the case passed or failed.
    for result in ("PASS", "FAIL"):
        fl = S.format_table([{"case": "range-bench", "result": result, "figures": "median 5 us\nbest 4 us"}])
        assert "    figures: median 5 us / best 4 us" in fl
    assert S.table_row({"figures": "x"})["figures"] == "x" and "figures" not in S.table_row({})
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
              dict(pack_rc=0, pack_err=""), dict(pack_err="some other failure"),
              dict(pack_rc=0, pack_err="", packed_play={"verify": {"matched": False}})]
    for f in faults:
        assert S.range_checks(**{**good, **f}), f
    # A pack that knows ranges: the packed capture must replay matched.
    assert S.range_checks(**{**good, "pack_rc": 0, "pack_err": "", "packed_play": play}) == []


def test_range_refuse_pattern_matches_the_recorders_message():
    case = next(c for c in C.CHECK_CASES if c.name == "range-refuse")
    said = ("kreplay: range capture of launches 1:3 abandoned: cuMemAlloc_v2 was called inside the range "
            "(after 1 steps); range captures cannot hold it; the application continues\n")
    assert re.search(case.stderr, said, re.S)
    assert not re.search(case.stderr, said.replace("cuMemAlloc_v2", "cuMemFree_v2"), re.S)


def test_range_unsupported_patterns_name_the_call():
    """range-unsupported(-alloc): the refusal names the call that was made (issue 32, proof 6)."""
    said = ("kreplay: range capture of profiler-range #1 abandoned: {call} was called inside the range "
            "(after step 4); the application continues\n")
    for name, call, other in (("range-unsupported", "cuLaunchHostFunc", "cuMemAllocAsync"),
                              ("range-unsupported-alloc", "cuMemAllocAsync", "cuLaunchHostFunc")):
        case = next(c for c in C.CHECK_CASES if c.name == name)
        assert case.want_rc == 3 and "{range_streams}" in case.argv
        assert re.search(case.stderr, said.format(call=call), re.S), name
        assert re.search(case.stderr, said.format(call=call + "_ptsz"), re.S), name
        assert not re.search(case.stderr, said.format(call=other), re.S), name
        assert not re.search(case.stderr, said.format(call=call).replace("; the application continues", ""), re.S)


# -- range cases (krrange.py) -------------------------------------------------------------------

import krrange as R  # noqa: E402

S1, S2, EV1, EV2 = 0x10, 0x20, 0xE1, 0xE2
STREAM_OF = {0: S1, 1: S1, 2: S2, 3: S2, 4: S2, 5: S2, 6: S2, 7: S1, 8: S1, 9: S1}
EVENT_OF = {1: EV1, 2: EV1, 6: EV2, 7: EV2}
KERNEL_AT = {0: "streams_produce", 4: "streams_middle", 8: "streams_finish"}


def streams_info(kinds=R.STREAMS_FULL_KINDS, origin="profiler-range #1", launches=None, host_wait=True):
    steps = []
    for i, kind in enumerate(kinds):
        k = KERNEL_AT.get(i) if kind == "kernel" else None
        steps.append({"index": i, "kind": kind, "kernel": {"name": k, "mangled": k} if k else None,
                      "grid": R.STREAMS_GRID if k else None, "block": R.STREAMS_BLOCK if k else None,
                      "bytes": R.STREAMS_BYTES if kind in R.OP_BYTES_KINDS else None, "event": EVENT_OF.get(i),
                      "stream": STREAM_OF.get(i, S1), "original_ns": 5000 if k else None})
    if host_wait:
        steps.append({"index": len(steps), "kind": "host-wait", "kernel": None, "stream": S1})
    return {"steps": steps, "range": {"origin": origin, "launches": list(launches) if launches else None,
                                      "kernel_steps": 3, "streams": 2, "original_ns": 30000, "step_digests": True}}


def range_play(info, passes=8, **kw):
    p = {"durations_ns": [20000] * passes, "median_ns": 20000, "first_divergent_step": None,
         "verify": {"matched": True, "deterministic": True},
         "steps": [{"index": s["index"], "kind": s["kind"], "kernel": s["kernel"],
                    "median_ns": 4000 if s["kind"] == "kernel" else None} for s in info["steps"]]}
    p.update(kw)
    return p


def _edit_step(info, i, **kw):
    import copy

    x = copy.deepcopy(info)
    x["steps"][i].update(kw)
    return x


def _edit_range(info, **kw):
    import copy

    x = copy.deepcopy(info)
    x["range"].update(kw)
    return x


def test_streams_launch_range_is_found_from_list():
    ks = [{"name": n, "demangled": n, "count": 4, "first_launch": f}
          for n, f in zip(R.STREAMS_KERNELS, (1, 2, 3))]
    assert R.streams_launch_range(ks, 2) == (7, 9)
    assert R.streams_launch_range({"kernels": ks, "ranges": []}, 1) == (4, 6)
    import copy

    bad = []
    for i, kw in ((1, {"count": 3}), (2, {"first_launch": 5}), (0, {"name": "other", "demangled": "other"})):
        b = copy.deepcopy(ks)
        b[i].update(kw)
        bad.append(b)
    for b in bad + [ks + [dict(ks[0])]]:
        with pytest.raises(ValueError):
            R.streams_launch_range(b, 2)
    for nth in (0, 4):
        with pytest.raises(ValueError):
            R.streams_launch_range(ks, nth)
    with pytest.raises(ValueError):
        R.streams_launch_range(None, 1)


def test_streams_case_verdict_wants_every_step_kind_stream_and_a_verified_replay():
    info = streams_info()
    good = dict(rec_rc=0, base_out="streams checksum 1\n", rec_out="streams checksum 1\n", info=info, play_rc=0,
                play=range_play(info), kinds=R.STREAMS_FULL_KINDS, origin="profiler-range #1")
    assert R.streams_case_checks(**good) == []
    linfo = streams_info(R.STREAMS_LAUNCH_KINDS, "launch-range 7:9", (7, 9), host_wait=False)
    assert R.streams_case_checks(**{**good, "info": linfo, "play": range_play(linfo), "kinds": R.STREAMS_LAUNCH_KINDS,
                                    "origin": "launch-range 7:9", "launches": (7, 9)}) == []
    no_fill = streams_info(tuple(k for k in R.STREAMS_FULL_KINDS if k != "fill"))
    faults = [
        dict(rec_rc=3), dict(rec_out="streams checksum 2\n"), dict(base_out="", rec_out=""), dict(info=None),
        dict(info=no_fill), dict(kinds=R.STREAMS_LAUNCH_KINDS),
        dict(info=_edit_step(info, 4, kernel={"name": "streams_finish"})),
        dict(info=_edit_step(info, 0, grid=[1, 1, 1])), dict(info=_edit_step(info, 8, original_ns=0)),
        dict(info=_edit_step(info, 3, bytes=4)), dict(info=_edit_step(info, 5, bytes=None)),
        dict(info=_edit_step(info, 1, event=None)), dict(info=_edit_step(info, 2, event=EV2)),
        dict(info=_edit_step(_edit_step(info, 6, event=EV1), 7, event=EV1)),
        dict(info=_edit_step(info, 4, stream=S1)), dict(info=_edit_step(info, 9, stream=S2)),
        dict(info=_edit_range(info, origin="profiler-range #2")), dict(info=_edit_range(info, kernel_steps=2)),
        dict(info=_edit_range(info, streams=1)), dict(info=_edit_range(info, original_ns=None)),
        dict(info=_edit_range(info, step_digests=False)), dict(launches=(7, 9)),
        dict(play_rc=1), dict(play=range_play(info, passes=7)),
        dict(play=range_play(info, verify={"matched": False, "deterministic": True})),
        dict(play=range_play(info, verify={"matched": True, "deterministic": False})),
        dict(play=range_play(info, first_divergent_step=3)), dict(play=range_play(info, steps=[])),
        dict(play={k: v for k, v in range_play(info).items() if k != "first_divergent_step"}),
        dict(play=None),
    ]
    for f in faults:
        assert R.streams_case_checks(**{**good, **f}), f


def test_per_step_times_are_wanted_for_every_kernel_step():
    info = streams_info()
    assert R.per_step_checks(range_play(info)) == []
    p = range_play(info)
    p["steps"][4]["median_ns"] = None
    assert R.per_step_checks(p)
    assert R.per_step_checks(range_play(info, steps=[s for s in p["steps"] if s["kind"] != "kernel"]))
    assert R.per_step_checks(None)


def test_the_module_variant_must_match_and_be_slower():
    ok = {"median_ns": 30000, "verify": {"matched": True, "deterministic": True}}
    slow = {"median_ns": 300000, "verify": {"matched": True, "deterministic": True}}
    assert R.module_checks(ok, 0, slow) == []
    for base, rc, var in ((ok, 2, slow), (ok, 0, {**slow, "verify": {"matched": False, "deterministic": True}}),
                          (ok, 0, {**slow, "verify": {"matched": True, "deterministic": False}}),
                          (ok, 0, {**slow, "median_ns": 31000}), (ok, 0, None),
                          ({**ok, "verify": {"matched": False}}, 0, slow), ({}, 0, slow)):
        assert R.module_checks(base, rc, var), (base, rc, var)


def test_the_divergent_variant_is_named_by_its_step():
    info = streams_info()
    middle = R.middle_step(info)
    assert middle == R.STREAMS_MIDDLE_STEP == 4
    assert R.middle_step(_edit_step(info, 8, kernel={"name": "streams_middle"})) is None
    bad = {"first_divergent_step": 4, "verify": {"matched": False, "deterministic": True}}
    assert R.divergent_checks(1, bad, middle) == []
    # Inside verify is accepted too.
    assert R.divergent_checks(1, {"verify": {**bad["verify"], "first_divergent_step": 4}}, middle) == []
    for rc, play, m in ((0, bad, middle), (1, {**bad, "first_divergent_step": 5}, middle),
                        (1, {**bad, "first_divergent_step": None}, middle), (1, bad, None),
                        (1, {**bad, "verify": {"matched": True, "deterministic": True}}, middle),
                        (1, {**bad, "verify": {"matched": False, "deterministic": False}}, middle), (1, None, middle)):
        assert R.divergent_checks(rc, play, m), (rc, play, m)
    # A relocated replay cannot name the step: the player's reason is in the failure.
    relocated = {**bad, "first_divergent_step": None, "divergence_note": "the replay was relocated"}
    assert any("the replay was relocated" in w for w in R.divergent_checks(1, relocated, middle))


def torch_info(kernels=15, **rng):
    steps = [{"index": i, "kind": "kernel", "kernel": {"name": f"k{i}", "mangled": f"_Z2k{i}v"}, "stream": 0,
              "original_ns": 20000} for i in range(kernels)]
    r = {"origin": "nvtx-range layer.2 #2", "launches": [300, 314], "kernel_steps": kernels, "streams": 1,
         "original_ns": 400000, "step_digests": True}
    r.update(rng)
    return {"steps": steps, "range": r}


def test_the_torch_layer_verdict_checks_time_both_ways_and_shows_figures():
    info = torch_info()
    play = range_play(info, median_ns=399000)
    flush = {"durations_ns": [410000] + [400000] * 7, "median_ns": 401000}
    good = dict(rec_rc=0, base_out="torch block output bits 5\n", rec_out="torch block output bits 5\n", info=info,
                play_rc=0, play=play, flush=flush)
    why, fig = R.nvtx_torch_checks(**good)
    assert why == [] and "first pass 410.0 us (+2.5 %)" in fig and "median 401.0 us" in fig and "400.0 us" in fig
    faults = [dict(rec_rc=3), dict(rec_out="torch block output bits 6\n"), dict(info=torch_info(5)),
              dict(info=torch_info(origin="nvtx-range layer.2 #1")), dict(info=torch_info(streams=2)),
              dict(info=torch_info(original_ns=None)), dict(play_rc=1),
              dict(play={**play, "verify": {"matched": False, "deterministic": True}}),
              dict(flush={**flush, "durations_ns": [430000] + [400000] * 7}), dict(flush={**flush, "median_ns": 370000}),
              dict(flush=None)]
    for f in faults:
        why, fig = R.nvtx_torch_checks(**{**good, **f})
        assert why and "in-app" in fig, f
    assert R.within(105, 100) and not R.within(106, 100) and not R.within(94, 100) and not R.within(100, 0)


def test_the_save_step_kernel_runs_once_per_layer():
    info = torch_info(4)
    for i, m in enumerate(("A", "B", "A", "C")):
        info["steps"][i]["kernel"]["mangled"] = m
    listed = [{"name": "A", "count": 24}, {"name": "B", "count": 13}, {"name": "C", "count": 12}]
    assert R.save_step_choice(info, listed) == (3, "C", 7)
    assert R.save_step_choice(info, {"kernels": listed}) == (3, "C", 7)
    assert R.save_step_choice(info, [{"name": "C", "count": 11}]) is None
    assert R.save_step_choice(None, listed) is None
    # Of two candidates, the one with pointer parameters (whose memory can be compared).
    listed.append({"name": "B", "count": 12})
    info["steps"][1]["kernel"]["name"] = "void f(float const*, float*)"
    info["steps"][3]["kernel"]["name"] = "void g(Params)"
    assert R.save_step_choice(info, listed) == (1, "B", 7)


def single_info(ptr="0000000070000000", scalar="0000803f", address=0x70000000, offset=0x100, size=0x1000):
    return {"kernel": {"name": "k(float*, float)", "mangled": "_Z1kPff"},
            "launch": {"grid": [8, 1, 1], "block": [128, 1, 1], "dynamic_shared_bytes": 0},
            "params": [{"size": 8, "pointer": True, "value_hex": ptr, "region": 0, "region_offset": offset},
                       {"size": 4, "pointer": False, "value_hex": scalar},
                       {"size": 8, "pointer": True, "value_hex": "0" * 16, "region": None}],
            "regions": [{"id": 0, "address": address, "size": size}]}


def test_argument_memory_is_paired_by_argument_and_compared_from_the_extracted_files(tmp_path):
    saved, direct = single_info(), single_info(address=0x80000000, offset=0x200, size=0x2000)
    windows, why = R.param_windows(saved, direct)
    assert why == [] and windows == [{"param": 0, "a": (0, 0x70000000, 0x100), "b": (0, 0x80000000, 0x200),
                                      "length": 0xF00}]
    one_sided = single_info()
    one_sided["params"][2]["region"] = 0
    assert R.param_windows(saved, one_sided)[1]
    assert R.param_windows({"params": []}, {"params": []})[1]
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    data = bytes(range(256)) * 32  # 8 KiB
    (a / "region-0-0x70000000.bin").write_bytes(data[:0x1000])
    (a / "region-0-0x70000000.post.bin").write_bytes(b"\1" * 0x1000)
    (b / "region-0-0x80000000.bin").write_bytes(b"\0" * 0x100 + data[:0x1F00])
    (b / "region-0-0x80000000.post.bin").write_bytes(b"\0" * 0x100 + b"\1" * 0x1F00)
    assert R.compare_windows(windows, a, b) == [{"param": 0, "pre_same": True, "post_same": True}]
    (b / "region-0-0x80000000.post.bin").write_bytes(b"\0" * 0x100 + b"\2" * 0x1F00)
    assert R.compare_windows(windows, a, b) == [{"param": 0, "pre_same": True, "post_same": False}]
    (b / "region-0-0x80000000.post.bin").unlink()  # no post file: the kernel did not write there
    assert R.compare_windows(windows, a, b)[0]["post_same"] is False
    (a / "region-0-0x70000000.post.bin").unlink()
    assert R.compare_windows(windows, a, b) == [{"param": 0, "pre_same": True, "post_same": True}]
    assert R.compare_windows(windows, a, tmp_path / "missing")[0] == {"param": 0, "pre_same": False,
                                                                       "post_same": False}


def test_a_saved_step_equals_the_direct_capture_by_identity_replay_and_memory():
    matched = {"verify": {"matched": True, "deterministic": True}}
    same = [{"param": 0, "pre_same": True, "post_same": True}]
    good = dict(save_rc=0, saved_info=single_info(), saved_play=matched, direct_rc=0,
                direct_info=single_info(ptr="0000000080000000"), direct_play=matched, compared=same, windows_why=[])
    assert R.save_step_checks(**good) == []
    other_launch = single_info()
    other_launch["launch"] = {**other_launch["launch"], "grid": [16, 1, 1]}
    faults = [dict(save_rc=2), dict(direct_rc=3), dict(saved_info=None), dict(direct_info=None),
              dict(saved_info={**single_info(), "steps": [{"index": 0}]}), dict(direct_info=other_launch),
              dict(direct_info=single_info(scalar="00000040")),
              dict(direct_info={**single_info(), "kernel": {"mangled": "_Z1qPff"}}),
              dict(saved_play={"verify": {"matched": False, "deterministic": True}}), dict(direct_play=None),
              dict(compared=[{"param": 0, "pre_same": True, "post_same": False}]),
              dict(compared=[{"param": 0, "pre_same": False, "post_same": True}]), dict(compared=[]),
              dict(windows_why=["argument 2 points into a captured region in one capture only"])]
    for f in faults:
        assert R.save_step_checks(**{**good, **f}), f


BENCH_OUT = ("bench checksum 12.5\n"
             "figures in-app range: {app} us (30 kernels, events around the range, one run)\n"
             "figures baseline: 80.00 us best of 20 rounds (30 kernels launched back to back from a C++ loop, 2.667 us per kernel)\n")


def bench_info(kernels=30, original_ns=90000):
    return {"steps": [{"index": i, "kind": "kernel", "kernel": {"name": "bench_step"}, "stream": 5}
                      for i in range(kernels)],
            "range": {"origin": "profiler-range #1", "original_ns": original_ns}}


def test_the_bench_verdict_wants_time_within_5_percent_and_2_us_per_step():
    assert R.bench_figures(BENCH_OUT.format(app="91.50")) == {"in-app range": 91.5, "baseline": 80.0}
    assert R.stable_output(BENCH_OUT.format(app="1")) == "bench checksum 12.5\n"
    info = bench_info()
    play = range_play(info, passes=20, median_ns=90500, durations_ns=[85000] + [90500] * 19)
    good = dict(base_out=BENCH_OUT.format(app="91.50"), rec_rc=0, rec_out=BENCH_OUT.format(app="140.00"), info=info,
                play_rc=0, play=play, passes=20)
    why, fig = R.bench_checks(**good)
    assert why == [], why
    assert "+0.167 us per step" in fig and "baseline C++ loop 80.0 us" in fig and "median 90.5 us" in fig
    faults = [dict(rec_rc=3), dict(rec_out="bench checksum 12.6\n"), dict(base_out="bench checksum 12.5\n"),
              dict(info=bench_info(29)), dict(info=bench_info(original_ns=80000)),
              dict(play={**play, "median_ns": 100000}),
              # in time with the recording, but 2.33 us per step slower than the C++ loop
              dict(info=bench_info(original_ns=150000), play={**play, "median_ns": 150000, "durations_ns": [150000] * 20}),
              dict(play={**play, "verify": {"matched": False, "deterministic": True}}), dict(passes=8), dict(play=None)]
    for f in faults:
        why, fig = R.bench_checks(**{**good, **f})
        assert why and "per step" in fig, f


def test_a_launch_bound_app_lets_the_replay_be_faster_never_slower():
    # Catches: the session-24 H100 host's failure (replay 102.3 us against in-app 111.4, the
    # app's own loop of the same launches 124.3 us: its launches set its time) judged as a
    # replay defect; and the allowance reaching a GPU-bound app, or a slower replay.
    assert R.launch_bound(124.26, 101700) and not R.launch_bound(80.0, 85000)
    assert not R.launch_bound(None, 101700) and not R.launch_bound(124.26, 0)
    assert not R.launch_bound(106.0, 101700), "within 5 %: not launch-bound"
    info = bench_info(original_ns=111400)
    out = BENCH_OUT.format(app="157.06").replace("80.00 us", "124.26 us")
    play = range_play(info, passes=20, median_ns=102300, durations_ns=[101700] + [102300] * 19)
    why, fig = R.bench_checks(out, 0, out, info, 0, play, 20)
    assert why == [] and "launches, not the GPU" in fig, (why, fig)
    slower = {**play, "median_ns": 117500, "durations_ns": [101700] + [117500] * 19}
    assert R.bench_checks(out, 0, out, info, 0, slower, 20)[0], "5.5 % slower, launch-bound or not"
    gpu_bound = BENCH_OUT.format(app="157.06").replace("80.00 us", "100.00 us")
    why, fig = R.bench_checks(gpu_bound, 0, gpu_bound, info, 0, play, 20)
    assert why and "launches, not the GPU" not in fig, "an app as fast as the replay: both sides judged"


def test_the_bench_is_judged_on_the_round_of_median_ratio():
    # Catches: the first round taken (one clock state decides), the best one taken (a lucky
    # pairing passes), or a round without figures treated as perfect.
    assert R.median_round([(100, 94), (100, 99), (100, 104)]) == 1
    assert R.median_round([(100, 110), (200, 190), (100, 101)]) == 2
    assert R.median_round([(100, 100), (0, 100), (100, 0)]) == 1, "missing figures are the worst"
    assert R.median_round([(100, 100)]) == 0
    assert R.median_round([]) is None


def range_metrics_play(info):
    """A good `play --metrics --json` of streams_info(): values per kernel step, the sums."""
    import copy

    play = copy.deepcopy(range_play(info, passes=2))
    per = {"sm__cycles_elapsed.avg": 1000.0, "dram__bytes_read.sum": 4194304.0, "sm__cycles_elapsed.max": 1200.0}
    for s in play["steps"]:
        if s["kind"] == "kernel":
            s["metrics"] = dict(per)
    n = sum(s["kind"] == "kernel" for s in play["steps"])
    play["range_metrics"] = {k: per[k] * n for k in R.RANGE_METRICS_ADDITIVE}
    return play


def test_range_metrics_need_every_kernel_step_and_the_additive_sums():
    import copy

    info = streams_info()
    kernels = sum(k == "kernel" for k in R.STREAMS_FULL_KINDS)
    assert kernels == 3
    good = range_metrics_play(info)
    assert R.range_metrics_checks(0, good, info, kernels) == []
    # DRAM bytes may be 0 (L2 held the data); the cycles may not.
    zero = copy.deepcopy(good)
    for s in zero["steps"]:
        if s["kind"] == "kernel":
            s["metrics"]["dram__bytes_read.sum"] = 0
    zero["range_metrics"]["dram__bytes_read.sum"] = 0
    assert R.range_metrics_checks(0, zero, info, kernels) == []

    def fault(edit):
        p = copy.deepcopy(good)
        edit(p)
        return p

    kernel_at = [i for i, s in enumerate(good["steps"]) if s["kind"] == "kernel"]
    op_at = next(i for i, s in enumerate(good["steps"]) if s["kind"] != "kernel")
    faults = [
        fault(lambda p: p["steps"][kernel_at[1]].pop("metrics")),
        fault(lambda p: p["steps"][kernel_at[2]]["metrics"].pop("sm__cycles_elapsed.max")),
        fault(lambda p: p["steps"][kernel_at[0]]["metrics"].update({"sm__cycles_elapsed.avg": 0})),
        fault(lambda p: p["steps"][kernel_at[0]]["metrics"].update({"dram__bytes_read.sum": None})),
        fault(lambda p: p["steps"][op_at].update({"metrics": {"sm__cycles_elapsed.avg": 1.0}})),
        fault(lambda p: p.pop("range_metrics")),
        fault(lambda p: p["range_metrics"].pop("dram__bytes_read.sum")),
        fault(lambda p: p["range_metrics"].update({"sm__cycles_elapsed.avg": 1000.0})),
        fault(lambda p: p["range_metrics"].update({"sm__cycles_elapsed.max": 3600.0})),
        fault(lambda p: p.update({"steps": p["steps"][:kernel_at[2]]})),
        None,
    ]
    for f in faults:
        assert R.range_metrics_checks(0, f, info, kernels), f
    assert R.range_metrics_checks(1, good, info, kernels)
    assert R.range_metrics_checks(0, good, info, kernels + 1)


def test_every_range_case_is_registered_with_its_app():
    import test_range  # noqa: F401

    for name in ("range-streams-launch", "range-streams-profiler", "range-streams-nvtx", "range-nvtx-torch",
                 "range-module", "range-divergent", "range-save-step", "range-bench", "range-metrics"):
        assert name in C.REGISTERED and name in C.all_case_names(), name
    assert "counters" in C.INLINE_CASES["range-metrics"]
    assert {"timed"} <= set(C.INLINE_CASES["range-nvtx-torch"]) and {"bench"} <= set(C.INLINE_CASES["range-bench"])
    apps = Apps(Path("/nonexistent"), "sm_90", "/usr/local/cuda")
    for app_name in ("range_streams", "range_streams_slow", "range_streams_divergent"):
        sources, argv = apps.recipe(app_name)
        assert all(Path(s).is_file() for s in sources), app_name
    assert (ROOT / "testdata/apps/torch_block_app.py").is_file()
    for kargs, argv in C.RANGE_CAPTURES.values():
        assert C.placeholders(argv) <= {"range_streams"} and kargs


# -- record -k K --graph-launch (krrange.graph_launch_*) ------------------------------------------

GELU = "_ZN2at6native29vectorized_elementwise_kernelILi4ENS0_GeluE"


def graph_launch_info(kernels=(GELU, "_Zmul", "_Zadd"), ops=(), origin="graph-launch vectorized_elementwise_kernel #3 "
                      "(graph launch 2)", stream=0x51):
    steps = [{"index": i, "kind": "kernel", "kernel": {"name": k, "mangled": k}, "stream": stream, "original_ns": 3000}
             for i, k in enumerate(kernels)]
    steps += [{"index": len(steps) + i, "kind": k, "kernel": None, "stream": stream, "bytes": 64}
              for i, k in enumerate(ops)]
    return {"steps": steps, "range": {"origin": origin, "launches": [20, 19 + len(kernels)],
                                      "kernel_steps": len(kernels), "streams": 1, "original_ns": 9000,
                                      "step_digests": True}}


def test_the_graph_launch_kernel_is_a_graph_kernel_at_its_last_execution():
    listed = [{"name": "_Zeager_gelu", "demangled": "gelu_eager", "count": 9, "in_graphs": 0},
              {"name": GELU, "demangled": "void at::native::vectorized_elementwise_kernel<4, at::native::Gelu>", "count": 4,
               "in_graphs": 3},
              {"name": "_Zother", "demangled": "other", "count": 40, "in_graphs": 40}]
    assert R.graph_launch_choice(listed, R.GRAPH_LAUNCH_KERNEL["cudagraph"]) == (GELU, 4)
    assert R.graph_launch_choice({"kernels": listed}, "GELU") == (GELU, 4)
    assert R.graph_launch_choice(listed, "triton_") is None
    assert R.graph_launch_choice(None, "gelu") is None


def test_the_graph_launch_verdict_wants_the_whole_graph_replayed_bit_exact():
    info = graph_launch_info(ops=("fill",))
    good = dict(rec_rc=0, base_out="cudagraph 3 replays 1.5\n", rec_out="cudagraph 3 replays 1.5\n", info=info,
                play_rc=0, play=range_play(info), mangled=GELU)
    assert R.graph_launch_checks(**good) == []
    one = graph_launch_info(kernels=(GELU,))
    faults = [dict(rec_rc=3), dict(rec_out="cudagraph 3 replays 1.6\n"), dict(base_out="", rec_out=""),
              dict(info=one, play=range_play(one)),
              dict(mangled="_Zsomething_else"),
              dict(info=graph_launch_info(ops=("event-record",)), play=range_play(graph_launch_info(ops=("event-record",)))),
              dict(info=graph_launch_info(origin="launch-range 3:5"), play=range_play(graph_launch_info())),
              dict(info=_edit_step(info, 1, stream=0x99), play=range_play(_edit_step(info, 1, stream=0x99))),
              dict(info=_edit_range(info, kernel_steps=2), play=range_play(info)),
              dict(info=_edit_range(info, step_digests=False), play=range_play(info)),
              dict(play={**range_play(info), "verify": {"matched": False, "deterministic": True}}),
              dict(play=range_play(info, durations_ns=[1] * 7)), dict(play_rc=1), dict(play=None)]
    for f in faults:
        assert R.graph_launch_checks(**{**good, **f}), f


def test_graph_launch_check_cases_match_the_recorders_messages():
    host = next(c for c in C.CHECK_CASES if c.name == "range-graph-launch-host")
    said = ("kreplay: capture of the graph launch holding graph_consume (match 2, graph launch 1) failed: the graph "
            "node cannot be captured: node 0 of the graph is a host function node; --graph-launch captures kernel, "
            "memset and 1D memcpy nodes; the application continues\n")
    assert host.want_rc == 3 and "--graph-launch" in host.kargs and re.search(host.stderr, said, re.S)
    assert not re.search(host.stderr, said.replace("host function", "event record"), re.S)
    eager = next(c for c in C.CHECK_CASES if c.name == "range-graph-launch-eager")
    said = ("kreplay: capture of vectorized_elementwise_kernel (match 1, launch 5) not taken: that match was not inside "
            "a graph launch (--graph-launch needs a kernel that runs in a CUDA graph); the application continues\n")
    assert eager.want_rc == 3 and re.search(eager.stderr, said, re.S)
    assert not re.search(eager.stderr, said.replace("match 1", "match 2"), re.S)


def test_the_graph_launch_cases_are_registered_with_their_app():
    import test_range  # noqa: F401

    for name in ("range-graph-launch", "range-graph-launch-compile"):
        assert name in C.REGISTERED and name in C.all_case_names(), name
    app = (ROOT / "testdata/apps/torch_graph_app.py").read_text()
    assert 'mode == "cudagraph"' in app and 'mode="reduce-overhead"' in app


def test_range_stall_verdict_wants_the_range_at_most_the_sum_of_its_kernels():
    line = "kreplay: captured bench_step (match 1) -> r.krr: 2 regions, stalled the app {} ms, 9 ms in all\n"
    singles = [(0, line.format(3.0))] * R.BENCH_KERNELS
    why, fig = R.stall_checks(0, line.format(40.0), singles)
    assert why == [] and "40.0 ms" in fig and "90.0 ms in all" in fig
    assert R.stall_checks(0, line.format(95.0), singles)[0]
    assert R.stall_checks(3, line.format(40.0), singles)[0]
    assert R.stall_checks(0, line.format(40.0), singles[:-1])[0]
    assert R.stall_checks(0, line.format(40.0), singles[:-1] + [(1, "")])[0]
    assert R.stall_ms("no figure") is None


def test_farm_play_verdict_wants_every_capture_matched_once_and_states_the_overhead():
    import krfarm as F
    import test_tools  # noqa: F401

    assert "farm-play" in C.REGISTERED and "timed" in C.INLINE_CASES["farm-play"]
    files = ["/t/a.krr", "/t/b.krr"]
    rec = lambda f, v="matched": {"file": f, "verdict": v}  # noqa: E731
    lone = {"/t/a.krr": 0.5, "/t/b.krr": 0.5}
    why, fig = F.farm_checks(0, [rec("/t/a.krr"), rec("/t/b.krr")], files, 1.05, lone)
    assert why == [] and "+5.0 %" in fig and "525 ms per capture" in fig and "target" not in fig
    assert "over the 10 % target" in F.farm_checks(0, [rec("/t/a.krr"), rec("/t/b.krr")], files, 1.5, lone)[1]
    faults = [dict(rc=2), dict(records=[rec("/t/a.krr")]), dict(records=[rec("/t/a.krr"), rec("/t/b.krr", "error")]),
              dict(records=[rec("/t/a.krr"), rec("/t/a.krr")]), dict(records=[rec("/t/a.krr"), None])]
    for f in faults:
        args = {**dict(rc=0, records=[rec("/t/a.krr"), rec("/t/b.krr")], files=files, farm_s=1.0, lone_s=lone), **f}
        assert F.farm_checks(**args)[0], f
    assert F.read_lines('{"a": 1}\n\nnot json\n') == [{"a": 1}, None]


def test_farm_report_verdict_wants_a_row_per_capture_and_a_point_per_timed_one():
    import krfarm as F

    records = [{"file": "a.krr", "median_us": 3.0}, {"file": "b.krr", "median_us": None}]
    page = ('<svg><circle/><circle/></svg><table id="captures"><tr><th>file</th></tr>'
            '<tr class="capture"><td>a</td></tr><tr class="capture bad"><td>b</td></tr></table>')
    assert F.report_checks(page, records) == []
    assert F.report_checks("", records) == ["no --html report was written"]
    assert F.report_checks(page.replace('<tr class="capture bad">', "<tr>"), records)
    assert F.report_checks(page.replace("<circle/>", ""), records)
    assert F.report_checks(page + '<img src="https://x/y.png">', records)
    assert F.report_checks(page + "<svg></svg>", records)


def test_farm_devices_and_no_timing_verdicts_want_a_refusal_and_untimed_records():
    import krfarm as F
    import test_tools  # noqa: F401

    assert "farm-devices-no-timing" in C.REGISTERED
    err = "kreplay: error: --devices 1: there is no device 1: this process sees 1 GPU (ordinal 0) through CUDA_VISIBLE_DEVICES=0"
    assert F.devices_checks(2, err, "") == []
    assert F.devices_checks(0, err, "")
    assert F.devices_checks(2, "kreplay: error: something else", "")
    assert F.devices_checks(2, err, '{"file": "a.krr"}\n')
    rec = lambda f, **k: {"file": f"/t/{f}", "verdict": "matched", "median_us": 4.5,  # noqa: E731
                          "spread_pct": None, "key": f, **k}
    files = ["/t/a.krr", "/t/b.krr"]
    assert F.no_timing_checks(0, [rec("a.krr"), rec("b.krr", median_us=None)], files) == []
    for bad in ([rec("a.krr"), rec("b.krr", median_us=0.0)], [rec("a.krr"), rec("b.krr", spread_pct=1.0)], [rec("a.krr"), rec("b.krr", key=None)],
                [rec("a.krr"), rec("b.krr", verdict="error")], [rec("a.krr")]):
        assert F.no_timing_checks(0, bad, files), bad
    assert F.no_timing_checks(2, [rec("a.krr"), rec("b.krr")], files)


def test_the_chunk_kernels_binary_must_run_all_its_gpu_tests():
    # The count is the file's: a GPU test added there failed chunk-kernels on the H200 while
    # every test passed (the constant still said 4).
    source = (ROOT / "cuda" / "tests" / "chunks_gpu.rs").read_text()
    assert source.count("#[test]") == source.count("#[ignore") == S.CHUNK_GPU_TESTS
    n = S.CHUNK_GPU_TESTS
    good = f"running {n} tests\n" + "test a ... ok\n" * n + f"\ntest result: ok. {n} passed; 0 failed; 0 ignored; 0 measured"
    assert S.rust_tests_ran(0, good)
    assert not S.rust_tests_ran(1, good)
    assert not S.rust_tests_ran(0, good.replace(f"{n} passed", f"{n - 1} passed"))
    assert not S.rust_tests_ran(0, good.replace("0 ignored", "1 ignored"))
    assert not S.rust_tests_ran(0, good + "\nskipped: no GPU")
    assert not S.rust_tests_ran(0, "test result: FAILED. 1 passed; 1 failed; 0 ignored")


def test_table_verdict_wants_the_check_enough_answers_and_no_disagreement():
    line = ("kreplay: walk: 2002 regions in 3.1 ms: 2002 answered by the table (0 of them answered otherwise "
            "by the driver); 1 lookups 0.0 ms (answered in 1.0 ms); 2002 regions scanned 0.5 ms; the rest 0.4 ms; "
            "3 minor page faults\n")
    assert S.table_checks("noise\n" + line, 2000) == []
    assert S.table_checks(line * 2, 4000) == []
    assert S.table_checks("", 1) == ["no walk line on stderr (KREPLAY_DEBUG_STALL=1)"]
    few = S.table_checks(line, 2003)
    assert len(few) == 1 and "2002 words, fewer than 2003" in few[0]
    bad = S.table_checks(line.replace("(0 of them", "(2 of them"), 1)
    assert len(bad) == 1 and "answered 2 of the table's 2002" in bad[0]
    unchecked = S.table_checks(line.replace(" (0 of them answered otherwise by the driver)", ""), 1)
    assert unchecked == ["a walk line without the driver's check (KREPLAY_DEBUG_TABLE=check)"]
    off = S.table_checks(line.replace("2002 answered by the table (0 of them answered otherwise by the driver)",
                                      "0 answered by the table (off)"), 1)
    assert any("fewer than 1" in w for w in off)


def test_table_check_case_is_inline_and_its_run_cases_exist():
    assert "table-check" in C.INLINE_CASES
    names = {c.name for c in C.RUN_CASES}
    import test_tools
    assert all(n in names and k >= 1 for n, k in test_tools.TABLE_CHECK_CASES)


def test_graph_bench_verdict_judges_the_recorder_over_cuptis_floor_and_against_before():
    assert "graph-bench" in C.INLINE_CASES and "bench" in C.INLINE_CASES["graph-bench"]
    # Session 22's H100 figures: CUPTI alone +2.71 %, the recorder's own +1.78 %.
    why, txt = S.graph_bench_checks(238.503, 249.203, 244.969)
    assert why == [] and "+4.49 %" in txt and "+1.78 %" in txt and "ms" in txt
    assert S.graph_bench_checks(238.5, 252.0, 244.9)[0], "the recorder's own +2.9 %"
    assert S.graph_bench_checks(238.5, 240.0, 239.0)[0] == []
    assert S.graph_bench_checks(None, 240.0, 239.0)[0] and S.graph_bench_checks(238.5, None, 239.0)[0]
    assert S.graph_bench_checks(238.5, 240.0, None)[0]
    # Against the library before: within 1 % of the plain run, not more.
    why, txt = S.graph_bench_checks(238.5, 246.0, 244.9, old=244.0)
    assert why == [] and "before" in txt and "+0.84 %" in txt
    assert S.graph_bench_checks(238.5, 247.0, 244.9, old=244.0)[0], "+1.26 % slower than before"


def test_capture_times_verdict_wants_every_case_measured_and_none_much_slower():
    assert "capture-times-bench" in C.INLINE_CASES and "bench" in C.INLINE_CASES["capture-times-bench"]
    out = '{"captures": [{"match_index": 2, "stall_ms": 9.0}, {"match_index": 1, "stall_ms": 3.5}]}'
    assert S.first_stall_ms("app output\n" + out) == 3.5
    assert S.first_stall_ms("no json") is None and S.first_stall_ms('{"captures": []}') is None
    good = [("a", 3.0, 3.1), ("b", 10.0, 9.8)]
    why, lines = S.capture_time_checks(good)
    assert why == [] and "all cases" in lines[-1] and "ms" in lines[0]
    assert S.capture_time_checks([("a", 3.0, 1.0)])[0], "over 1.5 x + 2 ms"
    assert S.capture_time_checks([("a", None, 1.0)])[0] and S.capture_time_checks([("a", 1.0, None)])[0]
    assert S.capture_time_checks([])[0]
    # Each case within its slack, but all of them together more than 5 % slower.
    assert S.capture_time_checks([(str(i), 10.5, 9.0) for i in range(5)])[0]


def test_the_suites_memory_option_is_added_only_where_a_case_names_none(monkeypatch):
    import prepared as P
    monkeypatch.delenv(P.SUITE_MEMORY, raising=False)
    assert P.suite_memory(("--foo",)) == ["--foo"] and P.suite_memory_tag() == ""
    monkeypatch.setenv(P.SUITE_MEMORY, "touched")
    assert P.suite_memory(()) == ["--memory", "touched"]
    assert P.suite_memory(("--memory", "all")) == ["--memory", "all"]
    assert P.suite_memory_tag() == "-touched"


def test_the_streams_range_is_found_through_the_listing_or_said_why_not():
    import krrange as R

    class Ran:
        def __init__(self, out, rc=0):
            self.out, self.rc = out, rc

    seen = []

    def run(cmd, name):
        seen.append((cmd, name))
        return Ran("not json\n", rc=3)

    found, why = R.listed_streams_range(run, "kreplay", ["./app"], name="ls")
    assert found is None and "list (exit 3)" in why
    assert seen == [(["kreplay", "list", "--json", "--", "./app"], "ls")]


def test_profile_touched_verdict_fails_what_a_restore_by_chunks_or_a_missed_page_gives():
    """Issue 35's profile proof: the verdict passes pages restored deterministically, and fails
    a write set by chunks, a lost page (not deterministic), a changed output, a counter lost."""
    def rows(write_set, chunk, det=True, passes=5, metrics=None):
        r = dict(write_set_bytes=write_set, restore_chunk_bytes=chunk, deterministic=det,
                 durations_ns=[1000] * passes, metrics=metrics or [], metrics_error=None)
        return [dict(r) for _ in range(3)]

    ok = ("touched", 0, "sparse 1\n", rows(C.SPARSE_WRITTEN, 4096), C.SPARSE_WRITTEN, 4096, ())
    assert C.profile_touched_verdict("sparse 1\n", [ok]) == []
    by_chunks = ok[:3] + (rows(C.SPARSE_BUFFER, 4 << 20), C.SPARSE_WRITTEN, 4096, ())
    assert any("write set" in w for w in C.profile_touched_verdict("sparse 1\n", [by_chunks]))
    lost = ok[:3] + (rows(C.SPARSE_WRITTEN, 4096, det=False), C.SPARSE_WRITTEN, 4096, ())
    assert any("not deterministic" in w for w in C.profile_touched_verdict("sparse 1\n", [lost]))
    assert any("output differs" in w for w in C.profile_touched_verdict("sparse 2\n", [ok]))
    assert any("printed nothing" in w for w in C.profile_touched_verdict("", [ok[:2] + ("",) + ok[3:]]))
    m = ("smsp__warps_launched.sum",)
    counted = rows(C.SPARSE_WRITTEN, 4096, metrics=[dict(name=m[0], value=256)])
    assert C.profile_touched_verdict("s\n", [("t", 0, "s\n", counted, C.SPARSE_WRITTEN, 4096, m)]) == []
    uncounted = rows(C.SPARSE_WRITTEN, 4096)
    one_pass = rows(C.SPARSE_WRITTEN, 4096, det=None, passes=1, metrics=[dict(name=m[0], value=256)])
    assert C.profile_touched_verdict("s\n", [("t", 0, "s\n", one_pass, C.SPARSE_WRITTEN, 4096, m)]) != []
    assert any("counters" in w for w in C.profile_touched_verdict("s\n", [("t", 0, "s\n", uncounted, C.SPARSE_WRITTEN, 4096, m)]))
    assert any("2 profiled rows" in w for w in C.profile_touched_verdict("s\n", [("t", 0, "s\n", counted[:2], C.SPARSE_WRITTEN, 4096, m)]))
