"""The public functions: validate once, pick an engine, let it write the result.

Validation lives here, not in the engines, so every engine sees arrays whose
shapes, dtypes and output buffers are already known to be right, and every
error names the problem the same way whatever array library was passed.
Before any of it, the dispatch rule (``frontends``) sends torch tensors and
dask arrays to their front ends, which sit above this module, and lists and
Python scalars are promoted as numpy would.  float16 and bfloat16 operands are widened to float32 for the
engine and the result is rounded once (``half``), so engines never see them.
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

from . import half
from .counting import matmul as counting_matmul
from .dtypes import INDEX_DTYPES, argmax_dtype, common_dtype, differentiable, is_half, promote_untyped, truth_dtype
from .engines import array_kind, select_engine
from .frontends import front_end
from .semirings import Semiring, get_semiring
from .shapes import NO_VECTORS, ProductShape, Vectors, product_shape, promote_vectors

_FLOAT32 = np.dtype(np.float32)


def matmul(a: Any, b: Any, semiring: "str | Semiring" = "max_plus", *, argmax: bool = False, out: Any = None):
    """Tropical matrix product ``C[..., i, j] = ⊕_k A[..., i, k] ⊗ B[..., k, j]``.

    Shapes follow ``numpy.matmul``: ``(..., M, K) @ (..., K, N)`` with
    broadcast batch dimensions, and a 1-D operand acts as a row (``a``) or a
    column (``b``) that is dropped from the result.  numpy (or other host)
    arrays run on the CPU engine and return numpy arrays; cupy arrays, and
    anything exposing ``__cuda_array_interface__`` or CUDA DLPack, run on the
    GPU and return cupy arrays on the same device.  torch tensors (CPU or
    CUDA) go to [`tropical_matmul`][tropical_gemm.torch.tropical_matmul] and
    come back as tensors with autograd; dask arrays go to
    [`tropical_gemm.dask.matmul`][tropical_gemm.dask.matmul] and stay lazy.
    Masked arrays are refused (their mask would be ignored).

    Dtypes are those of ``SUPPORTED_DTYPES``, the same for both operands;
    lists and Python scalars first take numpy's promotion (NEP 50: a list of
    floats is float64, as in ``numpy.matmul``).  float16 and bfloat16 are computed in float32 and rounded once, which is
    the exact result rounded to the half dtype (see the semantics page).
    The boolean semiring ``and_or`` takes bool operands (uint8 reads
    nonzero as true) and returns bool: ``C[i, j]`` is whether some ``k`` has
    both ``A[i, k]`` and ``B[k, j]``, computed on bits packed 64 (CPU) or
    32 (GPU) ks to a word.

    With ``argmax=True`` it returns ``(C, argmax)``, where ``argmax[..., i, j]``
    is the smallest ``k`` whose candidate equals ``C[..., i, j]``, or ``-1``
    when ``C`` is the semiring's zero (always the case when K = 0); for
    ``and_or``, the smallest ``k`` that makes the entry true.  ``out`` is
    a C-contiguous array for ``C``, or with ``argmax=True`` a pair of them.
    An output too large for the machine's memory is a ``MemoryError`` that
    names its size, raised before anything is allocated.

    The counting semirings (``count_max_plus``, ``count_min_plus``) take each
    operand as a tuple ``(values, counts)`` of one shape and return such a
    pair: the tropical product's values, and how many ways reach each one
    (``⊕`` keeps the better value and adds the counts of a tie, ``⊗`` adds
    the values and multiplies the counts).  Values are float32 or float64,
    counts non-negative integers, returned as exact int64: a count past
    ``2**63 - 1`` raises ``OverflowError``, a negative one ``ValueError``.

    Examples:
        >>> import numpy as np, tropical_gemm as tg
        >>> tg.matmul(np.array([[0., 1.]]), np.array([[2.], [0.]]), "max_plus")
        array([[2.]])
        >>> c, k = tg.matmul(np.array([[0., 1.]]), np.array([[2.], [0.]]), "min_plus", argmax=True)
        >>> c, k   # min(0 + 2, 1 + 0) = 1, won by k = 1
        (array([[1.]]), array([[1]], dtype=int32))
        >>> tg.matmul(np.array([0., 1.]), np.array([[2., 0.], [0., 5.]]))   # 1-D: as numpy.matmul
        array([2., 6.])
        >>> v, c = tg.matmul((np.array([[1., 2.]]), np.array([[3, 1]])),
        ...                  (np.array([[1.], [0.]]), np.array([[2], [5]])), "count_max_plus")
        >>> v, c   # 1 + 1 = 2 + 0: both ks reach 2, in 3·2 + 1·5 ways
        (array([[2.]]), array([[11]]))
    """
    if type(a) is not np.ndarray or type(b) is not np.ndarray or out is not None:
        if isinstance(a, tuple) or isinstance(b, tuple):  # (values, counts) pairs: a counting semiring
            return counting_matmul(a, b, semiring, argmax=argmax, out=out)
        front = front_end((a, b), out, "matmul")
        if front is not None:
            return front.matmul(a, b, semiring, argmax=argmax)
        a, b = promote_untyped((a, b))
    engine = select_engine(a, b)
    a, b = engine.as_array(a), engine.as_array(b)
    sr = get_semiring(semiring)
    dtype = truth_dtype(a.dtype, b.dtype) if sr.boolean else common_dtype(a.dtype, b.dtype)
    a, b, vectors = promote_vectors(a, b)
    return _forward(engine, a, b, sr, dtype, product_shape(a.shape, b.shape), vectors, argmax, out)


def planned_product(engine: Any, a: Any, b: Any, sr: Semiring, argmax: bool):
    """``matmul(a, b, sr, argmax=argmax)`` for a caller whose plan already guarantees what ``matmul`` checks.

    For einsum's steps: ``a`` and ``b`` are ``engine``'s own arrays, 3-D,
    ``(nb, m, k)`` and ``(nb, k, n)``, of one supported dtype.  Skipping the
    routing, engine choice and dtype and shape checks matters only for small
    products, where they are most of the host time; the memory check stays.
    """
    nb, m, k = a.shape
    dtype = truth_dtype(a.dtype, b.dtype) if sr.boolean else a.dtype
    return _forward(engine, a, b, sr, dtype, ProductShape((nb,), m, k, b.shape[2]), NO_VECTORS, argmax, None)


def _forward(engine: Any, a: Any, b: Any, sr: Semiring, dtype: np.dtype, shape: ProductShape, vectors: Vectors,
             argmax: bool, out: Any):
    """Allocate (or check) the outputs and let the engine write them; half precision through float32."""
    halved = is_half(dtype)
    _check_fits(engine, _forward_bytes(a, b, shape, dtype, argmax, halved), "the product's outputs")
    c_out, idx_out, returned = _outputs(engine, out, argmax, shape, vectors, dtype, a)
    if out is not None:
        _refuse_overlaps(engine, [buf for buf in (c_out, idx_out) if buf is not None], (a, b), "the operands a or b")
    if halved:
        a, b = half.widen(engine.NAME, a), half.widen(engine.NAME, b)
        c32 = engine.empty(shape.out_shape, _FLOAT32, a)
        engine.forward(a, b, sr, c32, idx_out)
        half.narrow(engine.NAME, c32, c_out)
    else:
        engine.forward(a, b, sr, c_out, idx_out)
    return returned


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
    shape; 1-D operands are promoted as by ``matmul``.  Float dtypes only; for
    float16 and bfloat16 the gradients are summed in float32 and rounded once.
    ``deterministic=True`` makes the CUDA engine add in a fixed order
    (bit-identical to the CPU engine); the CPU engine is always deterministic.
    The default CUDA mode adds with hardware float atomics, which flush
    subnormal results to zero; the deterministic mode keeps them.  ``out`` is
    a pair of C-contiguous arrays shaped and typed like ``a`` and ``b``,
    overwritten with the gradients (and returned).  For torch tensors, use
    autograd instead.

    Examples:
        >>> import numpy as np, tropical_gemm as tg
        >>> a, b = np.array([[0., 3.]]), np.array([[1.], [1.]])
        >>> c, k = tg.matmul(a, b, argmax=True)
        >>> tg.matmul_backward(np.ones_like(c), a, b, k)   # only k = 1 won: a[0, 1] and b[1, 0] get it
        (array([[0., 1.]]), array([[0.],
               [1.]]))
    """
    front_end((a, b, grad_c, argmax), out, "matmul_backward")
    engine = select_engine(grad_c, a, b, argmax)
    grad_c, a, b, argmax = (engine.as_array(x) for x in (grad_c, a, b, argmax))
    sr = get_semiring(semiring)
    if sr.boolean:
        raise TypeError("the and_or semiring has no gradient: its values are truth values")
    dtype = common_dtype(a.dtype, b.dtype)
    if not differentiable(dtype):
        raise TypeError(f"matmul_backward needs float operands (float32, float64, float16, bfloat16), got {dtype}")
    grad_a, grad_b = _gradient_outputs(engine, out, a, b, dtype)
    returned = (grad_a, grad_b) if out is None else out
    a, b, vectors = promote_vectors(a, b)
    shape = product_shape(a.shape, b.shape)
    final = vectors.out_shape(shape.out_shape)
    _check_product_like(grad_c, argmax, final, dtype)
    if out is not None:
        _refuse_overlaps(engine, [grad_a, grad_b], (grad_c, a, b, argmax), "grad_c, a, b or argmax")
    if vectors != NO_VECTORS:  # views: the gradients are C-contiguous, grad_c and argmax lose a size-1 axis
        grad_c, argmax = grad_c.reshape(shape.out_shape), argmax.reshape(shape.out_shape)
        grad_a, grad_b = grad_a.reshape(a.shape), grad_b.reshape(b.shape)
    _backward_into(engine, grad_c, a, b, argmax, sr, deterministic, (grad_a, grad_b))
    return returned


