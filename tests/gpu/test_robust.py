"""Robustness: the application's output and exit status survive whatever the recorder meets
(no match, unwritable output, a full disk, CUPTI held by the app, graphs it cannot capture,
the app ending mid-write, SIGTERM, stderr on a full disk, every launch matched)."""

from __future__ import annotations

import glob
import os
import re
import signal
import subprocess
import time

import pytest

import cases as C
import krsuite as S

pytestmark = pytest.mark.gpu


def _marks(c):
    m = [pytest.mark.timeout(c.timeout + 300)]
    if c.known:
        m.append(pytest.mark.xfail(strict=True, reason=c.known))
    return m


def check_verdict(rc, want_rc, base_out, rec_out, err, pattern) -> list:
    why = []
    if rc != want_rc:
        why.append(f"kreplay exits {rc}, want {want_rc}")
    if base_out != rec_out:
        why.append("the application's output differs from the plain run's")
    if re.search(pattern, err, re.S) is None:
        why.append(f"stderr does not match {pattern!r}")
    if S.recorder_panics(err):
        why.append("the recorder panicked: " + " | ".join(S.recorder_panics(err)[:3]))
    return why


def run_check(case, kr, kargs, argv, want_rc, pattern, timeout=300):
    base = case.run(argv, name="base", timeout=timeout)
    rec = case.run([kr, *kargs, "--"] + argv, name="rec", timeout=timeout)
    return check_verdict(rec.rc, want_rc, base.out, rec.out, rec.err, pattern)


@pytest.mark.parametrize("cc", [pytest.param(c, id=c.name, marks=_marks(c)) for c in C.CHECK_CASES])
def test_check(cc, case, row, kr, app):
    why = run_check(case, kr, list(cc.kargs), app(cc.argv), cc.want_rc, cc.stderr)
    row.update(kernel="-", matched=not why, why="; ".join(why))
    assert not why, "; ".join(why)


@C.inline("robust-unwritable")
def test_robust_unwritable(case, row, kr, app):
    """A capture that cannot be written where the recorder finds out: a file stands where the
    directory named by %k would go (an unwritable directory itself is refused before the
    application starts, which the CPU tests check). The app runs on unchanged, exit 3."""
    (case.path("unwritable")).mkdir(exist_ok=True)
    case.path("unwritable/saxpy").write_text("")
    kargs = ["record", "-k", "saxpy", "-o", str(case.path("unwritable")) + "/%k/x.krr"]
    why = run_check(case, kr, kargs, app(["{kapps}", "saxpy", "3"]), 3, "could not be written")
    row.update(kernel="-", matched=not why, why="; ".join(why))
    assert not why, "; ".join(why)


@C.inline("robust-list")
def test_robust_list(case, row, kr, app):
    """`kreplay list` on saxpy x3 (issue 39 item 2: the check was `"saxpy" in stdout`, which
    the app's own line satisfies): exit 0, the app's output first and unchanged, then the
    table with saxpy's row counting 3."""
    argv = app(["{kapps}", "saxpy", "3"])
    base = case.run(argv, name="base")
    ls = case.run([kr, "list", "--"] + argv, name="list")
    why = ([] if ls.rc == 0 else [f"list exits {ls.rc}"]) + S.list_output_checks(
        base.out, ls.out, "saxpy(int, float, float const*, float*)", 3)
    row.update(kernel="list: saxpy x3", matched=not why, why="; ".join(why))
    assert not why, "; ".join(why)


@C.inline("robust-disk-full")
def test_robust_disk_full(case, row, kr, app):
    """A full disk (a 256 KiB tmpfs): the capture fails, the app runs on with the same output,
    nothing is left behind (the bash suite's robust-disk-full-clean row, here in the same
    case). Needs root to mount: without, an explicit skip, as the bash suite counted it."""
    argv = app(["{kapps}", "stencil"])
    full = case.path("full")
    full.mkdir(exist_ok=True)
    m = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", str(full)], capture_output=True, text=True)
    if m.returncode != 0:
        pytest.skip(f"needs root to mount a 256 KiB tmpfs: {m.stderr.strip()[:200]}")
    try:
        why = run_check(case, kr, ["record", "-k", "stencil_iter", "-o", str(full / "x.krr")], argv, 3,
                        "No space left on device.*the application continues")
        left = os.listdir(full)
    finally:
        subprocess.run(["umount", str(full)])
    if left:
        why.append(f"left behind: {left}")
    row.update(kernel="stencil to a 256 KiB tmpfs", matched=not why, why="; ".join(why))
    assert not why, "; ".join(why)


