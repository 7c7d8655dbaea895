"""The CPU engine's backward pass: each gradient routed through its winning k.

A scatter of M·N contributions (one per output element) costs far less than
the forward's M·N·K candidates.  numpy prepares what each entry sends (the
gradient, scaled by the other operand for ``times``) and where (both
operands, or the one the tie rule picks for min/max ⊗) in whole-array
passes; one compiled loop (numba, compiled on first use and cached on disk
like the forward's kernels) then adds them in row-major (i, j) order, batch
by batch: the order of additions the CUDA engine's deterministic mode
reproduces, in the operands' dtype.  ``np.add.at`` adds in the same order,
but several times slower than the product it differentiates.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Callable

import numpy as np

from ...semirings import Semiring
from ...shapes import operand_batch_index

#: Where an entry's gradient goes: bit 0 to A, bit 1 to B.
TO_A, TO_B = 1, 2


def _scatter_rows(argmax, to_a, to_b, routes, grad_a, grad_b):  # noqa: ANN001, ANN202
    """``grad_a[i, k] += to_a[i, j]`` and ``grad_b[k, j] += to_b[i, j]`` for ``k = argmax[i, j] >= 0``,
    as ``routes[i, j]`` says, in row-major (i, j) order (compiled by numba)."""
    m, n = argmax.shape
    for i in range(m):
        for j in range(n):
            k = argmax[i, j]
            if k < 0:
                continue
            route = routes[i, j]
            if route & 1:
                grad_a[i, k] += to_a[i, j]
            if route & 2:
                grad_b[k, j] += to_b[i, j]


def _gather_rows(a, b, argmax, a_won, b_won):  # noqa: ANN001, ANN202
    """``a_won[i, j] = a[i, k]`` and ``b_won[i, j] = b[k, j]`` for ``k = argmax[i, j]`` (k = 0 where it is -1)."""
    m, n = argmax.shape
    for i in range(m):
        for j in range(n):
            k = max(argmax[i, j], 0)
            a_won[i, j] = a[i, k]
            b_won[i, j] = b[k, j]


@lru_cache(maxsize=1)
def _compiled() -> tuple[Callable, Callable]:
    """``(gather, scatter)`` compiled, decorated on the first backward (importing numba is the costly part)."""
    from numba import njit

    from .numba_cache import our_cache_dir

    with our_cache_dir():
        return njit(nogil=True, cache=True)(_gather_rows), njit(nogil=True, cache=True)(_scatter_rows)


@np.errstate(over="ignore", invalid="ignore")
def _backward_2d(
    grad_c: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    argmax: np.ndarray,
    semiring: Semiring,
    grad_a: np.ndarray,
    grad_b: np.ndarray,
) -> None:
    """Scatter one product's gradient into grad_a and grad_b, in row-major (i, j) order."""
    if a.shape[1] == 0:  # K = 0: nothing won, nothing to send
        return
    gather, scatter = _compiled()
    if semiring.mul == "plus":
        to_a = to_b = grad_c
        routes = np.full(argmax.shape, TO_A | TO_B, np.uint8)
    else:
        a_won, b_won = np.empty(argmax.shape, a.dtype), np.empty(argmax.shape, b.dtype)
        gather(a, b, argmax, a_won, b_won)  # entries with no winner read k = 0; the scatter skips them
        if semiring.mul == "times":
            to_a, to_b = grad_c * b_won, grad_c * a_won
            routes = np.full(argmax.shape, TO_A | TO_B, np.uint8)
        else:
            to_a = to_b = grad_c
            routes = np.subtract(TO_B, semiring.winner_is_a(a_won, b_won, np.isnan), dtype=np.uint8)  # A: 1, B: 2
    scatter(argmax, to_a, to_b, routes, grad_a, grad_b)


def _check_argmax_range(argmax: np.ndarray, k: int) -> None:
    """Indices outside [-1, K) would make this engine index out of bounds.

    Checked here, in the host engine: reading a device array's range would
    stall the stream, so the CUDA kernels instead skip indices outside [0, K).
    """
    if argmax.size == 0:
        return
    low, high = int(argmax.min()), int(argmax.max())
    if low < -1 or high >= k:
        raise ValueError(
            f"argmax holds indices in [{low}, {high}], but they must lie in [-1, {k - 1}] for K={k}"
        )


def backward(
    grad_c: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    argmax: np.ndarray,
    semiring: Semiring,
    deterministic: bool,
    grad_a: np.ndarray,
    grad_b: np.ndarray,
) -> None:
    """Write the gradients of a (batched) product, reduced over broadcast batch dims, into ``grad_a``/``grad_b``.

    The CPU engine is always deterministic, whatever ``deterministic`` says.
    Contributions are added in float of the operands' dtype, batch by batch in
    order, then row-major within a batch: the order the CUDA engine's
    deterministic mode reproduces.
    """
    _check_argmax_range(argmax, a.shape[-1])
    grad_a.fill(0)
    grad_b.fill(0)
    for index in np.ndindex(*grad_c.shape[:-2]):
        ia = operand_batch_index(index, a.shape[:-2])
        ib = operand_batch_index(index, b.shape[:-2])
        _backward_2d(grad_c[index], a[ia], b[ib], argmax[index], semiring, grad_a[ia], grad_b[ib])
