"""Half-precision storage: operands widen to float32 before an engine, the result narrows once after.

Every engine computes float16 and bfloat16 products in float32, so no engine
or kernel has a half-precision path of its own, and the result is the exact
product rounded once to the half dtype (docs/semantics.md has the proof).
On the CPU the casts are numpy's, which round to nearest even.  On the GPU
they are two kernels of our registry (``widen`` and ``narrow``, in
``cuda_src/cast.cu``): cupy's ``astype`` would have cupy compile a kernel of
its own, outside the verified cache.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

_FLOAT32 = np.dtype(np.float32)

#: Blocks of a cast launch at most; the kernels loop over the rest.
_MAX_BLOCKS = 65536


def widen(engine_name: str, x: Any) -> Any:
    """A new C-contiguous float32 array with the values of the half-precision array ``x`` (exact)."""
    if engine_name == "cpu":
        return np.ascontiguousarray(x, dtype=_FLOAT32)
    return _widen_cuda(x)


def narrow(engine_name: str, x32: Any, out: Any) -> None:
    """Round the C-contiguous float32 array ``x32`` once into ``out`` (same shape, C-contiguous)."""
    if engine_name == "cpu":
        with np.errstate(over="ignore"):  # overflow to inf is the rounding's result, not an accident
            np.copyto(out, x32, casting="unsafe")  # rounds to nearest even
        return
    _cast_cuda("narrow", out.dtype, x32, out, ())


def _widen_cuda(x: Any) -> Any:
    """The ``widen`` kernel over ``x``'s own strides, so a transposed view is read in place."""
    from .engines import cupy_module

    with x.device:
        out = cupy_module().empty(x.shape, dtype=_FLOAT32)
    _widen_into(x, out)
    return out


def _widen_into(x: Any, out: Any) -> None:
    from .jit.source import CAST_DIMS  # the jit is imported with the first device array, not with the package

    if x.ndim > CAST_DIMS:  # the kernel indexes CAST_DIMS dimensions: cast the leading one slice by slice
        for i in range(x.shape[0]):
            _widen_into(x[i], out[i])
        return
    pad = CAST_DIMS - x.ndim
    sizes = (1,) * pad + tuple(x.shape)
    strides = (0,) * pad + tuple(s // x.itemsize for s in x.strides)
    _cast_cuda("widen", x.dtype, x, out, (*sizes, *strides))


def _cast_cuda(op: str, half_dtype: np.dtype, src: Any, dst: Any, extra: tuple[int, ...]) -> None:
    """Launch one cast kernel on the arrays' device, on cupy's current stream."""
    from .jit import get_function, make_spec
    from .jit.source import ELEMENTWISE_THREADS

    n = math.prod(src.shape)
    if n == 0:
        return
    if half_dtype.name != "float16":
        raise TypeError(f"cupy arrays hold float16 but not {half_dtype}; use torch tensors for bfloat16")
    with src.device:
        kernel = get_function(make_spec(op, "", "float16"), src.device.id)
        blocks = min(-(-n // ELEMENTWISE_THREADS), _MAX_BLOCKS)
        kernel((blocks,), (ELEMENTWISE_THREADS,), (src, dst, np.int64(n), *map(np.int64, extra)))
