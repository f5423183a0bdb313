"""`region.tensor()` with PyTorch (issue 36; run by the GPU suite's python-package case, where
torch is installed): a capture's region as a `torch.Tensor` of the parameter's type, sharing
the decoded memory through DLPack (no copy), bfloat16 included without ml_dtypes, and on to
the GPU."""

from pathlib import Path

import numpy as np
import pytest

import kreplay
from kreplay import arrays
from kreplay.values import Param

torch = pytest.importorskip("torch", reason="torch is not installed (the GPU machine's python3 has it)")

SAXPY = Path(__file__).resolve().parents[2] / "testdata" / "captures" / "cuda-saxpy.krr"


def test_a_regions_tensor_is_its_parameters_type_and_values():
    cap = kreplay.open(SAXPY)
    n, a, x, y = cap.params
    t = y.region.tensor()
    assert t.dtype == torch.float32 and t.numel() == y.region.size // 4 and t.device.type == "cpu"
    assert torch.equal(t, torch.from_numpy(np.array(y.region.array())))
    out = y.tensor(post=True)[: n.value]
    torch.testing.assert_close(out, a.value * x.tensor()[: n.value] + t[: n.value], rtol=1e-6, atol=1e-6)


def test_the_tensor_shares_the_decoded_memory():
    f = kreplay._native.CaptureFile(str(SAXPY))
    buf = f.region_bytes(1, False, True)
    t = arrays.tensor(buf, "float32")
    a = arrays.view(buf, "float32")
    assert t.data_ptr() == a.ctypes.data, "torch.from_dlpack copied"
    t[3] = 42.0
    assert a[3] == 42.0


def test_bfloat16_tensors_need_no_ml_dtypes(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "ml_dtypes", None)
    cap = kreplay.open(SAXPY)
    info = dict(cap.info["params"][3], type="__nv_bfloat16*")
    t = Param.from_info(info, cap).tensor()
    assert t.dtype == torch.bfloat16 and t.numel() == cap.regions[1].size // 2
    high = cap.regions[1].array("float32").view(np.uint32) >> 16
    assert torch.equal(t.view(torch.int16)[1::2], torch.from_numpy(high.astype(np.uint16).view(np.int16)))


@pytest.mark.skipif(not Path("/dev/nvidiactl").exists(), reason="no GPU")
def test_the_tensor_goes_to_the_gpu():
    t = kreplay.open(SAXPY).regions[1].tensor()
    assert torch.equal(t.cuda().cpu(), t)
