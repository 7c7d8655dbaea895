"""The dtypes every semiring supports, and the rules that pick result dtypes.

Kept apart from the semiring catalogue because the array engines, the kernel
specs and the public API all need these rules without needing a semiring.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

ENGINE_DTYPES: tuple[str, ...] = ("float32", "float64", "int32", "int64")
"""The dtypes the engines and kernels compute in."""
HALF_DTYPES: tuple[str, ...] = ("float16", "bfloat16")
"""Stored in half precision, computed in float32 and rounded once (exact: see docs/semantics.md).

numpy arrays hold bfloat16 through the ``ml_dtypes`` package (as JAX's do),
torch tensors natively; cupy has float16 only.
"""
SUPPORTED_DTYPES: tuple[str, ...] = ENGINE_DTYPES + HALF_DTYPES
"""The dtypes every semiring accepts; both operands must have the same one.

Examples:
    >>> import tropical_gemm as tg
    >>> tg.SUPPORTED_DTYPES
    ('float32', 'float64', 'int32', 'int64', 'float16', 'bfloat16')
"""
FLOAT_DTYPES: tuple[str, ...] = ("float32", "float64")
"""The float dtypes the engines compute in (gradients exist for these and the halves)."""

BOOLEAN_DTYPES: tuple[str, ...] = ("bool", "uint8")
"""The operand dtypes of the boolean semiring ``and_or``; uint8 reads nonzero as true, and the result is bool."""
_TRUTH = frozenset(np.dtype(name) for name in BOOLEAN_DTYPES)
_BOOL = np.dtype(np.bool_)


#: The supported dtypes themselves, so that the check on every call is one
#: dict lookup (``np.dtype.name`` formats a string each time it is read).
#: bfloat16 is not here: numpy knows it only once ``ml_dtypes`` is imported.
_SUPPORTED: dict[np.dtype, str] = {np.dtype(name): name for name in (*ENGINE_DTYPES, "float16")}


def canonical_dtype(dtype: object) -> np.dtype:
    """``np.dtype(dtype)`` if it is supported, else a ``TypeError`` that lists what is."""
    if isinstance(dtype, np.dtype) and dtype in _SUPPORTED and dtype.isnative:
        return dtype
    try:
        dt = np.dtype(dtype)
    except TypeError as exc:
        raise TypeError(f"unsupported dtype {dtype!r}; supported: {', '.join(SUPPORTED_DTYPES)}") from exc
    if not dt.isnative and dt.newbyteorder("=") in _SUPPORTED:
        raise byte_order_error(dt)
    if not ((dt in _SUPPORTED and dt.isnative) or dt.name == "bfloat16"):
        hint = " (bool operands take the boolean semiring, semiring='and_or')" if dt.kind == "b" else ""
        raise TypeError(f"unsupported dtype {dt}; supported: {', '.join(SUPPORTED_DTYPES)}{hint}")
    return dt


def byte_order_error(dtype: np.dtype) -> TypeError:
    """The error for an array in the other byte order than this machine's: it names the conversion."""
    order = "big" if dtype.byteorder == ">" else "little"
    return TypeError(f"unsupported dtype {dtype}: it is {order}-endian, not this machine's byte order; convert it, "
                     f"e.g. x.astype(x.dtype.newbyteorder('='))")


def truth_dtype(a: object, b: object) -> np.dtype:
    """The result dtype of a boolean product (bool), once both operands are truth values.

    Examples:
        >>> from tropical_gemm.dtypes import truth_dtype
        >>> truth_dtype("bool", "uint8")
        dtype('bool')
        >>> truth_dtype("bool", "float32")
        Traceback (most recent call last):
        ...
        TypeError: the and_or semiring takes bool (or uint8 0/1) operands, got float32; pass x != 0 or x.astype(bool)
    """
    for dtype in (a, b):
        if np.dtype(dtype) not in _TRUTH:
            raise TypeError(f"the and_or semiring takes bool (or uint8 0/1) operands, got {np.dtype(dtype)}; "
                            "pass x != 0 or x.astype(bool)")
    return _BOOL


def common_dtype(a: object, b: object) -> np.dtype:
    """The operands' shared dtype; different dtypes are an error, never a silent cast.

    Examples:
        >>> from tropical_gemm.dtypes import common_dtype
        >>> common_dtype("float32", "float64")
        Traceback (most recent call last):
        ...
        TypeError: operands have different dtypes (float32 and float64); cast one explicitly, e.g. b.astype(a.dtype)
    """
    da, db = canonical_dtype(a), canonical_dtype(b)
    if da != db:
        raise different_dtypes(da, db)
    return da


def promote_untyped(operands: Sequence[Any]) -> list[Any]:
    """Operands without a dtype of their own (lists, tuples, Python scalars) as numpy would promote them.

    numpy's rule (NEP 50), as ``numpy.matmul`` and ``numpy.einsum`` apply it:
    the dtype is ``np.result_type`` of the arrays' dtype, the lists as
    ``np.asarray`` makes them and the Python scalars, which are weak (a
    float32 array with ``2.0`` stays float32; with a list of floats it is
    float64, as in numpy), and every operand is converted to it.  Arrays of
    two dtypes are left as they are, for ``common_dtype``'s error: the rule
    that arrays are never cast silently comes after numpy's.  A Python int
    too large for the dtype is numpy's ``OverflowError``.

    Examples:
        >>> import numpy as np
        >>> from tropical_gemm.dtypes import promote_untyped
        >>> [x.dtype for x in promote_untyped([np.ones(2, np.float32), [1.0, 2.0]])]
        [dtype('float64'), dtype('float64')]
        >>> [x.dtype for x in promote_untyped([np.ones(2, np.float32), 2.0])]
        [dtype('float32'), dtype('float32')]
    """
    untyped_kinds = (list, tuple, int, float, complex)  # bool is an int; anything else keeps its own rules
    typed = {x.dtype for x in operands if hasattr(x, "dtype")}
    if len(typed) > 1 or not any(isinstance(x, untyped_kinds) for x in operands):
        return list(operands)
    untyped = [x if isinstance(x, (int, float, complex)) else np.asarray(x) for x in operands
               if isinstance(x, untyped_kinds)]
    dtype = np.result_type(*typed, *untyped)
    return [np.asarray(x, dtype=dtype) if isinstance(x, (*untyped_kinds, np.ndarray)) else x for x in operands]


def different_dtypes(first: object, second: object, cast: str = "b.astype(a.dtype)") -> TypeError:
    """The error for operands of two dtypes, with the cast that fixes it (torch's is ``b.to(a.dtype)``)."""
    return TypeError(f"operands have different dtypes ({first} and {second}); cast one explicitly, e.g. {cast}")


def is_half(dtype: np.dtype) -> bool:
    """float16 or bfloat16: stored in half precision, computed in float32."""
    return dtype.itemsize == 2 and dtype.name in HALF_DTYPES


def differentiable(dtype: np.dtype) -> bool:
    """A float dtype of the library (gradients exist for these): float32, float64 or a half."""
    return dtype.name in FLOAT_DTYPES or is_half(dtype)


#: The dtypes of an argmax, in this machine's byte order: what ``argmax_dtype`` gives, and all the engines read.
INDEX_DTYPES: tuple[np.dtype, np.dtype] = (np.dtype(np.int32), np.dtype(np.int64))


def argmax_dtype(k: int) -> np.dtype:
    """int32 indices, unless K is so large that an index needs 64 bits."""
    return INDEX_DTYPES[0] if k < 2**31 else INDEX_DTYPES[1]


#: The kernels' dtype names: the supported dtypes', and bool, the boolean semiring's (its einsum's copies,
#: reductions and walk on the GPU).
_KERNEL_NAMES: dict[np.dtype, str] = {**_SUPPORTED, _BOOL: "bool"}


def dtype_name(dtype: np.dtype) -> str:
    """The kernels' name of a supported dtype or bool, without numpy's per-call string formatting."""
    return _KERNEL_NAMES[dtype]
