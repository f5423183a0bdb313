"""Verdicts of the touched-pages cases (issue 35), pure functions tested on the CPU
(test_touched_cpu.py): which region of `info --json` is the pool, and what a capture by
touched pages must show in `info --json` and in `play --verify --json`.

The cases make their capture by touched pages from a whole one with `craft_touched` (dist/),
from the page list the app writes: what the Sanitizer-based recorder will write by itself."""

from __future__ import annotations

PAGE = 4096


def pool_region(info: dict, pool_bytes: int):
    """The id of the region of exactly `pool_bytes` bytes (the app's pool), or None."""
    ids = [r.get("id") for r in (info or {}).get("regions") or [] if r.get("size") == pool_bytes]
    return ids[0] if len(ids) == 1 else None


def extents_checks(info: dict, region_id, pages: int, pool_bytes: int) -> list[str]:
    """The capture by touched pages holds `pages` pages of the pool, every other region whole."""
    why = []
    regions = (info or {}).get("regions") or []
    if not regions:
        return ["info --json shows no regions"]
    for r in regions:
        present, size = r.get("present_bytes"), r.get("size")
        if r.get("id") == region_id:
            ext = r.get("extents") or {}
            if present != pages * PAGE:
                why.append(f"pool region {region_id}: {present} bytes present, not {pages} pages of {PAGE}")
            if size != pool_bytes:
                why.append(f"pool region {region_id}: size {size}, not {pool_bytes}")
            if ext.get("page_size") != PAGE or not ext.get("present"):
                why.append(f"pool region {region_id}: extents {ext}")
        elif present != size or r.get("extents") is not None:
            why.append(f"region {r.get('id')}: {present} of {size} bytes present (should be whole)")
    return why


def replay_checks(play_rc: int, play: dict, passes: int, absent_bytes: int) -> list[str]:
    """`play --verify --json` of a faithful capture by touched pages: bit-exact, deterministic
    over `passes` passes, and the absent bytes reported."""
    why = []
    v = (play or {}).get("verify") or {}
    if play_rc != 0:
        why.append(f"play exits {play_rc}")
    if v.get("matched") is not True or v.get("mismatched_bytes"):
        why.append(f"verify: {v.get('mismatched_bytes')} bytes differ ({v.get('first_mismatches')})")
    if v.get("deterministic") is not True:
        why.append("passes differ")
    if (play or {}).get("passes") != passes:
        why.append(f"{(play or {}).get('passes')} passes, not {passes}")
    if (play or {}).get("absent_bytes") != absent_bytes:
        why.append(f"absent_bytes {(play or {}).get('absent_bytes')}, not {absent_bytes}")
    return why


def missing_page_checks(play_rc: int, play: dict, out_region) -> list[str]:
    """`play --verify --json` of a capture that lacks a page the kernel reads: the kernel reads
    the fill, so its output differs, in the output region, and play says so (exit 1)."""
    v = (play or {}).get("verify") or {}
    why = []
    if v.get("matched") is not False or not v.get("mismatched_bytes"):
        why.append(f"a page the kernel reads left out, yet verify says matched={v.get('matched')}")
    mismatches = v.get("first_mismatches") or []
    regions = {m.get("region_id") for m in mismatches}
    if out_region is None:
        why.append("no output region to look for the mismatch in")
    elif regions != {out_region}:
        why.append(f"mismatches in regions {sorted(regions)}, not only the output {out_region}")
    # The kernel read the fill (0xFF: a NaN), so 2 x NaN + 1 is the GPU's canonical NaN
    # 0x7FFFFFFF (bytes ff ff ff 7f): a zero fill would give 1.0 (00 00 80 3f) instead.
    not_nan = [m.get("found") for m in mismatches if m.get("found") not in (0xFF, 0x7F)]
    if not_nan:
        why.append(f"the output read no fill: found bytes {not_nan} where a NaN's are expected")
    if play_rc == 0:
        why.append("play exits 0 on a mismatch")
    return why


def recorder_notes(info) -> list[str]:
    """The recorder's notes of a capture (`info --json`'s annotations under `recorder`)."""
    return [v for k, v in ((info or {}).get("annotations") or []) if k == "recorder"]


def no_bigger(touched_bytes: int, whole_bytes: int) -> bool:
    """A capture by touched pages is no bigger than the whole one, but for its note (a capture
    whose every page was touched holds the same bytes): 4 KiB of slack."""
    return touched_bytes <= whole_bytes + 4096


def size_checks(touched_bytes: int, whole_bytes: int, read_written: int, overhead: int) -> list[str]:
    """The file by touched pages is at most 2 x the bytes read and written plus `overhead`
    (code and metadata: the whole capture's size less its memory), and smaller than the whole."""
    why = []
    if touched_bytes > 2 * read_written + overhead:
        why.append(f"capture by touched pages {touched_bytes} bytes > 2 x {read_written} read and written"
                   f" + {overhead} code and metadata")
    if touched_bytes >= whole_bytes:
        why.append(f"capture by touched pages {touched_bytes} bytes not smaller than the whole {whole_bytes}")
    return why


def touched_phase_ms(record_json: dict):
    """The first capture's `touched` stall phase (the instrumented run, ms) of `record --json`."""
    caps = (record_json or {}).get("captures") or []
    if not caps or not isinstance(caps, list):
        return None
    phases = (caps[0] or {}).get("stall_phases") or []
    ms = [p.get("ms") for p in phases if isinstance(p, dict) and p.get("phase") == "touched"]
    return float(ms[0]) if ms and isinstance(ms[0], (int, float)) else None


def suite_row_checks(name: str, whole: dict, touched: dict) -> list[str]:
    """One case of touched-suite-bench: {rc, out, bytes, matched, said} of its reachable and its
    touched capture. Whatever replays bit-exact whole must replay bit-exact by touched pages,
    with the application's output the same, and the touched capture no bigger."""
    why = []
    if touched.get("out") != whole.get("out") or touched.get("rc") != whole.get("rc"):
        why.append(f"{name}: the app's output or exit changed under --memory touched")
    if whole.get("matched") and not touched.get("matched"):
        why.append(f"{name}: replays whole but not by touched pages ({'; '.join(touched.get('said') or [])})")
    if (touched.get("bytes") or 0) > (whole.get("bytes") or 0) * 1.05 + 65536:
        why.append(f"{name}: touched capture {touched.get('bytes')} bytes > whole {whole.get('bytes')}")
    return why
