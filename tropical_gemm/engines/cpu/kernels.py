"""The CPU engine's compiled loops (numba): packed, register-blocked, one tile of C at a time.

One tile function is built per variant (⊕, ⊗, saturating or not, with argmax
or not) from a factory whose closure holds only small integers: numba folds
them into the code as constants, so each variant compiles to its own tight
loop, and numba's disk cache keys each one by those constants (a closure over
functions would not be cacheable).  Variants are built on first use, so a
process compiles or loads only the products it runs.

The loop nest: for each panel of B (``KB`` rows by ``NB`` columns, copied into
a contiguous buffer that stays in L2), two rows of C take four ks at a time.
The innermost loop runs over columns with no dependence between iterations,
so LLVM turns it into SIMD loads, adds and max/min across the whole vector
unit.  Row views keep its indices provably non-negative: an index numba must
check for wraparound becomes a gather and runs several times slower.  With
argmax, a pass takes ``GROUP`` ks and records only which group last improved
each entry (one compare per group, not per candidate); a scalar pass at the
end of each panel, while it is still in cache, finds the first k inside the
group whose candidate equals the result.

The tile is built from small numba functions that take the variant's codes
as arguments.  Those run per element (``_fold4``, ``_fold_group``) are
inlined by numba itself (``inline="always"``): left to LLVM, the larger
saturating ones stay calls, with the codes unknown inside, and the loop
loses its SIMD.  Their arguments are scalars only; a tuple passed into an
inlined helper also cost the argmax loop its SIMD.  ``_pass4`` is inlined
too (as an LLVM call it ran a few per cent slower); ``_pass_groups`` stays
an ordinary call (inlined by numba, it lost its SIMD).

Semantics (the engine's module docstring states them; tests/numpy_engine.py
is the plain reference): a candidate replaces the accumulator only when
strictly better, so ties keep the smallest k and NaN never wins; the
accumulator starts at the semiring's zero, and a zero result is +0.0.
"""

from __future__ import annotations

import time
from functools import lru_cache
from typing import Callable

import numpy as np
import numba
from numba import njit, types

from ...jit import log
from .numba_cache import compile_cached

#: ⊕ codes.
MAX, MIN = 0, 1
#: ⊗ codes.
PLUS, TIMES, OMIN, OMAX = 0, 1, 2, 3
ADD_CODES = {"max": MAX, "min": MIN}
MUL_CODES = {"plus": PLUS, "times": TIMES, "min": OMIN, "max": OMAX}

#: Rows of B per packed panel: KB x NB x 8 bytes (float64) is 1 MiB, the L2
#: of current x86 cores; float32 panels use half.
KB = 256
#: Panel shape of the argmax variant (see _make_tile): all of K up to 1024 in
#: one panel, so each entry of C goes through the scalar first-k pass about
#: once rather than once per panel it improved in; that pass, not the panel
#: falling out of L2 (its rows are read in order, so prefetch keeps up),
#: decides the speed.  Figures: docs/performance.md.
KB_ARGMAX = 1024
NB_ARGMAX = 512
#: ks per pass of the argmax loop; the winning group is resolved to its first k afterwards.
GROUP = 8
#: Columns of B per packed panel, and so the width of the vectorised loop.
NB = 512


@njit
def _saturating_add(x, y, zero, lo, hi):  # noqa: ANN001, ANN202 - numba infers the types
    """``x + y`` clamped to [lo, hi], with ``zero`` absorbing (integers only).

    Overflow is tested before adding: LLVM treats signed overflow as
    undefined, so a test on the wrapped sum could be optimised away.  Written
    with comparisons only, so it also types for floats, where it never runs.
    """
    if x == zero or y == zero:
        return zero
    if y > 0 and x > hi - y:
        return hi
    if y < 0 and x < lo - y:
        return lo
    return x + y


@njit
def _magnitude(x):  # noqa: ANN001, ANN202
    """|x| as uint64, exact even for the most negative integer."""
    return np.uint64(x) if x >= 0 else np.uint64(-(x + 1)) + np.uint64(1)