def self_match_checks(rc, secs, same, caps, infos, plays, list_kernels):
    """Every launch matched (-k 'regex:.' --count 8): 8 captures of the app's first 8
    launches (match index = launch index: the recorder's launches are not counted), each
    replayed bit-exact, the app's output unchanged, no recorder kernel listed or captured."""
    why = []
    if rc != 0:
        why.append(f"record rc {rc} after {secs:.0f} s")
    if not same:
        why.append("application output differs")
    if len(caps) != 8:
        why.append(f"{len(caps)} captures, want 8")
    kernels = []
    for f in caps:
        info, play = infos.get(f), plays.get(f)
        if not info or not play:
            why.append(f"{f}: no info or play JSON")
            continue
        k = info["kernel"]["name"]
        kernels.append(k.split("(")[0][-40:])
        rec = info.get("recorder") or {}
        if "kreplay" in k:
            why.append(f"captured the recorder's own kernel {k}")
        mi, li = rec.get("match_index"), rec.get("launch_index")
        if mi is None or mi != li:
            why.append(f"{f}: match {mi} != launch {li}")
        v = play.get("verify") or {}
        if v.get("matched") is not True:
            why.append(f"{f} ({k[:40]}): replay not bit-exact (deterministic {v.get('deterministic')})")
    if list_kernels is None:
        why.append("list --json wrote no JSON")
    elif any("kreplay" in k["name"] for k in list_kernels):
        why.append("list shows the recorder's kernels")
    return why, kernels


@pytest.mark.timeout(2400)
@pytest.mark.parametrize("name", list(C.SELF_MATCH_CASES))
def test_self_match(name, case, row, kr, app):
    argv = app(C.SELF_MATCH_CASES[name])
    d = case.path("caps")
    d.mkdir(exist_ok=True)
    base = case.run(argv, name="base", timeout=300)
    ls = case.run([kr, "list", "--json", "--"] + argv, name="list", timeout=300)
    rec = case.run([kr, "record", "-k", "regex:.", "--count", "8", "-o", d / "m%n.krr", "--"] + argv, name="rec",
                   timeout=600)
    caps = sorted(glob.glob(str(d / "m*.krr")))
    infos, plays = {}, {}
    for i, f in enumerate(caps):
        case.capture(f)
        a = case.run([kr, "info", "--json", f], name=f"info{i}")
        b = case.run([kr, "play", f, "--passes", "2", "--verify", "--json"], name=f"play{i}", timeout=120)
        infos[f], plays[f] = S.load_json(a.out_path), S.load_json(b.out_path)
    why, kernels = self_match_checks(rec.rc, rec.secs, base.out == rec.out, caps, infos, plays, S.last_json_line(ls.out))
    row.update(kernel="regex:. x8 (" + ", ".join(sorted(set(kernels)))[:60] + ")", regions=len(caps),
               matched=base.out == rec.out, why="; ".join(why))
    assert not why, "; ".join(why)


def report_dirs(tmp) -> list:
    return sorted(glob.glob(os.path.join(str(tmp), "kreplay-*-*")))


@pytest.mark.parametrize("ec", [pytest.param(c, id=c.name, marks=_marks(c)) for c in C.ENDING_CASES])
def test_ending(ec, case, row, kr, app):
    """The app ends while a 1 GiB capture is being written (exec, _exit, its own SIGTERM): its
    output and exit status kept, no NAME.partial and no report directory left, a capture that
    did get written verifies. The report directories are looked for in a TMPDIR of the case's
    own (the bash suite counted /tmp/kreplay-*-* before and after, which other cases running
    beside it would break)."""
    argv = app(["{kapps}", "end", ec.how])
    tmp = case.path("tmp")
    tmp.mkdir(exist_ok=True)
    w = case.capture(case.path("end.krr"))
    base = case.run(argv, name="base")
    rec = case.run([kr, "record", "-k", "big_scale", "-o", w] + argv, name="rec", env={"TMPDIR": str(tmp)}, timeout=300)
    why = []
    if base.out != rec.out:
        why.append("output differs")
    # exec/_exit after a completed capture: 0; before it: 3 (nothing captured); a signal: the app's.
    if base.rc == 0:
        if rec.rc not in (0, 3):
            why.append(f"rc {rec.rc}")
    elif rec.rc != base.rc:
        why.append(f"rc {rec.rc} (app {base.rc})")
    if os.path.exists(str(w) + ".partial"):
        why.append("partial file left")
    if report_dirs(tmp):
        why.append(f"report directory left: {report_dirs(tmp)}")
    got = "no capture"
    if w.exists():
        got = "captured"
        if case.run([kr, "verify", w], name="verify").rc != 0:
            why.append("capture does not verify")
    if re.search("removed .*partial", rec.err):
        got += ", partial removed"
    if S.recorder_panics(rec.err):
        why.append("the recorder panicked: " + " | ".join(S.recorder_panics(rec.err)[:3]))
    row.update(kernel=f"big_scale ({ec.how}: {got}, rc {rec.rc})", matched=not why, why="; ".join(why))
    assert not why, "; ".join(why)


