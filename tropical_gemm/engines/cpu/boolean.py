"""The boolean semiring (``and_or``) on the CPU: operands packed 64 ks to a word, one AND and a test per word.

``C[i, j]`` is whether some k has both ``A[i, k]`` and ``B[k, j]``: with A's
rows and B's columns packed into 64-bit words along k, that is whether any
word of ``A_row & B_col`` is nonzero, so one AND (and an OR into the
accumulator) stands for 64 multiply-adds, and no float copy of either operand
or of C is made.  The argmax is the first k that makes the entry true: the
lowest set bit of the first nonzero word.

Packing is numpy's ``packbits`` (nonzero reads as true, any strides), into
C-contiguous words; the word's bit ``j`` is ``k = 64·w + j`` on a little-endian
host, which every platform numba runs on is.  The product reads every word
(no early exit once an entry is true: a test per word cost the loop its
SIMD, and the time would depend on the data); the argmax stops at the first
nonzero word.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Callable

import numba
import numpy as np
from numba import njit, types
from numba.cpython.unsafe.numbers import trailing_zeros

from .numba_cache import compile_cached

#: ks per packed word.
WORD_BITS = 64
#: Columns of C per panel: their packed columns stay in the L1/L2 cache while every block of rows passes.
PANEL_COLUMNS = 64
#: Below this many word ANDs (M·N·K/64) a product runs on the calling thread.
SERIAL_WORDS = 2**18


def pack(x: np.ndarray, k_axis: int) -> np.ndarray:
    """``x``'s truth values packed along ``k_axis`` (-1 for A, -2 for B): C-contiguous uint64, shape (..., other, W).

    ``W = ceil(K / 64)``; the bits beyond K in the last word are 0, so they
    never make an entry true.  Where k is the operand's closer axis in memory,
    numpy's ``packbits`` runs along it; elsewhere (B in row layout, A in
    column layout) ``_pack_lines`` reads whole rows of k at a time, where
    ``packbits`` would gather one byte per line.

    Examples:
        >>> import numpy as np
        >>> pack(np.array([[True, False, True]]), -1)     # k = 0 and 2 set
        array([[5]], dtype=uint64)
        >>> pack(np.array([[1], [0], [2]], dtype=np.uint8), -2)   # B: one column, nonzero is true
        array([[5]], dtype=uint64)
    """
    lines_axis = -2 if k_axis == -1 else -1
    k = x.shape[k_axis]
    words = -(-k // WORD_BITS)
    out = np.zeros((*x.shape[:-2], x.shape[lines_axis], words), dtype=np.uint64)
    if out.size == 0:
        return out
    if abs(x.strides[k_axis]) <= abs(x.strides[lines_axis]):
        packed = np.moveaxis(np.packbits(x, axis=k_axis, bitorder="little"), k_axis, -1)
        out.view(np.uint8)[..., : packed.shape[-1]] = packed
        return out
    by_k = np.moveaxis(x, k_axis, -2)  # (..., K, lines), lines the closer axis
    pack_lines = pack_function(x.dtype)
    for index in np.ndindex(*x.shape[:-2]):
        pack_lines(by_k[index], out[index])
    return out


def _make_pack(signature: object) -> Callable:
    def pack_lines(x, out):  # noqa: ANN001, ANN202
        """``out[line, w]`` = bits ``x[64 w + j, line] != 0``: a row of ``x`` at a time, ORed into one word per line."""
        k, lines = x.shape
        word = np.zeros(lines, np.uint64)
        for w in range(out.shape[1]):
            word[:] = 0
            for j in range(min(WORD_BITS, k - WORD_BITS * w)):
                row = x[WORD_BITS * w + j]
                for line in range(lines):
                    word[line] |= np.uint64(row[line] != 0) << np.uint64(j)
            out[:, w] = word

    return compile_cached(njit(nogil=True)(pack_lines), signature)


@lru_cache(maxsize=None)
def pack_function(dtype: np.dtype) -> Callable:
    """The line packer for bool or uint8 operands, compiled or loaded from the disk cache on first use."""
    signature = types.void(types.Array(numba.from_dtype(np.dtype(dtype)), 2, "A", readonly=True),
                           types.Array(types.uint64, 2, "C"))
    return _make_pack(signature)


@njit(inline="always")
def _block(a0, a1, a2, a3, b0, b1, b2, b3, words):  # noqa: ANN001, ANN202, PLR0913
    """Four packed rows against four packed columns: the 16 ORs of their ANDs, each nonzero where true.

    Each word loaded feeds four ANDs, and the loop over words has no branch,
    so LLVM vectorises it.
    """
    c00 = c01 = c02 = c03 = c10 = c11 = c12 = c13 = np.uint64(0)
    c20 = c21 = c22 = c23 = c30 = c31 = c32 = c33 = np.uint64(0)
    for w in range(words):
        x0, x1, x2, x3 = a0[w], a1[w], a2[w], a3[w]
        y0, y1, y2, y3 = b0[w], b1[w], b2[w], b3[w]
        c00 |= x0 & y0; c01 |= x0 & y1; c02 |= x0 & y2; c03 |= x0 & y3  # noqa: E702
        c10 |= x1 & y0; c11 |= x1 & y1; c12 |= x1 & y2; c13 |= x1 & y3  # noqa: E702
        c20 |= x2 & y0; c21 |= x2 & y1; c22 |= x2 & y2; c23 |= x2 & y3  # noqa: E702
        c30 |= x3 & y0; c31 |= x3 & y1; c32 |= x3 & y2; c33 |= x3 & y3  # noqa: E702
    return ((c00, c01, c02, c03), (c10, c11, c12, c13), (c20, c21, c22, c23), (c30, c31, c32, c33))


@njit(inline="always")
def _store(out, i, cols, row):  # noqa: ANN001, ANN202
    """One row of a block's results into C: true where its accumulator is nonzero."""
    out[i, cols[0]] = row[0] != 0
    out[i, cols[1]] = row[1] != 0
    out[i, cols[2]] = row[2] != 0
    out[i, cols[3]] = row[3] != 0


