"""The argmax's second launch as plans: the resolve that finds each output's winning k in the slice its product
recorded, and the transposed copy of B it may read (pure, no CuPy).

The square and small families' argmax deeper than ``source.each_k_depth`` records, per output, the first k of
the slice where its value last improved.  The resolve searches that slice: staged, a tile of outputs' rows of
A and columns of B copied to shared memory, where K is short enough that this moves few values; else one
thread an output, reading B from a k-contiguous copy where B is one matrix whose k is not contiguous.
"""

from __future__ import annotations

import numpy as np

from ...jit.source import ELEMENTWISE_THREADS, PIPELINED_SHARED_LIMIT
from ...jit.spec import make_spec
from .launch import GRID_LIMIT, Plan, elementwise_grid

#: Outputs a side of the staged resolve's tiles, largest first (staged.cuh: argmax_resolve_staged).
RESOLVE_EDGES = (64, 32, 16)



def plan_resolve(semiring: str, dtype: str, scalars: tuple[int, ...], depth: int, b_shape: tuple[int, ...],
                 b_strides: tuple[int, ...], shared_limit: "int | None") -> tuple[Plan, "Plan | None", int]:
    """The resolve of a product whose forward scalars are ``scalars`` (M, N, K, strides, batches, ...) and
    whose kernel recorded slices ``depth`` deep; the copy of B it reads, if any, and that copy's bytes.

    The resolve takes the product's arguments and the slice depth (the staged form also its tile edge and
    pitch, and its shared memory); reading B's copy, B's strides are the copy's.
    """
    m, n, k, b_sk, b_sn, batches = scalars[0], scalars[1], scalars[2], scalars[5], scalars[6], scalars[9]
    itemsize = np.dtype(dtype).itemsize
    staged = staged_resolve(m, n, k, depth, itemsize, shared_limit)
    if staged is not None:
        edge, pitch = staged
        tiles_of_outputs = -(-m // edge) * -(-n // edge) * batches
        return (Plan(make_spec("argmax_resolve_staged", semiring, dtype), min(tiles_of_outputs, GRID_LIMIT),
                     ELEMENTWISE_THREADS, scalars, (depth, edge, pitch), 2 * edge * pitch * itemsize), None, 0)
    b_copy, operands = None, scalars
    if copy_b_for_the_resolve(b_shape, b_strides, m * n * batches):
        b_copy, operands = transpose_plan(dtype, k, n, b_sk, b_sn), with_b_transposed(scalars)
    resolve = Plan(make_spec("argmax_resolve", semiring, dtype), elementwise_grid(m * n * batches),
                   ELEMENTWISE_THREADS, operands, (depth,))
    return resolve, b_copy, 0 if b_copy is None else k * n * itemsize


def staged_resolve(m: int, n: int, k: int, depth: int, itemsize: int,
                   shared_limit: "int | None") -> "tuple[int, int] | None":
    """The staged resolve's (tile edge, pitch) for an M×K×N product, or None where the resolve of one thread
    an output serves it.

    A block copies the rows of A and columns of B that ``edge`` × ``edge`` outputs read, every k, into shared
    memory, ``pitch`` values a line (K rounded up to a 16-byte run, plus a run: slices stay aligned, and
    neighbouring lines fall in different banks).  The edge is the largest whose lines fit
    ``PIPELINED_SHARED_LIMIT`` (or the GPU's ``shared_limit``).  The staged form serves where that moves at
    most a quarter of the values (K over each side's edge) that an output's two slices of ``depth`` hold:
    beyond that, its search of the slices in shared memory costs more than the global reads it saves
    (``benchmarks/argmax_short_k.py`` measures both sides; docs/performance.md has the figures).

    Examples:
        >>> staged_resolve(64, 64, 64, 16, 4, None)  # batches of small matrices: rows and columns staged
        (64, 68)
        >>> staged_resolve(256, 256, 256, 16, 4, None) is None  # 16 values an output: the slices serve
        True
        >>> staged_resolve(4096, 4096, 4096, 16, 4, None) is None  # K too long for shared memory
        True
    """
    run = 16 // itemsize
    pitch = -(-k // run) * run + run
    limit = PIPELINED_SHARED_LIMIT if shared_limit is None else min(shared_limit, PIPELINED_SHARED_LIMIT)
    for edge in RESOLVE_EDGES:
        if 2 * edge * pitch * itemsize <= limit:
            moved = k * (1 / min(m, edge) + 1 / min(n, edge))
            return (edge, pitch) if moved <= depth / 4 else None
    return None


def copy_b_for_the_resolve(b_shape: tuple[int, ...], b_strides: tuple[int, ...], outputs: int) -> bool:
    """Whether an argmax resolve should read a k-contiguous copy of B (see ``transpose_plan``).

    Where B's k is not its contiguous axis, each k of an output's slice is a
    sector of its own; in the copy the slice is one run.  Only where B is
    one matrix (shared by any batch), and the copy is no larger than the
    output: a bounded, transient cost.
    """
    one_matrix = all(size == 1 or stride == 0 for size, stride in zip(b_shape[:-2], b_strides[:-2]))
    return one_matrix and abs(b_strides[-2]) != 1 and b_shape[-2] * b_shape[-1] <= outputs


def transpose_plan(dtype: str, k: int, n: int, b_sk: int, b_sn: int) -> Plan:
    """The launch writing B (K × N, strides in elements) transposed and C-contiguous: (B address, copy address)."""
    tiles = -(-k // 32) * -(-n // 32)
    return Plan(make_spec("transpose", "max_plus", dtype), min(tiles, GRID_LIMIT), ELEMENTWISE_THREADS,
                (k, n, b_sk, b_sn))


def with_b_transposed(scalars: tuple[int, ...]) -> tuple[int, ...]:
    """A forward launch's scalars with B's k and n strides those of its C-contiguous transpose."""
    k = scalars[2]
    return (*scalars[:5], 1, k, *scalars[7:])
