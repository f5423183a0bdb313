"""`kreplay verify`, `diff`, `pack` and `extract` from Python: the same library functions as
the command-line tool, with the same defaults, the same results (the fields of the commands'
`--json` output) and the same error text (OSError for the file system, FileExistsError for
an output already there without `force=True`, ValueError for a damaged capture or a refused
request). None of them needs a GPU."""

from __future__ import annotations

import json
import os
import warnings
from typing import Any

from . import _native

__all__ = ["verify", "diff", "pack", "extract"]


def _path(p: str | os.PathLike | None) -> str | None:
    return None if p is None else os.fspath(p)


def verify(path: str | os.PathLike, salvage: str | os.PathLike | None = None, force: bool = False) -> dict:
    """Checks every checksum, the END event and the trailer of a capture, as `kreplay verify`.

    Returns what `kreplay verify --json PATH` prints: for an intact file `{"file", "intact":
    True, "events", "chunks", "raw_bytes", "stored_bytes"}`; for a damaged one `{"file",
    "intact": False, "error" (the kind: "truncated", "checksum", "incomplete", ...), "offset"
    (the byte where the damage is, or None), "message"}`. A damaged capture is a result, not
    an exception; a file that cannot be opened raises OSError.

    `salvage=OUT` is `--salvage OUT`: a damaged capture's intact part is written to OUT as a
    complete capture (only once it verifies; never over the capture itself; an existing OUT
    only with `force=True`), and the result gains `"salvaged"`: what salvage kept and dropped
    (`kept_events`, `intact_events`, `dropped_regions`, `replay_blockers`: why it cannot be
    replayed, empty when it can, ...). An intact capture is left alone, with a RuntimeWarning.
    """
    verdict, salvaged, note = _native.verify(os.fspath(path), _path(salvage), force)
    result = json.loads(verdict)
    if note:
        warnings.warn(f"kreplay: {note}", RuntimeWarning, stacklevel=2)
    if salvaged is not None:
        result["salvaged"] = json.loads(salvaged)
    return result


def diff(a: str | os.PathLike, b: str | os.PathLike, state: str = "post", as_: str = "f32") -> dict:
    """Compares two captures region by region, as `kreplay diff A B`; returns what `kreplay
    diff --json` prints.

    `state` is `--state`: "post" (the memory as the kernel left it: the results) or "pre"
    (as it found it: the inputs). `as_` is `--as`: the element type differing bytes are read
    as for the error figures ("f32", "f16", "bf16", "i32", "u8"). The result has `identical`,
    `kernel_a`/`kernel_b`, and per pair of regions (paired by id, else address, else role,
    of the same size) `differing_bytes`, `differing_chunks`, `differing_elements`, `max_abs`,
    `max_rel`, `first_offset` and `nan_mismatches`; `unmatched_a`/`unmatched_b` list regions
    with no partner. A capture without recorded output compared with state="post" raises
    ValueError (compare the inputs with state="pre"). When either is a range capture the
    result also has `steps`: `steps_a`, `steps_b` and `differing` (each `{"index", "what"}`:
    the steps both hold that differ in kind, stream, kernel, geometry, argument values or
    what a copy or fill moves; a single capture counts as one kernel step).
    """
    return json.loads(_native.diff(os.fspath(a), os.fspath(b), state, as_))


def pack(
    src: str | os.PathLike,
    dst: str | os.PathLike,
    level: int | None = None,
    redact: bool = False,
    drop_post: bool = False,
    force: bool = False,
) -> dict:
    """Rewrites a capture for sharing into `dst`, as `kreplay pack SRC -o DST`; the output is
    byte for byte the command's.

    `level` is `--level`: the zstd level 1-22 (None: 19 for captures of up to 1 GiB of
    memory, 3 above). `redact=True` replaces the application's data by generated values of
    the same types (pointer words, handles, module globals and the argument bytes kept; the
    recorded output dropped). `drop_post=True` keeps where the kernel writes but not what
    (a smaller file; `play --verify` then checks determinism only). A range capture keeps
    its steps; `redact=True` also replaces the host bytes its copies hold (what a
    host-to-device copy sent, what a device-to-host copy received), its stream and event
    handles and its per-step digests, and lists each in the redaction. An existing `dst` is
    replaced only with `force=True`. The output is written to DST.partial and renamed once
    it verifies.

    Returns what the pack did: `file`, `output`, `size` (bytes of the output), `level`,
    `reference` (what the post chunks hold: "recorded", "dropped" or "redacted"), `redacted_bytes`, `kept_bytes`,
    `kept_regions`, `dropped_post_bytes`, `fields_replaced`, `fields_kept`.
    """
    return _native.pack(os.fspath(src), os.fspath(dst), level, redact, drop_post, force)


def extract(
    path: str | os.PathLike,
    out_dir: str | os.PathLike | None = None,
    repro: str | os.PathLike | None = None,
    force: bool = False,
) -> dict:
    """Unpacks a capture into files, as `kreplay extract PATH -o OUT_DIR [--repro REPRO]`; the
    files are the command's.

    Into `out_dir` (`-o`): `module-N.cubin` (or `.ptx`, `.fatbin`), `args.bin` (the argument
    bytes; for a range capture per step instead: `step-K-args.bin` for a kernel step,
    `step-K-host.bin` and `step-K-received.bin` for the host bytes of its copies),
    `region-ID-ADDRESS.bin` for each region (all-zero chunks as sparse holes) and
    `region-ID-ADDRESS.post.bin` for the recorded output of written ones, and `capture.json`
    (what `kreplay info --json` prints). Into `repro` (`--repro`): a standalone reproducer
    (one C++ file on the CUDA driver API, a Makefile, the code objects and the region files;
    `make -C REPRO && REPRO/repro`; not yet for a range capture: ValueError says so). At
    least one of them is needed. A directory must be
    new or empty, and the files may add up to at most 16 x the capture's size (at least
    256 MiB), unless `force=True`.

    Returns `{"output", "modules", "regions", "repro", "repro_files"}` (None where not asked).
    """
    return _native.extract(os.fspath(path), _path(out_dir), _path(repro), force)

