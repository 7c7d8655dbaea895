"""``optimize=`` takes what opt_einsum takes, and nothing else (issue 34.3)."""

from __future__ import annotations

import numpy as np
import opt_einsum as oe
import pytest

import tropical_gemm as tg
from tropical_gemm.einsum import einsum_plan

RNG = np.random.default_rng(7)
CHAIN = [RNG.integers(-50, 50, size=s).astype(np.float64) for s in ((4, 6), (6, 3), (3, 5))]  # exact in any order


def chain(optimize, n: int = 3):
    equation = ",".join(["ij", "jk", "kl"][:n]) + "->i" + "jkl"[n - 1]
    return tg.einsum(equation, *CHAIN[:n], optimize=optimize)


def calls_counted(fn):
    calls = []

    def counted(inputs, output, size_dict, memory_limit=None):
        calls.append(len(inputs))
        return fn(inputs, output, size_dict, memory_limit)

    return counted, calls


@pytest.mark.parametrize("optimize", [
    "auto", "greedy", "optimal", "dp", "branch-2", "random-greedy", True, False, None,
    [(1, 2), (0, 1)], ("einsum_path", (0, 1), (0, 1)), oe.paths.greedy, oe.paths.optimal,
    oe.paths.DynamicProgramming(), oe.RandomGreedy(max_repeats=4),
])
def test_every_form_opt_einsum_takes_gives_the_same_result(optimize):
    np.testing.assert_array_equal(chain(optimize), chain("optimal"))


def test_a_path_function_is_called_with_opt_einsums_arguments():
    counted, calls = calls_counted(oe.paths.greedy)
    plan = einsum_plan("ij,jk,kl->il", *CHAIN, optimize=counted)
    assert calls == [3] and len(plan.path) == 2


@pytest.mark.parametrize("n", [2, 3])
def test_an_unknown_name_lists_the_accepted_forms(n):
    with pytest.raises(ValueError, match=r"optimize='bogus' is not a known strategy; optimize takes .*'greedy'.*"
                                         r"explicit path.*PathOptimizer instance or path function.*cotengra"):
        chain("bogus", n)


@pytest.mark.parametrize("bad", [3, 1.5, {"greedy": 1}, [("a", "b")], b"auto"])
def test_anything_else_lists_the_accepted_forms(bad):
    with pytest.raises(TypeError, match="is not one of the accepted forms: an opt_einsum strategy name"):
        chain(bad, 2)


def test_a_cotengra_optimizer_is_taken_when_cotengra_is_installed():
    ctg = pytest.importorskip("cotengra")
    np.testing.assert_array_equal(chain(ctg.HyperOptimizer(max_repeats=4, progbar=False)), chain("optimal"))
    np.testing.assert_array_equal(chain("cotengra"), chain("optimal"))
