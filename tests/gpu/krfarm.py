"""The verdict of the farm-play case (issue 33): `kreplay play DIR --jobs 1 --json-lines` over
the testdata captures, against a lone `kreplay play` of each file. Pure: test_helpers_cpu.py
checks it without a GPU."""

from __future__ import annotations

import json

# The target for the farm's per-capture overhead over a lone `kreplay play`.
OVERHEAD_TARGET_PCT = 10.0


def read_lines(text: str) -> list:
    """The JSON lines of a --json-lines file (a line that does not read is None)."""
    out = []
    for line in (text or "").splitlines():
        if line.strip():
            try:
                out.append(json.loads(line))
            except ValueError:
                out.append(None)
    return out


def farm_checks(rc: int, records: list, files: list, farm_s: float, lone_s: dict) -> tuple:
    """(what failed, figures): exit 0, one record per file, each `matched`; the figures are
    the farm's wall time per capture against the lone plays' (the overhead, stated against
    the 10 % target but not failing on it: one run of ten small captures is noise-bound)."""
    why = [] if rc == 0 else [f"farm exit {rc}"]
    good = [r for r in records if isinstance(r, dict)]
    if len(good) != len(records):
        why.append(f"{len(records) - len(good)} line(s) not JSON")
    names = sorted(r.get("file", "").rsplit("/", 1)[-1] for r in good)
    want = sorted(f.rsplit("/", 1)[-1] for f in files)
    if names != want:
        why.append(f"records for {names}, captures {want}")
    bad = [f"{r.get('file')}: {r.get('verdict')} {r.get('error') or ''}".strip() for r in good
           if r.get("verdict") != "matched"]
    why += bad
    n = max(len(files), 1)
    lone_total = sum(lone_s.values())
    per_farm, per_lone = farm_s / n, lone_total / n
    pct = (farm_s / lone_total - 1) * 100 if lone_total > 0 else float("nan")
    over = "" if pct <= OVERHEAD_TARGET_PCT else f" (over the {OVERHEAD_TARGET_PCT:.0f} % target)"
    figures = (f"farm {per_farm * 1e3:.0f} ms per capture ({farm_s:.2f} s for {len(files)}), lone play "
               f"{per_lone * 1e3:.0f} ms per capture: overhead {pct:+.1f} %{over}")
    return why, figures


def report_checks(html: str, records: list) -> list:
    """What is wrong with the farm's `--html` report (issue 40) of `records`: one row per
    capture in its table, one chart with a point per timed capture (a legend dot per kind on
    top), nothing referred to outside the file."""
    if not html:
        return ["no --html report was written"]
    why = []
    good = [r for r in records if isinstance(r, dict)]
    start = html.find('<table id="captures">')
    table = html[start:html.find("</table>", start)] if start >= 0 else ""
    rows = table.count('<tr class="capture')
    if rows != len(good):
        why.append(f"the report has {rows} capture rows for {len(good)} records")
    timed = sum(1 for r in good if (r.get("median_us") or 0) > 0)
    if html.count("<svg") != 1:
        why.append(f"the report has {html.count('<svg')} charts, not 1")
    if html.count("<circle") < timed:
        why.append(f"the chart has {html.count('<circle')} points for {timed} timed captures")
    for outside in ("http://", "https://", "src=", "<script"):
        if outside in html:
            why.append(f"the report refers outside itself ({outside})")
    return why


def devices_checks(rc: int, err: str, results: str) -> list:
    """What is wrong with `CUDA_VISIBLE_DEVICES=0 kreplay play DIR --devices 1` (a GPU this
    process was not given): it must exit 2 before any child starts, naming the ordinal and the
    list, and leave no result."""
    why = [] if rc == 2 else [f"exit {rc}, not 2"]
    for says in ("there is no device 1", "CUDA_VISIBLE_DEVICES=0"):
        if says not in (err or ""):
            why.append(f"the error does not say {says!r}: {(err or '').strip()[-300:]}")
    if (results or "").strip():
        why.append("a child ran: the JSON lines hold results")
    return why


def no_timing_checks(rc: int, records: list, files: list) -> list:
    """What is wrong with `kreplay play DIR --no-timing --json-lines` (issue 33 review): exit
    0, a `matched` record per capture, its one pass's median a time above 0 or null (not
    timed), never 0, no spread (one pass has none), and its key (the path relative to DIR)."""
    why = [] if rc == 0 else [f"exit {rc}"]
    good = [r for r in records if isinstance(r, dict)]
    if len(good) != len(files):
        why.append(f"{len(good)} records for {len(files)} captures")
    for r in good:
        name = r.get("file", "").rsplit("/", 1)[-1]
        if r.get("verdict") != "matched":
            why.append(f"{name}: {r.get('verdict')} {r.get('error') or ''}".strip())
        median = r.get("median_us")
        if median is not None and not (isinstance(median, (int, float)) and median > 0):
            why.append(f"{name}: median_us {median!r}: neither a time nor null")
        if r.get("spread_pct") is not None:
            why.append(f"{name}: spread_pct {r.get('spread_pct')} from one pass")
        if r.get("key") != name:
            why.append(f"{name}: key {r.get('key')!r}")
    return why
