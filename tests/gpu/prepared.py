"""Work shared between cases, done once per run folder whichever xdist worker asks first (a
lock file per item): the test apps, built with nvcc and cached by source hash, and the
captures of the record-and-play cases, which other cases start from (play-tools,
robust-module, diff-replay, hostile-play, share-*, cupti-versions, repro:*), and the range
captures several range cases replay (range-streams-profiler, range-module, range-divergent).

A missing input is never a silent pass: `Captures.krr(name)` fails the asking case with how
the source was made (issue 39 item 8).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

import cases as C
from krsuite import Runner, last_json_line, load_json, ptx_verdict, read, recorder_panics, relocate_verdict

ROOT = Path(__file__).resolve().parents[2]
APPS_SRC = ROOT / "testdata" / "apps"


@contextmanager
def locked(path: Path):
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)



# KREPLAY_SUITE_MEMORY=touched records every run case with `--memory touched` (issue 35's
# second proof: each case that passes by reachable memory passes by touched pages); cases
# that name their own --memory keep it.
SUITE_MEMORY = "KREPLAY_SUITE_MEMORY"


def suite_memory(rec_extra) -> list:
    """A run case's record options with the suite's --memory added where it names none."""
    extra = list(rec_extra)
    memory = os.environ.get(SUITE_MEMORY)
    if memory and "--memory" not in extra:
        extra = ["--memory", memory] + extra
    return extra


def suite_memory_tag() -> str:
    memory = os.environ.get(SUITE_MEMORY)
    return f"-{memory}" if memory else ""

class AppBuildError(Exception):
    pass


class Apps:
    """The nvcc-built test apps: `get(name)` builds one on first use (cached under
    `cache/NAME-HASH`, the hash of its sources and command), or raises AppBuildError with the
    compiler's output, which fails the cases that need it and no other."""

    def __init__(self, cache: Path, arch: str, cuda_home: str):
        self.cache, self.arch, self.cuda_home = Path(cache), arch, cuda_home

    def recipe(self, name: str):
        """(sources, argv with {out}) of each app."""
        a, cu = f"-arch={self.arch}", self.cuda_home
        s = APPS_SRC
        return {
            "kapps": ([s / "kapps.cu"], ["nvcc", "-O2", "-std=c++17", a, "-o", "{out}", s / "kapps.cu"]),
            "ptrtable": ([s / "ptrtable.cu"], ["nvcc", "-O2", a, "-o", "{out}", s / "ptrtable.cu"]),
            "touch_gather": ([s / "touch_gather.cu"], ["nvcc", "-O2", a, "-o", "{out}", s / "touch_gather.cu"]),
            "driver_app": ([s / "driver_app.cu"], ["nvcc", "-O2", a, "-o", "{out}", s / "driver_app.cu", "-lcuda"]),
            "graph_apps": ([s / "graph_apps.cu"], ["nvcc", "-O2", "-std=c++17", a, "-o", "{out}", s / "graph_apps.cu"]),
            "beyond_apps": ([s / "beyond_apps.cu"],
                            ["nvcc", "-O2", "-std=c++17", a, "-o", "{out}", s / "beyond_apps.cu", "-lcuda"]),
            "range_app": ([s / "range_app.cu"], ["nvcc", "-O2", "-std=c++17", a, "-o", "{out}", s / "range_app.cu"]),
            # NVTX3 is header-only (nvtx3/nvToolsExt.h, which dlopens a tool when one is there).
            "range_streams": ([s / "range_streams.cu"],
                              ["nvcc", "-O2", "-std=c++17", a, "-o", "{out}", s / "range_streams.cu", "-ldl"]),
            # Variants of range_streams' middle kernel, for play --module (issue 32).
            "range_streams_slow": ([s / "range_streams_slow.cu"],
                                   ["nvcc", "-O2", a, "-cubin", "-o", "{out}", s / "range_streams_slow.cu"]),
            "range_streams_divergent": ([s / "range_streams_divergent.cu"],
                                        ["nvcc", "-O2", a, "-cubin", "-o", "{out}", s / "range_streams_divergent.cu"]),
            # profile --variant (issue 38): the app, its kernel as an identical cubin (the
            # overhead benchmark), and three variants of it, as cubins.
            "variant_app": ([s / "variant_app.cu"], ["nvcc", "-O2", a, "-o", "{out}", s / "variant_app.cu"]),
            "variant_same": ([s / "variant_app.cu"], ["nvcc", "-O2", a, "-cubin", "-o", "{out}", s / "variant_app.cu"]),
            "variant_slow": ([s / "variant_slow.cu"], ["nvcc", "-O2", a, "-cubin", "-o", "{out}", s / "variant_slow.cu"]),
            "variant_wrong": ([s / "variant_wrong.cu"],
                              ["nvcc", "-O2", a, "-cubin", "-o", "{out}", s / "variant_wrong.cu"]),
            "variant_layout": ([s / "variant_layout.cu"],
                               ["nvcc", "-O2", a, "-cubin", "-o", "{out}", s / "variant_layout.cu"]),
            "driver_kernel": ([s / "driver_kernel.cu"], ["nvcc", "-O2", a, "-cubin", "-o", "{out}", s / "driver_kernel.cu"]),
            "cupti_app": ([s / "cupti_app.cu"],
                          ["nvcc", "-O2", a, f"-I{cu}/extras/CUPTI/include", "-o", "{out}", s / "cupti_app.cu",
                           f"-L{cu}/lib64", f"-L{cu}/extras/CUPTI/lib64", "-lcupti"]),
            "example_tool": ([ROOT / "testdata/tools/example_tool.c", ROOT / "engine/include/kreplay_tool.h"],
                             ["cc", "-shared", "-fPIC", "-O2", f"-I{ROOT / 'engine/include'}", "-o", "{out}",
                              ROOT / "testdata/tools/example_tool.c"]),
        }[name]

    def get(self, name: str) -> Path:
        sources, argv = self.recipe(name)
        h = hashlib.sha256(" ".join(map(str, argv)).encode())
        for src in sources:
            h.update(Path(src).read_bytes())
        out = self.cache / f"{name}-{h.hexdigest()[:16]}"
        failed = out.with_suffix(".failed")
        with locked(self.cache / f"{name}.lock"):
            if out.exists():
                return out
            if failed.exists():
                raise AppBuildError(failed.read_text())
            r = Runner(self.cache / "build", env={})
            tmp = out.with_name(out.name + ".tmp")
            cmd = r.run([str(a).replace("{out}", str(tmp)) for a in argv], name=name, timeout=600)
            if cmd.rc == 0 and tmp.exists():
                tmp.rename(out)
                return out
            failed.write_text(f"building {name} failed:\n{cmd.describe()}")
            raise AppBuildError(failed.read_text())

    def resolve(self, argv) -> list:
        """`argv` with its placeholders replaced (building the apps they name)."""
        out = []
        for a in argv:
            a = str(a).replace("{apps}", str(APPS_SRC))
            for p in C.placeholders([a]):
                a = a.replace("{" + p + "}", str(self.get(p)))
            out.append(a)
        return out


