"""The public functions: validate once, pick an engine, let it write the result.

Validation lives here, not in the engines, so every engine sees arrays whose
shapes, dtypes and output buffers are already known to be right, and every
error names the problem the same way whatever array library was passed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .dtypes import FLOAT_DTYPES, argmax_dtype, canonical_dtype
from .engines import array_kind, select_engine
from .semirings import Semiring, get_semiring
from .shapes import ProductShape, product_shape


def matmul(a: Any, b: Any, semiring: "str | Semiring" = "max_plus", *, argmax: bool = False, out: Any = None):
    """Tropical matrix product ``C[..., i, j] = ⊕_k A[..., i, k] ⊗ B[..., k, j]``.

    Shapes follow ``numpy.matmul`` for operands with at least two dimensions:
    ``(..., M, K) @ (..., K, N)`` with broadcast batch dimensions.  numpy (or
    other host) arrays run on the CPU engine and return numpy arrays; cupy
    arrays, and anything exposing ``__cuda_array_interface__`` or CUDA DLPack,
    run on the GPU and return cupy arrays on the same device.

    With ``argmax=True`` it returns ``(C, argmax)``, where ``argmax[..., i, j]``
    is the smallest ``k`` whose candidate equals ``C[..., i, j]``, or ``-1``
    when ``C`` is the semiring's zero (always the case when K = 0).  ``out`` is
    a C-contiguous array for ``C``, or with ``argmax=True`` a pair of them.

    Examples:
        >>> import numpy as np, tropical_gemm as tg
        >>> tg.matmul(np.array([[0., 1.]]), np.array([[2.], [0.]]), "max_plus")
        array([[2.]])
        >>> c, k = tg.matmul(np.array([[0., 1.]]), np.array([[2.], [0.]]), "min_plus", argmax=True)
        >>> c, k   # min(0 + 2, 1 + 0) = 1, won by k = 1
        (array([[1.]]), array([[1]], dtype=int32))
    """
    engine = select_engine(a, b)
    a, b = engine.as_array(a), engine.as_array(b)
    sr = get_semiring(semiring)
    dtype = _common_dtype(a, b)
    shape = product_shape(a.shape, b.shape)
    c_out, idx_out = _outputs(engine, out, argmax, shape, dtype, a)
    if out is not None:
        _refuse_overlaps(engine, [buf for buf in (c_out, idx_out) if buf is not None], (a, b), "the operands a or b")
    engine.forward(a, b, sr, c_out, idx_out)
    return (c_out, idx_out) if argmax else c_out


def matmul_backward(
    grad_c: Any,
    a: Any,
    b: Any,
    argmax: Any,
    semiring: "str | Semiring" = "max_plus",
    *,
    deterministic: bool = False,
    out: Any = None,
):
    """Gradients ``(grad_a, grad_b)`` of a product, given ``argmax`` from [`matmul`][tropical_gemm.matmul].

    The gradient of each ``C[i, j]`` goes to its winning ``k``: to both
    operands for ``max_plus``/``min_plus``, scaled by the other operand for
    ``max_mul``, and to whichever operand was the min (``max_min``) or the max
    (``min_max``), A on ties.  Entries whose argmax is ``-1`` send nothing.
    Host ``argmax`` values outside ``[-1, K)`` raise ``ValueError``; on the GPU
    they are skipped instead, since checking them would synchronise the stream.
    Broadcast batch dimensions are summed, so each gradient has its operand's
    shape.  Float dtypes only.  ``deterministic=True`` makes the CUDA engine
    add in a fixed order (bit-identical to the CPU engine); the CPU engine is
    always deterministic.  The default CUDA mode adds with hardware float
    atomics, which flush subnormal results to zero; the deterministic mode
    keeps them.  ``out`` is a pair of C-contiguous arrays shaped and typed
    like ``a`` and ``b``, overwritten with the gradients (and returned).

    Examples:
        >>> import numpy as np, tropical_gemm as tg
        >>> a, b = np.array([[0., 3.]]), np.array([[1.], [1.]])
        >>> c, k = tg.matmul(a, b, argmax=True)
        >>> tg.matmul_backward(np.ones_like(c), a, b, k)   # only k = 1 won: a[0, 1] and b[1, 0] get it
        (array([[0., 1.]]), array([[0.],
               [1.]]))
    """
    engine = select_engine(grad_c, a, b, argmax)
    grad_c, a, b, argmax = (engine.as_array(x) for x in (grad_c, a, b, argmax))
    sr = get_semiring(semiring)
    dtype = _common_dtype(a, b)
    if dtype.name not in FLOAT_DTYPES:
        raise TypeError(f"matmul_backward needs float operands ({', '.join(FLOAT_DTYPES)}), got {dtype}")
    shape = product_shape(a.shape, b.shape)
    if tuple(grad_c.shape) != shape.out_shape or grad_c.dtype != dtype:
        raise ValueError(
            f"grad_c must have the product's shape {shape.out_shape} and dtype {dtype}, "
            f"got shape {tuple(grad_c.shape)} and dtype {grad_c.dtype}"
        )
    if tuple(argmax.shape) != shape.out_shape or argmax.dtype.kind != "i":
        raise ValueError(
            f"argmax must be an integer array of shape {shape.out_shape} (as returned by "
            f"matmul(..., argmax=True)), got shape {tuple(argmax.shape)} and dtype {argmax.dtype}"
        )
    grad_a, grad_b = _gradient_outputs(engine, out, a, b, dtype)
    if out is not None:
        _refuse_overlaps(engine, [grad_a, grad_b], (grad_c, a, b, argmax), "grad_c, a, b or argmax")
    engine.backward(grad_c, a, b, argmax, sr, deterministic, grad_a, grad_b)
    return grad_a, grad_b


def _refuse_overlaps(engine: Any, outputs: list[Any], inputs: tuple[Any, ...], inputs_named: str) -> None:
    """A caller's ``out`` buffers must not overlap the inputs or each other: the engine writes them while reading.

    New buffers cannot overlap anything, so callers check only buffers they were given.
    """
    for buf in outputs:
        if any(engine.may_share_memory(buf, x) for x in inputs):
            raise ValueError(f"out must not overlap {inputs_named}")
    if len(outputs) == 2 and engine.may_share_memory(*outputs):
        raise ValueError("out[0] and out[1] must not overlap each other")


def _common_dtype(a: Any, b: Any) -> np.dtype:
    """The operands' shared dtype; different dtypes are an error, never a silent cast."""
    da, db = canonical_dtype(a.dtype), canonical_dtype(b.dtype)
    if da != db:
        raise TypeError(
            f"operands have different dtypes ({da} and {db}); cast one explicitly, "
            "e.g. b.astype(a.dtype)"
        )
    return da


