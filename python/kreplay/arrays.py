"""A region's decoded bytes as typed arrays: the dtype a region is read as (the one its
parameters say, or the caller's), NumPy views without a copy, and `torch.Tensor`s through
DLPack without a copy."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from .values import numpy_dtype

__all__ = ["region_dtype", "param_dtype", "view", "tensor"]


def _named(param: Any) -> str:
    """`parameter 2 (`float*`)`, or without a known type `parameter 2`."""
    return f"parameter {param.index}" + (f" (`{param.type}`)" if param.type else "")


def param_dtype(param: Any) -> np.dtype:
    """The dtype a pointer parameter says its elements have (`float*`: float32); ValueError
    saying why not and what to pass when its type does not say."""
    et = param.element
    if et.dtype is None:
        raise ValueError(
            f"{_named(param)}: {et.why}; pass the element type, "
            "e.g. .array(dtype='float32') (or 'uint8' for the bytes)"
        )
    return numpy_dtype(et.dtype)


def region_dtype(region: Any, dtype: Any = None) -> np.dtype:
    """`dtype` when given; else the one the parameters pointing into the region agree on.
    ValueError naming the region and what to pass when none says or they disagree."""
    if dtype is not None:
        return numpy_dtype(dtype)
    params = tuple(region.pointed_by)
    said = {p.element.dtype for p in params if p.element.dtype is not None}
    where = f"region {region.id}" + (f" (global `{region.global_name}`)" if region.global_name else "")
    if len(said) == 1:
        return numpy_dtype(said.pop())
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


def view(buf: Any, dt: np.dtype, offset: int = 0, shape: Sequence[int] | None = None) -> np.ndarray:
    """The bytes of `buf` from `offset` as a NumPy array of `dt`, no copy (writable only when
    `buf` is). Trailing bytes that do not fill an element are left out; `shape` reshapes."""
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


# Element types NumPy cannot hand to DLPack (bfloat16 is ml_dtypes' own; bool only in newer
# NumPy): exported as an integer of the same size, reinterpreted by torch (no copy either way).
_THROUGH = {"bfloat16": ("int16", "bfloat16"), "bool": ("uint8", "bool")}


def tensor(buf: Any, dt: np.dtype, offset: int = 0, shape: Sequence[int] | None = None) -> Any:
    """The bytes of `buf` as a CPU `torch.Tensor` of `dt`, sharing `buf`'s memory (DLPack,
    no copy). `buf` must be writable: torch has no read-only tensors."""
    torch = _torch()
    a = view(buf, dt, offset, shape)
    through = _THROUGH.get(dt.name)
    if through is None:
        return torch.from_dlpack(a)
    exported, name = through
    return torch.from_dlpack(a.view(exported)).view(getattr(torch, name))
