"""Values, argmax and gradients of every semiring x dtype against the naive reference.

Each test takes the ``engine`` fixture, so the same checks run on the CPU
engine and (with a GPU) on the CUDA engine, which must agree bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import tropical_gemm as tg
from conftest import cuda_engine
from reference import one_of, otimes, reference_backward, reference_matmul, zero_of
from strategies import DTYPES, FLOAT_DTYPES, SEMIRINGS, Case, cases, random_values

# inf - inf, 0 * inf and overflow are documented behaviour, not worth a warning.
pytestmark = pytest.mark.filterwarnings("error")

# ------------------------------------------------------------------ helpers


def assert_identical(actual: np.ndarray, expected: np.ndarray) -> None:
    """Same shape, dtype and bits (so +0.0 vs -0.0 counts).

    NaN is compared as NaN: its sign and payload are the platform's (x86 makes
    -NaN from inf * 0, CUDA +NaN), and the semantics promise neither.
    """
    assert actual.shape == expected.shape and actual.dtype == expected.dtype
    np.testing.assert_array_equal(actual, expected)
    actual, expected = np.ascontiguousarray(actual), np.ascontiguousarray(expected)
    if actual.dtype.kind == "f":
        nan = np.isnan(expected)
        actual, expected = actual[~nan], expected[~nan]
    assert actual.tobytes() == expected.tobytes(), "bits differ"


def forward(engine, case: Case) -> tuple[np.ndarray, np.ndarray]:
    c, idx = tg.matmul(*case.on(engine.to_device), case.semiring, argmax=True)
    return engine.get(c, idx)


def backward(engine, grad_c: np.ndarray, case: Case, argmax: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    a, b = case.on(engine.to_device)
    grads = tg.matmul_backward(engine.to_device(grad_c), a, b, engine.to_device(argmax), case.semiring,
                               deterministic=True)
    return engine.get(*grads)


def simple(engine, a, b, semiring: str, dtype: str = "float64"):
    """A product of small literal matrices; returns host (C, argmax)."""
    a, b = engine.put(np.array(a, dtype=dtype), np.array(b, dtype=dtype))
    return engine.get(*tg.matmul(a, b, semiring, argmax=True))


# ------------------------------------------------- properties vs the reference


@given(case=cases())
def test_values_and_argmax_match_the_reference(engine, case):
    c, idx = forward(engine, case)
    ref_c, ref_idx = reference_matmul(case.a, case.b, case.semiring)
    assert_identical(c, ref_c)
    assert_identical(idx, ref_idx)


@given(case=cases())
def test_without_argmax_the_values_are_the_same(engine, case):
    c_only = engine.get(tg.matmul(*case.on(engine.to_device), case.semiring))[0]
    c, _ = forward(engine, case)
    assert_identical(c_only, c)


@given(case=cases(dtypes=FLOAT_DTYPES))
def test_float_results_are_never_nan_and_never_negative_zero(engine, case):
    c, _ = forward(engine, case)
    assert not np.isnan(c).any()
    assert not np.signbit(c[c == 0]).any()


@given(case=cases())
def test_argmax_points_at_a_candidate_equal_to_c(engine, case):
    """Independent of the reference: where argmax >= 0, that k's candidate is C."""
    c, idx = forward(engine, case)
    a = np.broadcast_to(case.a, (*c.shape[:-2], *case.a.shape[-2:]))
    b = np.broadcast_to(case.b, (*c.shape[:-2], *case.b.shape[-2:]))
    assert ((idx == -1) == (c == zero_of(case.semiring, c.dtype))).all()
    for pos in zip(*np.nonzero(idx >= 0)):
        *batch, i, j = pos
        k = idx[pos]
        cand = otimes(case.semiring, a[(*batch, i, k)].item(), b[(*batch, k, j)].item(), c.dtype)
        assert cand == c[pos]


