"""kreplay profile (in-process replay): the application's output bit-identical to a plain
run, every row of the report sane; and two MPI ranks recorded and profiled."""

from __future__ import annotations

import json
import os
import shutil

import pytest

import cases as C
import krsuite as S
from prepared import ROOT, locked

pytestmark = pytest.mark.gpu

MPI_APP = str(ROOT / "testdata" / "apps" / "mpi_app.py")


def _marks(c):
    m = [pytest.mark.timeout(c.timeout + 300)] + [getattr(pytest.mark, x) for x in c.marks]
    if c.known:
        m.append(pytest.mark.xfail(strict=True, reason=c.known))
    return m


def profile_rows(text: str) -> list:
    return [json.loads(l) for l in (text or "").splitlines() if l.strip()]


def profile_verdict(rc, plain_out, prof_out, rows, err, check) -> list:
    why = []
    if rc != 0:
        why.append(f"exit {rc}")
    if plain_out != prof_out or plain_out == "":
        why.append("the application's output differs from a plain run")
    prof = [r for r in rows if not r.get("skipped")]
    skipped = [r for r in rows if r.get("skipped")]
    return why + check(prof, skipped, rows, err)


@pytest.mark.parametrize("pc", [pytest.param(c, id=c.name, marks=_marks(c)) for c in C.PROFILE_CASES])
def test_profile(pc, case, row, kr, app):
    argv = app(pc.argv)
    args = app(pc.args)
    plain = case.run(argv, name="plain", timeout=600)
    report = case.path("prof.json")
    prof = case.run([kr, "profile", *args, "-o", report, "--"] + argv, name="prof", timeout=600)
    rows = profile_rows(S.read(report))
    why = profile_verdict(prof.rc, plain.out, prof.out, rows, prof.err, pc.check)
    ps = [r for r in rows if not r.get("skipped")]
    r0 = ps[0] if ps else (rows[0] if rows else {})
    row.update(kernel=r0.get("short_name", "-"), regions=len(rows), bytes=r0.get("write_set_bytes", 0),
               original_us=(r0.get("durations_ns") or [0])[0] / 1e3, median_us=r0.get("median_ns", 0) / 1e3,
               matched=plain.out == prof.out, deterministic=all(r.get("deterministic") for r in ps) if ps else None,
               address_mode="in place", why="; ".join(why))
    assert not why, "; ".join(why)


def two_ranks() -> list:
    """The command that starts two ranks: mpirun when there is one, else torchrun."""
    if shutil.which("mpirun"):
        return ["mpirun", "-n", "2", "--allow-run-as-root", "--oversubscribe"]
    return ["torchrun", "--nproc_per_node", "2", "--no-python"]


def mpi_recorded(run_dir, kr, child_env) -> dict:
    """Two ranks recorded once (-o mpi-r%r.krr), each capture verified and played: shared by
    the two rank cases."""
    d = run_dir / "rec" / "mpi-2ranks"
    with locked(run_dir / "rec" / "mpi-2ranks.lock"):
        r = S.load_json(d / "result.json")
        if r:
            return r
        run = S.Runner(d, env=child_env)
        launch = two_ranks()
        rec = run.run(launch + [kr, "record", "-k", "regex:erf_kernel", "-o", d / "mpi-r%r.krr", "--", "python3", MPI_APP],
                      name="mpi", timeout=600)
        r = {"launcher": launch[0], "rc": rec.rc, "ranks": {}}
        for k in (0, 1):
            f = d / f"mpi-r{k}.krr"
            x = {"krr": str(f), "exists": f.exists()}
            if f.exists():
                x["info"] = S.load_json(run.run([kr, "info", "--json", f], name=f"info{k}").out_path)
                x["verify_rc"] = run.run([kr, "verify", f], name=f"verify{k}").rc
                p = run.run([kr, "play", f, "--passes", "8", "--verify", "--json"], name=f"play{k}")
                x["play_rc"], x["play"] = p.rc, S.load_json(p.out_path)
            r["ranks"][str(k)] = x
        r["log"] = [c.describe() for c in run.log]
        (d / "result.json").write_text(json.dumps(r))
        return r


@pytest.mark.parametrize("rank", [0, 1])
@C.inline("mpi-2ranks")
def test_mpi_2ranks(rank, run_dir, kr, child_env, case, row):
    """Two ranks, one capture each, named by rank: each verifies and replays matched."""
    r = mpi_recorded(run_dir, kr, child_env)
    case.notes.extend(r["log"])
    x = r["ranks"][str(rank)]
    case.capture(x["krr"])
    info, play = x.get("info") or {}, x.get("play") or {}
    v = play.get("verify") or {}
    why = []
    if r["rc"] != 0:
        why.append(f"{r['launcher']} exits {r['rc']}")
    if not x["exists"]:
        why.append(f"no capture for rank {rank}")
    elif x.get("verify_rc") != 0 or x.get("play_rc") != 0 or v.get("matched") is not True:
        why.append(f"verify {x.get('verify_rc')}, play {x.get('play_rc')}, matched {v.get('matched')}")
    if (info.get("recorder") or {}).get("rank") != rank:
        why.append(f"rank {(info.get('recorder') or {}).get('rank')} in the capture")
    row.update(case=f"mpi-rank{rank} ({r['launcher']})", kernel=(info.get("kernel") or {}).get("name", "-"),
               regions=len(info.get("regions") or []), bytes=os.path.getsize(x["krr"]) if x["exists"] else 0,
               original_us=(play.get("original_ns") or 0) / 1e3, median_us=(play.get("median_ns") or 0) / 1e3,
               matched=bool(v.get("matched")), address_mode=play.get("address_mode", "-"), why="; ".join(why))
    assert not why, "; ".join(why)