def fingerprint(bins: Path) -> str:
    parts = []
    for f in ("kreplay", "libkreplay_record.so"):
        try:
            st = (bins / f).stat()
            parts.append(f"{f}:{st.st_size}:{int(st.st_mtime)}")
        except OSError:
            parts.append(f"{f}:missing")
    return " ".join(parts)


class Captures:
    """The record-and-play pipeline of each run case, done once per run folder; its result
    (exit statuses, parsed JSON, the command log) kept as `rec/NAME/result.json`."""

    def __init__(self, folder: Path, kr: Path, apps: Apps, env: dict):
        self.folder, self.kr, self.apps, self.env = Path(folder), Path(kr), apps, env
        # A run by touched pages records other captures than one by reachable memory.
        self.stamp = fingerprint(self.kr.parent) + suite_memory_tag()

    def dir(self, name: str) -> Path:
        return self.folder / name

    def get(self, name: str) -> dict:
        """The pipeline's result for run case `name` (or share case: see `share`)."""
        d = self.dir(name)
        with locked(self.folder / f"{name}.lock"):
            r = load_json(d / "result.json")
            if r and r.get("stamp") == self.stamp:
                return r
            shutil.rmtree(d, ignore_errors=True)
            share = next((c for c in C.SHARE_CASES if c.name == name), None)
            r = self._share(share) if share else self._record_and_play(self._case(name), d)
            r["stamp"] = self.stamp
            (d / "result.json").write_text(json.dumps(r))
            return r

    def krr(self, name: str) -> Path:
        """The capture of case `name`; fails the asking case when there is none."""
        r = self.get(name)
        p = Path(r["krr"])
        if not r.get("has_capture") or not p.exists():
            pytest.fail(f"the source capture {name} was not recorded:\n" + "\n\n".join(r.get("log", [])), pytrace=False)
        return p

    def _case(self, name: str) -> C.RunCase:
        for c in C.RUN_CASES:
            if c.name == name:
                return c
        if name == C.TORCH_COMPILE.name:
            return C.TORCH_COMPILE
        raise KeyError(f"no run case {name}")

    def _record_and_play(self, case: C.RunCase, d: Path) -> dict:
        kr = str(self.kr)
        run = Runner(d, env=self.env)
        r = {"case": case.name, "krr": str(d / "capture.krr"), "has_capture": False, "log": []}
        try:
            argv = self.apps.resolve(case.argv)
        except AppBuildError as e:
            r.update(base_rc=-1, record_rc=-1, output_same=False, setup_error=str(e), log=[str(e)])
            return r
        regex, nth = case.regex, case.nth
        if case.name == C.TORCH_COMPILE.name:
            # A first run fills Inductor's cache, so the listing and the recording compile
            # (and launch) alike.
            run.run(argv, name="warm", timeout=900)
            ls = run.run([kr, "list", "--json", "--"] + argv, name="list", timeout=900)
            ks = [k for k in (last_json_line(ls.out) or []) if "triton_" in k.get("demangled", "") and k.get("in_graphs")]
            if not ks:
                r.update(base_rc=0, record_rc=-1, output_same=False,
                         setup_error="list shows no Triton kernel inside a CUDA graph",
                         log=[c.describe() for c in run.log])
                return r
            regex, nth = "^" + ks[0]["name"] + "$", ks[0]["count"]
            r["resolved"] = {"regex": regex, "nth": nth}
        w = d / "capture.krr"
        t0 = time.monotonic()
        base = run.run(argv, name="base", timeout=case.timeout)
        t1 = time.monotonic()
        rec = run.run([kr, "record", *suite_memory(case.rec_extra), "-k", "regex:" + regex, "--nth", str(nth),
                       "-o", w] + argv, name="rec", timeout=case.timeout)
        t2 = time.monotonic()
        r.update(base_rc=base.rc, record_rc=rec.rc, output_same=base.out == rec.out,
                 base_ms=int((t1 - t0) * 1000), record_ms=int((t2 - t1) * 1000), has_capture=w.exists(),
                 record_panics=recorder_panics(rec.err))
        if w.exists():
            ver = run.run([kr, "verify", w], name="verify")
            run.run([kr, "info", "--json", w], name="info")
            run.run([kr, "info", w], name="info-text")
            play = run.run([kr, "play", w, "--passes", "8", "--verify", "--json"], name="play")
            reloc = run.run([kr, "play", w, "--relocate", "--passes", "2", "--verify", "--json"], name="reloc")
            info = load_json(d / "info.out") or {}
            r.update(verify_rc=ver.rc, play_rc=play.rc, reloc_rc=reloc.rc, reloc_err=reloc.err[-4000:],
                     info=info, play=load_json(d / "play.out"), reloc=load_json(d / "reloc.out"))
            ptx = None
            if any(m.get("kind") == "ptx" for m in info.get("modules") or []):
                run.run([kr, "play", w, "--ptx", "--passes", "2", "--verify", "--json"], name="ptx")
                ptx = load_json(d / "ptx.out")
            r["ptx_json"] = ptx
            play_det = ((r["play"] or {}).get("verify") or {}).get("deterministic") is not False
            r["ptx"] = ptx_verdict(info, ptx, play_det)
            r["relocated"] = relocate_verdict(r["reloc"], reloc.rc, reloc.err)
        r["log"] = [c.describe() for c in run.log]
        return r

    def range_capture(self, name: str) -> dict:
        """The range capture `name` of C.RANGE_CAPTURES, recorded once per run folder (the
        app plain, then under `record KARGS`, then `info --json`): base/record exit statuses
        and stdout, the parsed info, the command log. Cases check what they need of it."""
        d = self.dir(name)
        with locked(self.folder / f"{name}.lock"):
            r = load_json(d / "result.json")
            if r and r.get("stamp") == self.stamp:
                return r
            shutil.rmtree(d, ignore_errors=True)
            r = self._record_range(name, d)
            r["stamp"] = self.stamp
            (d / "result.json").write_text(json.dumps(r))
            return r

    def _record_range(self, name: str, d: Path) -> dict:
        kargs, app_argv = C.RANGE_CAPTURES[name]
        run = Runner(d, env=self.env)
        w = d / "capture.krr"
        r = {"case": name, "krr": str(w), "has_capture": False}
        try:
            argv = self.apps.resolve(app_argv)
        except AppBuildError as e:
            r.update(base_rc=-1, record_rc=-1, base_out="", rec_out="", setup_error=str(e), log=[str(e)])
            return r
        base = run.run(argv, name="base", timeout=900)
        rec = run.run([str(self.kr), "record", *kargs, "-o", w, "--force", "--"] + argv, name="rec", timeout=900)
        r.update(base_rc=base.rc, record_rc=rec.rc, base_out=base.out, rec_out=rec.out, rec_err=rec.err[-4000:],
                 has_capture=w.exists())
        if w.exists():
            run.run([str(self.kr), "info", "--json", w], name="info")
            r["info"] = load_json(d / "info.out")
        r["log"] = [c.describe() for c in run.log]
        return r

    def _share(self, case: C.ShareCase) -> dict:
        """pack FLAGS --level 3 of the source capture, info, play --passes 8 --verify, and
        play --relocate (which the bash suite did not run: its repro row compared "-" with
        "-"; issue 39 item 4)."""
        src = self.krr(case.source)
        d = self.dir(case.name)
        run = Runner(d, env=self.env)
        kr = str(self.kr)
        w = d / "capture.krr"
        pack = run.run([kr, "pack", src, "-o", w, *case.flags, "--level", "3"], name="pack")
        r = {"case": case.name, "krr": str(w), "has_capture": w.exists(), "pack_rc": pack.rc}
        if w.exists():
            run.run([kr, "info", "--json", w], name="info")
            play = run.run([kr, "play", w, "--passes", "8", "--verify", "--json"], name="play")
            reloc = run.run([kr, "play", w, "--relocate", "--passes", "2", "--verify", "--json"], name="reloc")
            r.update(info=load_json(d / "info.out") or {}, play=load_json(d / "play.out"), play_rc=play.rc,
                     reloc=load_json(d / "reloc.out"), reloc_rc=reloc.rc, reloc_err=reloc.err[-4000:])
        r["log"] = [c.describe() for c in run.log]
        return r