def _backward_into(engine: Any, grad_c: Any, a: Any, b: Any, argmax: Any, sr: Semiring, deterministic: bool,
                   grads: tuple[Any, Any]) -> None:
    """The engine's backward into ``grads``; half-precision operands through float32, rounded once."""
    if not is_half(a.dtype):
        engine.backward(grad_c, a, b, argmax, sr, deterministic, *grads)
        return
    grad_c, a, b = (half.widen(engine.NAME, x) for x in (grad_c, a, b))
    grads32 = engine.empty(a.shape, _FLOAT32, a), engine.empty(b.shape, _FLOAT32, b)
    engine.backward(grad_c, a, b, argmax, sr, deterministic, *grads32)
    for g32, g in zip(grads32, grads):
        half.narrow(engine.NAME, g32, g)


def _check_product_like(grad_c: Any, argmax: Any, shape: tuple[int, ...], dtype: np.dtype) -> None:
    """``grad_c`` and ``argmax`` must be shaped like the product (``dtype``; int32 or int64 indices)."""
    if tuple(grad_c.shape) != shape or grad_c.dtype != dtype:
        raise ValueError(
            f"grad_c must have the product's shape {shape} and dtype {dtype}, "
            f"got shape {tuple(grad_c.shape)} and dtype {grad_c.dtype}"
        )
    if tuple(argmax.shape) != shape or argmax.dtype not in INDEX_DTYPES:  # the engines read no other indices
        raise ValueError(
            f"argmax must be an int32 or int64 array of shape {shape}, in this machine's byte order (as returned "
            f"by matmul(..., argmax=True)), got shape {tuple(argmax.shape)} and dtype {argmax.dtype}"
        )


