"""The CPU engine's counting tropical product (numba): one tile of C at a time, rows by k by columns.

Each row of the tile keeps, per column, the best value so far, its count and
whether that count overflowed; a strictly better candidate replaces all three
and an equal one adds its count.  The loop runs over columns innermost, so
B is read along its rows.  Counts are non-negative int64, and overflow is
decided before each multiply and add (signed overflow is undefined for
LLVM): a count that overflowed only matters if its value is the final one,
so the flag travels with the count and is reported per tile.  The
semantics are those of ``jit/functors.py``'s device kernel: NaN equals
nothing and so is never counted, and a result at the zero counts 0.

The ⊕ (max or min) is a compile-time constant of each variant, as in
``kernels.py``, so each compiles to its own loop and numba's disk cache keys it.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Callable

import numba
import numpy as np
from numba import njit, types

from ...semirings import COUNT_NEGATIVE as NEGATIVE
from ...semirings import COUNT_OVERFLOW as OVERFLOW
from .numba_cache import our_cache_dir

_INT64_MAX = np.iinfo(np.int64).max
#: Counts below this multiply without overflow (their product is below 2**62).
_SMALL = 2**31


def _make_tile(maximise: bool, signature: object) -> Callable:
    @njit(signature, nogil=True, cache=True)
    def tile(va, ca, vb, cb, vc, cc, r0, r1, c0, c1, zero):  # noqa: ANN001, ANN202, PLR0913
        """``vc, cc[r0:r1, c0:c1]`` from the pairs ``(va, ca)`` and ``(vb, cb)``; returns the flag bits."""
        flags = 0
        width = c1 - c0
        best = np.empty(width, vc.dtype)
        count = np.empty(width, np.int64)
        over = np.empty(width, np.bool_)
        for i in range(r0, r1):
            best[:] = zero
            count[:] = 0
            over[:] = False
            for k in range(va.shape[1]):
                a, x = va[i, k], ca[i, k]
                if x < 0:
                    flags |= NEGATIVE
                vrow, crow = vb[k, c0:c1], cb[k, c0:c1]
                for j in range(width):
                    y = crow[j]
                    if y < 0:
                        flags |= NEGATIVE
                    cand = a + vrow[j]
                    wins = cand > best[j] if maximise else cand < best[j]
                    if not (wins or cand == best[j]):
                        continue
                    overflowed = (x | y) >= _SMALL and x != 0 and y > _INT64_MAX // x
                    ways = 0 if overflowed else x * y
                    if wins:
                        best[j], count[j], over[j] = cand, ways, overflowed
                    elif overflowed or count[j] > _INT64_MAX - ways:
                        over[j] = True
                    else:
                        count[j] += ways
            for j in range(width):
                if best[j] == zero:
                    vc[i, c0 + j], cc[i, c0 + j] = zero, 0
                    continue
                if over[j]:
                    flags |= OVERFLOW
                vc[i, c0 + j] = best[j] + 0.0  # a zero result is +0.0, whichever signed zero won
                cc[i, c0 + j] = count[j]
        return flags

    return tile


@lru_cache(maxsize=None)
def tile_function(add: str, dtype: np.dtype) -> Callable:
    """The counting tile of ⊕ = ``add`` on ``dtype`` values, compiled or loaded from the disk cache on first use.

    Operands take any strides (numba's layout ``A``), read-only; outputs are C-contiguous.
    """
    value = numba.from_dtype(np.dtype(dtype))
    values_in = types.Array(value, 2, "A", readonly=True)
    counts_in = types.Array(types.int64, 2, "A", readonly=True)
    signature = types.int64(values_in, counts_in, values_in, counts_in, types.Array(value, 2, "C"),
                            types.Array(types.int64, 2, "C"), types.int64, types.int64, types.int64, types.int64,
                            value)
    with our_cache_dir():
        return _make_tile(add == "max", signature)
