"""The public surface: names, lookup, out=, lazy imports, and the issue's one-liner."""

from __future__ import annotations

import doctest
import subprocess
import sys

import numpy as np
import pytest

import tropical_gemm as tg
from reference import RULES
from strategies import random_values


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)


# ----------------------------------------------------------------- catalogue


def test_semirings_are_the_canonical_names_in_order():
    assert tg.semirings() == ("max_plus", "min_plus", "max_mul", "max_min", "min_max", "and_or")


#: The semirings on ordered values (the boolean one, and_or, has tests of its own: test_boolean.py).
ORDERED = tuple(name for name in tg.semirings() if not tg.get_semiring(name).boolean)


@pytest.mark.parametrize("name", ORDERED)
def test_catalogue_matches_the_documented_table(name):
    sr = tg.get_semiring(name)
    assert (sr.add, sr.mul) == RULES[name]


@pytest.mark.parametrize(
    "spelling,canonical",
    [
        ("max_plus", "max_plus"), ("MaxPlus", "max_plus"), ("maxplus", "max_plus"), ("tropical", "max_plus"),
        ("MAX-PLUS", "max_plus"), ("Max_Plus", "max_plus"), (" max-plus ", "max_plus"),
        ("min_plus", "min_plus"), ("MinPlus", "min_plus"), ("minplus", "min_plus"), ("min-plus", "min_plus"),
        ("max_mul", "max_mul"), ("MaxMul", "max_mul"), ("maxmul", "max_mul"), ("max_times", "max_mul"),
        ("max-times", "max_mul"), ("MaxTimes", "max_mul"),
        ("max_min", "max_min"), ("bottleneck", "max_min"), ("MaxMin", "max_min"), ("widest-path", "max_min"),
        ("min_max", "min_max"), ("minimax", "min_max"), ("MinMax", "min_max"), ("min-max", "min_max"),
    ],
)
def test_lookup_ignores_case_dashes_and_underscores(spelling, canonical):
    assert tg.get_semiring(spelling).name == canonical


def test_every_alias_computes_the_same_product():
    rng = np.random.default_rng(3)
    a, b = random_values(rng, (5, 6), "float64", 0.1), random_values(rng, (6, 4), "float64", 0.1)
    for name in ORDERED:
        sr = tg.get_semiring(name)
        expected = tg.matmul(a, b, name)
        for alias in sr.aliases:
            np.testing.assert_array_equal(tg.matmul(a, b, alias), expected)
        np.testing.assert_array_equal(tg.matmul(a, b, sr), expected)


def test_max_plus_is_the_default_semiring():
    a, b = np.array([[1.0, 5.0]]), np.array([[2.0], [-1.0]])
    assert tg.matmul(a, b).tolist() == [[4.0]]


def test_supported_dtypes():
    assert tg.SUPPORTED_DTYPES == ("float32", "float64", "int32", "int64", "float16", "bfloat16")


def test_argmax_widens_to_int64_only_for_huge_k():
    from tropical_gemm.dtypes import argmax_dtype

    assert argmax_dtype(0) == np.int32 and argmax_dtype(2**31 - 1) == np.int32
    assert argmax_dtype(2**31) == np.int64


# ---------------------------------------------------------------------- out


def test_out_receives_the_product(engine):
    rng = np.random.default_rng(5)
    a, b = engine.put(random_values(rng, (2, 7, 9), "float32", 0.1), random_values(rng, (9, 4), "float32", 0.1))
    out = engine.to_device(np.full((2, 7, 4), 123.0, "float32"))
    result = tg.matmul(a, b, "min_plus", out=out)
    assert result is out
    np.testing.assert_array_equal(*engine.get(out, tg.matmul(a, b, "min_plus")))


def test_out_pair_receives_values_and_argmax(engine):
    rng = np.random.default_rng(6)
    a, b = engine.put(random_values(rng, (7, 9), "int64", 0.1), random_values(rng, (9, 4), "int64", 0.1))
    c_out = engine.to_device(np.full((7, 4), 5, "int64"))
    i_out = engine.to_device(np.full((7, 4), 5, "int32"))
    c, idx = tg.matmul(a, b, "max_mul", argmax=True, out=(c_out, i_out))
    assert c is c_out and idx is i_out
    ref_c, ref_idx = tg.matmul(a, b, "max_mul", argmax=True)
    np.testing.assert_array_equal(*engine.get(c, ref_c))
    np.testing.assert_array_equal(*engine.get(idx, ref_idx))


@pytest.mark.parametrize("semiring", ["max_plus", "max_mul", "min_max"])
def test_backward_out_pair_is_overwritten_with_the_gradients(engine, semiring):
    rng = np.random.default_rng(7)
    a, b = engine.put(random_values(rng, (2, 6, 9), "float64", 0.1), random_values(rng, (9, 5), "float64", 0.1))
    c, idx = tg.matmul(a, b, semiring, argmax=True)
    grad_c = engine.to_device(rng.normal(size=(2, 6, 5)))
    out = (engine.to_device(np.full((2, 6, 9), 7.0)), engine.to_device(np.full((9, 5), 7.0)))  # stale values
    grad_a, grad_b = tg.matmul_backward(grad_c, a, b, idx, semiring, deterministic=True, out=out)
    assert grad_a is out[0] and grad_b is out[1]
    expected = tg.matmul_backward(grad_c, a, b, idx, semiring, deterministic=True)
    for got, want in zip((grad_a, grad_b), expected):
        np.testing.assert_array_equal(*engine.get(got, want))


def test_host_array_likes_are_accepted_and_give_numpy():
    c = tg.matmul([[1, 2]], [[3], [4]], "max_plus")
    assert isinstance(c, np.ndarray) and c.dtype == np.int64 and c.tolist() == [[6]]


def test_results_are_fresh_arrays_of_the_operands_dtype(engine):
    a, b = engine.put(np.ones((3, 4), "float32"), np.ones((4, 2), "float32"))
    c, idx = tg.matmul(a, b, argmax=True)
    assert type(c) is type(a) and c.dtype == np.float32 and idx.dtype == np.int32
    assert c.shape == idx.shape == (3, 2)


# --------------------------------------------------------------- packaging


def test_import_is_lazy():
    """``import tropical_gemm`` and a CPU product must not import cupy or torch."""
    done = run_python(
        "import sys, numpy as np, tropical_gemm as tg\n"
        "tg.matmul(np.ones((2, 2)), np.ones((2, 2)), argmax=True)\n"
        "print(sorted(m for m in ('cupy', 'torch') if m in sys.modules))"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_the_issue_one_liner_prints_a_3_by_5_array_of_2():
    done = run_python(
        "import numpy as np, tropical_gemm as tg; "
        "print(tg.matmul(np.ones((3,4),'f4'), np.ones((4,5),'f4'), 'MaxPlus'))"
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(np.full((3, 5), 2.0, "float32"))
    assert done.stdout.count("2.") == 15


def test_version_is_set():
    assert isinstance(tg.__version__, str) and tg.__version__[0].isdigit()


@pytest.mark.parametrize("module", ["tropical_gemm.api", "tropical_gemm.semirings"])
def test_docstring_examples_run(module):
    __import__(module)
    failures, tried = doctest.testmod(sys.modules[module])
    assert tried > 0 and failures == 0