def _outputs(engine: Any, out: Any, want_argmax: bool, shape: ProductShape, dtype: np.dtype, like: Any):
    """The buffers the engine writes: the caller's, after checking them, or new ones where ``like`` lives."""
    idx_dtype = argmax_dtype(shape.k)
    if out is None:
        c_out = engine.empty(shape.out_shape, dtype, like)
        return c_out, engine.empty(shape.out_shape, idx_dtype, like) if want_argmax else None
    if want_argmax:
        if not (isinstance(out, tuple) and len(out) == 2):
            raise TypeError("with argmax=True, out must be a tuple (values, argmax)")
        return (_checked_out(engine, out[0], "out[0]", shape.out_shape, dtype),
                _checked_out(engine, out[1], "out[1]", shape.out_shape, idx_dtype))
    if isinstance(out, tuple):
        raise TypeError("out is a tuple, but argmax=False: pass one array, or argmax=True for (values, argmax)")
    return _checked_out(engine, out, "out", shape.out_shape, dtype), None


def _gradient_outputs(engine: Any, out: Any, a: Any, b: Any, dtype: np.dtype) -> tuple[Any, Any]:
    """The gradient buffers: the caller's ``(grad_a, grad_b)`` after checking them, or new ones."""
    if out is None:
        return engine.empty(tuple(a.shape), dtype, a), engine.empty(tuple(b.shape), dtype, b)
    if not (isinstance(out, tuple) and len(out) == 2):
        raise TypeError("out must be a tuple (grad_a, grad_b)")
    return (_checked_out(engine, out[0], "out[0]", tuple(a.shape), dtype),
            _checked_out(engine, out[1], "out[1]", tuple(b.shape), dtype))


def _checked_out(engine: Any, buf: Any, label: str, shape: tuple[int, ...], dtype: np.dtype) -> Any:
    """``buf`` if the engine can write the result straight into it, else an error naming why.

    ``engine.as_array(buf) is buf`` holds only for the engine's own array type,
    so lists, tensors or subclasses (which would receive a copy) are refused.
    """
    if array_kind(buf) != engine.NAME or engine.as_array(buf) is not buf:
        raise TypeError(f"{label} is a {type(buf).__name__}, but the operands run on the {engine.NAME} engine")
    if tuple(buf.shape) != shape:
        raise ValueError(f"{label} has shape {tuple(buf.shape)}, expected {shape}")
    if buf.dtype != dtype:
        raise TypeError(f"{label} has dtype {buf.dtype}, expected {dtype}")
    if not engine.is_c_contiguous(buf):
        raise ValueError(f"{label} must be C-contiguous")
    if not getattr(getattr(buf, "flags", None), "writeable", True):
        raise ValueError(f"{label} is read-only")
    return buf
