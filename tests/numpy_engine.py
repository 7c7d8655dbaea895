"""The numpy CPU engine that the numba engine replaced, kept as an independent reference.

Until the numba kernels (tropical_gemm/engines/cpu) it was the CPU engine,
and the CUDA engine matched it bit for bit.  tests/test_cpu_engine.py checks
that the new engine still does, on random data of every kind.  Every rule of
the semantics (NaN ignored by min/max, saturating integers with an absorbing
zero, ties to the smallest k, +0.0 for zero results) is spelt out here in the
plainest numpy.  Speed comes from blocking, not cleverness: each block of C
stays in cache while K streams past it, one ufunc call per (block, k), and the
blocks run on a thread pool because numpy ufuncs release the GIL.  Memory is
O(M·N) plus one block per worker, never the O(M·K·N) broadcast.
"""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import lru_cache
from typing import Callable, Iterator

import numpy as np

from tropical_gemm.semirings import Semiring
from tropical_gemm.shapes import operand_batch_index

NAME = "cpu"

#: Elements of C per block.  Each step over k costs two or three ufunc calls of
#: about a microsecond of fixed overhead, so blocks must be large enough to hide
#: it, yet the accumulator and the candidate buffer (2 x 256 KiB in float32)
#: must stay in a core's L2.  On a 2-core Zen 5, 1024^3 float32 max_plus ran
#: 1.5-2x faster with 65536 than with 16384 (benchmarks/cpu.py has the figures).
BLOCK_ELEMENTS = 65536

#: numpy's ufunc buffer size (elements) inside the block loops, by ⊗.  A
#: candidate is a broadcast ``(rows, 1) ⊗ (1, cols)``.  For + and x numpy's
#: unbuffered strided loop has a SIMD path for the broadcast operand, but with
#: the default 8192 numpy buffers blocks narrower than about 2700 columns and
#: runs at a third of the speed, so those use 512.  min and max have no such
#: path, and there buffering (the default) is faster.  At 1024^3 on a 2-core
#: Zen 5: f32 max_plus about 14 -> 25 G ops/s with 512; f32 max_min 11 -> 8.5.
UFUNC_BUFSIZE: dict[str, int] = {"plus": 512, "times": 512, "min": 8192, "max": 8192}

#: ``candidate(a_col, b_row, out=buf)`` writes the broadcast ``a ⊗ b`` into ``buf``.
Candidate = Callable[..., np.ndarray]


@lru_cache(maxsize=1)
def _workers() -> int:
    """CPU threads to spread blocks over; asked once, since every call splits by it."""
    return os.cpu_count() or 1


@lru_cache(maxsize=1)
def _pool() -> ThreadPoolExecutor:
    return ThreadPoolExecutor(max_workers=_workers(), thread_name_prefix="tropical_gemm_cpu")


# ---------------------------------------------------------------- candidates

_FLOAT_MUL: dict[str, Candidate] = {"plus": np.add, "times": np.multiply, "min": np.fmin, "max": np.fmax}
_INT_MUL_UNCHECKED: dict[str, Candidate] = {
    "plus": np.add, "times": np.multiply, "min": np.minimum, "max": np.maximum,
}


