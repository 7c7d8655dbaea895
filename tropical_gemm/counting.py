"""Counting tropical products: ``matmul`` on (values, counts) pairs, and the steps einsum runs on them.

A counting semiring (``semirings.COUNTING_CATALOGUE``) pairs each tropical
value with the number of ways it is reached.  Its operands are tuples
``(values, counts)`` of one shape; this module checks them once, as ``api``
checks plain operands, and hands the engine four arrays.  The engines report
a count that went past int64, or a negative count they read, as bits of a
one-element flags array; ``raise_on_flags`` turns them into exceptions.  On
the GPU reading the flags waits for the product, so einsum keeps one flags
array for all its steps and reads it once, at the end.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

from .dtypes import byte_order_error
from .engines import select_engine
from .semirings import (COUNT_DTYPE, COUNT_NEGATIVE, COUNT_OVERFLOW, COUNTING_VALUE_DTYPES, CountingSemiring,
                        counting_semirings, find_counting_semiring, get_semiring)
from .shapes import NO_VECTORS, product_shape, promote_vectors

_INT32 = np.dtype(np.int32)


def matmul(a: Any, b: Any, semiring: "str | CountingSemiring", *, argmax: bool = False, out: Any = None):
    """The counting product of the pairs ``a = (values, counts)`` and ``b``: a pair ``(values, counts)``.

    ``tropical_gemm.matmul`` sends tuple operands here; see its docstring and
    the semantics page.
    """
    sr = counting_semiring(semiring)
    if argmax:
        raise ValueError(f"argmax=True is not defined for {sr.name}: every tied k adds to the count, none wins; "
                         "use the plain semiring (e.g. max_plus) for the argmax")
    if out is not None:
        raise TypeError(f"out is not supported for {sr.name}; the product returns new (values, counts) arrays")
    (va, ca), (vb, cb) = operand_pair(a, "a"), operand_pair(b, "b")
    engine = select_engine(va, ca, vb, cb)
    va, vb = engine.as_array(va), engine.as_array(vb)
    ca, cb = counts_array(engine, ca, va, "a"), counts_array(engine, cb, vb, "b")
    values_dtype(va.dtype, vb.dtype)
    va, vb, vectors = promote_vectors(va, vb)
    ca, cb, _ = promote_vectors(ca, cb)
    shape = product_shape(va.shape, vb.shape)
    flags = new_flags(engine, va)
    values, counts = product(engine, va, ca, vb, cb, sr, shape.out_shape, flags)
    raise_on_flags(engine, flags, sr)
    if vectors != NO_VECTORS:
        return vectors.squeeze(values), vectors.squeeze(counts)
    return values, counts


def counting_semiring(semiring: object) -> CountingSemiring:
    """The counting semiring named; for any other semiring, an error saying that pairs are for counting ones."""
    sr = find_counting_semiring(semiring)
    if sr is not None:
        return sr
    name = get_semiring(semiring).name  # an unknown name raises here, listing the valid ones
    raise TypeError(f"(values, counts) pairs are the operands of the counting semirings "
                    f"({', '.join(counting_semirings())}); {name} takes arrays (a tuple operand is read as such a "
                    "pair: pass nested tuples as np.asarray(x))")


def operand_pair(x: Any, label: str) -> tuple[Any, Any]:
    """``x`` as ``(values, counts)``: a tuple of two arrays, or a ``TypeError`` naming what it is."""
    if not (isinstance(x, tuple) and len(x) == 2):
        described = f"a tuple of {len(x)}" if isinstance(x, tuple) else type(x).__name__
        raise TypeError(f"operand {label} of a counting semiring must be a tuple (values, counts) of two arrays "
                        f"of one shape, got {described}")
    masked = sys.modules.get("numpy.ma")
    for part, array in zip(("values", "counts"), x):
        library = type(array).__module__.split(".")[0]
        if library in ("torch", "dask") or (masked is not None and isinstance(array, masked.MaskedArray)):
            raise TypeError(f"operand {label}: the {part} are a {type(array).__module__}.{type(array).__name__}; "
                            "the counting semirings take numpy or cupy arrays (a masked array's mask would be "
                            "ignored; pass a torch tensor as t.numpy() or cupy.from_dlpack(t))")
    return x


def values_dtype(*dtypes: np.dtype) -> np.dtype:
    """The values' one dtype, which must be one of ``COUNTING_VALUE_DTYPES``."""
    if any(d != dtypes[0] for d in dtypes):
        listed = " and ".join(str(d) for d in dict.fromkeys(dtypes))
        raise TypeError(f"the values have different dtypes ({listed}); cast them to one, e.g. float64")
    if not dtypes[0].isnative:  # the kernels read this machine's byte order
        raise byte_order_error(dtypes[0])
    if dtypes[0].name not in COUNTING_VALUE_DTYPES:
        raise TypeError(f"the values of a counting semiring must be {' or '.join(COUNTING_VALUE_DTYPES)}, got "
                        f"{dtypes[0]}; cast them, e.g. values.astype(np.float64) (integers up to 2**53 stay exact)")
    return dtypes[0]


def counts_array(engine: Any, counts: Any, values: Any, label: str) -> Any:
    """``counts`` as the engine's int64 array, shaped like ``values``, or an error naming the problem."""
    counts = engine.as_array(counts)
    if tuple(counts.shape) != tuple(values.shape):
        raise ValueError(f"operand {label}: the counts have shape {tuple(counts.shape)} but the values "
                         f"{tuple(values.shape)}; each value needs its count")
    kind = counts.dtype.kind
    if kind not in "iu" or (kind == "u" and counts.dtype.itemsize == 8):
        raise TypeError(f"operand {label}: counts must be integers that fit int64 (numbers of ways), got "
                        f"{counts.dtype}; pass e.g. np.ones(shape, dtype=np.int64)")
    return counts if counts.dtype == COUNT_DTYPE else counts.astype(COUNT_DTYPE)


def new_flags(engine: Any, like: Any) -> Any:
    """A zeroed one-element int32 array where ``like`` lives, for the engines' flag bits."""
    flags = engine.empty((1,), _INT32, like)
    if engine.NAME == "cpu":
        flags[0] = 0
    else:  # a memset: a CuPy fill would compile a kernel of CuPy's own
        flags.data.memset_async(0, flags.nbytes)
    return flags


def product(engine: Any, va: Any, ca: Any, vb: Any, cb: Any, sr: CountingSemiring, out_shape: tuple[int, ...],
            flags: Any) -> tuple[Any, Any]:
    """New ``(values, counts)`` of shape ``out_shape`` from the engine; its flag bits OR'd into ``flags``."""
    values = engine.empty(out_shape, va.dtype, va)
    counts = engine.empty(out_shape, COUNT_DTYPE, va)
    engine.count_forward(va, ca, vb, cb, sr, values, counts, flags)
    return values, counts


def raise_on_flags(engine: Any, flags: Any, sr: CountingSemiring) -> None:
    """Raise for the bits the engine set; on the GPU this waits for the launches before it."""
    bits = int(flags[0]) if engine.NAME == "cpu" else int(flags.get()[0])
    if bits & COUNT_NEGATIVE:
        raise ValueError(f"{sr.name}: a count is negative; counts are numbers of ways (≥ 0)")
    if bits & COUNT_OVERFLOW:
        raise OverflowError(f"{sr.name}: a count of the result is larger than int64 holds (2**63 - 1); counts "
                            "are exact and never wrap, so the result is refused (count a smaller network, or "
                            "its parts)")