@njit
def _saturating_mul(x, y, lo, hi):  # noqa: ANN001, ANN202
    """``x * y`` clamped to [lo, hi] (integers only; 0 absorbs by arithmetic).

    The magnitudes decide overflow in unsigned arithmetic before multiplying
    (signed overflow is undefined for LLVM); ``lo`` is ``-(hi + 1)``.
    """
    negative = (x < 0) != (y < 0)
    limit = np.uint64(hi) + np.uint64(1) if negative else np.uint64(hi)
    ux = _magnitude(x)
    if ux != np.uint64(0) and _magnitude(y) > limit // ux:
        return lo if negative else hi
    return x * y


@njit
def _mul(x, y, mul, sat, zero, lo, hi):  # noqa: ANN001, ANN202, PLR0913
    """⊗: NaN-ignoring min/max for floats (numpy's fmin/fmax), saturating integers when ``sat``."""
    if mul == PLUS:
        return _saturating_add(x, y, zero, lo, hi) if sat else x + y
    if mul == TIMES:
        return _saturating_mul(x, y, lo, hi) if sat else x * y
    if mul == OMIN:
        return y if (y < x or x != x) else x
    return y if (y > x or x != x) else x


@njit
def _better(t, c, add):  # noqa: ANN001, ANN202
    """Strictly better under ⊕; False for a NaN candidate."""
    return t > c if add == MAX else t < c


@njit
def _first_winners(a, panel, w, k0, k1, i, row, row_idx, mul, sat, zero, lo, hi):  # noqa: ANN001, ANN202, PLR0913
    """Turn the winning groups of ks found in this panel into the first k whose candidate equals C.

    Within a group the candidates replaced the running best only when strictly
    better, so the winner is the first k whose candidate equals the final
    value: the smallest k, as the tie rule asks.  ``_mul`` recomputes each
    candidate exactly as the product did, so equality is exact.  Run while the
    panel is still in cache; indices from earlier panels are below ``k0``.
    """
    for j in range(w):
        q = row_idx[j]
        if q >= k0:
            # A fixed-length scan from the last k down, with selects rather than an
            # early exit: where the winner sits is random, so branches mispredict.
            value = row[j]
            first = q
            for g in range(GROUP - 1, -1, -1):
                k = min(q + g, k1 - 1)
                t = _mul(a[i, k], panel[(k - k0) * w + j], mul, sat, zero, lo, hi)
                first = k if t == value else first
            row_idx[j] = first


@njit(inline="always")
def _fold4(c, x0, x1, x2, x3, y0, y1, y2, y3, add, mul, sat, zero, lo, hi):  # noqa: ANN001, ANN202, PLR0913
    """``c`` ⊕ (x0 ⊗ y0) ⊕ … ⊕ (x3 ⊗ y3), left to right, each candidate kept only when strictly better."""
    t = _mul(x0, y0, mul, sat, zero, lo, hi)
    c = t if _better(t, c, add) else c
    t = _mul(x1, y1, mul, sat, zero, lo, hi)
    c = t if _better(t, c, add) else c
    t = _mul(x2, y2, mul, sat, zero, lo, hi)
    c = t if _better(t, c, add) else c
    t = _mul(x3, y3, mul, sat, zero, lo, hi)
    return t if _better(t, c, add) else c


@njit(inline="always")
def _fold_group(c, last, k, x0, x1, x2, x3, x4, x5, x6, x7, y0, y1, y2, y3, y4, y5, y6, y7,  # noqa: ANN001, ANN202, PLR0913
                add, mul, sat, zero, lo, hi):
    """One entry of C folded with a group of GROUP candidates ``x_g ⊗ y_g``, and its group index.

    The index becomes ``k``, the group's first k, when the group improved the entry, else stays ``last``.
    """
    v = _fold4(c, x0, x1, x2, x3, y0, y1, y2, y3, add, mul, sat, zero, lo, hi)
    v = _fold4(v, x4, x5, x6, x7, y4, y5, y6, y7, add, mul, sat, zero, lo, hi)
    return v, (k if _better(v, c, add) else last)


@njit(inline="always")
def _panel_row(panel, k, k0, w):  # noqa: ANN001, ANN202
    """Row ``k`` of B as packed in ``panel`` (its ks start at ``k0``; ``w`` columns)."""
    return panel[(k - k0) * w : (k - k0 + 1) * w]