def _is_tame(x: np.ndarray, mul: str) -> bool:
    """True when no ⊗ between values of ``x`` can overflow or meet the zero.

    Then plain integer arithmetic is exact, and the engine may skip the
    saturating path.  The same test decides the fast path inside the kernels.
    """
    if mul in ("min", "max") or x.size == 0:
        return True
    bits = x.dtype.itemsize * 8
    limit = 2 ** (bits - 2) if mul == "plus" else 2 ** ((bits - 2) // 2)
    return bool(x.min() >= -limit and x.max() < limit)


def _saturating_add(a: np.ndarray, b: np.ndarray, zero: np.generic) -> np.ndarray:
    """``a + b`` clamped to the dtype's range, with ``zero`` absorbing."""
    info = np.iinfo(a.dtype)
    if a.dtype.itemsize < 8:
        total = np.clip(a.astype(np.int64) + b.astype(np.int64), info.min, info.max).astype(a.dtype)
    else:
        with np.errstate(over="ignore"):
            total = a + b
        overflow = ((a ^ total) & (b ^ total)) < 0
        total = np.where(overflow, np.where(a < 0, info.min, info.max), total)
    return np.where((a == zero) | (b == zero), zero, total)


def _saturating_mul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``a * b`` clamped to the dtype's range (0 absorbs by arithmetic)."""
    info = np.iinfo(a.dtype)
    if a.dtype.itemsize < 8:
        return np.clip(a.astype(np.int64) * b.astype(np.int64), info.min, info.max).astype(a.dtype)
    with np.errstate(over="ignore"):
        product = a * b
    estimate = a.astype(np.float64) * b.astype(np.float64)
    result = np.where(estimate >= 2.0**64, info.max, np.where(estimate <= -(2.0**64), info.min, product))
    unsure = (np.abs(estimate) >= 2.0**62) & (np.abs(estimate) < 2.0**64)
    if unsure.any():
        a_b, b_b = np.broadcast_arrays(a, b)
        for pos in zip(*np.nonzero(unsure)):
            exact = int(a_b[pos]) * int(b_b[pos])
            result[pos] = min(max(exact, info.min), info.max)
    return result


def candidate_function(semiring: Semiring, dtype: np.dtype, tame: bool) -> Candidate:
    """The elementwise ⊗ for one dtype, exact under the documented rules."""
    if dtype.kind == "f":
        return _FLOAT_MUL[semiring.mul]
    if tame or semiring.mul in ("min", "max"):
        return _INT_MUL_UNCHECKED[semiring.mul]
    if semiring.mul == "times":
        return _writing_into(_saturating_mul)
    zero = semiring.zero(dtype)
    return _writing_into(lambda a, b: _saturating_add(a, b, zero))


def _writing_into(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Candidate:
    """Give a function that returns a new array the ``(a, b, out)`` shape of a ufunc."""

    def candidate(a: np.ndarray, b: np.ndarray, *, out: np.ndarray) -> np.ndarray:
        out[...] = fn(a, b)
        return out

    return candidate


def reduce_function(semiring: Semiring, dtype: np.dtype) -> np.ufunc:
    """The ⊕ ufunc: fmax/fmin (NaN ignored) for floats, maximum/minimum for ints."""
    if dtype.kind == "f":
        return np.fmax if semiring.add == "max" else np.fmin
    return np.maximum if semiring.add == "max" else np.minimum


# ------------------------------------------------------------------- forward


def _blocks(m: int, n: int) -> list[tuple[slice, slice]]:
    """Tiles of C: whole rows of up to BLOCK_ELEMENTS, and at least one per worker.

    Rows of C are split rather than columns so each block reads contiguous
    rows of B; a product too small for BLOCK_ELEMENTS still feeds every core.
    """
    cols = min(n, BLOCK_ELEMENTS) or 1
    rows = max(1, min(BLOCK_ELEMENTS // cols, -(-m // _workers())))
    return [
        (slice(r, min(r + rows, m)), slice(c, min(c + cols, n)))
        for r in range(0, m, rows)
        for c in range(0, n, cols)
    ]


@contextmanager
def _ufunc_bufsize(size: int) -> Iterator[None]:
    """Set numpy's ufunc buffer size for this thread, and restore it after."""
    previous = np.setbufsize(size)
    try:
        yield
    finally:
        np.setbufsize(previous)


def _forward_block(
    a: np.ndarray,
    b: np.ndarray,
    out: np.ndarray,
    argmax_out: np.ndarray | None,
    rows: slice,
    cols: slice,
    semiring: Semiring,
    candidate: Candidate,
) -> None:
    """One block of C over the whole of K; ties keep the smallest k.

    Overflow to ±inf and the NaN of -inf + inf or 0 * inf are part of the
    documented IEEE semantics (and ⊕ ignores that NaN), so numpy must not warn.
    """
    with np.errstate(over="ignore", invalid="ignore"), _ufunc_bufsize(UFUNC_BUFSIZE[semiring.mul]):
        dtype = out.dtype
        zero = semiring.zero(dtype)
        acc = np.full((rows.stop - rows.start, cols.stop - cols.start), zero, dtype=dtype)
        cand = np.empty_like(acc)
        a_block = a[rows]
        b_block = b[:, cols]
        reduce = reduce_function(semiring, dtype)
        if argmax_out is None:
            for k in range(a.shape[1]):
                reduce(acc, candidate(a_block[:, k : k + 1], b_block[k : k + 1], out=cand), out=acc)
        else:
            # A candidate wins only if strictly better, so ties keep the smallest k
            # and NaN (never better) is ignored; ⊕ then takes the same value.
            better = np.greater if semiring.add == "max" else np.less
            idx = np.full(acc.shape, -1, dtype=argmax_out.dtype)
            wins = np.empty(acc.shape, dtype=bool)
            for k in range(a.shape[1]):
                candidate(a_block[:, k : k + 1], b_block[k : k + 1], out=cand)
                better(cand, acc, out=wins)
                reduce(acc, cand, out=acc)
                np.copyto(idx, k, where=wins)
            argmax_out[rows, cols] = idx
        if dtype.kind == "f":
            acc += 0.0  # a zero result is always +0.0, whichever signed zero won
        out[rows, cols] = acc


def forward(
    a: np.ndarray,
    b: np.ndarray,
    semiring: Semiring,
    out: np.ndarray,
    argmax_out: np.ndarray | None,
) -> None:
    """Write ``a ⊗ b`` (batched, broadcast) into ``out``, and the argmax if asked.

    ``out`` and ``argmax_out`` have the broadcast shape ``(*batch, M, N)``.
    """
    batch = out.shape[:-2]
    tame = _is_tame(a, semiring.mul) and _is_tame(b, semiring.mul)
    candidate = candidate_function(semiring, out.dtype, tame)
    tasks = []
    for index in np.ndindex(*batch):
        a2 = a[operand_batch_index(index, a.shape[:-2])]
        b2 = np.ascontiguousarray(b[operand_batch_index(index, b.shape[:-2])])
        c2 = out[index]
        i2 = None if argmax_out is None else argmax_out[index]
        for rows, cols in _blocks(c2.shape[0], c2.shape[1]):
            tasks.append((a2, b2, c2, i2, rows, cols, semiring, candidate))
    _run(tasks, work=out.size * max(a.shape[-1], 1))


def _run(tasks: list[tuple], work: int) -> None:
    """Run blocks on the pool when there is enough work to pay for threads."""
    if len(tasks) == 1 or work < 2**20:
        for task in tasks:
            _forward_block(*task)
        return
    for future in [_pool().submit(_forward_block, *task) for task in tasks]:
        future.result()


# ------------------------------------------------- backward and array glue

# The backward scatter and the array glue are not what this reference checks
# (the forward is): they are the engine's own, so the engine interface stays whole.
from tropical_gemm.engines.cpu import as_array, backward, empty, is_c_contiguous, may_share_memory  # noqa: E402,F401