@given(case=cases(dtypes=FLOAT_DTYPES), seed=st.integers(0, 2**32 - 1))
def test_gradients_match_the_reference(engine, case, seed):
    c, idx = forward(engine, case)
    grad_c = random_values(np.random.default_rng(seed), c.shape, str(c.dtype), special_rate=0.0)
    grad_a, grad_b = backward(engine, grad_c, case, idx)
    ref_a, ref_b = reference_backward(grad_c, case.a, case.b, idx, case.semiring)
    assert_identical(grad_a, ref_a)
    assert_identical(grad_b, ref_b)


@pytest.mark.gpu
@given(case=cases(dtypes=FLOAT_DTYPES, batched=False, max_size=24))
def test_cuda_default_backward_agrees_with_deterministic_mode(case):
    """The fast (possibly atomic) mode may add in another order, so only up to rounding.

    With grad_c = 1 every contribution is exactly 1 except for max_mul (the
    other operand), so sums must match exactly; for max_mul the difference is
    bounded by the same sums taken over absolute values, plus one smallest
    normal number per term, since float atomics flush subnormal results to
    zero.  GPU only: the CPU engine has a single, ordered mode.
    """
    engine = cuda_engine()
    c, idx = forward(engine, case)
    ones = np.ones_like(c)
    a, b = case.on(engine.to_device)
    fast = engine.get(*tg.matmul_backward(engine.to_device(ones), a, b, engine.to_device(idx), case.semiring))
    exact = backward(engine, ones, case, idx)
    if case.semiring != "max_mul":
        for f, e in zip(fast, exact):
            assert_identical(f, e)
        return
    bounds = reference_backward(ones, np.abs(case.a), np.abs(case.b), idx, case.semiring)
    for f, e, bound in zip(fast, exact, bounds):
        finite = np.isfinite(bound)
        np.testing.assert_array_equal(f[~finite], e[~finite])
        flushed = np.finfo(e.dtype).tiny * max(case.a.shape[0], case.b.shape[-1])
        assert (np.abs(f[finite] - e[finite]) <= 1e-5 * bound[finite] + flushed).all()


# ------------------------------------------------------------ explicit edges


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("semiring", SEMIRINGS)
@pytest.mark.parametrize("m,n", [(1, 1), (3, 5), (0, 4), (4, 0)])
def test_k_zero_gives_the_zero_and_argmax_minus_one(engine, semiring, dtype, m, n):
    a, b = engine.put(np.empty((m, 0), dtype), np.empty((0, n), dtype))
    c, idx = engine.get(*tg.matmul(a, b, semiring, argmax=True))
    assert c.shape == (m, n) and c.dtype == np.dtype(dtype)
    assert idx.shape == (m, n) and idx.dtype == np.int32
    assert (c == zero_of(semiring, dtype)).all()
    assert (idx == -1).all()


@pytest.mark.parametrize("semiring", SEMIRINGS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(1, 1, 1), (67, 70, 65), (1, 70, 1), (70, 1, 70)])
def test_sizes_across_tile_edges(engine, semiring, dtype, shape):
    m, k, n = shape
    rng = np.random.default_rng(sum(shape))
    case = Case(random_values(rng, (m, k), dtype, 0.05), random_values(rng, (k, n), dtype, 0.05),
                semiring, "C", "stepped")
    c, idx = forward(engine, case)
    ref_c, ref_idx = reference_matmul(case.a, case.b, semiring)
    assert_identical(c, ref_c)
    assert_identical(idx, ref_idx)


@pytest.mark.parametrize("layout", ["F", "transposed_view", "negative_strides", "row_and_column_slices"])
def test_non_contiguous_operands(engine, layout):
    rng = np.random.default_rng(7)
    a = random_values(rng, (20, 40), "float32", 0.05)
    b = random_values(rng, (40, 30), "float32", 0.05)
    views = {
        "F": lambda x: np.asfortranarray(x),
        "transposed_view": lambda x: x.T.copy().T,
        "negative_strides": lambda x: x[::-1, ::-1].copy()[::-1, ::-1],
        "row_and_column_slices": lambda x: np.pad(x, 3)[3:-3, 3:-3],
    }
    va, vb = (views[layout](x) for x in (a, b))
    assert not (va.flags.c_contiguous and vb.flags.c_contiguous)
    c, idx = engine.get(*tg.matmul(*engine.put(va, vb), "max_plus", argmax=True))
    ref_c, ref_idx = reference_matmul(a, b, "max_plus")
    assert_identical(c, ref_c)
    assert_identical(idx, ref_idx)