@njit(inline="always")
def _pass4(a, panel, o0, o1, i, ii, k0, k1, w, add, mul, sat, zero, lo, hi):  # noqa: ANN001, ANN202, PLR0913
    """Rows ``i`` and ``ii`` of C (views ``o0``, ``o1``) folded with this panel's ks, four at a time."""
    for k in range(k0, k1, 4):
        ka, kb, kc = min(k + 1, k1 - 1), min(k + 2, k1 - 1), min(k + 3, k1 - 1)
        b0, b1 = _panel_row(panel, k, k0, w), _panel_row(panel, ka, k0, w)
        b2, b3 = _panel_row(panel, kb, k0, w), _panel_row(panel, kc, k0, w)
        x0, x1, x2, x3 = a[i, k], a[i, ka], a[i, kb], a[i, kc]
        z0, z1, z2, z3 = a[ii, k], a[ii, ka], a[ii, kb], a[ii, kc]
        for j in range(w):
            y0, y1, y2, y3 = b0[j], b1[j], b2[j], b3[j]
            o0[j] = _fold4(o0[j], x0, x1, x2, x3, y0, y1, y2, y3, add, mul, sat, zero, lo, hi)
            o1[j] = _fold4(o1[j], z0, z1, z2, z3, y0, y1, y2, y3, add, mul, sat, zero, lo, hi)


@njit
def _pass_groups(a, panel, o0, o1, i0, i1, i, ii, k0, k1, w, add, mul, sat, zero, lo, hi):  # noqa: ANN001, ANN202, PLR0913
    """As _pass4, GROUP ks at a time, also recording in ``i0``/``i1`` the group that last improved each entry.

    One compare per group, not per candidate; _first_winners then finds the k inside it.
    """
    for k in range(k0, k1, GROUP):
        ks = (k, min(k + 1, k1 - 1), min(k + 2, k1 - 1), min(k + 3, k1 - 1), min(k + 4, k1 - 1),
              min(k + 5, k1 - 1), min(k + 6, k1 - 1), min(k + 7, k1 - 1))
        b0, b1 = _panel_row(panel, ks[0], k0, w), _panel_row(panel, ks[1], k0, w)
        b2, b3 = _panel_row(panel, ks[2], k0, w), _panel_row(panel, ks[3], k0, w)
        b4, b5 = _panel_row(panel, ks[4], k0, w), _panel_row(panel, ks[5], k0, w)
        b6, b7 = _panel_row(panel, ks[6], k0, w), _panel_row(panel, ks[7], k0, w)
        x0, x1, x2, x3 = a[i, ks[0]], a[i, ks[1]], a[i, ks[2]], a[i, ks[3]]
        x4, x5, x6, x7 = a[i, ks[4]], a[i, ks[5]], a[i, ks[6]], a[i, ks[7]]
        z0, z1, z2, z3 = a[ii, ks[0]], a[ii, ks[1]], a[ii, ks[2]], a[ii, ks[3]]
        z4, z5, z6, z7 = a[ii, ks[4]], a[ii, ks[5]], a[ii, ks[6]], a[ii, ks[7]]
        for j in range(w):
            y0, y1, y2, y3, y4, y5, y6, y7 = b0[j], b1[j], b2[j], b3[j], b4[j], b5[j], b6[j], b7[j]
            o0[j], i0[j] = _fold_group(o0[j], i0[j], k, x0, x1, x2, x3, x4, x5, x6, x7,
                                       y0, y1, y2, y3, y4, y5, y6, y7, add, mul, sat, zero, lo, hi)
            o1[j], i1[j] = _fold_group(o1[j], i1[j], k, z0, z1, z2, z3, z4, z5, z6, z7,
                                       y0, y1, y2, y3, y4, y5, y6, y7, add, mul, sat, zero, lo, hi)


@njit(inline="always")
def _fill(out, idx, r0, r1, c0, c1, zero, argmax):  # noqa: ANN001, ANN202, PLR0913
    """The tile of C set to the semiring's zero, and its argmax to -1 (no k yet)."""
    for i in range(r0, r1):
        out[i, c0:c1] = zero
        if argmax:
            idx[i, c0:c1] = -1


