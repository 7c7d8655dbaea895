"""The CPU engine's backward pass: each gradient routed through its winning k.

A scatter of M·N contributions (one per output element) costs far less than
the forward's M·N·K candidates.  numpy prepares what each entry sends (the
gradient, scaled by the other operand for ``times``) and where (both
operands, or the one the tie rule picks for min/max ⊗) in whole-array
passes; one compiled loop then adds them in row-major (i, j) order, batch
by batch: the order of additions the CUDA engine's deterministic mode
reproduces, in the operands' dtype.  The loop is the compiled extension's
``scatter`` where it is built (nothing compiles at run time), else numba's,
compiled on first use and cached on disk like the forward's kernels.
``np.add.at`` adds in the same order, but several times slower than the
product it differentiates.
"""

from __future__ import annotations

from functools import lru_cache
from types import ModuleType
from typing import Callable

import numpy as np

from ...semirings import Semiring
from ...shapes import operand_batch_index
from .workers import native_kernels

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


#: The extension's code of each gradient type (gradients are float; see its ``scatter``); +4 for an int64 argmax.
_NATIVE_CODES = {np.dtype(np.float32): 0, np.dtype(np.float64): 1}


def _native_code(values: np.dtype, argmax: np.ndarray) -> int:
    """The extension's code of one variant of its backward loops."""
    return _NATIVE_CODES[values] + 4 * (argmax.dtype.itemsize == 8)


def _native() -> "ModuleType | None":
    """The compiled extension, or None where it is not built or numba is asked for (then numpy gathers and
    numba scatters): the one choice the products make, so that both run the same kind of kernels."""
    return native_kernels()


@lru_cache(maxsize=1)
def _numba_scatter() -> Callable:
    """numba's scatter, imported and compiled (or loaded from the disk cache) on first use."""
    from .numba_cache import cached_njit

    return cached_njit(_scatter_rows, nogil=True)


def _gather(a: np.ndarray, b: np.ndarray, argmax: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(a[i, k], b[k, j])`` for ``k = argmax[i, j]`` (k = 0 where it is -1): copies, so exact."""
    native = _native()
    if native is None:
        won = np.maximum(argmax, 0)
        return np.take_along_axis(a, won, axis=1), b[won, np.arange(b.shape[1])]
    a_won, b_won = np.empty(argmax.shape, a.dtype), np.empty(argmax.shape, b.dtype)
    native.gather(_native_code(a.dtype, argmax), np.ascontiguousarray(argmax), a, b, a_won, b_won)
    return a_won, b_won


def _scatter(argmax: np.ndarray, to_a: np.ndarray, to_b: np.ndarray, routes: np.ndarray, grad_a: np.ndarray,
             grad_b: np.ndarray) -> None:
    native = _native()
    if native is None:
        _numba_scatter()(argmax, to_a, to_b, routes, grad_a, grad_b)
        return
    contiguous = (np.ascontiguousarray(x) for x in (argmax, to_a, to_b, routes))
    native.scatter(_native_code(grad_a.dtype, argmax), *contiguous, grad_a, grad_b)


def _native_products(native: ModuleType, grad_c: np.ndarray, a: np.ndarray, b: np.ndarray, argmax: np.ndarray,
                     times: bool, grad_a: np.ndarray, grad_b: np.ndarray) -> None:
    """The extension's plus/times backward: grad_a by bands of rows and grad_b by bands of columns, side by side.

    Each cell of a gradient belongs to one band, and receives its terms in
    row-major (i, j) order within it, so the threads change no bit.
    """
    from .workers import SERIAL_WORK, num_threads, run_jobs

    m, n = argmax.shape
    workers = num_threads() if m * n * 64 >= SERIAL_WORK else 1
    shared = (np.ascontiguousarray(argmax), np.ascontiguousarray(grad_c), a, b)
    code = _native_code(grad_a.dtype, argmax)
    jobs = [(code, times, side, lo, min(lo + step, extent), *shared, grad)
            for side, extent, grad in ((0, m, grad_a), (1, n, grad_b))
            for step in (max(-(-extent // workers), 1),) for lo in range(0, extent, step)]
    run_jobs(native.backward_products, jobs, workers)


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
    native = _native()
    if native is not None and semiring.mul in ("plus", "times"):  # no M×N temporaries, both gradients at once
        _native_products(native, grad_c, a, b, argmax, semiring.mul == "times", grad_a, grad_b)
        return
    if semiring.mul == "plus":
        to_a = to_b = grad_c
        routes = np.full(argmax.shape, TO_A | TO_B, np.uint8)
    else:
        a_won, b_won = _gather(a, b, argmax)  # entries with no winner read k = 0; the scatter skips them
        if semiring.mul == "times":
            to_a, to_b = grad_c * b_won, grad_c * a_won
            routes = np.full(argmax.shape, TO_A | TO_B, np.uint8)
        else:
            to_a = to_b = grad_c
            routes = np.subtract(TO_B, semiring.winner_is_a(a_won, b_won, np.isnan), dtype=np.uint8)  # A: 1, B: 2
    _scatter(argmax, to_a, to_b, routes, grad_a, grad_b)


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
