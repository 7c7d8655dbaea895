"""benchmarks/exact_path.py's wild operands: the semiring's zero where every slice of a K slice deep sees it."""

from __future__ import annotations

import numpy as np

from script_modules import load_script


def _draw(shape_a, shape_b, dtype, order="C"):
    rng = np.random.default_rng(0)
    return rng.integers(-1000, 1000, shape_a).astype(dtype), rng.integers(-1000, 1000, shape_b).astype(dtype)


def test_wild_operands_put_the_zero_in_every_seventh_column_of_a():
    exact_path = load_script("benchmarks", "exact_path")
    a, b = exact_path.wild_operands(_draw)((5, 40), (40, 3), "int32", order="F")
    zero = np.iinfo(np.int32).min
    assert (a[:, ::7] == zero).all() and (a[:, 1::7] != zero).all() and (b != zero).all()
    # every 16-deep slice of K holds a column of zeros: each takes the exact path
    assert all((a[:, k0:k0 + 16] == zero).any() for k0 in range(0, 40, 16))


def test_the_cases_cover_tame_wild_one_slice_and_float32():
    exact_path = load_script("benchmarks", "exact_path")
    cases = exact_path.CASES
    assert {c[0] for c in cases} == {"float32", "int32"}
    assert any(c[5] and c[1] for c in cases) and any(c[5] and not c[1] for c in cases)
    assert any(c[3] <= 16 and c[1] for c in cases)  # a K of one slice: no resolve
