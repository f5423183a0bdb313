"""Kernel parameters as Python values: what a parameter's C type says about its bytes.

`element_type(ctype)` reads a C parameter type as the kernel's signature spells it (`float`,
`float const*`, `__nv_bfloat16*`, `unsigned long long`, ...) into what kreplay needs: whether
it is a pointer, and the NumPy dtype name of the value (or of what the pointer points at).
Types it cannot read (a struct, a template, `void*`, a driver launch without a signature)
give no dtype and a reason, which `Region.array()` and `Param.value` pass on.
`decode_value` turns a parameter's recorded bytes into a `float`, `int` or `bool` (a pointer
into its address as an `int`), or keeps them as `bytes` when the type is not known.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["ElementType", "Param", "element_type", "decode_value"]

# Words of a C type that say nothing of its bytes.
_QUALIFIERS = frozenset({"const", "volatile", "__restrict__", "__restrict", "restrict", "struct", "class"})

# Named scalar types, by the name the demangler or a header spells (CUDA targets Linux LP64:
# `long` is 8 bytes; `char` is signed on x86-64, the common host).
_NAMED = {
    "float": "float32",
    "double": "float64",
    "half": "float16",
    "__half": "float16",
    "__nv_half": "float16",
    "bfloat16": "bfloat16",
    "bf16": "bfloat16",
    "__bf16": "bfloat16",
    "nv_bfloat16": "bfloat16",
    "__nv_bfloat16": "bfloat16",
    "bool": "bool",
    "_Bool": "bool",
    "size_t": "uint64",
    "ssize_t": "int64",
    "ptrdiff_t": "int64",
    "intptr_t": "int64",
    "uintptr_t": "uint64",
    "CUdeviceptr": "uint64",
    "cudaTextureObject_t": "uint64",
    "cudaSurfaceObject_t": "uint64",
    "CUtexObject": "uint64",
    "CUsurfObject": "uint64",
    **{f"int{b}_t": f"int{b}" for b in (8, 16, 32, 64)},
    **{f"uint{b}_t": f"uint{b}" for b in (8, 16, 32, 64)},
}
_INTEGER_WORDS = frozenset({"signed", "unsigned", "char", "short", "int", "long"})


@dataclass(frozen=True)
class ElementType:
    """What a C parameter type says: `pointer` (the value is a device address), `dtype` (the
    NumPy dtype name of the value, or of the elements a pointer points at; None when not
    known) and `why` (when `dtype` is None: why not, in words to show the user)."""

    ctype: str | None
    pointer: bool
    dtype: str | None
    why: str | None = None


def _integer_dtype(words: list[str]) -> str | None:
    """`unsigned long long`, `short int`, `signed char`, ... as a dtype name (LP64)."""
    if not words or not set(words) <= _INTEGER_WORDS or words.count("long") > 2:
        return None
    unsigned = "unsigned" in words
    if "char" in words:
        bits = 8
    elif "short" in words:
        bits = 16
    elif "long" in words:
        bits = 64
    else:
        bits = 32
    return f"{'u' if unsigned else ''}int{bits}"


def _scalar_dtype(base: str) -> str | None:
    """The dtype name of a scalar C type written without qualifiers, or None."""
    if base.startswith("std::"):
        base = base[len("std::") :]
    return _NAMED.get(base) or _integer_dtype(base.split())


def element_type(ctype: str | None, pointer_hint: bool = False) -> ElementType:
    """Reads a kernel parameter's C type (as `kreplay info` shows it). `pointer_hint` is the
    recorder's own finding that the value is a device address, used when the capture holds
    no signature (a driver launch of an unmangled name)."""
    if ctype is None:
        why = (
            "the capture holds no signature for this kernel (launched by a name that is not "
            "mangled), so the parameter's type is not known"
        )
        return ElementType(None, pointer_hint, None, why)
    if "<" in ctype or "(" in ctype or "[" in ctype or "&" in ctype:
        return ElementType(ctype, "*" in ctype, None, f"`{ctype}` is a template, function, array or reference type")
    words = [w for w in ctype.replace("*", " * ").split() if w not in _QUALIFIERS]
    depth = words.count("*")
    base = " ".join(w for w in words if w != "*")
    if depth > 1:
        return ElementType(ctype, True, "uint64")  # it points at pointers: device addresses
    if base == "void":
        why = f"`{ctype}` says nothing of what it points at" if depth else "`void` holds no value"
        return ElementType(ctype, depth == 1, None, why)
    dtype = _scalar_dtype(base)
    if dtype is None:
        why = f"`{base}` is not a C scalar type kreplay knows (a struct, class, enum or typedef)"
        return ElementType(ctype, depth == 1, None, why)
    return ElementType(ctype, depth == 1, dtype)


def _decode_scalar(dtype: str, raw: bytes) -> Any:
    """A scalar's little-endian bytes as a Python value of its dtype."""
    if dtype == "bool":
        return raw[0] != 0
    if dtype == "bfloat16":  # the upper half of a float32: no ml_dtypes needed for one value
        return struct.unpack("<f", b"\0\0" + raw)[0]
    if dtype.startswith("float"):
        return struct.unpack({"float16": "<e", "float32": "<f", "float64": "<d"}[dtype], raw)[0]
    return int.from_bytes(raw, "little", signed=not dtype.startswith("u"))


