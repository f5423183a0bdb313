"""kreplay from Python: GPU kernel captures (.krr) as Python objects.

    import kreplay
    cap = kreplay.open("saxpy.krr")
    cap.kernel["name"], cap.launch["grid"]
    n, a, x, y = cap.params                          # typed: n.value == 4194304, a.value == 1.5
    cap.steps                                        # a range capture's steps ([] for one dispatch)
    cap.range                                        # the range as a whole (None for one dispatch)
    ys = y.region.array()                            # float32 (`float*` says so): NumPy view, no copy
    out = y.region.array(post=True)                  # the recorded output
    t = y.region.tensor()                            # a torch.Tensor on the same memory (DLPack)
    report = kreplay.play("saxpy.krr", passes=8, verify=True)   # needs a GPU
    caps = kreplay.record(["python", "app.py"], kernel="saxpy", out="saxpy.krr")

Reading and inspecting captures needs no GPU. `play` replays in this process through the
CUDA driver; `record` runs a command under the `kreplay` command-line tool (on PATH, or named
by KREPLAY_BIN), which injects the recorder.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from . import _native, arrays
from .commands import diff, extract, pack, verify
from .values import ElementType, Param, element_type

__all__ = [
    "open",
    "play",
    "record",
    "verify",
    "diff",
    "pack",
    "extract",
    "Capture",
    "Region",
    "Step",
    "Range",
    "Param",
    "ElementType",
    "element_type",
    "RecordError",
    "CaptureChanged",
    "__version__",
]
__version__ = _native.__version__

#: Raised when a capture's file was written over in place (`cp new.krr old.krr`) after
#: `open`: the handle would otherwise read another capture's bytes under this one's
#: description. A file replaced by rename is another file: an open handle reads on, unchanged.
CaptureChanged = _native.CaptureChanged


@dataclass(frozen=True)
class Region:
    """One captured buffer: where it was (`address`), how large (`size`, bytes), why it is in
    the capture (`role`, `kind`, `global_name` for a module global), whether the kernel
    wrote it, and the parameters that point into it (`pointed_by`: they say its element
    type). `array()` reads it as NumPy, `tensor()` as torch, `bytes()` as bytes."""

    path: str
    id: int
    address: int
    size: int
    kind: str
    role: str
    written: bool
    global_name: str | None
    info: dict = field(repr=False, compare=False)
    # The open capture it belongs to (the file as it was opened, whatever took its name since).
    _file: Any = field(default=None, repr=False, compare=False)
    pointed_by: tuple = field(default=(), repr=False, compare=False)

    def _bytes(self, post: bool, writable: bool = False):
        if self._file is None:
            return _native.region_bytes(self.path, self.id, post, writable)
        return self._file.region_bytes(self.id, post, writable)

    def bytes(self, post: bool = False) -> memoryview:
        """The region's bytes (before the dispatch, or after it with `post=True`), decoded
        once into memory that is read-only and shared by every view of it."""
        return memoryview(self._bytes(post))

    def array(self, dtype: Any = None, post: bool = False, shape: Sequence[int] | None = None) -> np.ndarray:
        """The region as a read-only NumPy array (no copy of the decoded bytes) of `dtype`, or,
        without one, of the type the parameters pointing into it say (`float*`: float32;
        `__nv_bfloat16*`: bfloat16, through ml_dtypes). ValueError saying what to pass when no
        parameter says. Trailing bytes that do not fill an element are left out; `shape`
        reshapes; `post=True` reads the state after the dispatch (the recorded output)."""
        return arrays.view(self._bytes(post), arrays.region_element(self, dtype), shape=shape)

    def tensor(self, dtype: Any = None, post: bool = False, shape: Sequence[int] | None = None) -> Any:
        """As `array()`, as a CPU `torch.Tensor` that shares the decoded memory (DLPack, no
        copy). Each call decodes the region anew, so the tensor is writable and writes reach
        no other array. ImportError without PyTorch."""
        element = arrays.region_element(self, dtype)
        return arrays.tensor(self._bytes(post, writable=True), element, shape=shape)


@dataclass(frozen=True)
class Step:
    """One step of a range capture (`Capture.steps`), in issue order: `index` (0-based) and
    `kind` (`kernel`, `copy-dtod`, `copy-htod`, `copy-dtoh`, `fill`, `event-record`,
    `event-wait` or `host-wait`). A kernel step has its kernel's `name` (demangled, with its
    signature when known) and `mangled` name, its `grid` and `block`, and `original_ns`, its
    duration in the application (None when not measured); for other steps these are None.
    `bytes` is what a copy or fill moves or sets (None for other steps), `event` the
    application's event handle value an event record or wait names, `stream` the
    application's stream handle value the step was issued on. `info` is its entry of
    `kreplay info --json`'s `steps`, unchanged."""

    index: int
    kind: str
    name: str | None
    mangled: str | None
    grid: tuple[int, int, int] | None
    block: tuple[int, int, int] | None
    bytes: int | None
    event: int | None
    stream: int
    original_ns: int | None
    info: dict = field(repr=False, compare=False)

    @property
    def is_kernel(self) -> bool:
        """Whether this step is a kernel launch (rather than a copy, fill, event or wait)."""
        return self.kind == "kernel"

    @classmethod
    def from_info(cls, s: dict) -> Step:
        """The step of an entry of `kreplay info --json`'s `steps`."""
        kernel = s.get("kernel") or {}
        grid, block = s.get("grid"), s.get("block")
        return cls(
            index=s["index"],
            kind=s.get("kind", "kernel"),
            name=kernel.get("name"),
            mangled=kernel.get("mangled"),
            grid=tuple(grid) if grid is not None else None,
            block=tuple(block) if block is not None else None,
            bytes=s.get("bytes"),
            event=s.get("event"),
            stream=s["stream"],
            original_ns=s.get("original_ns"),
            info=s,
        )


