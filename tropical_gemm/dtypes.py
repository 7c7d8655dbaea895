"""The dtypes every semiring supports, and the rules that pick result dtypes.

Kept apart from the semiring catalogue because the array engines, the kernel
specs and the public API all need these rules without needing a semiring.
"""

from __future__ import annotations

import numpy as np

SUPPORTED_DTYPES: tuple[str, ...] = ("float32", "float64", "int32", "int64")
"""The dtypes every semiring and engine accepts; both operands must have the same one.

Examples:
    >>> import tropical_gemm as tg
    >>> tg.SUPPORTED_DTYPES
    ('float32', 'float64', 'int32', 'int64')
"""
FLOAT_DTYPES: tuple[str, ...] = ("float32", "float64")


#: The supported dtypes themselves, so that the check on every call is one
#: dict lookup (``np.dtype.name`` formats a string each time it is read).
_SUPPORTED: dict[np.dtype, str] = {np.dtype(name): name for name in SUPPORTED_DTYPES}


def canonical_dtype(dtype: object) -> np.dtype:
    """``np.dtype(dtype)`` if it is supported, else a ``TypeError`` that lists what is."""
    if isinstance(dtype, np.dtype) and dtype in _SUPPORTED and dtype.isnative:
        return dtype
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"unsupported dtype {dtype!r}; supported: {', '.join(SUPPORTED_DTYPES)}") from exc
    if dt not in _SUPPORTED or not dt.isnative:
        raise TypeError(f"unsupported dtype {dt}; supported: {', '.join(SUPPORTED_DTYPES)}")
    return dt


def argmax_dtype(k: int) -> np.dtype:
    """int32 indices, unless K is so large that an index needs 64 bits."""
    return np.dtype(np.int32) if k < 2**31 else np.dtype(np.int64)


def dtype_name(dtype: np.dtype) -> str:
    """The name of a supported dtype, without numpy's per-call string formatting."""
    return _SUPPORTED[dtype]
