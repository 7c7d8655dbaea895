"""A deliberately naive reference for tropical products, independent of the engines.

Everything here is scalar Python written straight from the documented rules
(docs/semantics.md), one (i, j, k) at a time, so that a bug shared with the
vectorised CPU engine (or the CUDA kernels) is unlikely.  It must never import
``tropical_gemm.engines``; it takes only the semiring's *name* from the tests.

Floats: float32 values are computed in Python floats (binary64) and rounded
once to float32.  For a single + or x of two float32 values that is exactly
IEEE float32 arithmetic (binary64 has more than 2*24+2 bits, so the double
rounding is innocuous).  Integers are computed exactly in Python ints and then
clamped, so saturation is spelt out rather than inherited from numpy.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

# (⊕, ⊗) per canonical semiring name, as the documentation states them.
RULES: dict[str, tuple[str, str]] = {
    "max_plus": ("max", "plus"),
    "min_plus": ("min", "plus"),
    "max_mul": ("max", "times"),
    "max_min": ("max", "min"),
    "min_max": ("min", "max"),
}


def zero_of(semiring: str, dtype: np.dtype) -> float | int:
    """The identity of ⊕: 0 for max_mul, else ∓inf (or the integer dtype's min/max)."""
    add, mul = RULES[semiring]
    dtype = np.dtype(dtype)
    if mul == "times":
        return 0
    if dtype.kind == "f":
        return -math.inf if add == "max" else math.inf
    info = np.iinfo(dtype)
    return int(info.min) if add == "max" else int(info.max)


def one_of(semiring: str, dtype: np.dtype) -> float | int:
    """The identity of ⊗."""
    _, mul = RULES[semiring]
    dtype = np.dtype(dtype)
    if mul == "plus":
        return 0
    if mul == "times":
        return 1
    if dtype.kind == "f":
        return math.inf if mul == "min" else -math.inf
    info = np.iinfo(dtype)
    return int(info.max) if mul == "min" else int(info.min)


def _clamp(value: int, dtype: np.dtype) -> int:
    info = np.iinfo(dtype)
    return min(max(value, int(info.min)), int(info.max))


def _round(value: float, dtype: np.dtype) -> float:
    """Round a binary64 value to ``dtype`` (the single IEEE rounding of that format)."""
    with np.errstate(over="ignore"):
        return float(np.dtype(dtype).type(value))


def _nan_ignoring(pick, x: float, y: float) -> float:
    """min/max in the numpy.fmin/fmax sense: a NaN operand is ignored."""
    if math.isnan(x):
        return y
    if math.isnan(y):
        return x
    return pick(x, y)


def otimes(semiring: str, x, y, dtype: np.dtype):
    """One candidate ``x ⊗ y`` under the documented rules for ``dtype``."""
    _, mul = RULES[semiring]
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        if mul == "plus":
            return _round(x + y, dtype)  # IEEE: -inf + inf is NaN
        if mul == "times":
            return _round(x * y, dtype)  # IEEE: 0 * inf is NaN
        return _nan_ignoring(min if mul == "min" else max, x, y)
    if mul == "plus":
        zero = zero_of(semiring, dtype)
        if x == zero or y == zero:
            return zero  # the zero absorbs; it never wraps or saturates back
        return _clamp(x + y, dtype)
    if mul == "times":
        return _clamp(x * y, dtype)
    return min(x, y) if mul == "min" else max(x, y)


def _strictly_better(semiring: str, candidate, best) -> bool:
    """Does ``candidate`` beat ``best`` under ⊕?  NaN never does."""
    add, _ = RULES[semiring]
    return candidate > best if add == "max" else candidate < best


def _product_2d(a: list, b: list, m: int, k: int, n: int, semiring: str, dtype: np.dtype):
    zero = zero_of(semiring, dtype)
    c = [[zero] * n for _ in range(m)]
    idx = [[-1] * n for _ in range(m)]
    for i in range(m):
        for j in range(n):
            best, arg = zero, -1
            for kk in range(k):
                cand = otimes(semiring, a[i][kk], b[kk][j], dtype)
                if _strictly_better(semiring, cand, best):
                    best, arg = cand, kk
            c[i][j] = best + 0 if isinstance(best, int) else best + 0.0  # -0.0 -> +0.0
            idx[i][j] = arg
    return c, idx


def _batch_indices(shape: tuple[int, ...]):
    return itertools.product(*(range(s) for s in shape))


def _operand_index(index: tuple[int, ...], operand_batch: tuple[int, ...]) -> tuple[int, ...]:
    offset = len(index) - len(operand_batch)
    return tuple(0 if s == 1 else index[offset + d] for d, s in enumerate(operand_batch))


def reference_matmul(a: np.ndarray, b: np.ndarray, semiring: str) -> tuple[np.ndarray, np.ndarray]:
    """``(C, argmax)`` of a (batched, broadcast) product, one scalar at a time.

    argmax is the smallest k whose candidate equals C, or -1 when no candidate
    strictly beats the zero.
    """
    a, b = np.asarray(a), np.asarray(b)
    dtype = a.dtype
    assert b.dtype == dtype
    m, k = a.shape[-2:]
    n = b.shape[-1]
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    c = np.empty((*batch, m, n), dtype=dtype)
    idx = np.empty((*batch, m, n), dtype=np.int32)
    for index in _batch_indices(batch):
        a2 = a[_operand_index(index, a.shape[:-2])].tolist()
        b2 = b[_operand_index(index, b.shape[:-2])].tolist()
        c2, i2 = _product_2d(a2, b2, m, k, n, semiring, dtype)
        c[index] = np.array(c2, dtype=dtype).reshape(m, n)
        idx[index] = np.array(i2, dtype=np.int32).reshape(m, n)
    return c, idx


def winner_is_a(semiring: str, x: float, y: float) -> bool:
    """For ⊗ = min/max: did the candidate take A's value?  A on ties; a NaN loses."""
    _, mul = RULES[semiring]
    if math.isnan(y):
        return True
    if math.isnan(x):
        return False
    return x <= y if mul == "min" else x >= y


def reference_backward(
    grad_c: np.ndarray, a: np.ndarray, b: np.ndarray, argmax: np.ndarray, semiring: str
) -> tuple[np.ndarray, np.ndarray]:
    """Route each ``grad_c[..., i, j]`` to its argmax k, one scalar at a time.

    Additions happen in the operands' dtype in the documented order (batch by
    batch, then row-major over (i, j)), so the result is bit-exact.
    """
    _, mul = RULES[semiring]
    dtype = a.dtype
    to_dtype = dtype.type
    grad_a = np.zeros(a.shape, dtype=dtype)
    grad_b = np.zeros(b.shape, dtype=dtype)
    m, n = grad_c.shape[-2:]
    for index in _batch_indices(grad_c.shape[:-2]):
        ia = _operand_index(index, a.shape[:-2])
        ib = _operand_index(index, b.shape[:-2])
        for i in range(m):
            for j in range(n):
                kk = int(argmax[(*index, i, j)])
                if kk < 0:
                    continue
                g = to_dtype(grad_c[(*index, i, j)])
                x, y = a[(*ia, i, kk)], b[(*ib, kk, j)]
                with np.errstate(invalid="ignore", over="ignore"):
                    if mul == "plus":
                        grad_a[(*ia, i, kk)] += g
                        grad_b[(*ib, kk, j)] += g
                    elif mul == "times":
                        grad_a[(*ia, i, kk)] += to_dtype(g * y)
                        grad_b[(*ib, kk, j)] += to_dtype(g * x)
                    elif winner_is_a(semiring, float(x), float(y)):
                        grad_a[(*ia, i, kk)] += g
                    else:
                        grad_b[(*ib, kk, j)] += g
    return grad_a, grad_b


def assert_same_bits(got, want: np.ndarray) -> None:
    """Same dtype, shape and bits as ``want`` (``got`` may be a cupy array).

    NaN's sign and payload are the platform's (x86 makes -NaN, CUDA +NaN),
    so a NaN matches any NaN.
    """
    got = got.get() if hasattr(got, "get") else np.asarray(got)
    assert got.shape == want.shape and got.dtype == want.dtype
    if got.dtype.kind == "f":
        nan = np.isnan(want)
        np.testing.assert_array_equal(np.isnan(got), nan)
        bits = f"i{got.itemsize}"
        np.testing.assert_array_equal(got[~nan].view(bits), want[~nan].view(bits))
    else:
        np.testing.assert_array_equal(got, want)