@pytest.mark.parametrize(
    "shape_a,shape_b,shape_c",
    [
        ((2, 3, 4), (4, 5), (2, 3, 5)),
        ((3, 4), (2, 4, 5), (2, 3, 5)),
        ((2, 1, 3, 4), (3, 4, 5), (2, 3, 3, 5)),
        ((1, 3, 4), (2, 4, 5), (2, 3, 5)),
        ((0, 3, 4), (4, 5), (0, 3, 5)),
    ],
)
def test_batch_broadcasting_and_summed_gradients(engine, shape_a, shape_b, shape_c):
    rng = np.random.default_rng(11)
    case = Case(random_values(rng, shape_a, "float64", 0.05), random_values(rng, shape_b, "float64", 0.05),
                "max_plus", "C", "C")
    c, idx = forward(engine, case)
    assert c.shape == shape_c
    ref_c, ref_idx = reference_matmul(case.a, case.b, "max_plus")
    assert_identical(c, ref_c)
    assert_identical(idx, ref_idx)
    grad_c = random_values(rng, shape_c, "float64", 0.0)
    grad_a, grad_b = backward(engine, grad_c, case, idx)
    assert grad_a.shape == shape_a and grad_b.shape == shape_b
    ref_a, ref_b = reference_backward(grad_c, case.a, case.b, idx, "max_plus")
    assert_identical(grad_a, ref_a)
    assert_identical(grad_b, ref_b)


# -------------------------------------------- the documented rules, by hand


def test_ties_go_to_the_smallest_k(engine):
    c, idx = simple(engine, [[1.0, 2.0, 0.0, 3.0]], [[2.0], [1.0], [3.0], [0.0]], "max_plus")
    assert c.tolist() == [[3.0]] and idx.tolist() == [[0]]


def test_nan_is_ignored_by_the_sum(engine):
    nan = np.nan
    c, idx = simple(engine, [[nan, 1.0]], [[5.0], [2.0]], "max_plus")
    assert c.tolist() == [[3.0]] and idx.tolist() == [[1]]
    c, idx = simple(engine, [[nan, nan]], [[5.0], [2.0]], "min_plus")
    assert c.tolist() == [[np.inf]] and idx.tolist() == [[-1]]


def test_nan_is_ignored_by_a_min_or_max_product(engine):
    c, idx = simple(engine, [[np.nan, 1.0]], [[5.0], [2.0]], "max_min")
    assert c.tolist() == [[5.0]] and idx.tolist() == [[0]]
    c, idx = simple(engine, [[np.nan, 1.0]], [[np.nan], [2.0]], "min_max")
    assert c.tolist() == [[2.0]] and idx.tolist() == [[1]]


def test_opposite_infinities_make_nan_which_the_sum_ignores(engine):
    inf = np.inf
    c, idx = simple(engine, [[-inf, 1.0]], [[inf], [-5.0]], "max_plus")
    assert c.tolist() == [[-4.0]] and idx.tolist() == [[1]]
    c, idx = simple(engine, [[-inf]], [[inf]], "max_plus")
    assert c.tolist() == [[-inf]] and idx.tolist() == [[-1]]


def test_zero_times_infinity_is_ignored_in_max_mul(engine):
    c, idx = simple(engine, [[0.0, 2.0]], [[np.inf], [3.0]], "max_mul")
    assert c.tolist() == [[6.0]] and idx.tolist() == [[1]]


def test_a_zero_result_is_positive_zero(engine):
    c, idx = simple(engine, [[-0.0]], [[-0.0]], "max_plus")
    assert c.tolist() == [[0.0]] and not np.signbit(c).any() and idx.tolist() == [[0]]
    c, idx = simple(engine, [[-0.0, 1.0]], [[1.0], [-1.0]], "max_mul")
    assert c.tolist() == [[0.0]] and not np.signbit(c).any() and idx.tolist() == [[-1]]