def _forward_bytes(a: Any, b: Any, shape: ProductShape, dtype: np.dtype, argmax: bool, halved: bool) -> int:
    """The bytes a product allocates: its outputs, and for half precision the float32 copies too."""
    cells = math.prod(shape.out_shape)
    per_cell = dtype.itemsize + (argmax_dtype(shape.k).itemsize if argmax else 0) + (4 if halved else 0)
    return cells * per_cell + (4 * (math.prod(a.shape) + math.prod(b.shape)) if halved else 0)


#: Below this many bytes, allocations are not checked against the memory size (the query costs time).
_CHECKED_BYTES = 2**30


def _check_fits(engine: Any, nbytes: int, what: str) -> None:
    """A clear ``MemoryError`` naming the size when ``nbytes`` exceeds the memory it would live in."""
    if nbytes < _CHECKED_BYTES:
        return
    total = _memory_size(engine.NAME)
    if nbytes > total:
        raise MemoryError(
            f"{what} need {_size(nbytes)}, more than the {_size(total)} of "
            f"{'host memory' if engine.NAME == 'cpu' else 'GPU memory'}; split the product "
            "(e.g. over the batch or rows of a) or use tropical_gemm.dask for chunked products"
        )


def _memory_size(engine_name: str) -> int:
    """Physical host memory, or the current GPU's memory."""
    if engine_name == "cpu":
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    from .engines import cupy_module

    return int(cupy_module().cuda.runtime.memGetInfo()[1])


