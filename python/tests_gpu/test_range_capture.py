"""A range capture from Python (issue 32; run by scripts/gpu-test.sh, case python-package): a
layer of testdata/apps/torch_block_app.py recorded with `kreplay record --nvtx-range`, opened
with `kreplay.open` (its steps are `kreplay info --json`'s) and replayed bit-exact by
`kreplay.play`."""

import json
import os
import subprocess
import sys

import pytest

import kreplay

APPS = os.environ.get("KREPLAY_APPS")
KREPLAY = os.environ.get("KREPLAY_BIN")
pytestmark = pytest.mark.skipif(not (APPS and KREPLAY),
                                reason="KREPLAY_APPS and KREPLAY_BIN not set: run through scripts/gpu-test.sh")


@pytest.fixture(scope="module")
def layer_capture(tmp_path_factory):
    """layer.1 of the second iteration, recorded once for this module's tests (the first
    iteration allocates inside its layers, which a range refuses: measured on the H200)."""
    out = tmp_path_factory.mktemp("range") / "layer1.krr"
    app = [sys.executable, os.path.join(APPS or "", "torch_block_app.py"), "2"]
    rec = subprocess.run([KREPLAY, "record", "-q", "--nvtx-range", "layer.1", "--nth", "2", "-o", str(out), "--force", "--"] + app,
                         capture_output=True, text=True, timeout=900)
    assert rec.returncode == 0, rec.stderr[-2000:]
    info = json.loads(subprocess.run([KREPLAY, "info", "--json", str(out)], check=True, capture_output=True,
                                     text=True).stdout)
    return str(out), info


def test_a_range_opens_with_the_steps_info_lists(layer_capture):
    path, info = layer_capture
    cap = kreplay.open(path)
    assert cap.is_range
    assert info["range"]["origin"] == "nvtx-range layer.1 #2"
    assert [s.info for s in cap.steps] == info["steps"]
    kernels = [s for s in info["steps"] if s["kind"] == "kernel"]
    assert len(kernels) == info["range"]["kernel_steps"] >= 10


def test_a_range_replays_bit_exact_from_python(layer_capture):
    path, info = layer_capture
    report = kreplay.play(path, passes=3, verify=True)
    assert report["verify"]["matched"] is True, report["verify"]
    assert report["verify"]["deterministic"] is True
    assert len(report["durations_ns"]) == 3
    assert [s["kind"] for s in report.get("steps") or []] == [s["kind"] for s in info["steps"]]