def decode_value(et: ElementType, raw: bytes) -> Any:
    """A parameter's recorded bytes as a Python value: a pointer's address (`int`), a scalar
    of a known type (`float`, `int`, `bool`), or the bytes themselves when the type is not
    known or its size is not the size the launch passed."""
    if et.pointer:
        return int.from_bytes(raw, "little") if len(raw) == 8 else bytes(raw)
    if et.dtype is None or np.dtype(_plain(et.dtype)).itemsize != len(raw):
        return bytes(raw)
    return _decode_scalar(et.dtype, raw)


def _plain(dtype: str) -> str:
    """A dtype name NumPy knows without ml_dtypes (same size)."""
    return "uint16" if dtype == "bfloat16" else dtype


# The keys of the dictionaries `Capture.params` used to return; `param[key]` still reads
# them (`value` now typed, as `param.value`).
_COMPAT_KEYS = ("index", "offset", "size", "pointer", "value_hex", "type", "value", "region", "region_offset")


@dataclass(frozen=True)
class Param:
    """One kernel parameter: `index`, `offset` and `size` in the argument buffer, its C
    `type` (None when the capture has no signature), `value` as a Python value (`int`,
    `float`, `bool`; a pointer's address as an `int`; `bytes` when the type is not known),
    and for a pointer the region it points into (`region_id`, `region_offset`, `region`).
    `element` is what the type says (`element.dtype`: the dtype `array()` gives). `info` is
    the parameter as `kreplay info --json` prints it; `param["value"]`, `param["region"]`
    and the other keys of that dictionary still work (`value` typed)."""

    index: int
    offset: int
    size: int
    type: str | None
    value: Any
    pointer: bool
    region_id: int | None
    region_offset: int | None
    element: ElementType = field(repr=False)
    info: dict = field(repr=False, compare=False)
    _capture: Any = field(default=None, repr=False, compare=False)

    @classmethod
    def from_info(cls, info: dict, capture: Any = None) -> "Param":
        """A Param from its `kreplay info --json` entry (and the Capture it belongs to)."""
        et = element_type(info.get("type"), bool(info.get("pointer")))
        raw = bytes.fromhex(info.get("value_hex") or "")
        return cls(
            index=info["index"],
            offset=info["offset"],
            size=info["size"],
            type=info.get("type"),
            value=decode_value(et, raw),
            pointer=et.pointer,
            region_id=info.get("region"),
            region_offset=info.get("region_offset"),
            element=et,
            info=info,
            _capture=capture,
        )

    def __getitem__(self, key: str) -> Any:
        """The old dictionary form: `param["value"]` (typed), `param["region"]` (the id), ..."""
        if key == "value":
            return self.value
        if key not in _COMPAT_KEYS:
            raise KeyError(key)
        return self.info.get(key)

    def get(self, key: str, default: Any = None) -> Any:
        """As `dict.get` on the old dictionary form."""
        if key == "value":
            return self.value
        return self.info.get(key, default) if key in _COMPAT_KEYS else default

    @property
    def region(self) -> Any:
        """The Region this pointer points into (None for a value, or a pointer into no
        captured region)."""
        if self.region_id is None or self._capture is None:
            return None
        return self._capture.region(self.region_id)

    def _target(self) -> Any:
        r = self.region
        if r is None:
            what = "is not a pointer" if not self.pointer else "points into no captured region"
            raise ValueError(f"parameter {self.index}" + (f" (`{self.type}`)" if self.type else "") + f" {what}: it has no array")
        return r

    def array(self, dtype: Any = None, post: bool = False) -> np.ndarray:
        """What this pointer points at, from its address to the end of its region, as a
        read-only NumPy array of the type the parameter says (`float*` gives float32) or of
        `dtype`. `post=True`: after the dispatch (the recorded output)."""
        from . import arrays

        r = self._target()
        element = dtype if dtype is not None else arrays.param_element(self)
        return arrays.view(r._bytes(post), element, offset=self.region_offset or 0)

    def tensor(self, dtype: Any = None, post: bool = False) -> Any:
        """As `array()`, as a `torch.Tensor` sharing the decoded memory (DLPack, no copy; a
        decoding of its own, so writes reach no other array). Needs PyTorch."""
        from . import arrays

        r = self._target()
        element = dtype if dtype is not None else arrays.param_element(self)
        return arrays.tensor(r._bytes(post, writable=True), element, offset=self.region_offset or 0)
