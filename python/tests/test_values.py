"""Typed values (issue 36): parameters as Python values, the dtype a C type says, regions read
as the element type their parameters say, bfloat16 through ml_dtypes, tensors through DLPack
without a copy, and a docstring on every public object."""

import ctypes
import inspect
import sys
import types
from pathlib import Path

import numpy as np
import pytest

import kreplay
from kreplay import arrays
from kreplay.arrays import numpy_dtype
from kreplay.values import ElementType, Param, decode_value, element_type

CAPTURES = Path(__file__).resolve().parents[2] / "testdata" / "captures"
SAXPY = CAPTURES / "cuda-saxpy.krr"


@pytest.mark.parametrize(
    "ctype, pointer, dtype",
    [
        ("float", False, "float32"),
        ("double", False, "float64"),
        ("half", False, "float16"),
        ("__half", False, "float16"),
        ("bf16", False, "bfloat16"),
        ("__nv_bfloat16", False, "bfloat16"),
        ("bool", False, "bool"),
        ("char", False, "int8"),
        ("signed char", False, "int8"),
        ("unsigned char", False, "uint8"),
        ("short", False, "int16"),
        ("unsigned short", False, "uint16"),
        ("int", False, "int32"),
        ("unsigned int", False, "uint32"),
        ("unsigned", False, "uint32"),
        ("long", False, "int64"),
        ("unsigned long", False, "uint64"),
        ("long long", False, "int64"),
        ("unsigned long long", False, "uint64"),
        ("long unsigned int", False, "uint64"),
        ("int8_t", False, "int8"),
        ("std::int64_t", False, "int64"),
        ("uint16_t", False, "uint16"),
        ("uint32_t", False, "uint32"),
        ("size_t", False, "uint64"),
        ("float*", True, "float32"),
        ("float const*", True, "float32"),
        ("const float *", True, "float32"),
        ("float* __restrict__", True, "float32"),
        ("__nv_bfloat16 const*", True, "bfloat16"),
        ("unsigned long long const*", True, "uint64"),
        ("int const volatile*", True, "int32"),
        ("float**", True, "uint64"),  # points at device addresses
    ],
)
def test_c_types_read_as_their_dtype(ctype, pointer, dtype):
    et = element_type(ctype)
    assert (et.pointer, et.dtype, et.why) == (pointer, dtype, None)


@pytest.mark.parametrize(
    "ctype, pointer, why",
    [
        ("Batch", False, "not a C scalar type"),
        ("Batch*", True, "not a C scalar type"),
        ("void*", True, "says nothing of what it points at"),
        ("cute::Tensor<float, 4>", False, "template"),
        ("thrust::pair<int, int>*", True, "template"),
        ("void (*)(int)", True, "template, function"),
        ("long long long", False, "not a C scalar type"),
    ],
)
def test_types_kreplay_cannot_read_say_why(ctype, pointer, why):
    et = element_type(ctype)
    assert et.dtype is None and et.pointer == pointer
    assert why in et.why


def test_without_a_signature_the_recorders_pointer_finding_is_kept():
    assert element_type(None, pointer_hint=True).pointer
    assert not element_type(None).pointer
    assert "no signature" in element_type(None).why


@pytest.mark.parametrize(
    "ctype, raw, value",
    [
        ("int", (-7).to_bytes(4, "little", signed=True), -7),
        ("unsigned int", (2**32 - 1).to_bytes(4, "little"), 2**32 - 1),
        ("float", bytes.fromhex("0000c03f"), 1.5),
        ("double", bytes.fromhex("000000000000f83f"), 1.5),
        ("__half", bytes.fromhex("003e"), 1.5),
        ("__nv_bfloat16", bytes.fromhex("c03f"), 1.5),
        ("bool", b"\x01", True),
        ("bool", b"\x00", False),
        ("char", b"\xff", -1),
        ("float*", bytes.fromhex("000080f4c97f0000"), 0x7FC9F4800000),
    ],
)
def test_values_decode_to_python_types(ctype, raw, value):
    v = decode_value(element_type(ctype), raw)
    assert v == value and type(v) is type(value)


def test_values_of_unknown_types_or_sizes_stay_bytes():
    assert decode_value(element_type("Batch"), b"\x01\x02") == b"\x01\x02"
    assert decode_value(element_type(None), b"\x00\x00@@") == b"\x00\x00@@"
    assert decode_value(element_type("int"), b"\x01\x00") == b"\x01\x00", "2 bytes are no int"