@njit(inline="always")
def _positive_zeros(out, r0, r1, c0, c1):  # noqa: ANN001, ANN202
    """A zero result is +0.0, whichever signed zero won."""
    for i in range(r0, r1):
        for j in range(c0, c1):
            out[i, j] += 0.0


def _make_tile(add: int, mul: int, sat: bool, argmax: bool, floating: bool, signature: object) -> Callable:
    """The compiled tile function of one variant and signature (constants folded, disk-cached)."""
    # With argmax, each panel of ks ends with a scalar pass over the entries it
    # changed; taller panels make that pass rarer.
    kb_size, nb_size = (KB_ARGMAX, NB_ARGMAX) if argmax else (KB, NB)

    @njit(nogil=True)
    def tile(a, b, out, idx, r0, r1, c0, c1, zero, lo, hi):  # noqa: ANN001, ANN202, PLR0913
        """``out[r0:r1, c0:c1]`` (and ``idx``'s, with argmax) from ``a`` and ``b``.

        Odd rows and ks left over at the edges reuse the same step with a row
        or a k repeated: ⊕ is idempotent and a repeated candidate only ties,
        so the result is unchanged and ties still keep the smallest k.
        """
        kdim = a.shape[1]
        _fill(out, idx, r0, r1, c0, c1, zero, argmax)
        panel = np.empty(min(kb_size, kdim) * min(nb_size, c1 - c0), a.dtype)  # no larger than this tile needs
        for j0 in range(c0, c1, nb_size):
            j1 = min(j0 + nb_size, c1)
            w = j1 - j0
            for k0 in range(0, kdim, kb_size):
                k1 = min(k0 + kb_size, kdim)
                for k in range(k0, k1):
                    panel[(k - k0) * w : (k - k0 + 1) * w] = b[k, j0:j1]
                for i in range(r0, r1, 2):
                    ii = min(i + 1, r1 - 1)
                    o0, o1 = out[i, j0:j1], out[ii, j0:j1]
                    if argmax:
                        i0, i1 = idx[i, j0:j1], idx[ii, j0:j1]
                        _pass_groups(a, panel, o0, o1, i0, i1, i, ii, k0, k1, w, add, mul, sat, zero, lo, hi)
                        _first_winners(a, panel, w, k0, k1, i, o0, i0, mul, sat, zero, lo, hi)
                        if ii != i:
                            _first_winners(a, panel, w, k0, k1, ii, o1, i1, mul, sat, zero, lo, hi)
                    else:
                        _pass4(a, panel, o0, o1, i, ii, k0, k1, w, add, mul, sat, zero, lo, hi)
        if floating:
            _positive_zeros(out, r0, r1, c0, c1)

    return compile_cached(tile, signature)


@lru_cache(maxsize=None)
def tile_function(add: str, mul: str, sat: bool, argmax: bool, dtype: np.dtype, idx_dtype: np.dtype) -> Callable:
    """The tile function of one variant, compiled or loaded from the disk cache on first use.

    Its one signature takes A and B with any strides (numba's layout ``A``), read-only:
    the kernel reads A by element and copies B into panels anyway, so
    strided operands (Dask chunks of a memory map, transposed views) need no
    C-contiguous copy, and contiguous ones use the same compiled code.
    """
    value, index = numba.from_dtype(np.dtype(dtype)), numba.from_dtype(np.dtype(idx_dtype))
    operand = types.Array(value, 2, "A", readonly=True)  # read-only memory maps too; writable arrays convert
    signature = types.void(operand, operand, types.Array(value, 2, "C"), types.Array(index, 2, "C"),
                           types.int64, types.int64, types.int64, types.int64, value, value, value)
    started = time.perf_counter()
    tile = _make_tile(ADD_CODES[add], MUL_CODES[mul], sat, argmax, np.dtype(dtype).kind == "f", signature)
    how = "loaded from the CPU kernel cache" if sum(tile.stats.cache_hits.values()) else "compiled by numba"
    log.info("CPU kernel %s/%s %s%s%s %s in %.2f s", add, mul, np.dtype(dtype).name, " saturating" * sat,
             " argmax" * argmax, how, time.perf_counter() - started)
    return tile