@dataclass(frozen=True)
class Range:
    """What a range capture is as a whole (`Capture.range`): `origin`, how it was selected as
    `kreplay record` takes it again (`launch-range 3:5`, `nvtx-range layer.2 #1`,
    `profiler-range #1`); `launches`, the process launch indices of its first and last
    kernel steps (None when not known); `kernel_steps`, how many of its steps are kernel
    launches; `streams`, how many streams the steps were issued on; `original_ns`, the
    range's in-app duration (None when not measured); `step_digests`, whether it holds a
    digest of memory after each step (so `play --verify` can name the first step that
    diverges). `info` is `kreplay info --json`'s `range`, unchanged."""

    origin: str
    launches: tuple[int, int] | None
    kernel_steps: int
    streams: int
    original_ns: int | None
    step_digests: bool
    info: dict = field(repr=False, compare=False)

    @classmethod
    def from_info(cls, r: dict) -> Range:
        """The range of `kreplay info --json`'s `range`."""
        launches = r.get("launches")
        return cls(
            origin=r["origin"],
            launches=tuple(launches) if launches is not None else None,
            kernel_steps=r["kernel_steps"],
            streams=r["streams"],
            original_ns=r.get("original_ns"),
            step_digests=bool(r.get("step_digests")),
            info=r,
        )