@njit(inline="always")
def _first_true(arow, bcol, words):  # noqa: ANN001, ANN202
    """The smallest k with both bits set (the lowest set bit of the first nonzero AND), or -1."""
    for w in range(words):
        both = arow[w] & bcol[w]
        if both != 0:
            return w * WORD_BITS + np.int64(trailing_zeros(both))  # int64 throughout: uint64 would make it float
    return -1


def _make_tile(argmax: bool, signature: object) -> Callable:
    """The compiled tile of one variant (with the argmax or not), disk-cached."""

    def tile(ap, bp, out, idx, r0, r1, c0, c1):  # noqa: ANN001, ANN202, PLR0913
        """``out[r0:r1, c0:c1]`` (and ``idx``'s, with argmax) from packed rows ``ap`` and packed columns ``bp``.

        Without argmax: blocks of 4 rows by 4 columns, over panels of
        ``PANEL_COLUMNS`` columns that stay in cache while every row block
        passes; rows and columns left over at the edges repeat the last one
        (each entry is written with its own value, so a repeat is harmless).
        With argmax: each entry scans its words up to the first nonzero one.
        """
        words = ap.shape[1]
        if argmax:
            for i in range(r0, r1):
                for j in range(c0, c1):
                    first = _first_true(ap[i], bp[j], words)
                    idx[i, j] = first
                    out[i, j] = first >= 0
            return
        for p0 in range(c0, c1, PANEL_COLUMNS):
            p1 = min(p0 + PANEL_COLUMNS, c1)
            for i in range(r0, r1, 4):
                rows = (i, min(i + 1, r1 - 1), min(i + 2, r1 - 1), min(i + 3, r1 - 1))
                for j in range(p0, p1, 4):
                    cols = (j, min(j + 1, p1 - 1), min(j + 2, p1 - 1), min(j + 3, p1 - 1))
                    row0, row1, row2, row3 = _block(ap[rows[0]], ap[rows[1]], ap[rows[2]], ap[rows[3]],
                                                    bp[cols[0]], bp[cols[1]], bp[cols[2]], bp[cols[3]], words)
                    _store(out, rows[0], cols, row0)
                    _store(out, rows[1], cols, row1)
                    _store(out, rows[2], cols, row2)
                    _store(out, rows[3], cols, row3)

    return compile_cached(njit(nogil=True)(tile), signature)


@lru_cache(maxsize=None)
def tile_function(argmax: bool, idx_dtype: np.dtype) -> Callable:
    """The tile function of one variant, compiled or loaded from the disk cache on first use."""
    words = types.Array(types.uint64, 2, "C", readonly=True)
    index = types.Array(numba.from_dtype(np.dtype(idx_dtype)), 2, "C")
    signature = types.void(words, words, types.Array(types.boolean, 2, "C"), index,
                           types.int64, types.int64, types.int64, types.int64)
    return _make_tile(argmax, signature)
