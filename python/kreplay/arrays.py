"""A region's decoded bytes as typed arrays: the dtype a region is read as (the one its
parameters say, or the caller's), NumPy views without a copy, and `torch.Tensor`s through
DLPack without a copy."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np


__all__ = ["numpy_dtype", "region_element", "param_element", "view", "tensor"]


def numpy_dtype(name: Any) -> np.dtype:
    """A NumPy dtype from a dtype name or anything `numpy.dtype` takes; `bfloat16` through
    the `ml_dtypes` package (ImportError naming `pip install ml-dtypes` without it)."""
    if isinstance(name, str) and name in ("bfloat16", "bf16"):
        try:
            import ml_dtypes
        except ImportError:
            raise ImportError(
                "bfloat16 needs the ml_dtypes package: pip install ml-dtypes "
                "(or pass dtype='uint16' for the raw bits)"
            ) from None
        return np.dtype(ml_dtypes.bfloat16)
    return np.dtype(name)


def _named(param: Any) -> str:
    """`parameter 2 (`float*`)`, or without a known type `parameter 2`."""
    return f"parameter {param.index}" + (f" (`{param.type}`)" if param.type else "")


def param_element(param: Any) -> str:
    """The dtype name a pointer parameter says its elements have (`float*`: float32);
    ValueError saying why not and what to pass when its type does not say."""
    et = param.element
    if et.dtype is None:
        raise ValueError(
            f"{_named(param)}: {et.why}; pass the element type, "
            "e.g. .array(dtype='float32') (or 'uint8' for the bytes)"
        )
    return et.dtype


def region_element(region: Any, dtype: Any = None) -> Any:
    """`dtype` when given; else the dtype name the parameters pointing into the region agree
    on. ValueError naming the region and what to pass when none says or they disagree."""
    if dtype is not None:
        return dtype
    params = tuple(region.pointed_by)
    said = {p.element.dtype for p in params if p.element.dtype is not None}
    where = f"region {region.id}" + (f" (global `{region.global_name}`)" if region.global_name else "")
    if len(said) == 1:
        return said.pop()
    if len(said) > 1:
        how = ", ".join(f"parameter {p.index} as {p.element.dtype}" for p in params if p.element.dtype)
        raise ValueError(f"{where} is pointed into by {how}: pass dtype= to say which")
    if params:
        whys = "; ".join(f"{_named(p)}: {p.element.why}" for p in params)
        raise ValueError(f"{where}: {whys}; pass dtype=, e.g. .array('float32') (or 'uint8' for the bytes)")
    raise ValueError(
        f"{where}: no kernel parameter points at it, so nothing says its element type; "
        "pass dtype=, e.g. .array('float32') (or 'uint8' for the bytes)"
    )


def view(buf: Any, dtype: Any, offset: int = 0, shape: Sequence[int] | None = None) -> np.ndarray:
    """The bytes of `buf` from `offset` as a NumPy array of `dtype` (a name, `bfloat16`
    included, or a NumPy dtype), no copy (writable only when `buf` is). Trailing bytes that do
    not fill an element are left out; `shape` reshapes."""
    dt = numpy_dtype(dtype)
    count = max(len(buf) - offset, 0) // dt.itemsize
    a = np.frombuffer(buf, dtype=dt, count=count, offset=offset if count else 0)
    return a.reshape(shape) if shape is not None else a


def _torch() -> Any:
    try:
        import torch
    except ImportError:
        raise ImportError(
            "tensor() needs PyTorch: pip install torch (array() gives the same data as a NumPy array without it)"
        ) from None
    return torch


# Element types NumPy cannot hand to DLPack (bfloat16 is ml_dtypes' own, and torch needs no
# ml_dtypes for it; bool only in newer NumPy): exported as an integer of the same size and
# reinterpreted by torch (no copy either way).
_THROUGH = {"bfloat16": ("int16", "bfloat16"), "bf16": ("int16", "bfloat16"), "bool": ("uint8", "bool")}


def _through(dtype: Any) -> tuple[str, str] | None:
    """How a dtype crosses DLPack when NumPy cannot export it: (exported as, torch's name)."""
    if isinstance(dtype, str):
        return _THROUGH.get(dtype)
    return _THROUGH.get(getattr(np.dtype(dtype), "name", ""))


def tensor(buf: Any, dtype: Any, offset: int = 0, shape: Sequence[int] | None = None) -> Any:
    """The bytes of `buf` as a CPU `torch.Tensor` of `dtype`, sharing `buf`'s memory (DLPack,
    no copy). `buf` must be writable: torch has no read-only tensors."""
    torch = _torch()
    through = _through(dtype)
    if through is None:
        return torch.from_dlpack(view(buf, dtype, offset, shape))
    exported, name = through
    return torch.from_dlpack(view(buf, exported, offset, shape)).view(getattr(torch, name))
