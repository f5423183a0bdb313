"""pytest plugin (registered through the `pytest11` entry point): the `kreplay_record`
fixture records a kernel of a command a test runs, into the test's temporary directory.

    def test_saxpy_replays(kreplay_record):
        cap = kreplay_record(["./app", "saxpy"], kernel="saxpy")
        report = cap.play(passes=8, verify=True)
        assert report["verify"]["matched"]
"""

from __future__ import annotations

import re
from typing import Any, Callable, Sequence

import pytest

import kreplay


@pytest.fixture
def kreplay_record(tmp_path) -> Callable[..., Any]:
    """`kreplay_record(cmd, kernel, nth=1, count=1, **kwargs)`: the Capture (a list of them
    with count > 1), written under the test's tmp_path unless `out` is given."""

    def _record(cmd: Sequence[str], kernel: str, **kwargs: Any):
        name = re.sub(r"[^A-Za-z0-9_.-]+", "_", kernel)[:60] or "kernel"
        many = kwargs.get("count", 1) > 1
        out = kwargs.pop("out", tmp_path / (f"{name}-%n.krr" if many else f"{name}.krr"))
        caps = kreplay.record(cmd, kernel=kernel, out=out, **kwargs)
        return caps[0] if len(caps) == 1 else caps

    return _record
