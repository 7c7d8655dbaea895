"""The small kernels around products on the GPU: all of them registry kernels.

CuPy compiles a kernel of its own for each reduction, ufunc, ``where``,
``fill`` with a non-zero value, ``astype`` or fancy index the first time a
process meets it (NVRTC, about 0.15 s each, in CuPy's cache, out of reach of
our lock, stats, warm-up and AOT bundles).  So nothing on a product path
calls them: the split-K ⊕ with its argmax, Dask's merge of two partial
products, the K = 0 result and the copies the backward needs are the
``combine``, ``merge``, ``fill``, ``gather``/``gather_index`` and
``argmax_offset`` kernels of the catalogue (the gathers also copy bool, and
make truth values of uint8: ``truth_values``).  Each takes contiguous
buffers (the gathers: any strides), one thread per element, on CuPy's
current stream.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from . import cupy_module
from ..dtypes import dtype_name
from ..jit import KernelSpec, make_spec, tiers
from ..jit.source import ELEMENTWISE_THREADS
from .cuda.batching import fold_dims
from .cuda.plan import FORWARD_SCALARS, Plan, elementwise_grid

#: Dims a gather indexes (``cuda_src/gather.cu``); arrays with more (after folding) are gathered a
#: leading index at a time.  Einsum's views have an axis per label, and a network's fold into many.
GATHER_DIMS = 24


def launch(spec: KernelSpec, device: int, total: int, args: tuple, stream: "int | None" = None) -> None:
    """One thread per element of ``total``: the grid covers it (capped; the kernels loop); ``stream``: a raw
    handle, None for CuPy's current stream."""
    grid = (elementwise_grid(total),)
    tiers().get_function(spec, device)(grid, (ELEMENTWISE_THREADS,), args, stream=stream)  # after its prefetch, if any


def combine_spec(semiring: str, dtype: str) -> KernelSpec:
    return make_spec("combine", semiring, dtype)


def _i64(*values: int) -> tuple:
    return tuple(np.int64(v) for v in values)


def fill_zero(c: Any, idx: Any, semiring: str) -> None:
    """``c`` (C-contiguous) set to the semiring's zero and ``idx`` (int32, or None) to -1."""
    spec = make_spec("fill", semiring, dtype_name(c.dtype))
    launch(spec, c.device.id, c.size, (c, 0 if idx is None else idx, *_i64(c.size)))


def combine_slices(parts: Any, idx_parts: Any, c: Any, idx: Any, semiring: str, chunk: int) -> None:
    """``c`` = ⊕ of ``parts[s]`` (slice s covering k from s·chunk); ``idx`` the argmax of the earliest winner.

    ``parts`` is (count, *c.shape) and C-contiguous, as are ``c`` and ``idx_parts``/``idx`` (int32, or None).
    """
    spec = combine_spec(semiring, dtype_name(c.dtype))
    null = idx is None
    # no operands and a resolve depth of 0: these partials' argmaxes are exact (each slice resolved its own)
    launch(spec, c.device.id, c.size, (parts, 0 if null else idx_parts, c, 0 if null else idx, 0, 0,
                                       *_i64(parts.shape[0], c.size, chunk, *(0,) * FORWARD_SCALARS), np.int32(0)))


def merge(c1: Any, i1: Any, c2: Any, i2: Any, semiring: str) -> tuple[Any, Any]:
    """``(c1 ⊕ c2, argmax)`` of two C-contiguous partials of consecutive K ranges; the first wins ties.

    The argmax is None when ``i1`` is.
    """
    cupy = cupy_module()
    c = cupy.empty(c1.shape, c1.dtype)
    idx = None if i1 is None else cupy.empty(c1.shape, np.int32)
    spec = make_spec("merge", semiring, dtype_name(c1.dtype))
    null = idx is None
    launch(spec, c1.device.id, c.size, (c1, 0 if null else i1, c2, 0 if null else i2, c, 0 if null else idx,
                                        *_i64(c.size)))
    return c, idx


def offset_argmax(idx: Any, offset: int) -> None:
    """Add ``offset`` to every k of a C-contiguous int32 argmax, in place; -1 stays."""
    launch(make_spec("argmax_offset", "max_plus", "int32"), idx.device.id, idx.size, (idx, *_i64(idx.size, offset)))


def contiguous(x: Any, *, index: bool = False) -> Any:
    """``x`` itself if C-contiguous (and int32 where ``index``), else a C-contiguous copy by a registry kernel.

    ``index``: an int32 copy of an int32 or int64 argmax; other integer dtypes are a ``TypeError``.
    """
    if index and x.dtype not in (np.int32, np.int64):
        raise TypeError(f"argmax on the GPU must be int32 or int64 (as matmul returns it), got {x.dtype}; "
                        "pass argmax.astype('int32')")
    if x.flags.c_contiguous and (not index or x.dtype == np.int32):
        return x
    out = cupy_module().empty(x.shape, np.int32 if index else x.dtype)
    if x.size:
        _gather(x, out, make_spec("gather_index" if index else "gather", "max_plus", dtype_name(x.dtype)))
    return out


def truth_values(x: Any) -> Any:
    """A C-contiguous bool copy of a bool or uint8 array, every nonzero byte written as 1 (True).

    For the and_or einsum's uint8 operands: its reductions, copies and
    configuration walk compare truth values as bytes, so they read only 0
    and 1.  The copy is the bool ``gather``, whose conversion to C++'s
    ``bool`` normalises each byte.
    """
    with x.device:
        out = cupy_module().empty(x.shape, np.bool_)
        if x.size:
            _gather(x, out, make_spec("gather", "and_or", dtype_name(out.dtype)))
    return out


def _gather(x: Any, out: Any, spec: KernelSpec) -> None:
    scalars = gather_scalars(x.shape, tuple(s // x.itemsize for s in x.strides))
    if scalars is None:
        for i in range(x.shape[0]):
            _gather(x[i], out[i], spec)
        return
    launch(spec, x.device.id, x.size, (x, out, *_i64(*scalars)))


def gather_launch(spec: KernelSpec, shape: tuple[int, ...], strides: tuple[int, ...]) -> "Plan | None":
    """The launch (an engine ``Plan``, to bind) of a gather of ``shape``/``strides`` (in elements), or None
    where the view folds into more dims than a gather indexes."""
    scalars = gather_scalars(shape, strides)
    return None if scalars is None else Plan(spec, elementwise_grid(scalars[0]), ELEMENTWISE_THREADS, scalars)


def gather_scalars(shape: tuple[int, ...], strides: tuple[int, ...]) -> "tuple[int, ...] | None":
    """A gather's arguments after ``(x, out)``: the element count, the dims it walks, then ``GATHER_DIMS``
    sizes and strides (padded at the front).

    None where the view folds into more dims than a gather indexes (then it
    is gathered a leading index at a time).  Strides are in elements.

    Examples:
        >>> scalars = gather_scalars((3, 4), (1, 3))      # a transposed 4 x 3: two dims to walk
        >>> scalars[:2], scalars[2 + GATHER_DIMS - 2:2 + GATHER_DIMS], scalars[-2:]
        ((12, 2), (3, 4), (1, 3))
    """
    sizes, steps = fold_dims(shape, strides)
    if len(sizes) > GATHER_DIMS:
        return None
    pad = GATHER_DIMS - len(sizes)
    return (math.prod(shape), len(sizes), *((1,) * pad + sizes), *((0,) * pad + steps))