@pytest.mark.parametrize("dtype", DTYPES)
def test_max_mul_outside_its_domain_is_clipped_at_zero(engine, dtype):
    """max_mul's ⊕ starts from its zero 0, so C = max(0, max_k a*b)."""
    c, idx = simple(engine, [[-1, -2], [-1, 2]], [[3, 5], [1, 7]], "max_mul", dtype)
    assert c.tolist() == [[0, 0], [2, 14]]
    assert idx.tolist() == [[-1, -1], [1, 1]]


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_sums_saturate_and_never_wrap(engine, dtype):
    info = np.iinfo(dtype)
    lo, hi = int(info.min), int(info.max)
    c, _ = simple(engine, [[hi - 1, 5]], [[7], [hi]], "max_plus", dtype)
    assert c.tolist() == [[hi]]
    c, _ = simple(engine, [[lo + 1]], [[-9]], "min_plus", dtype)
    assert c.tolist() == [[lo]]
    c, _ = simple(engine, [[-(2 ** (info.bits - 2))]], [[-(2 ** (info.bits - 2)) - 1]], "min_plus", dtype)
    assert c.tolist() == [[lo]]


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_the_integer_zero_absorbs(engine, dtype):
    info = np.iinfo(dtype)
    lo, hi = int(info.min), int(info.max)
    c, idx = simple(engine, [[lo, lo + 1]], [[hi], [-3]], "max_plus", dtype)
    assert c.tolist() == [[lo]] and idx.tolist() == [[-1]]  # lo+1-3 saturates to the zero
    c, idx = simple(engine, [[lo, 0]], [[hi], [-3]], "max_plus", dtype)
    assert c.tolist() == [[-3]] and idx.tolist() == [[1]]
    c, idx = simple(engine, [[hi, 4]], [[lo], [hi]], "min_plus", dtype)
    assert c.tolist() == [[hi]] and idx.tolist() == [[-1]]
    c, idx = simple(engine, [[lo]], [[hi]], "max_min", dtype)
    assert c.tolist() == [[lo]] and idx.tolist() == [[-1]]