@dataclass(frozen=True)
class Capture:
    """A .krr capture: `info` is what `kreplay info --json` prints. The file stays open for the
    object's lifetime: its regions read the file it was opened on (a file replaced by rename
    since is another file), and raise CaptureChanged if that file was written over in place."""

    path: str
    info: dict = field(repr=False)
    _file: Any = field(default=None, repr=False, compare=False)

    @property
    def kernel(self) -> dict:
        """The kernel: `name` (demangled, with its signature when known), and what the
        capture knows of its code."""
        return self.info["kernel"]

    @property
    def launch(self) -> dict:
        """The launch: `grid`, `block`, dynamic shared memory, cluster, attributes."""
        return self.info["launch"]

    @property
    def params(self) -> list[Param]:
        """Each kernel parameter as a `Param`: its C type, its value as a Python `int`,
        `float` or `bool` (a pointer's address as an `int`, with the region it points
        into), or `bytes` when the type is not known. `param["value"]` and the other keys of
        `kreplay info --json`'s entry still work (`value` typed)."""
        return [Param.from_info(p, self) for p in self.info["params"]]

    @property
    def is_range(self) -> bool:
        """Whether this is a range capture (a sequence of steps: kernel launches, and since
        format 1.3 copies, fills, event records and waits) rather than one dispatch."""
        return bool(self.info.get("steps"))

    @property
    def steps(self) -> list[Step]:
        """A range capture's steps in issue order, each a `Step` (index, kind, kernel name,
        grid, block, bytes, event, stream, in-app duration: `kreplay info --json`'s `steps`);
        `[]` for a capture of one dispatch. `kernel`, `launch` and `params` are the first
        kernel step's (a range may begin with a copy or a wait)."""
        return [Step.from_info(s) for s in self.info.get("steps") or []]

    @property
    def range(self) -> Range | None:
        """What a range capture is as a whole (`Range`: origin, launch indices, kernel steps,
        streams, in-app duration, whether it holds per-step digests); None for a capture of
        one dispatch."""
        r = self.info.get("range")
        return Range.from_info(r) if r else None

    @property
    def device(self) -> dict | None:
        """The GPU it was captured on (name, compute capability, ...), when recorded."""
        return self.info.get("device")

    @property
    def reference(self) -> str:
        """`recorded`, or `dropped`/`redacted` when `kreplay pack` removed the output."""
        return self.info.get("reference", "recorded")

    @property
    def regions(self) -> list[Region]:
        """Every captured buffer, as a `Region`, in id order."""
        params = self.params
        return [
            Region(
                path=self.path,
                id=r["id"],
                address=r["address"],
                size=r["size"],
                kind=r["kind"],
                role=r["role"],
                written=bool(r.get("written")),
                global_name=r.get("global") or None,
                info=r,
                _file=self._file,
                pointed_by=tuple(p for p in params if p.pointer and p.region_id == r["id"]),
            )
            for r in self.info["regions"]
        ]

    def region(self, id_or_address: int) -> Region:
        """The region with this id, or the one holding this device address."""
        for r in self.regions:
            if r.id == id_or_address:
                return r
        for r in self.regions:
            if r.address <= id_or_address < r.address + r.size and r.address != 0:
                return r
        raise KeyError(f"{self.path}: no region {id_or_address:#x}")

    def play(self, **kwargs: Any) -> dict:
        """As `kreplay.play`, on the file this capture was opened on."""
        if self._file is None:
            return play(self.path, **kwargs)
        return _report(*self._file.play(**_play_args(**kwargs)))

    def __repr__(self) -> str:
        steps = f", steps={len(self.info['steps'])}" if self.info.get("steps") else ""
        return f"Capture({self.path!r}, kernel={self.kernel.get('name')!r}, regions={len(self.info['regions'])}{steps})"


def open(path: str | os.PathLike) -> Capture:  # noqa: A001 - the package's entry point
    """Opens a capture (checks its structure; no GPU needed). The file stays open while the
    Capture lives."""
    p = os.fspath(path)
    f = _native.CaptureFile(p)
    return Capture(path=p, info=json.loads(f.describe()), _file=f)


# The keyword defaults of `play` are the player's, as `kreplay play`'s flags are (a test in
# python/tests checks them against `_native.play_defaults()`): one plain pass, no check.
def play(
    path: str | os.PathLike,
    passes: int = 1,
    verify: bool = False,
    metrics: Sequence[str] = (),
    warmup: int = 0,
    device: int = 0,
    relocate: bool = False,
    ptx: bool = False,
    flush_cache: bool | None = None,
) -> dict:
    """Replays a capture on a GPU in this process, as `kreplay play` does with the same
    flags; returns the object `kreplay play --json` prints (median_ns, durations_ns,
    verify.matched, metrics, ...). Raises RuntimeError with the reason when it cannot (no
    GPU, another architecture, address in use, a salvaged capture that lost what the kernel
    needs); what `kreplay play` warns about (a device heap the recorder could not capture)
    is a RuntimeWarning. `flush_cache` is `kreplay play --cache`: None (the default, as the
    CLI's) keeps the L2 for timed passes and empties it before counter passes; True empties
    it before both; False keeps it for both."""
    args = _play_args(passes, verify, metrics, warmup, device, relocate, ptx, flush_cache)
    return _report(*_native.play(os.fspath(path), **args))


