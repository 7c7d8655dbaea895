"""The exact CPU engine: SIMD tile kernels on a thread pool of our own.

The kernels come compiled ahead of time, in the extension module ``_native``
(C++ from ``cpp/``, built at install where a C++ compiler is found, one copy
per instruction set, chosen at import), so no call waits for a compiler.
Where the extension is not built, or for a variant it leaves out (int64
argmax), the same loops compile with numba on first use and are cached on
disk (``kernels``).  ``$TROPICAL_GEMM_CPU_KERNELS=numba`` picks numba always
(read once, at the first product).

Semantics, shared with the CUDA engine bit for bit: NaN never wins ⊕ (numpy's
fmax/fmin) and is ignored by a min/max ⊗; integers saturate, with the zero
absorbing; ties go to the smallest k; a zero result is +0.0.
``tests/numpy_engine.py`` keeps the plain numpy engine this one replaced, as
the reference the tests compare it with bit for bit.

Speed comes from the tile kernels: packed panels of B, two rows of C by four
ks per pass, and a column loop that the compiler (GCC or Clang for the extension,
LLVM under numba) vectorises to the widest SIMD the host has.
Each call splits C into tiles, one per worker thread, as square as C allows
(see ``_grid``); the kernels release the GIL.  Memory is the output plus one
packed panel per worker; strided operands are read in place.

The boolean semiring (``and_or``) has kernels of its own (``boolean``), on
operands packed 64 ks to a word, run on the same tiles and threads.

numba is imported, and each of its kernel variants compiled or loaded from
the disk cache, only on the first product that needs it.
"""

from __future__ import annotations

from functools import lru_cache, partial
from types import ModuleType
from typing import Callable

import numpy as np

from ...dtypes import truth_dtype
from ...semirings import CountingSemiring, Semiring
from ...shapes import operand_batch_index
from .backward import backward
from .workers import ENV_KERNELS, ENV_THREADS, SERIAL_WORK, num_threads, set_num_threads
from .workers import native_kernels as _native_kernels
from .workers import pool as _pool
from .workers import run_jobs as _run

__all__ = ["ENV_KERNELS", "ENV_THREADS", "NAME", "as_array", "backward", "count_forward", "empty", "forward", "is_c_contiguous",
           "kernels_description", "may_share_memory", "num_threads", "prepare", "set_num_threads"]

NAME = "cpu"

@lru_cache(maxsize=1)
def _kernels() -> ModuleType:
    """The numba kernels, imported on the first product they serve (numba's import is the costly part)."""
    from . import kernels

    return kernels


def kernels_description() -> str:
    """Which kernels serve CPU products here, for people: the extension's instruction set, or numba's version.

    Raises ``importlib.metadata.PackageNotFoundError`` where neither is installed.
    """
    native = _native_kernels()
    if native is not None:
        return f"{native.isa()} kernels of the compiled extension"
    from importlib import metadata  # not at import: it costs a fresh process tens of milliseconds

    return f"numba {metadata.version('numba')} kernels, compiled on first use"


# ------------------------------------------------------------------- forward


