"""A corpus (issue 33, `record --each-kernel`): every distinct kernel of the PyTorch block
stack captured once into a folder with its corpus.json, each file there with its SHA-256 and
replayed matched; then the same bounded by --max-bytes: kernels left out, the output
unchanged. Verdicts in krcorpus.py."""

from __future__ import annotations

import pytest

import cases as C
import krcorpus as K
import krsuite as S
from prepared import APPS_SRC

pytestmark = pytest.mark.gpu

# Two iterations: every kernel of the stack runs in the first.
TORCH_BLOCK = ["python3", str(APPS_SRC / "torch_block_app.py"), "2"]
# Three grids, each its own Triton specialization of row_softmax (BLOCK follows the width).
TRITON_SPECS = ["python3", str(APPS_SRC / "triton_corpus_app.py"), "2"]


@C.inline("corpus-each-kernel")
@pytest.mark.timeout(3600)
def test_corpus_each_kernel(case, row, kr):
    base = case.run(TORCH_BLOCK, name="base", timeout=900)
    listed = case.run([kr, "list", "--json", "--"] + TORCH_BLOCK, name="list", timeout=900)
    d = case.path("corpus")
    rec = case.run([kr, "record", "-q", "--each-kernel", "-o", f"{d}/", "--force", "--"] + TORCH_BLOCK,
                   name="rec", timeout=1800)
    manifest = S.load_json(d / "corpus.json")
    caps = (manifest or {}).get("captures") or [] if isinstance(manifest, dict) else []
    sums, plays = {}, {}
    for i, c in enumerate(caps):
        f = d / c["file"]
        sums[c["file"]] = K.sha256_of(f)
        if i < 3:
            case.capture(f)
        p = case.run([kr, "play", f, "--passes", "2", "--verify", "--json"], name=f"play-{i:03d}", timeout=300)
        plays[c["file"]] = S.load_json(p.out_path)
    why = K.corpus_checks(rec.rc, base.out, rec.out, manifest, S.last_json_line(listed.out), sums, plays)

    sizes = [c.get("bytes_stored") or 0 for c in caps]
    bound = K.max_bytes_for(sizes)
    if bound is None:
        why.append(f"the corpus is too small to bound ({len(sizes)} captures, {sum(sizes)} bytes)")
    else:
        b = case.path("bounded")
        rec2 = case.run([kr, "record", "-q", "--each-kernel", "--max-bytes", str(bound), "-o", f"{b}/", "--force",
                         "--"] + TORCH_BLOCK, name="rec-bounded", timeout=1800)
        m2 = S.load_json(b / "corpus.json")
        caps2 = (m2 or {}).get("captures") or [] if isinstance(m2, dict) else []
        sums2 = {c["file"]: K.sha256_of(b / c["file"]) for c in caps2}
        why += [f"bounded: {w}" for w in K.bounded_checks(rec2.rc, base.out, rec2.out, m2, bound, sums2)]
        row["bounded"] = f"{len(caps2)} kept, {len((m2 or {}).get('left_out') or [])} left out under {bound} bytes"
    row.update(kernel=f"{len(caps)} kernels, {sum(sizes)} bytes", matched=not why, why="; ".join(why)[:900])
    assert not why, "; ".join(why)


@C.inline("corpus-triton-specializations")
@pytest.mark.timeout(1200)
def test_corpus_triton_specializations(case, row, kr):
    """Several loaded modules define `row_softmax` (one per specialization): each capture must
    keep the module its launch ran, not the latest loaded (before the fix, the first grid's
    second execution replayed the 1024-wide code and mismatched)."""
    base = case.run(TRITON_SPECS, name="base", timeout=600)
    d = case.path("corpus")
    rec = case.run([kr, "record", "-q", "--each-kernel", "--by", "shape", "--per-kernel", "2", "-k", "row_softmax",
                    "-o", f"{d}/", "--force", "--"] + TRITON_SPECS, name="rec", timeout=900)
    manifest = S.load_json(d / "corpus.json")
    caps = (manifest or {}).get("captures") or [] if isinstance(manifest, dict) else []
    modules, plays = {}, {}
    for i, c in enumerate(caps):
        f = d / c["file"]
        info = S.load_json(case.run([kr, "info", "--json", f], name=f"info-{i}", timeout=120).out_path) or {}
        modules[c["file"]] = [m.get("size") for m in info.get("modules") or []]
        p = case.run([kr, "play", f, "--verify", "--json"], name=f"play-{i}", timeout=300)
        plays[c["file"]] = S.load_json(p.out_path)
    why = K.specialization_checks(rec.rc, base.out, rec.out, manifest, modules, plays, 3, 2)
    row.update(kernel=f"row_softmax, {len(caps)} captures of 3 specializations", matched=not why,
               why="; ".join(why)[:900])
    assert not why, "; ".join(why)