def _play_args(
    passes: int = 1,
    verify: bool = False,
    metrics: Sequence[str] = (),
    warmup: int = 0,
    device: int = 0,
    relocate: bool = False,
    ptx: bool = False,
    flush_cache: bool | None = None,
) -> dict:
    """`play`'s keyword arguments, defaults filled in, as the native layer takes them."""
    return dict(
        passes=passes,
        verify=verify,
        metrics=list(metrics),
        warmup=warmup,
        device=device,
        relocate=relocate,
        ptx=ptx,
        flush_cache=flush_cache,
    )


def _report(report_json: str, notes: Sequence[str]) -> dict:
    """The native replay's report, its warnings raised as the CLI prints them."""
    for note in notes:
        warnings.warn(f"kreplay: {note}", RuntimeWarning, stacklevel=3)
    return json.loads(report_json)


class RecordError(RuntimeError):
    """`kreplay record` failed or captured nothing; `stderr` says why."""

    def __init__(self, message: str, returncode: int, stderr: str):
        super().__init__(message)
        self.returncode = returncode
        self.stderr = stderr


def _kreplay_bin() -> str:
    b = os.environ.get("KREPLAY_BIN") or shutil.which("kreplay")
    if not b:
        raise RecordError("the kreplay command is not on PATH (set KREPLAY_BIN to its path)", 127, "")
    return b


def record(
    cmd: Sequence[str],
    kernel: str,
    out: str | os.PathLike = "capture.krr",
    nth: int = 1,
    count: int = 1,
    memory: str | None = None,
    env: dict | None = None,
    cwd: str | os.PathLike | None = None,
    timeout: float | None = None,
) -> list[Capture]:
    """Runs `cmd` under `kreplay record -k KERNEL --nth N --count M -o OUT` and returns the
    captures it wrote (one per dispatch; with count > 1, OUT must hold %n, the match index, as
    in `out="gemm-%n.krr"`: that is checked before the command runs). The application's own
    exit status is kept: a failing application raises RecordError."""
    out_name = os.fspath(out)
    if count > 1 and not _has_match_index(out_name):
        raise RecordError(
            f"record(count={count}): out={out_name!r} has no %n (the match index), so the captures "
            f"would all get the same name; use e.g. out={_with_match_index(out_name)!r}",
            2,
            "",
        )
    args = [_kreplay_bin(), "record", "-k", kernel, "--nth", str(nth), "--count", str(count), "-o", out_name, "--json"]
    if memory:
        args += ["--memory", memory]
    args += ["--", *map(str, cmd)]
    r = subprocess.run(args, capture_output=True, text=True, env=env, cwd=cwd, timeout=timeout)
    paths, error = _written(r.stdout)
    if r.returncode != 0 or not paths:
        why = error or (r.stderr.strip().splitlines()[-1] if r.stderr.strip() else f"exit status {r.returncode}")
        raise RecordError(f"kreplay record -k {kernel}: {why}", r.returncode, r.stderr)
    base = Path(cwd) if cwd else Path.cwd()
    return [open(p if os.path.isabs(p) else base / p) for p in paths]


def _has_match_index(pattern: str) -> bool:
    """Whether an output pattern holds %n (`%%n` is a percent sign and an n)."""
    i = 0
    while i < len(pattern) - 1:
        if pattern[i] == "%":
            if pattern[i + 1] == "n":
                return True
            i += 2
            continue
        i += 1
    return False


def _with_match_index(pattern: str) -> str:
    """The pattern with `-%n` before its extension."""
    head, dot, ext = pattern.rpartition(".")
    if dot and head and "/" not in ext:
        return f"{head}-%n.{ext}"
    return f"{pattern}-%n"


def _written(stdout: str) -> tuple[list[str], str | None]:
    """The capture files named in `record --json`'s output, and its `error` (why nothing was
    captured)."""
    paths: list[str] = []
    error: str | None = None
    for line in stdout.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            v = json.loads(line)
        except json.JSONDecodeError:
            continue
        if not isinstance(v, dict):
            continue
        error = v.get("error") or error
        for c in v.get("captures") or []:
            p = c.get("file") or c.get("path")
            if p:
                paths.append(p)
    return paths, error
