"""The dtypes every semiring supports, and the rules that pick result dtypes.

Kept apart from the semiring catalogue because the array engines, the kernel
specs and the public API all need these rules without needing a semiring.
"""

from __future__ import annotations

import numpy as np

SUPPORTED_DTYPES: tuple[str, ...] = ("float32", "float64", "int32", "int64")
FLOAT_DTYPES: tuple[str, ...] = ("float32", "float64")


def canonical_dtype(dtype: object) -> np.dtype:
    """``np.dtype(dtype)`` if it is supported, else a ``TypeError`` that lists what is."""
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"unsupported dtype {dtype!r}; supported: {', '.join(SUPPORTED_DTYPES)}") from exc
    if dt.name not in SUPPORTED_DTYPES or not dt.isnative:
        raise TypeError(f"unsupported dtype {dt}; supported: {', '.join(SUPPORTED_DTYPES)}")
    return dt


def argmax_dtype(k: int) -> np.dtype:
    """int32 indices, unless K is so large that an index needs 64 bits."""
    return np.dtype(np.int32) if k < 2**31 else np.dtype(np.int64)


def is_float(dtype: np.dtype) -> bool:
    return np.dtype(dtype).kind == "f"
