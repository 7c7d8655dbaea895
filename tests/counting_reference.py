"""A naive reference for the counting tropical products, written from docs/semantics.md, one (i, j, k) at a time.

It never imports ``tropical_gemm``: the rules are spelt out here.  Values are
computed in Python floats and rounded once to the dtype (exact IEEE
arithmetic for a single + of two float32 values); counts in Python ints, so
the true count is known even where it is past int64.
"""

from __future__ import annotations

import itertools
import math

import numpy as np

#: ⊕ of each counting semiring.
ADD = {"count_max_plus": "max", "count_min_plus": "min"}
INT64_MAX = 2**63 - 1


def zero(semiring: str) -> float:
    return -math.inf if ADD[semiring] == "max" else math.inf


def _better(semiring: str, cand: float, best: float) -> bool:
    return cand > best if ADD[semiring] == "max" else cand < best


def _entry(semiring: str, a_values, a_counts, b_values, b_counts, dtype: np.dtype) -> tuple[float, int]:
    """⊕ over k of (a_k + b_k, a_count_k · b_count_k): the best value and the sum of its counts."""
    best, count = zero(semiring), 0
    for av, ac, bv, bc in zip(a_values, a_counts, b_values, b_counts):
        cand = float(np.asarray(float(av) + float(bv)).astype(dtype))  # one rounding to the dtype
        if math.isnan(cand):
            continue  # NaN equals nothing: it never wins and never counts
        if _better(semiring, cand, best):
            best, count = cand, int(ac) * int(bc)
        elif cand == best:
            count += int(ac) * int(bc)
    if best == zero(semiring):
        count = 0
    return best + 0.0, count


def reference_counting_matmul(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray],
                              semiring: str) -> tuple[np.ndarray, list]:
    """``(values, counts)``: values as an array of the operands' dtype, counts as nested Python ints (exact).

    Operands are 2-D or batched, broadcast as numpy.matmul (no 1-D here).
    """
    (av, ac), (bv, bc) = a, b
    dtype = av.dtype
    batch = np.broadcast_shapes(av.shape[:-2], bv.shape[:-2])
    m, k = av.shape[-2:]
    n = bv.shape[-1]
    values = np.empty((*batch, m, n), dtype=dtype)
    counts = np.empty((*batch, m, n), dtype=object)
    for index in itertools.product(*(range(s) for s in batch)):
        ia = tuple(0 if s == 1 else i for i, s in zip(index[len(index) - (av.ndim - 2):], av.shape[:-2]))
        ib = tuple(0 if s == 1 else i for i, s in zip(index[len(index) - (bv.ndim - 2):], bv.shape[:-2]))
        for i, j in itertools.product(range(m), range(n)):
            value, count = _entry(semiring, av[ia][i], ac[ia][i], bv[ib][:, j], bc[ib][:, j], dtype)
            values[(*index, i, j)] = value
            counts[(*index, i, j)] = count
    return values, counts


def reference_counting_einsum(subscripts: str, pairs: list, semiring: str) -> tuple[np.ndarray, np.ndarray]:
    """Every assignment of every index, one at a time: the ⊕ of each term's (sum of values, product of counts).

    ``subscripts`` has an explicit output and one letter per axis (no ``...``).
    """
    inputs, output = subscripts.split("->")
    terms = inputs.split(",")
    sizes: dict[str, int] = {}
    for term, (values, _) in zip(terms, pairs):
        sizes.update(zip(term, values.shape))
    letters = sorted(sizes)
    dtype = pairs[0][0].dtype
    out_shape = tuple(sizes[c] for c in output)
    best = np.full(out_shape, zero(semiring), dtype=np.float64)
    counts = np.zeros(out_shape, dtype=object)
    for assignment in itertools.product(*(range(sizes[c]) for c in letters)):
        at = dict(zip(letters, assignment))
        value, ways = 0.0, 1
        for term, (values, cs) in zip(terms, pairs):
            index = tuple(at[c] for c in term)
            value = float(np.asarray(value + float(values[index])).astype(dtype))
            ways *= int(cs[index])
        out = tuple(at[c] for c in output)
        if math.isnan(value):
            continue
        if _better(semiring, value, best[out]):
            best[out], counts[out] = value, ways
        elif value == best[out]:
            counts[out] += ways
    counts[best == zero(semiring)] = 0
    return best.astype(dtype) + 0.0, counts