def test_saxpys_parameters_are_typed_values_with_the_regions_they_point_into():
    cap = kreplay.open(SAXPY)
    n, a, x, y = cap.params
    assert (n.value, a.value) == (4194304, 1.5) and type(n.value) is int and type(a.value) is float
    assert x.pointer and isinstance(x.value, int)
    assert x.value == int(cap.info["params"][2]["value"], 16)
    assert (x.region_id, x.region_offset, y.region_id) == (0, 0, 1)
    assert x.region.id == 0 and cap.region(x.value).id == 0
    assert n.region is None and not n.pointer
    # The old dictionary keys still read, `value` now typed.
    assert n["value"] == 4194304 and a["value"] == 1.5 and y["region"] == 1 and x["type"] == "float const*"
    assert x.get("nope", 3) == 3 and n.get("region") is None
    with pytest.raises(KeyError):
        n["nope"]


def test_a_region_reads_as_the_type_its_parameter_says():
    cap = kreplay.open(SAXPY)
    n, a, x, y = cap.params
    xs = x.region.array()
    assert xs.dtype == np.float32 and len(xs) == x.region.size // 4 and not xs.flags.writeable
    assert np.array_equal(xs, x.region.array("float32"))
    assert np.array_equal(x.array(), xs)
    np.testing.assert_allclose(y.array(post=True)[: n.value], a.value * xs[: n.value] + y.array()[: n.value], rtol=1e-6)
    tex = kreplay.open(CAPTURES / "texture-table.krr")
    assert tex.params[0].region.array().dtype == np.uint64


def test_a_parameter_pointing_inside_a_region_reads_from_its_address():
    cap = kreplay.open(SAXPY)
    info = dict(cap.info["params"][3], region_offset=8)
    p = Param.from_info(info, cap)
    assert np.array_equal(p.array(), cap.params[3].array()[2:])


def test_regions_no_parameter_types_say_what_to_pass():
    cap = kreplay.open(SAXPY)
    coef = next(r for r in cap.regions if r.global_name == "coef")
    with pytest.raises(ValueError, match=r"global `coef`.*no kernel parameter points at it.*dtype="):
        coef.array()
    assert coef.array("uint8").nbytes == coef.size
    extra = kreplay.open(CAPTURES / "driver-extra.krr")
    with pytest.raises(ValueError, match="region 0: parameter 0: the capture holds no signature.*dtype="):
        extra.regions[0].array()
    with pytest.raises(ValueError, match="parameter 2 is not a pointer"):
        extra.params[2].array()
    batch = kreplay.open(CAPTURES / "cuda-pointers.krr").params[0]
    assert batch.type == "Batch" and isinstance(batch.value, bytes) and len(batch.value) == batch.size


def _with_params(region, *ctypes):
    """The region as if parameters of these C types pointed into it."""
    ps = tuple(
        Param.from_info({"index": i, "offset": 8 * i, "size": 8, "pointer": True, "type": t, "value_hex": "00" * 8,
                         "region": region.id, "region_offset": 0})
        for i, t in enumerate(ctypes)
    )
    return kreplay.Region(**{**{f: getattr(region, f) for f in region.__dataclass_fields__}, "pointed_by": ps})


def test_parameters_that_disagree_on_a_regions_type_ask_which():
    y = kreplay.open(SAXPY).regions[1]
    with pytest.raises(ValueError, match="parameter 0 as float32, parameter 1 as int32: pass dtype="):
        _with_params(y, "float*", "int*").array()
    assert _with_params(y, "float*", "float const*").array().dtype == np.float32
    assert _with_params(y, "float*", "Batch*").array().dtype == np.float32, "one type known, the other silent"


def test_bfloat16_through_ml_dtypes():
    pytest.importorskip("ml_dtypes", reason="ml_dtypes not installed (pip install ml-dtypes)")
    y = _with_params(kreplay.open(SAXPY).regions[1], "__nv_bfloat16*")
    b = y.array()
    assert b.dtype.name == "bfloat16" and len(b) == y.size // 2
    # A float32's upper half is the bfloat16 of it, rounded down: the same bits.
    assert np.array_equal(b.view(np.uint16)[1::2], (y.array("float32").view(np.uint32) >> 16).astype(np.uint16))
    assert y.array("bf16").dtype == b.dtype


def test_bfloat16_without_ml_dtypes_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "ml_dtypes", None)  # import fails as if not installed
    with pytest.raises(ImportError, match="pip install ml-dtypes"):
        numpy_dtype("bfloat16")
    with pytest.raises(ImportError, match="pip install ml-dtypes"):
        _with_params(kreplay.open(SAXPY).regions[1], "__nv_bfloat16*").array()
    # One value needs no ml_dtypes.
    assert decode_value(element_type("__nv_bfloat16"), bytes.fromhex("c03f")) == 1.5