def _is_tame(x: np.ndarray, mul: str) -> bool:
    """True when no ⊗ between integer values of ``x`` can overflow or meet the zero.

    Then plain integer arithmetic is exact, and the kernels skip saturation.
    """
    if x.dtype.kind == "f" or mul in ("min", "max") or x.size == 0:
        return True
    bits = x.dtype.itemsize * 8
    limit = 2 ** (bits - 2) if mul == "plus" else 2 ** ((bits - 2) // 2)
    return bool(x.min() >= -limit and x.max() < limit)


def _limits(dtype: np.dtype) -> tuple[np.generic, np.generic]:
    if dtype.kind == "f":
        return dtype.type(-np.inf), dtype.type(np.inf)
    info = np.iinfo(dtype)
    return dtype.type(info.min), dtype.type(info.max)


def _grid(m: int, n: int, workers: int) -> tuple[int, int]:
    """How many row and column ranges to cut C into: one tile per worker, as square as C allows.

    Each worker packs the columns of B its tile needs and reads the rows of A
    it needs, so a tile of ``m/r`` rows by ``n/c`` columns moves ``(m/r + n/c)·K``
    elements: row strips alone would make every worker pack all of B, which
    on many cores costs as much memory traffic as a large share of the
    product.  Tiles keep at least two rows (the kernel's row pair) and 16
    columns (its SIMD loop); ties go to more rows.
    """
    shapes = [(r, workers // r) for r in range(1, workers + 1) if workers % r == 0]
    fits = [(r, c) for r, c in shapes if 2 * r <= m and 16 * c <= n]
    if not fits:
        return max(1, min(workers, m // 2)), 1
    return min(fits, key=lambda rc: (m / rc[0] + n / rc[1], -rc[0]))


def _splits(m: int, n: int, workers: int) -> list[tuple[int, int, int, int]]:
    """Tiles of C ``(r0, r1, c0, c1)``, one per worker: rows in pairs, as the kernel takes them, columns by 16."""
    if workers == 1 or m * n == 0:
        return [(0, m, 0, n)]
    rows, cols = _grid(m, n, workers)
    row_step = 2 * -(-m // (2 * rows))
    col_step = 16 * -(-n // (16 * cols))
    return [(r, min(r + row_step, m), c, min(c + col_step, n))
            for r in range(0, m, row_step) for c in range(0, n, col_step)]


def forward(
    a: np.ndarray,
    b: np.ndarray,
    semiring: Semiring,
    out: np.ndarray,
    argmax_out: np.ndarray | None,
) -> None:
    """Write ``a ⊗ b`` (batched, broadcast) into ``out``, and the argmax if asked.

    ``out`` and ``argmax_out`` are C-contiguous with the broadcast shape ``(*batch, M, N)``.
    """
    if out.size == 0:
        return
    if semiring.boolean:
        _forward_bits(a, b, out, argmax_out)
        return
    dtype = out.dtype
    sat = not (_is_tame(a, semiring.mul) and _is_tame(b, semiring.mul))
    idx = np.empty((1, 1), dtype=np.int32) if argmax_out is None else None
    tile, scalars = _tile(semiring, sat, dtype, argmax_out is not None,
                          (idx if argmax_out is None else argmax_out).dtype)
    m, n = out.shape[-2:]
    workers = num_threads() if out.size * max(a.shape[-1], 1) >= SERIAL_WORK else 1
    jobs = []
    for index in np.ndindex(*out.shape[:-2]):
        a2 = a[operand_batch_index(index, a.shape[:-2])]
        b2 = b[operand_batch_index(index, b.shape[:-2])]
        i2 = idx if argmax_out is None else argmax_out[index]
        jobs += [(a2, b2, out[index], i2, *split, *scalars) for split in _splits(m, n, workers)]
    _run(tile, jobs, workers)


@lru_cache(maxsize=1)
def _boolean() -> ModuleType:
    """The boolean semiring's kernels, imported on its first product."""
    from . import boolean

    return boolean


def _forward_bits(a: np.ndarray, b: np.ndarray, out: np.ndarray, argmax_out: np.ndarray | None) -> None:
    """``and_or``: A's rows and B's columns packed into words along k (``boolean``), then tiles as above."""
    bits = _boolean()
    a_words, b_words = bits.pack(a, -1), bits.pack(b, -2)
    idx = np.empty((1, 1), dtype=np.int32) if argmax_out is None else None
    tile = bits.tile_function(argmax_out is not None, (idx if argmax_out is None else argmax_out).dtype)
    m, n = out.shape[-2:]
    workers = num_threads() if out.size * max(a_words.shape[-1], 1) >= bits.SERIAL_WORDS else 1
    jobs = []
    for index in np.ndindex(*out.shape[:-2]):
        a2 = a_words[operand_batch_index(index, a.shape[:-2])]
        b2 = b_words[operand_batch_index(index, b.shape[:-2])]
        i2 = idx if argmax_out is None else argmax_out[index]
        jobs += [(a2, b2, out[index], i2, *split) for split in _splits(m, n, workers)]
    _run(tile, jobs, workers)


def _tile(semiring: Semiring, sat: bool, dtype: np.dtype, argmax: bool,
          idx_dtype: np.dtype) -> tuple[Callable, tuple]:
    """The tile function of this variant, and the scalars it takes after the tile's bounds.

    Both kinds of kernel take ``(a, b, out, idx, r0, r1, c0, c1, *scalars)``.
    """
    limits = (semiring.zero(dtype), *_limits(dtype))
    native = _native_kernels()
    code = None if native is None else _native_variant(semiring.add, semiring.mul, sat, argmax, dtype, idx_dtype)
    if code is not None:
        return partial(native.tile, code), (np.array(limits, dtype).tobytes(),)
    return _kernels().tile_function(semiring.add, semiring.mul, sat, argmax, dtype, idx_dtype), limits


@lru_cache(maxsize=None)
def _native_variant(add: str, mul: str, sat: bool, argmax: bool, dtype: np.dtype, idx_dtype: np.dtype) -> "int | None":
    """The extension's code for this variant (its module defines the layout), or None where it is not built."""
    native = _native_kernels()
    return native.variant(dtype.name, add, mul, sat, argmax, idx_dtype.name)


def prepare(semiring: Semiring, dtype: np.dtype, argmax: bool) -> int:
    """Have the kernels of one product ready; returns how many numba compiled or loaded (0: the extension serves).

    Integer products get both kernels, plain and saturating (see ``_is_tame``).
    The boolean semiring's kernels are numba's always: its tile of this
    argmax variant and the line packer of this truth dtype (bool or uint8),
    counted when this call compiled or loaded them (two products share a tile).
    """
    dtype = np.dtype(dtype)
    if semiring.boolean:
        truth_dtype(dtype, dtype)
        bits = _boolean()
        before = bits.tile_function.cache_info().currsize + bits.pack_function.cache_info().currsize
        bits.tile_function(argmax, np.dtype(np.int32))
        bits.pack_function(dtype)
        return bits.tile_function.cache_info().currsize + bits.pack_function.cache_info().currsize - before
    numba_kernels = 0
    for sat in (False, True) if dtype.kind == "i" else (False,):
        tile, _ = _tile(semiring, sat, dtype, argmax, np.dtype(np.int32))
        numba_kernels += not isinstance(tile, partial)
    return numba_kernels


def count_forward(a_values: np.ndarray, a_counts: np.ndarray, b_values: np.ndarray, b_counts: np.ndarray,
                  semiring: CountingSemiring, out_values: np.ndarray, out_counts: np.ndarray,
                  flags: np.ndarray) -> None:
    """Write the counting product of the pairs ``(a_values, a_counts)`` and ``(b_values, b_counts)``.

    Batched and broadcast as ``forward``; the outputs are C-contiguous.  ORs
    into ``flags[0]`` the bits ``semirings.COUNT_OVERFLOW`` and ``COUNT_NEGATIVE``: a count that
    overflowed int64, a negative count read.
    """
    if out_values.size == 0:
        return
    from .counting import tile_function  # numba: imported and compiled on the first counting product

    tile = tile_function(semiring.values.add, out_values.dtype)
    zero = semiring.values.zero(out_values.dtype)
    m, n = out_values.shape[-2:]
    workers = num_threads() if out_values.size * max(a_values.shape[-1], 1) >= SERIAL_WORK else 1
    jobs = []
    for index in np.ndindex(*out_values.shape[:-2]):
        a_at = operand_batch_index(index, a_values.shape[:-2])
        b_at = operand_batch_index(index, b_values.shape[:-2])
        jobs += [(a_values[a_at], a_counts[a_at], b_values[b_at], b_counts[b_at], out_values[index],
                  out_counts[index], *split, zero) for split in _splits(m, n, workers)]
    if workers == 1 or len(jobs) == 1:
        bits = [tile(*job) for job in jobs]
    else:
        bits = [future.result() for future in [_pool(workers).submit(tile, *job) for job in jobs]]
    flags[0] |= int(np.bitwise_or.reduce(np.asarray(bits, dtype=np.int64)))


# --------------------------------------------------------------- array glue


def as_array(x: object) -> np.ndarray:
    """Any host array-like as a numpy array (no copy when it already is one)."""
    return np.asarray(x)


def empty(shape: tuple[int, ...], dtype: np.dtype, like: np.ndarray) -> np.ndarray:
    """A new array; ``like`` says where, which on the host is always the same place."""
    return np.empty(shape, dtype=dtype)


def is_c_contiguous(x: np.ndarray) -> bool:
    return bool(x.flags.c_contiguous)


def may_share_memory(x: np.ndarray, y: np.ndarray) -> bool:
    return bool(np.may_share_memory(x, y))