@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_products_saturate(engine, dtype):
    info = np.iinfo(dtype)
    half = 2 ** (info.bits // 2)
    c, _ = simple(engine, [[half, 3]], [[half], [2]], "max_mul", dtype)
    assert c.tolist() == [[int(info.max)]]
    c, idx = simple(engine, [[-half, 3]], [[half], [2]], "max_mul", dtype)
    assert c.tolist() == [[6]] and idx.tolist() == [[1]]
    c, _ = simple(engine, [[int(info.min)]], [[-1]], "max_mul", dtype)
    assert c.tolist() == [[int(info.max)]]


def test_int64_products_near_the_limit_are_exact(engine):
    """Where float64 cannot tell whether a product overflows, the answer is still exact."""
    big = 3037000499  # floor(sqrt(2**63 - 1))
    c, _ = simple(engine, [[big, big + 1]], [[big], [big + 1]], "max_mul", "int64")
    assert c.tolist() == [[2**63 - 1]]
    c, _ = simple(engine, [[big]], [[big]], "max_mul", "int64")
    assert c.tolist() == [[big * big]]


@pytest.mark.parametrize("semiring", SEMIRINGS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_zero_and_one_are_the_documented_values(semiring, dtype):
    sr = tg.get_semiring(semiring)
    assert sr.zero(dtype) == zero_of(semiring, dtype) and sr.zero(dtype).dtype == np.dtype(dtype)
    assert sr.one(dtype) == one_of(semiring, dtype) and sr.one(dtype).dtype == np.dtype(dtype)


# ------------------------------------------------------ gradients, by hand


def grads(engine, a, b, semiring, grad_c=None):
    a, b = np.array(a, dtype=float), np.array(b, dtype=float)
    da, db = engine.put(a, b)
    c, idx = tg.matmul(da, db, semiring, argmax=True)
    g = engine.to_device(np.ones(c.shape) if grad_c is None else np.array(grad_c, dtype=float))
    return engine.get(*tg.matmul_backward(g, da, db, idx, semiring))


def test_plus_gradients_go_to_both_operands(engine):
    ga, gb = grads(engine, [[0.0, 3.0]], [[1.0], [1.0]], "max_plus", [[2.0]])
    assert ga.tolist() == [[0.0, 2.0]] and gb.tolist() == [[0.0], [2.0]]


def test_times_gradients_are_scaled_by_the_other_operand(engine):
    ga, gb = grads(engine, [[2.0, 3.0]], [[1.0], [5.0]], "max_mul", [[2.0]])
    assert ga.tolist() == [[0.0, 10.0]] and gb.tolist() == [[0.0], [6.0]]


@pytest.mark.parametrize(
    "semiring,a,b,to_a",
    [
        ("max_min", 1.0, 2.0, True),
        ("max_min", 3.0, 2.0, False),
        ("max_min", 2.0, 2.0, True),
        ("max_min", 2.0, np.nan, True),
        ("max_min", np.nan, 2.0, False),
        ("min_max", 3.0, 2.0, True),
        ("min_max", 1.0, 2.0, False),
        ("min_max", 2.0, 2.0, True),
        ("min_max", 2.0, np.nan, True),
        ("min_max", np.nan, 2.0, False),
    ],
)
def test_min_max_gradients_go_to_the_operand_that_won(engine, semiring, a, b, to_a):
    ga, gb = grads(engine, [[a]], [[b]], semiring)
    assert ga.tolist() == [[1.0 if to_a else 0.0]]
    assert gb.tolist() == [[0.0 if to_a else 1.0]]


def test_entries_without_a_winner_send_no_gradient(engine):
    ga, gb = grads(engine, [[-np.inf, -np.inf]], [[1.0], [2.0]], "max_plus")
    assert ga.tolist() == [[0.0, 0.0]] and gb.tolist() == [[0.0], [0.0]]


WORKED_A = [[0.0, 2.0, 1.0], [3.0, 0.0, 0.0], [1.0, 1.0, 1.0]]
WORKED_B = [[0.0, 1.0, 0.0], [1.0, 0.0, 2.0], [0.0, 0.0, 0.0]]


@pytest.mark.parametrize(
    "semiring,c,argmax,grad_a,grad_b",
    [
        ("max_plus", [[3, 2, 4], [3, 4, 3], [2, 2, 3]], [[1, 1, 1], [0, 0, 0], [1, 0, 1]],
         [[0, 3, 0], [3, 0, 0], [1, 2, 0]], [[1, 2, 1], [2, 1, 2], [0, 0, 0]]),
        ("max_mul", [[2, 0, 4], [0, 3, 0], [1, 1, 2]], [[1, -1, 1], [-1, 0, -1], [1, 0, 1]],
         [[0, 3, 0], [1, 0, 0], [1, 3, 0]], [[0, 4, 0], [3, 0, 3], [0, 0, 0]]),
        ("max_min", [[1, 0, 2], [0, 1, 0], [1, 1, 1]], [[1, 0, 1], [0, 0, 0], [1, 0, 1]],
         [[1, 1, 0], [0, 0, 0], [1, 2, 0]], [[1, 1, 1], [1, 0, 0], [0, 0, 0]]),
    ],
)
def test_the_worked_example_of_the_docs(engine, semiring, c, argmax, grad_a, grad_b):
    """docs/semantics.md works this 3x3 example by hand; grad_c is all ones."""
    got_c, got_idx = engine.get(*tg.matmul(*engine.put(np.array(WORKED_A), np.array(WORKED_B)), semiring,
                                           argmax=True))
    assert got_c.tolist() == c and got_idx.tolist() == argmax
    ga, gb = grads(engine, WORKED_A, WORKED_B, semiring)
    assert ga.tolist() == grad_a and gb.tolist() == grad_b
