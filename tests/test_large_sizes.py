"""64-bit sizes on the GPU: arrays with more than 2**31 elements, where a 32-bit offset would wrap.

An operand A of (2**16 + 8) × 2**15 int32 (8 GiB) crosses element 2**31 in
row 65536, stored by rows and as a transposed view (by columns); and an
argmax product whose outputs cross it (the values-only output case is in
test_cuda_engine.py).  Operands are filled on the GPU with hashed integers
in [-1000, 1000], so nothing saturates and ties are common; a handful of
rows, among them the ones around element 2**31 and the last ones, are
checked against the numpy broadcast of those rows.  Each test skips when
the GPU lacks the free memory, and gives it back afterwards.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

import tropical_gemm as tg

pytestmark = pytest.mark.gpu

#: splitmix64 of (index, seed), folded into [-1000, 1000]; ``i`` is 64-bit here.
HASH_FILL = """
unsigned long long z = (unsigned long long)i + seed * 0x9E3779B97F4A7C15ull;
z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
z ^= z >> 31;
x = (int)(z % 2001ull) - 1000;
"""


@pytest.fixture(scope="module")
def cp():
    import cupy

    return cupy


@pytest.fixture(autouse=True)
def gives_memory_back():
    yield
    import cupy

    cupy.get_default_memory_pool().free_all_blocks()


def require_free_gib(cp, gib: float) -> None:
    cp.get_default_memory_pool().free_all_blocks()
    free, _ = cp.cuda.runtime.memGetInfo()
    if free < gib * 2**30:
        pytest.skip(f"needs {gib} GiB of free GPU memory, {free / 2**30:.1f} GiB free")


def hashed(cp, shape: tuple[int, ...], seed: int) -> Any:
    """int32 values in [-1000, 1000] made on the GPU (never all zeros, no host copy of a huge array)."""
    out = cp.empty(shape, dtype=np.int32)
    cp.ElementwiseKernel("uint64 seed", "int32 x", HASH_FILL, "tg_test_hash_fill")(np.uint64(seed), out)
    return out


def product_rows(cp, make_a: Callable[[], Any], b: Any, rows: list[int]) -> dict[str, np.ndarray]:
    """Rows of ``A ⊗ B`` (values alone, then with argmax) and of A, on the host; A and C live only in here."""
    a = make_a()

    def picked(x: Any) -> np.ndarray:
        return cp.stack([x[r] for r in rows]).get()

    got = {"a": picked(a), "b": b.get()}
    c = tg.matmul(a, b, "max_plus")
    got["c"] = picked(c)
    del c
    c, k = tg.matmul(a, b, "max_plus", argmax=True)
    got["c_arg"], got["k"] = picked(c), picked(k)
    return got


def assert_rows_right(got: dict[str, np.ndarray]) -> None:
    candidates = got["a"][:, :, None].astype(np.int64) + got["b"][None].astype(np.int64)
    np.testing.assert_array_equal(got["c"], candidates.max(axis=1))
    np.testing.assert_array_equal(got["c_arg"], candidates.max(axis=1))
    np.testing.assert_array_equal(got["k"], candidates.argmax(axis=1))  # numpy's argmax: the first k


@pytest.mark.parametrize("layout", ["row", "col"])
def test_an_operand_over_2_31_elements(cp, layout):
    m, k = 2**16 + 8, 2**15
    assert m * k > 2**31
    require_free_gib(cp, 9)
    crossing = 2**31 // k  # by rows, A[crossing, 0] is element 2**31; by columns, every row reaches past it
    rows = [0, 1, crossing - 1, crossing, m - 2, m - 1]
    b = hashed(cp, (k, 3), seed=2)
    make_a = (lambda: hashed(cp, (m, k), seed=1)) if layout == "row" else (lambda: hashed(cp, (k, m), seed=1).T)
    assert_rows_right(product_rows(cp, make_a, b, rows))


def test_an_argmax_output_over_2_31_elements(cp):
    m, k, n = 2**16 + 3, 5, 2**15 + 1
    assert m * n > 2**31
    require_free_gib(cp, 17)  # C and argmax, 8 GiB each
    crossing = 2**31 // n  # the row of C holding element 2**31
    a = hashed(cp, (m, k), seed=3)
    b = hashed(cp, (k, n), seed=4)
    assert_rows_right(product_rows(cp, lambda: a, b, [0, 1, crossing, crossing + 1, m - 2, m - 1]))