def profile_2ranks_checks(reports: dict, plain: str, prof: str) -> list:
    why = []
    for k in (0, 1):
        rows = reports.get(k) or []
        if not rows:
            why.append(f"no report for rank {k}")
        for x in rows:
            if x.get("rank") != k:
                why.append(f"rank {x.get('rank')} in the report of rank {k}")
            if x.get("skipped") or x.get("deterministic") is not True or len(x.get("durations_ns", [])) != 4:
                why.append(f"rank {k}: {x}")
    if plain != prof or plain.count("rank") != 2:
        why.append(f"outputs differ: {plain!r} vs {prof!r}")
    return why


@C.inline("profile-2ranks")
def test_profile_2ranks(case, row, kr):
    """Two ranks profiled, one report each (-o prof-r%r.json); the ranks' output unchanged."""
    launch = two_ranks()
    plain = case.run(launch + ["python3", MPI_APP], name="plain", timeout=600)
    prof = case.run(launch + [kr, "profile", "-k", "regex:erf", "--all", "--passes", "4", "-o", case.path("prof-r%r.json"),
                              "--", "python3", MPI_APP], name="prof", timeout=600)
    reports = {k: profile_rows(S.read(case.path(f"prof-r{k}.json"))) for k in (0, 1)}
    srt = lambda t: "".join(sorted(t.splitlines(keepends=True)))  # noqa: E731 (ranks print in any order)
    why = profile_2ranks_checks(reports, srt(plain.out), srt(prof.out))
    row.update(case=f"profile-2ranks ({launch[0]})", kernel="erf", regions=2, matched=srt(plain.out) == srt(prof.out),
               address_mode="in place", why="; ".join(why))
    assert not why, "; ".join(why)


SPARSE = ["{kapps}", "sparse", "3"]


def profile_sparse(case, kr, argv, extra, name):
    """kapps sparse profiled with `extra` flags: the command and its report's rows."""
    report = case.path(f"{name}.json")
    cmd = case.run([kr, "profile", "-k", "sparse_bump", "--all", *extra, "-o", report, "--"] + argv, name=name,
                   timeout=600)
    return cmd, profile_rows(S.read(report))


def median_us(rows, key):
    v = sorted(r.get(key, 0) for r in rows if not r.get("skipped"))
    return v[len(v) // 2] / 1e3 if v else 0.0


@C.inline("profile-touched")
def test_profile_touched(case, row, kr, app):
    """Issue 35: `profile --memory touched` restores only the pages the dispatch changed: kapps
    sparse writes 512 KiB in 32 places of a 64 MiB buffer, so every 4 MiB chunk changes
    (64 MiB restored by default, 512 KiB by pages); both deterministic over 5 passes, the
    application's output as a plain run's."""
    argv = app(SPARSE)
    plain = case.run(argv, name="plain")
    passes = ["--passes", "5"]
    rc, reach = profile_sparse(case, kr, argv, passes, "reachable")
    tc, touched = profile_sparse(case, kr, argv, passes + ["--memory", "touched"], "touched")
    why = C.profile_touched_verdict(plain.out, [
        ("reachable", rc.rc, rc.out, reach, C.SPARSE_BUFFER, 4 << 20, ()),
        ("touched", tc.rc, tc.out, touched, C.SPARSE_WRITTEN, 4096, ()),
    ])
    figures = (f"restore median {median_us(touched, 'restore_median_ns'):.1f} us by pages "
               f"({C.SPARSE_WRITTEN >> 10} KiB) vs {median_us(reach, 'restore_median_ns'):.1f} us by chunks "
               f"({C.SPARSE_BUFFER >> 20} MiB); pass overhead {median_us(touched, 'pass_overhead_ns'):.1f} vs "
               f"{median_us(reach, 'pass_overhead_ns'):.1f} us")
    row.update(kernel=f"sparse_bump: {figures}", regions=len(touched), bytes=C.SPARSE_WRITTEN,
               matched=plain.out == tc.out, address_mode="in place", figures=figures, why="; ".join(why))
    assert not why, "; ".join(why)


@C.inline("profile-touched-metrics")
def test_profile_touched_metrics(case, row, kr, app):
    """`profile --memory touched` keeps counters: profile stays on CUPTI (only `record
    --memory touched` runs on the Compute Sanitizer API)."""
    argv = app(SPARSE)
    plain = case.run(argv, name="plain")
    metrics = ("smsp__warps_launched.sum", "dram__bytes_read.sum")
    # Five timed passes besides the counters: the page restores between them are what is
    # checked (the counters' own passes restore whole regions).
    tc, touched = profile_sparse(case, kr, argv, ["--memory", "touched", "--passes", "5", "--metrics",
                                                  ",".join(metrics)], "touched")
    why = C.profile_touched_verdict(plain.out, [
        ("touched --metrics", tc.rc, tc.out, touched, C.SPARSE_WRITTEN, 4096, metrics),
    ])
    warps = [m["value"] for r in touched for m in r.get("metrics") or [] if m["name"] == metrics[0]]
    if warps and any(w != 32 * 256 // 32 for w in warps):
        why.append(f"warps launched {warps}, expected 256 each")
    row.update(kernel=f"sparse_bump --memory touched --metrics: warps {warps}", regions=len(touched),
               bytes=C.SPARSE_WRITTEN, matched=plain.out == tc.out, address_mode="in place", why="; ".join(why))
    assert not why, "; ".join(why)