@C.inline("robust-sigterm")
def test_robust_sigterm(case, row, kr, app):
    """SIGTERM sent to kreplay record after 10 s reaches the app; kreplay waits, cleans up and
    exits as the app did (143) within 30 s. The app is found as kreplay's descendant (the bash
    suite matched `pgrep -f "kapps end sleep"`, which any other such process satisfies)."""
    argv = app(["{kapps}", "end", "sleep"])
    tmp = case.path("tmp")
    tmp.mkdir(exist_ok=True)
    w = case.capture(case.path("sigterm.krr"))
    cmd, p = case.start([kr, "record", "-k", "big_scale", "-o", w] + argv, name="rec", env={"TMPDIR": str(tmp)})
    assert p is not None, "kreplay did not start"
    time.sleep(10)
    kids = S.children_of(p.pid)
    os.kill(p.pid, signal.SIGTERM)
    t0 = time.monotonic()
    case.finish(cmd, p, timeout=120)
    took = time.monotonic() - t0
    why = []
    if cmd.rc != 143:
        why.append(f"rc {cmd.rc}")
    if not kids:
        why.append("kreplay had no child process after 10 s")
    still = [k for k in kids if S.alive(k)]
    if still:
        why.append(f"the application still runs: {still}")
        for k in still:
            os.kill(k, signal.SIGKILL)
    if report_dirs(tmp):
        why.append("report directory left")
    if os.path.exists(str(w) + ".partial"):
        why.append("partial file left")
    if took > 30:
        why.append(f"took {took:.0f} s")
    row.update(kernel=f"kreplay killed after 10 s (rc {cmd.rc}, {took:.0f} s to exit)", matched=not why, why="; ".join(why))
    assert not why, "; ".join(why)


@C.inline("robust-stderr-full")
def test_robust_stderr_full(case, row, kr, app):
    """The app's stderr is a full disk: the recorder's diagnostics are lost, the app is not
    (the CUPTI-user app makes the recorder stand down and say so at start-up, on that
    stderr; an unwritable capture path)."""
    cupti, kapps = app(["{cupti_app}"]), app(["{kapps}", "saxpy", "3"])
    b1 = case.run(cupti, name="base-cupti")
    r1 = case.run([kr, "record", "-k", "saxpy_traced"] + cupti, name="rec-cupti", err="/dev/full")
    # A file where the %k directory goes: only the recorder finds that out, after the start (an
    # unwritable directory is refused before the application runs).
    case.path("unwritable").mkdir(exist_ok=True)
    case.path("unwritable/saxpy").write_text("")
    out = str(case.path("unwritable")) + "/%k/x.krr"
    r2 = case.run([kr, "record", "-k", "saxpy", "-o", out] + kapps, name="rec-saxpy", err="/dev/full")
    b2 = case.run(kapps, name="base-saxpy")
    why = []
    if r1.rc != 3:
        why.append(f"cupti app: rc {r1.rc} (want 3)")
    if b1.out != r1.out:
        why.append("cupti app output differs")
    if r2.rc != 3:
        why.append(f"unwritable capture: rc {r2.rc} (want 3)")
    if b2.out != r2.out:
        why.append("saxpy output differs")
    row.update(kernel=f"app stderr on /dev/full (rc {r1.rc}, {r2.rc})", matched=not why, why="; ".join(why))
    assert not why, "; ".join(why)
