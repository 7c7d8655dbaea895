"""Semiring laws at the matrix level: associativity, the identity matrix, distributivity.

They need no reference, so they check the engines from a different angle.
Each law is exercised where it holds exactly: associativity on integers small
enough never to saturate (and with the absorbing zero mixed in), or on the
lattice semirings (max_min, min_max) over the full range; identity and
distributivity on every dtype, inside each semiring's domain.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tropical_gemm as tg
from reference import RULES, one_of, zero_of
from strategies import DTYPES, SEMIRINGS, random_values

LATTICES = ("max_min", "min_max")


def in_domain(rng: np.random.Generator, shape: tuple[int, ...], dtype: str, semiring: str) -> np.ndarray:
    """Random values the semiring is defined on: no NaN; non-negative for max_mul; no -0.0.

    A NaN is ignored by ⊕ rather than propagated, so it is outside every
    semiring's carrier set; -0.0 comes back as +0.0 from a product.
    """
    x = random_values(rng, shape, dtype, 0.2)
    if x.dtype.kind == "f":
        x = np.where(np.isnan(x), 1.5, x) + 0.0
    if semiring == "max_mul":
        x = np.abs(x) if x.dtype.kind == "f" else np.maximum(x, 0)
    return x.astype(dtype)


def small_with_zeros(rng: np.random.Generator, shape: tuple[int, ...], dtype: str, semiring: str) -> np.ndarray:
    """Integers that cannot saturate through two products, plus the semiring's zero."""
    low = 0 if semiring == "max_mul" else -1000
    x = rng.integers(low, 1000, size=shape).astype(dtype)
    return np.where(rng.random(shape) < 0.15, zero_of(semiring, dtype), x).astype(dtype)


def identity(n: int, semiring: str, dtype: str) -> np.ndarray:
    e = np.full((n, n), zero_of(semiring, dtype), dtype=dtype)
    np.fill_diagonal(e, one_of(semiring, dtype))
    return e


def oplus(semiring: str, x: np.ndarray, y: np.ndarray) -> np.ndarray:
    return np.maximum(x, y) if RULES[semiring][0] == "max" else np.minimum(x, y)


dims = st.integers(1, 24)
seeds = st.integers(0, 2**32 - 1)


@given(semiring=st.sampled_from(SEMIRINGS), dtype=st.sampled_from(["int32", "int64"]),
       m=dims, k=dims, l=dims, n=dims, seed=seeds)
def test_product_is_associative_on_integers(engine, semiring, dtype, m, k, l, n, seed):
    rng = np.random.default_rng(seed)
    make = in_domain if semiring in LATTICES else small_with_zeros
    a, b, c = engine.put(make(rng, (m, k), dtype, semiring), make(rng, (k, l), dtype, semiring),
                         make(rng, (l, n), dtype, semiring))
    left = tg.matmul(tg.matmul(a, b, semiring), c, semiring)
    right = tg.matmul(a, tg.matmul(b, c, semiring), semiring)
    np.testing.assert_array_equal(*engine.get(left, right))


@given(semiring=st.sampled_from(LATTICES), dtype=st.sampled_from(["float32", "float64"]),
       m=dims, k=dims, l=dims, n=dims, seed=seeds)
def test_lattice_products_are_associative_on_floats(engine, semiring, dtype, m, k, l, n, seed):
    rng = np.random.default_rng(seed)
    a, b, c = engine.put(*(in_domain(rng, s, dtype, semiring) for s in ((m, k), (k, l), (l, n))))
    left = tg.matmul(tg.matmul(a, b, semiring), c, semiring)
    right = tg.matmul(a, tg.matmul(b, c, semiring), semiring)
    np.testing.assert_array_equal(*engine.get(left, right))


@given(semiring=st.sampled_from(SEMIRINGS), dtype=st.sampled_from(DTYPES), m=dims, n=dims, seed=seeds)
def test_identity_matrix_is_neutral_on_both_sides(engine, semiring, dtype, m, n, seed):
    x = in_domain(np.random.default_rng(seed), (m, n), dtype, semiring)
    a, e_left, e_right = engine.put(x, identity(m, semiring, dtype), identity(n, semiring, dtype))
    left, left_idx = engine.get(*tg.matmul(e_left, a, semiring, argmax=True))
    right = engine.get(tg.matmul(a, e_right, semiring))[0]
    np.testing.assert_array_equal(left, x)
    np.testing.assert_array_equal(right, x)
    # E ⊗ A picks row i of A for row i of C, unless the entry is the zero itself.
    rows = np.broadcast_to(np.arange(m)[:, None], (m, n))
    np.testing.assert_array_equal(left_idx, np.where(x == zero_of(semiring, dtype), -1, rows))


@given(semiring=st.sampled_from(SEMIRINGS), dtype=st.sampled_from(DTYPES), m=dims, k=dims, n=dims, seed=seeds)
def test_product_distributes_over_elementwise_sum(engine, semiring, dtype, m, k, n, seed):
    """A ⊗ (B ⊕ C) = (A ⊗ B) ⊕ (A ⊗ C) and (B ⊕ C) ⊗ D = (B ⊗ D) ⊕ (C ⊗ D), exactly.

    Exact even with rounding and saturation, because both are monotonic.
    """
    rng = np.random.default_rng(seed)
    a, b, c, d = (in_domain(rng, s, dtype, semiring) for s in ((m, k), (k, n), (k, n), (n, m)))
    da, db, dc, dd, dbc = engine.put(a, b, c, d, oplus(semiring, b, c))
    left = engine.get(tg.matmul(da, dbc, semiring))[0]
    ab, ac = engine.get(tg.matmul(da, db, semiring), tg.matmul(da, dc, semiring))
    np.testing.assert_array_equal(left, oplus(semiring, ab, ac))
    right = engine.get(tg.matmul(dbc, dd, semiring))[0]
    bd, cd = engine.get(tg.matmul(db, dd, semiring), tg.matmul(dc, dd, semiring))
    np.testing.assert_array_equal(right, oplus(semiring, bd, cd))


@pytest.mark.parametrize("semiring", SEMIRINGS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_the_zero_matrix_absorbs(engine, semiring, dtype):
    x = in_domain(np.random.default_rng(1), (6, 5), dtype, semiring)
    zeros = np.full((4, 6), zero_of(semiring, dtype), dtype=dtype)
    c, idx = engine.get(*tg.matmul(*engine.put(zeros, x), semiring, argmax=True))
    assert (c == zero_of(semiring, dtype)).all() and (idx == -1).all()