def _size(nbytes: int) -> str:
    """``3.6 TiB``: bytes in the largest binary unit that keeps a number of at least 1."""
    value, unit = float(nbytes), "bytes"
    for unit in ("bytes", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if value < 1024:
            break
        value /= 1024
    return f"{value:.1f} {unit}" if unit != "bytes" else f"{nbytes} bytes"


def _refuse_overlaps(engine: Any, outputs: list[Any], inputs: tuple[Any, ...], inputs_named: str) -> None:
    """A caller's ``out`` buffers must not overlap the inputs or each other: the engine writes them while reading.

    New buffers cannot overlap anything, so callers check only buffers they were given.
    """
    for buf in outputs:
        if any(engine.may_share_memory(buf, x) for x in inputs):
            raise ValueError(f"out must not overlap {inputs_named}")
    if len(outputs) == 2 and engine.may_share_memory(*outputs):
        raise ValueError("out[0] and out[1] must not overlap each other")


def _outputs(engine: Any, out: Any, want_argmax: bool, shape: ProductShape, vectors: Vectors, dtype: np.dtype,
             like: Any):
    """``(values, argmax, returned)``: the buffers the engine writes, shaped as the promoted product, and
    what the call returns (the caller's ``out``, or the new buffers without the axes of 1-D operands).
    """
    final = vectors.out_shape(shape.out_shape)
    idx_dtype = argmax_dtype(shape.k)
    if out is None:
        c_new = engine.empty(shape.out_shape, dtype, like)
        idx_new = engine.empty(shape.out_shape, idx_dtype, like) if want_argmax else None
        c_ret = vectors.squeeze(c_new) if vectors != NO_VECTORS else c_new
        if not want_argmax:
            return c_new, None, c_ret
        return c_new, idx_new, (c_ret, vectors.squeeze(idx_new) if vectors != NO_VECTORS else idx_new)
    if want_argmax:
        if not (isinstance(out, tuple) and len(out) == 2):
            raise TypeError("with argmax=True, out must be a tuple (values, argmax)")
        c_buf = _checked_out(engine, out[0], "out[0]", final, dtype)
        idx_buf = _checked_out(engine, out[1], "out[1]", final, idx_dtype)
        return c_buf.reshape(shape.out_shape), idx_buf.reshape(shape.out_shape), out
    if isinstance(out, tuple):
        raise TypeError("out is a tuple, but argmax=False: pass one array, or argmax=True for (values, argmax)")
    return _checked_out(engine, out, "out", final, dtype).reshape(shape.out_shape), None, out


def _gradient_outputs(engine: Any, out: Any, a: Any, b: Any, dtype: np.dtype) -> tuple[Any, Any]:
    """The gradient buffers: the caller's ``(grad_a, grad_b)`` after checking them, or new ones."""
    if out is None:
        return engine.empty(tuple(a.shape), dtype, a), engine.empty(tuple(b.shape), dtype, b)
    if not (isinstance(out, tuple) and len(out) == 2):
        raise TypeError("out must be a tuple (grad_a, grad_b)")
    return (_checked_out(engine, out[0], "out[0]", tuple(a.shape), dtype),
            _checked_out(engine, out[1], "out[1]", tuple(b.shape), dtype))


def _checked_out(engine: Any, buf: Any, label: str, shape: tuple[int, ...], dtype: np.dtype) -> Any:
    """The array the engine writes for the caller's ``buf``, or an error naming why it cannot.

    The engine's own array type is written as it is.  numpy subclasses that
    keep ndarray's memory (``np.memmap``, ``np.matrix``) are written through a
    plain view of them, which the caller's object then shows; masked arrays
    were refused before.  Anything else (lists, tensors) would receive a copy.
    """
    kind = array_kind(buf)
    if kind == "cpu" and isinstance(buf, np.ndarray):
        view = np.asarray(buf)
    elif kind == engine.NAME and engine.as_array(buf) is buf:
        view = buf
    else:
        raise TypeError(
            f"{label} is a {type(buf).__module__}.{type(buf).__name__}, but the operands run on the "
            f"{engine.NAME} engine, which writes only into {'numpy' if engine.NAME == 'cpu' else 'cupy'} arrays"
        )
    if kind != engine.NAME:
        raise TypeError(f"{label} is a host array, but the operands run on the {engine.NAME} engine")
    if tuple(view.shape) != shape:
        raise ValueError(f"{label} has shape {tuple(view.shape)}, expected {shape}")
    if view.dtype != dtype:
        raise TypeError(f"{label} has dtype {view.dtype}, expected {dtype}")
    if not engine.is_c_contiguous(view):
        raise ValueError(f"{label} must be C-contiguous")
    if not getattr(getattr(view, "flags", None), "writeable", True):
        raise ValueError(f"{label} is read-only (for an np.memmap: opened with mode='r'; use 'r+')")
    return view
