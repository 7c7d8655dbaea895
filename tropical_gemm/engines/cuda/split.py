"""K slices as plans: the launches of a product cut along K, then the ⊕ of the slices (pure, no CuPy).

A product whose output has too few tiles to fill the GPU runs as ``splits``
equal slices of K side by side (the slice index an extra, leading batch
dim), one more launch for any rest, and a combine kernel that ⊕s the
partial results and keeps the argmax of the earliest slice that attains the
result.  ⊕ is exact and associative, so the bits are those of one launch.
Where the slices' kernel leaves its argmax to a resolve (the square
family's), the combine resolves it, once per output of the whole product,
instead of each slice resolving its own partials.
The partials live in a scratch buffer of ``scratch_bytes`` that the caller
provides: the array path takes cupy arrays, the torch bridge one tensor.
"""

from __future__ import annotations

from typing import NamedTuple

import math
from functools import lru_cache

from ...jit import make_spec
from ...jit.source import ELEMENTWISE_THREADS
from .launch import Plan, aligned, elementwise_grid
from .plan import ForwardPlan, plan_forward
from .resolve import copy_b_for_the_resolve, transpose_plan, with_b_transposed


def k_slices(k: int, splits: int) -> tuple[int, int, int]:
    """``(chunk, rest, count)``: ``splits`` slices of ``chunk``, a last one of ``rest`` if any, ``count`` in all."""
    chunk = k // splits
    rest = k - splits * chunk
    return chunk, rest, splits + (rest > 0)


class SplitKPlan(NamedTuple):
    """The launches of one K-sliced product on addresses, and where each reads and writes.

    ``slices`` covers the ``splits`` equal slices (C-contiguous partials of
    ``part_bytes`` each from the start of the scratch buffer, their int32
    argmaxes of ``index_part_bytes`` each from ``index_offset``); ``rest``
    the last, shorter slice, reading its operands ``rest_offsets`` bytes
    further on and writing the partial after the others; ``combine`` ⊕s
    the partials into C, and resolves the argmax where the slices' plans
    leave it to a resolve (theirs is then dropped).  Its addresses are
    (partials, their argmaxes, C, argmax, A, B).  ``b_copy``, if any, first
    transposes B into the scratch at ``b_copy_offset``, and the combine's
    resolve reads that copy: each output's slice of B is then one run of
    memory rather than a sector per k.
    """

    slices: ForwardPlan
    rest: ForwardPlan | None
    rest_offsets: tuple[int, int]
    combine: Plan
    splits: int
    part_bytes: int
    index_part_bytes: int
    index_offset: int
    scratch_bytes: int
    b_copy: Plan | None
    b_copy_offset: int


def _with_slice_dim(shape: tuple[int, ...], strides: tuple[int, ...], rank: int, k_axis: int, chunk: int,
                    splits: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """An operand as ``splits`` slices of ``chunk`` along its k axis: a leading dim over the full batch rank."""
    pad = rank - len(shape)
    shape, strides = (1,) * pad + shape, (0,) * pad + strides
    sliced = list(shape)
    sliced[k_axis] = chunk
    return (splits, *sliced), (chunk * strides[k_axis], *strides)


@lru_cache(maxsize=256)
def plan_split_k(a_shape: tuple[int, ...], a_strides: tuple[int, ...], b_shape: tuple[int, ...],
                 b_strides: tuple[int, ...], batch: tuple[int, ...], dtype: str, semiring: str, argmax: bool,
                 sms: int, splits: int, itemsize: int, shared_limit: "int | None" = None) -> SplitKPlan:
    """The K-sliced launches of a product whose ``plan_forward`` asked for ``splits`` slices (strides in elements;
    ``shared_limit`` as there)."""
    k, n = a_shape[-1], b_shape[-1]
    chunk, rest, count = k_slices(k, splits)
    rank = len(batch) + 2
    a_sl, a_st = _with_slice_dim(a_shape, a_strides, rank, -1, chunk, splits)
    b_sl, b_st = _with_slice_dim(b_shape, b_strides, rank, -2, chunk, splits)
    slices = plan_forward(a_sl, a_st, b_sl, b_st, (splits, *batch), dtype, semiring, argmax, sms, False,
                          shared_limit)
    rest_plan, offsets = None, (0, 0)
    if rest:
        rest_plan = plan_forward((*a_shape[:-1], rest), a_strides, (*b_shape[:-2], rest, n), b_strides, batch,
                                 dtype, semiring, argmax, sms, False, shared_limit)
        offsets = (splits * chunk * a_strides[-1] * itemsize, splits * chunk * b_strides[-2] * itemsize)
    whole = plan_forward(a_shape, a_strides, b_shape, b_strides, batch, dtype, semiring, argmax, sms, False,
                         shared_limit)
    depth = 0  # the combine's resolve depth; the tiles that need a resolve never transpose, as it assumes
    if slices.resolve is not None:  # one resolve, in the combine, for the whole product
        depth = max(plan.resolve.int32_scalars[0] for plan in (slices, rest_plan) if plan and plan.resolve)
        slices = slices.without_resolve()
        if rest_plan is not None:
            rest_plan = rest_plan.without_resolve()
    outputs = math.prod(batch) * a_shape[-2] * n
    part_bytes = outputs * itemsize
    index_offset = aligned(count * part_bytes)
    scratch_bytes = index_offset + (count * outputs * 4 if argmax else 0)
    operands = whole.product.scalars
    b_copy, b_copy_offset = None, 0
    if depth and copy_b_for_the_resolve(b_shape, b_strides, outputs):
        b_copy = transpose_plan(dtype, k, n, b_strides[-2], b_strides[-1])
        b_copy_offset = aligned(scratch_bytes)
        scratch_bytes = b_copy_offset + n * k * itemsize
        operands = with_b_transposed(operands)
    combine = Plan(make_spec("combine_resolve" if depth else "combine", semiring, dtype),
                   elementwise_grid(outputs), ELEMENTWISE_THREADS, (count, outputs, chunk, *operands), (depth,))
    return SplitKPlan(slices, rest_plan, offsets, combine, splits, part_bytes, outputs * 4, index_offset,
                      scratch_bytes, b_copy, b_copy_offset)

