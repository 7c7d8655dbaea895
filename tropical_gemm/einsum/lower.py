"""Lowering: each planned step becomes one batched tropical product or one reduction.

A pairwise step permutes each operand's axes into its groups (a view) and
reshapes it to three dimensions, ``(batch, left, k)`` and ``(batch, k, right)``;
the reshape is a view whenever each group is contiguous in memory and
otherwise the one permuted copy of that operand a step may make.  The product
goes to the engine through ``api.planned_product``, the tail of
[`tropical_gemm.matmul`][tropical_gemm.matmul] without the checks the plan
already guarantees; its ``(batch, left, right)`` result is viewed with one axis per
label, so no step ever permutes its output or broadcasts its inputs against
each other.  A single-operand step is one reduction: numpy on the host, the
registry's ``reduce`` kernel on the GPU.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Callable

import numpy as np

from ..api import planned_product
from ..semirings import Semiring
from .parse import Parsed
from .plan import Pair, Plan, Reduce

#: Threads per block of the reduction kernel: eight warps, one row each.
REDUCE_THREADS = 256


def diagonal_view(x: Any, labels: tuple[int, ...], drop: tuple[int, ...], strided: Callable) -> Any:
    """``x`` with broadcast axes dropped and each repeated label's axes folded into one (a diagonal).

    The view steps over the repeated axes together: its stride is the sum of
    theirs.  ``strided(x, shape, element_strides)`` makes it for the library.
    """
    if drop:
        x = x[tuple(0 if axis in drop else slice(None) for axis in range(len(labels)))]
        labels = tuple(lab for axis, lab in enumerate(labels) if axis not in drop)
    if len(set(labels)) == len(labels):
        return x
    order: list[int] = []
    shape: dict[int, int] = {}
    stride: dict[int, int] = {}
    for lab, size, st in zip(labels, x.shape, element_strides(x)):
        if lab not in shape:
            order.append(lab)
            shape[lab], stride[lab] = size, 0
        stride[lab] += st
    return strided(x, tuple(shape[lab] for lab in order), tuple(stride[lab] for lab in order))


def element_strides(x: Any) -> tuple[int, ...]:
    """Strides in elements: torch's ``stride()``, or numpy's and cupy's byte strides over the item size."""
    if callable(getattr(x, "stride", None)):
        return tuple(x.stride())
    return tuple(s // x.itemsize for s in x.strides)


def _numpy_strided(x: np.ndarray, shape: tuple[int, ...], strides: tuple[int, ...]) -> np.ndarray:
    return np.lib.stride_tricks.as_strided(x, shape, tuple(s * x.itemsize for s in strides), writeable=False)


def _cupy_strided(x: Any, shape: tuple[int, ...], strides: tuple[int, ...]) -> Any:
    from cupy.lib.stride_tricks import as_strided

    return as_strided(x, shape, tuple(s * x.itemsize for s in strides))


# ------------------------------------------------------------------ reductions


def reduce_rows_cpu(x: np.ndarray, semiring: Semiring) -> tuple[np.ndarray, np.ndarray]:
    """⊕ of each row of ``(R, K)`` and the smallest k attaining it; -1 where the row is the zero.

    The CPU engine's rule, vectorised: a candidate wins only when strictly
    better than the running value, which is the first k equal to the final
    value (NaN equals nothing and the ⊕ ignores it).
    """
    zero = semiring.zero(x.dtype)
    values = semiring.add_ufunc(x.dtype).reduce(x, axis=1, initial=zero)
    values = np.asarray(values, dtype=x.dtype)
    if x.dtype.kind == "f":
        values += 0.0  # a zero result is +0.0, whichever signed zero won
    if x.shape[1] == 0:
        return values, np.full(x.shape[0], -1, dtype=np.int64)
    idx = (x == values[:, None]).argmax(axis=1)
    idx[values == zero] = -1
    return values, idx


def reduce_rows_cuda(x: Any, semiring: Semiring) -> tuple[Any, Any]:
    """The same on the GPU: one launch of the registry's ``reduce`` kernel, one warp per row."""
    import cupy

    from ..dtypes import dtype_name
    from ..jit import get_function

    rows, k = x.shape
    if k >= 2**31:
        raise ValueError(f"an einsum reduction on the GPU supports K < 2**31, got K={k}")
    with x.device:
        values = cupy.empty(rows, dtype=x.dtype)
        idx = cupy.empty(rows, dtype=np.int32)
        if rows:
            launch = reduce_launch(semiring.name, dtype_name(x.dtype), rows, k, element_strides(x))
            get_function(launch.spec, x.device.id)((launch.grid,), (launch.block,),
                                                    (x, values, idx, *map(np.int64, launch.scalars)))
    return values, idx


def reduce_launch(semiring: str, dtype: str, rows: int, k: int, strides: tuple[int, int]) -> Any:
    """The ``reduce`` kernel's launch (an engine ``Plan``) over ``rows`` rows of ``k``: one warp per row.

    Its arguments after ``(x, values, argmax)`` are the rows, k and ``x``'s two strides in elements.
    """
    from ..engines.cuda.launch import Plan as Launch
    from ..jit import make_spec

    return Launch(make_spec("reduce", semiring, dtype), -(-rows // (REDUCE_THREADS // 32)), REDUCE_THREADS,
                  (rows, k, *strides))


# ------------------------------------------------------------------ execution


class ArrayOps:
    """What lowering needs from numpy or cupy: views, the product and the reduction.

    The product goes to the engine directly (``planned_product``): the plan
    already guarantees the shapes, dtype and array library that ``matmul``
    would check again on every step.
    """

    def __init__(self, engine: Any, strided: Callable, reduce_rows: Callable, regroup: Callable) -> None:
        self.engine = engine
        self.strided = strided
        self.reduce_rows = reduce_rows
        self.regroup = regroup

    def product(self, a: Any, b: Any, semiring: Semiring, want_argmax: bool) -> tuple[Any, Any]:
        if want_argmax:
            return planned_product(self.engine, a, b, semiring, True)
        return planned_product(self.engine, a, b, semiring, False), None


@lru_cache(maxsize=2)
def array_ops(kind: str) -> ArrayOps:
    """The operations for ``"cpu"`` (numpy) or ``"cuda"`` (cupy) arrays."""
    if kind == "cpu":
        from ..engines import cpu

        return ArrayOps(cpu, _numpy_strided, reduce_rows_cpu, _reshaped)
    from ..engines import cuda

    return ArrayOps(cuda, _cupy_strided, reduce_rows_cuda, _cupy_regrouped)


@lru_cache(maxsize=4096)
def _is_identity(perm: tuple[int, ...]) -> bool:
    """Whether ``perm`` keeps every axis in place; plans repeat their permutations, so it is cached."""
    return perm == tuple(range(len(perm)))


def permuted(x: Any, perm: tuple[int, ...]) -> Any:
    """``x`` with its axes in ``perm`` order (a view); torch spells it ``permute``."""
    if _is_identity(perm):
        return x
    return x.permute(*perm) if hasattr(x, "permute") else x.transpose(perm)


@lru_cache(maxsize=1024)
def nocopy_strides(shape: tuple[int, ...], strides: tuple[int, ...],
                   target: tuple[int, ...]) -> tuple[int, ...] | None:
    """The strides (in elements) of ``target`` as a view of ``shape``/``strides``; None where it needs a copy.

    numpy answers this from the strides alone (a one-element stand-in is
    never read), so the CuPy path needs no copy kernel to find out.  The
    answer depends on the three tuples alone, and a network repeats them
    step after step, so it is cached rather than asked of numpy each time.

    Examples:
        >>> nocopy_strides((2, 3, 4), (12, 4, 1), (6, 4))
        (4, 1)
        >>> nocopy_strides((3, 2), (1, 3), (6,)) is None     # a transposed pair of axes
        True
    """
    stand_in = np.lib.stride_tricks.as_strided(np.zeros(1, np.int8), shape, strides)
    try:
        view = np.reshape(stand_in, target, copy=False)
    except ValueError:
        return None
    return view.strides


def _reshaped(view: Any, shape: tuple[int, ...]) -> Any:
    """The library's own reshape: a view where it can be, else its own copy (numpy on the host, torch)."""
    return view.reshape(shape)


def _cupy_regrouped(view: Any, shape: tuple[int, ...]) -> Any:
    """CuPy's reshape, but a needed copy is the registry's ``gather`` kernel, never CuPy's own
    copy kernel, which CuPy would compile behind the registry's back.  A C-contiguous view (every
    intermediate, most inputs) reshapes as a view by CuPy's own reshape, without the stride search."""
    if view.flags.c_contiguous:
        return view if view.shape == shape else view.reshape(shape)
    steps = nocopy_strides(view.shape, element_strides(view), shape)
    if steps is not None:
        return _cupy_strided(view, shape, steps)
    from ..engines.cuda_aux import contiguous

    return contiguous(view).reshape(shape)


def run_pair(ops: Any, step: Pair, a: Any, b: Any, semiring: Semiring, want_argmax: bool) -> tuple[Any, Any]:
    """One pairwise step: the batched product of the grouped views, viewed back with an axis per label."""
    a3 = ops.regroup(permuted(a, step.a_perm), step.a_shape)
    b3 = ops.regroup(permuted(b, step.b_perm), step.b_shape)
    values, idx = ops.product(a3, b3, semiring, want_argmax and bool(step.contracted))
    return values.reshape(step.out_shape), (None if idx is None else idx.reshape(step.out_shape))


def run_reduce(ops: Any, step: Reduce, x: Any, semiring: Semiring) -> tuple[Any, Any]:
    """One single-operand step: kept axes first, reduced ones last, one reduction of the rows."""
    x2 = ops.regroup(permuted(x, step.perm), step.shape2)
    values, idx = ops.reduce_rows(x2, semiring)
    return values.reshape(step.out_shape), (None if idx is None else idx.reshape(step.out_shape))


def execute(plan: Plan, parsed: Parsed, operands: list[Any], ops: Any, semiring: Semiring,
            want_argmax: bool) -> tuple[Any, list[Any]]:
    """Run every step; the result in output order, and each step's argmax (None where not kept)."""
    live = [diagonal_view(x, labels, drop, ops.strided)
            for x, labels, drop in zip(operands, parsed.inputs, parsed.drop)]
    argmaxes: list[Any] = []
    for step in plan.steps:
        if isinstance(step, Pair):
            a, b = live[step.left], live[step.right]
            del live[max(step.left, step.right)], live[min(step.left, step.right)]   # the higher one first
            values, idx = run_pair(ops, step, a, b, semiring, want_argmax)
            live.append(values)
        elif step.in_place:
            values, idx = run_reduce(ops, step, live[step.src], semiring)
            live[step.src] = values
        else:
            values, idx = run_reduce(ops, step, live.pop(step.src), semiring)
            live.append(values)
        argmaxes.append(idx if want_argmax else None)
    return permuted(live[0], plan.final), argmaxes