def test_region_bytes_are_writable_only_when_decoded_so():
    f = kreplay._native.CaptureFile(str(SAXPY))
    assert memoryview(f.region_bytes(1)).readonly
    with pytest.raises((BufferError, TypeError), match="read-only|not writable"):
        ctypes.c_char.from_buffer(f.region_bytes(1))  # asks for a writable buffer
    assert ctypes.c_char.from_buffer(f.region_bytes(1, False, True)) is not None
    w = memoryview(f.region_bytes(1, False, True))
    assert not w.readonly
    orig = memoryview(f.region_bytes(1))[5]
    w[5] = (orig + 1) % 256
    assert memoryview(f.region_bytes(1, False, True))[5] == orig, "each writable decoding is its own"
    assert w[5] == (orig + 1) % 256


def test_tensor_without_torch_says_what_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(ImportError, match="pip install torch"):
        kreplay.open(SAXPY).regions[1].tensor()


def _numpy_torch():
    """A stand-in for torch made of NumPy: DLPack in, `.view(dtype)` to reinterpret (the two
    calls `tensor()` makes), so the plumbing is tested where torch is not installed."""
    ml = pytest.importorskip("ml_dtypes", reason="ml_dtypes not installed (pip install ml-dtypes)")
    return types.SimpleNamespace(from_dlpack=np.from_dlpack, bfloat16=ml.bfloat16, bool=np.bool_)


def test_tensor_goes_through_dlpack_without_a_copy(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", _numpy_torch())
    buf = bytearray(np.arange(8, dtype=np.float32).tobytes())
    t = arrays.tensor(buf, "float32")
    assert np.shares_memory(t, np.frombuffer(buf, np.uint8)) and t.dtype == np.float32
    bf = arrays.tensor(buf, "bfloat16")
    assert bf.dtype.name == "bfloat16" and np.shares_memory(bf, np.frombuffer(buf, np.uint8))
    assert arrays.tensor(buf, "bool").dtype == np.bool_
    y = kreplay.open(SAXPY).regions[1]
    t = y.tensor()
    assert t.flags.writeable and np.array_equal(t, y.array())
    t[0] += 1
    assert y.array()[0] == t[0] - 1, "a tensor's decoding is its own"


def test_a_torch_tensor_shares_the_decoded_memory():
    torch = pytest.importorskip("torch", reason="torch not installed: the GPU machine runs this (python-package)")
    buf = bytearray(np.arange(8, dtype=np.float32).tobytes())
    t = arrays.tensor(buf, "float32")
    assert t.data_ptr() == np.frombuffer(buf, np.uint8).ctypes.data, "no copy"
    buf[0:4] = np.float32(9).tobytes()
    assert t[0].item() == 9.0
    y = kreplay.open(SAXPY).regions[1]
    assert y.tensor().dtype == torch.float32
    assert torch.equal(y.tensor(), torch.from_numpy(np.array(y.array())))
    assert arrays.tensor(buf, "bfloat16").dtype == torch.bfloat16


def _public(obj):
    """The public members of a class (its own, not object's)."""
    for name, member in vars(obj).items():
        if not name.startswith("_") or name in ("__getitem__",):
            yield name, member


def test_every_public_object_has_a_docstring():
    undocumented = []
    for name in kreplay.__all__:
        obj = getattr(kreplay, name)
        if name == "__version__":
            continue
        if not inspect.getdoc(obj):
            undocumented.append(name)
        if inspect.isclass(obj):
            for mname, member in _public(obj):
                if callable(member) or isinstance(member, (property, classmethod, staticmethod)):
                    if not inspect.getdoc(member):
                        undocumented.append(f"{name}.{mname}")
    for mod in (kreplay, kreplay.values, kreplay.arrays):
        if not inspect.getdoc(mod):
            undocumented.append(mod.__name__)
        for fname in getattr(mod, "__all__", ()):
            if not inspect.getdoc(getattr(mod, fname)):
                undocumented.append(f"{mod.__name__}.{fname}")
    assert not undocumented, f"help() says nothing of: {undocumented}"


def test_the_docstring_check_finds_an_undocumented_method():
    class Bare:
        """Documented."""

        def method(self):
            pass

    assert [n for n, m in _public(Bare) if callable(m) and not inspect.getdoc(m)] == ["method"]


def test_element_type_is_a_value():
    assert element_type("float*") == ElementType("float*", True, "float32")
