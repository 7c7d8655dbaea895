"""tropical_gemm.einsum against a naive tropical einsum, every subscript feature and every error."""

from __future__ import annotations

import itertools
import string

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tropical_gemm as tg
from tropical_gemm.einsum import einsum_plan
from tests.reference import RULES, _strictly_better, otimes, zero_of

SEMIRINGS = tuple(RULES)


def naive_einsum(subscripts: str, *operands: np.ndarray, semiring: str = "max_plus") -> np.ndarray:
    """Every assignment of every index, one at a time: ⊗ of the operands' entries, ⊕ into the output.

    Written from the definition, with numpy's implicit output and ``...``
    only through np.einsum's own parser (to get the output letters), never
    through tropical_gemm.
    """
    dtype = operands[0].dtype
    lhs, _, rhs = subscripts.partition("->")
    terms = lhs.split(",")
    if "->" not in subscripts:
        counts = {c: lhs.count(c) for c in set(lhs) if c.isalpha()}
        rhs = "".join(sorted(c for c, n in counts.items() if n == 1))
    sizes: dict[str, int] = {}
    for term, x in zip(terms, operands):
        for c, n in zip(term, x.shape):
            sizes[c] = max(sizes.get(c, 1), n)
    letters = sorted(sizes)
    out = np.full(tuple(sizes[c] for c in rhs), zero_of(semiring, dtype), dtype=object)
    for values in itertools.product(*(range(sizes[c]) for c in letters)):
        at = dict(zip(letters, values))
        cand = None
        for term, x in zip(terms, operands):
            v = x[tuple(at[c] if x.shape[i] > 1 else 0 for i, c in enumerate(term))].item()
            cand = v if cand is None else otimes(semiring, cand, v, dtype)
        pos = tuple(at[c] for c in rhs)
        if _strictly_better(semiring, cand, out[pos]):
            out[pos] = cand
    return np.asarray(out.astype(dtype) + (0.0 if dtype.kind == "f" else 0), dtype=dtype)


def small_ints(rng: np.random.Generator, shape: tuple[int, ...], dtype: str, semiring: str) -> np.ndarray:
    """Small integers (exact under any association of ⊗), in float or int dtype, ties likely."""
    low = 0 if semiring == "max_mul" else -4
    return rng.integers(low, 4, size=shape).astype(dtype)


def value_of(config: dict, subscripts: str, operands, semiring: str, pos: tuple[int, ...]) -> float:
    """The ⊗ of the operands' entries at the configuration's winning indices for one output element."""
    lhs, _, rhs = subscripts.partition("->")
    at = {c: int(config[c][pos]) for c in config}
    at.update(dict(zip(rhs, pos)))
    cand = None
    for term, x in zip(lhs.split(","), operands):
        v = x[tuple(at[c] for c in term)].item()
        cand = v if cand is None else otimes(semiring, cand, v, x.dtype)
    return cand


CASES = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 2)]),
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 3)]),
    ("ij,jk", [(3, 4), (4, 2)]),                  # implicit output
    ("ij->i", [(3, 5)]),                           # a reduction
    ("ij->", [(3, 5)]),
    ("ii->i", [(4, 4)]),                           # a diagonal
    ("iij,jk->ik", [(3, 3, 2), (2, 4)]),
    ("ii", [(3, 3)]),                              # a trace
    ("ij,ij->ij", [(3, 4), (3, 4)]),               # elementwise ⊗ (batch only)
    ("i,j->ij", [(3,), (4,)]),                     # outer
    (",ij->ij", [(), (2, 3)]),                     # a scalar
    ("ijk,jl,lk->i", [(2, 3, 4), (3, 2), (2, 4)]),
    ("ab,bc,cd,da->", [(2, 3), (3, 2), (2, 3), (3, 2)]),  # a ring
    ("ij,jk->ki", [(3, 4), (4, 2)]),
    ("ijk->kji", [(2, 3, 4)]),
    ("ij,k->ik", [(3, 4), (5,)]),                  # j seen once: reduced first
]


@pytest.mark.parametrize("semiring", SEMIRINGS)
@pytest.mark.parametrize("subscripts, shapes", CASES)
def test_matches_the_naive_einsum(subscripts, shapes, semiring):
    rng = np.random.default_rng(len(subscripts))
    for dtype in ("float64", "int32"):
        ops = [small_ints(rng, s, dtype, semiring) for s in shapes]
        got = tg.einsum(subscripts, *ops, semiring=semiring)
        want = naive_einsum(subscripts, *ops, semiring=semiring)
        np.testing.assert_array_equal(np.asarray(got), want)
        assert np.asarray(got).dtype == want.dtype


@pytest.mark.parametrize("subscripts, shapes", [
    ("...ij,...jk->...ik", [(2, 1, 3, 4), (3, 4, 2)]),
    ("...ij,jk", [(2, 3, 4), (4, 2)]),
    ("i...->...", [(3, 2, 2)]),
    ("...,...->...", [(2, 1), (1, 3)]),
])
def test_ellipsis_broadcasts_like_numpy(subscripts, shapes):
    # max_plus over small ints equals numpy's sum-product of exp... no: compare with naive on broadcast copies.
    rng = np.random.default_rng(0)
    ops = [rng.integers(-4, 4, size=s).astype("float64") for s in shapes]
    got = tg.einsum(subscripts, *ops)
    # numpy's einsum shape rules, tropical values: log of the sum of exps is not exact, so use max over the
    # numpy-broadcast naive sum of the letters: expand '...' by hand through np.einsum's output shape.
    assert got.shape == np.einsum(subscripts, *ops).shape
    letters = iter("uvwxyz")
    width = max(len(s) - len(t.replace("...", "")) for t, s in zip(subscripts.split("->")[0].split(","), shapes))
    dots = "".join(next(letters) for _ in range(width))
    expanded = []
    for t, s in zip(subscripts.split("->")[0].split(","), shapes):
        own = len(s) - len(t.replace("...", ""))
        expanded.append(t.replace("...", dots[width - own:]))
    out = subscripts.split("->")[1].replace("...", dots) if "->" in subscripts else None
    if out is None:
        counts = {c: "".join(expanded).count(c) for c in set("".join(expanded))}
        out = dots + "".join(sorted(c for c, n in counts.items() if n == 1 and c not in dots))
    want = naive_einsum(",".join(expanded) + "->" + out, *ops)
    np.testing.assert_array_equal(got, want)


def test_interleaved_labels_and_configuration():
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((4, 5))
    got, config = tg.einsum(a, ["row", 7], b, [7, ("col",)], ["row"], return_configuration=True)
    np.testing.assert_array_equal(got, tg.einsum("ij,jk->i", a, b))
    assert set(config) == {7, ("col",)} and config[7].shape == (3,)


@pytest.mark.parametrize("semiring", SEMIRINGS)
@given(data=st.data())
@settings(max_examples=25, deadline=None)
def test_random_subscripts_match_the_naive_einsum_and_configurations_attain_them(semiring, data):
    n_ops = data.draw(st.integers(1, 4))
    letters = string.ascii_lowercase[: data.draw(st.integers(1, 5))]
    sizes = {c: data.draw(st.integers(1, 3)) for c in letters}
    terms = [data.draw(st.lists(st.sampled_from(letters), min_size=0, max_size=3).map("".join))
             for _ in range(n_ops)]
    used = sorted(set("".join(terms)))
    out = "".join(data.draw(st.permutations(used))[: data.draw(st.integers(0, len(used)))])
    subscripts = ",".join(terms) + "->" + out
    seed = data.draw(st.integers(0, 2**16))
    rng = np.random.default_rng(seed)
    ops = [small_ints(rng, tuple(sizes[c] for c in t), "float64", semiring) for t in terms]
    got, config = tg.einsum(subscripts, *ops, semiring=semiring, optimize=data.draw(
        st.sampled_from(["auto", "greedy", "optimal"])), return_configuration=True)
    want = naive_einsum(subscripts, *ops, semiring=semiring)
    np.testing.assert_array_equal(got, want)
    zero = zero_of(semiring, np.float64)
    for pos in np.ndindex(*want.shape):
        if want[pos] == zero:
            assert all(v[pos] == -1 for v in config.values())
        else:
            full = {c: v for c, v in config.items() if c not in out}
            for c in set("".join(terms)) - set(out):
                assert 0 <= full[c][pos] < sizes[c]
            # diagonals: a repeated letter takes one value, so evaluating per term is the rule
            assert value_of(full, subscripts, ops, semiring, pos) == want[pos]


def test_configuration_is_the_smallest_index_on_ties():
    value, config = tg.einsum("i,i->", np.zeros(4), np.zeros(4), return_configuration=True)
    assert value == 0 and int(config["i"]) == 0
    value, config = tg.einsum("ij->", np.full((2, 3), -np.inf), return_configuration=True)
    assert value == -np.inf and int(config["i"]) == -1 and int(config["j"]) == -1


def test_nan_loses_and_a_zero_size_index_gives_the_zero():
    x = np.array([[np.nan, 1.0, 2.0]])
    assert tg.einsum("ij->i", x)[0] == 2.0
    assert tg.einsum("ij->i", x, semiring="min_plus")[0] == 1.0
    empty = tg.einsum("ij,jk->ik", np.ones((2, 0)), np.ones((0, 3)), return_configuration=True)
    assert (empty[0] == -np.inf).all() and (empty[1]["j"] == -1).all()


def test_explicit_paths_and_strategies_give_the_same_values():
    rng = np.random.default_rng(2)
    ops = [rng.integers(-4, 4, size=s).astype("float64") for s in [(3, 4), (4, 5), (5, 2)]]
    want = tg.einsum("ij,jk,kl->il", *ops)
    for optimize in ("greedy", "optimal", "branch-2", [(1, 2), (0, 1)], [(0, 1, 2)], ["einsum_path", (0, 1), (0, 1)]):
        np.testing.assert_array_equal(tg.einsum("ij,jk,kl->il", *ops, optimize=optimize), want)
    assert einsum_plan("ij,jk,kl->il", *ops, optimize=[(1, 2), (0, 1)]).path == ((1, 2), (0, 1))


def test_steps_are_pairwise_products_and_reductions():
    plan = einsum_plan("ij,jk,k,l->i", np.ones((2, 3)), np.ones((3, 4)), np.ones(4), np.ones(5))
    kinds = [type(s).__name__ for s in plan.steps]
    assert kinds.count("Reduce") == 1 and kinds.count("Pair") == 3


def test_only_views_reach_the_product_when_groups_are_contiguous(monkeypatch):
    from tropical_gemm.einsum import lower

    seen = []
    real = lower.planned_product
    monkeypatch.setattr(lower, "planned_product",
                        lambda engine, a, b, *args: seen.append((a.base, b.base)) or real(engine, a, b, *args))
    a, b = np.ones((2, 3, 4)), np.ones((2, 4, 5))
    tg.einsum("bij,bjk->bik", a, b)
    assert seen and np.shares_memory(seen[0][0], a) and np.shares_memory(seen[0][1], b)


def test_explicit_paths_name_the_callers_operands_even_after_a_reduction():
    rng = np.random.default_rng(8)
    a, b, c = rng.standard_normal((3, 4, 6)), rng.standard_normal((4, 5)), rng.standard_normal((5, 2))
    want = tg.einsum("ijx,jk,kl->il", a, b, c)  # x is reduced in place, first
    plan = einsum_plan("ijx,jk,kl->il", a, b, c, optimize=[(1, 2), (0, 1)])
    assert [type(s).__name__ for s in plan.steps] == ["Reduce", "Pair", "Pair"]
    assert (plan.steps[1].left, plan.steps[1].right) == (1, 2)  # b and c, as the caller named them
    np.testing.assert_array_equal(tg.einsum("ijx,jk,kl->il", a, b, c, optimize=[(1, 2), (0, 1)]), want)


@pytest.mark.parametrize("semiring", SEMIRINGS)
@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_integer_extremes_saturate_as_the_products_do(semiring, dtype):
    info = np.iinfo(dtype)
    rng = np.random.default_rng(9)
    values = np.array([info.min, info.min + 1, -1, 0, 1, info.max - 1, info.max], dtype=dtype)
    a, b = rng.choice(values, size=(3, 4)), rng.choice(values, size=(4, 2))
    np.testing.assert_array_equal(tg.einsum("ij,jk->ik", a, b, semiring=semiring),
                                  naive_einsum("ij,jk->ik", a, b, semiring=semiring))
    np.testing.assert_array_equal(tg.einsum("ij->j", a, semiring=semiring), naive_einsum("ij->j", a, semiring=semiring))


@pytest.mark.parametrize("semiring", SEMIRINGS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_reductions_follow_the_naive_rule_with_nan_inf_and_ties(semiring, dtype):
    from tropical_gemm.einsum.lower import reduce_rows_cpu
    from tropical_gemm.semirings import get_semiring

    rng = np.random.default_rng(10)
    x = rng.integers(-2, 2, size=(9, 7)).astype(dtype)
    x[1] = np.nan
    x[2, ::2] = np.nan
    x[3] = -np.inf
    x[4] = np.inf
    x[5, 3] = -0.0
    x[6] = 0.0
    values, idx = reduce_rows_cpu(x, get_semiring(semiring))
    zero = zero_of(semiring, x.dtype)
    for r in range(x.shape[0]):
        best, arg = zero, -1
        for k in range(x.shape[1]):
            if _strictly_better(semiring, x[r, k].item(), best):
                best, arg = x[r, k].item(), k
        assert (values[r], idx[r]) == (best, arg), (r, values[r], idx[r], best, arg)
        assert best != 0 or not np.signbit(values[r]), r  # a zero result is +0.0


def test_a_step_never_holds_the_broadcast_of_its_inputs():
    import tracemalloc

    a, b = np.ones((4, 96, 96)), np.ones((4, 96, 96))
    tg.einsum("bji,bjk->bik", a, b, return_configuration=True)  # compiles the CPU kernel outside the trace
    tracemalloc.start()
    tg.einsum("bji,bjk->bik", a, b, return_configuration=True)  # a needs one permuted copy
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    broadcast = 4 * 96**3 * 8
    assert peak < broadcast / 8, (peak, broadcast)


def test_cotengra_is_used_when_installed_and_named_when_not():
    ops = [np.ones((2, 3)), np.ones((3, 4)), np.ones((4, 2))]
    try:
        import cotengra  # noqa: F401
    except ImportError:
        with pytest.raises(ImportError, match="pip install cotengra"):
            tg.einsum("ij,jk,kl->il", *ops, optimize="cotengra")
    else:
        np.testing.assert_array_equal(tg.einsum("ij,jk,kl->il", *ops, optimize="cotengra"),
                                      tg.einsum("ij,jk,kl->il", *ops))


# ---------------------------------------------------------------------- subscripts as opt_einsum writes them


def test_a_100_index_chain_written_with_opt_einsum_get_symbol():
    # get_symbol gives a-z, A-Z, then other Unicode characters (from its 53rd index on): every one is an index
    opt_einsum = pytest.importorskip("opt_einsum")
    symbols = [opt_einsum.get_symbol(i) for i in range(100)]
    assert len(set(symbols)) == 100 and not all(s.isascii() for s in symbols)
    rng = np.random.default_rng(100)
    ops = [rng.integers(-50, 50, size=(3, 3)) for _ in range(99)]
    equation = ",".join(symbols[i] + symbols[i + 1] for i in range(99)) + "->" + symbols[0] + symbols[99]
    value, config = tg.einsum(equation, *ops, return_configuration=True)
    chain = ops[0]
    for op in ops[1:]:
        chain = tg.matmul(chain, op)                       # integers: every contraction order gives these bits
    np.testing.assert_array_equal(value, chain)
    interleaved = [x for i, op in enumerate(ops) for x in (op, [i, i + 1])] + [[0, 99]]
    np.testing.assert_array_equal(tg.einsum(*interleaved), chain)
    assert sorted(config) == sorted(symbols[1:99])         # the contracted indices, by the names written
    # the configuration is a path through the chain whose terms add up to each entry
    for i, j in np.ndindex(3, 3):
        path = [i, *(int(config[s][i, j]) for s in symbols[1:99]), j]
        assert sum(int(op[path[t], path[t + 1]]) for t, op in enumerate(ops)) == value[i, j]


def test_digits_and_punctuation_are_indices_and_spaces_are_ignored():
    rng = np.random.default_rng(101)
    a, b = rng.normal(size=(2, 3)), rng.normal(size=(3, 4))
    expected = tg.einsum("ij,jk->ik", a, b)
    np.testing.assert_array_equal(tg.einsum("1+,+é->1é", a, b), expected)
    np.testing.assert_array_equal(tg.einsum(" 1 + , + é -> 1 é ", a, b), expected)
    np.testing.assert_array_equal(tg.einsum("一二,二三", a, b), expected)  # implicit output: sorted by code point


# ---------------------------------------------------------------------- errors


@pytest.mark.parametrize("subscripts, shapes, message", [
    ("ij,j>k->i", [(2, 3), (3, 4)], r"'->' must appear at most once, and '-', '>' only in it"),
    ("ij-,jk->ik", [(2, 3), (3, 4)], r"'->' must appear at most once, and '-', '>' only in it"),
    ("ij,jk->ik", [(2, 3), (4, 5)], r"index 'j' has size 3 in operand 0 \(axis 1\) but size 4 in operand 1"),
    ("ij,jk->ik", [(2, 3)], r"name 2 operand\(s\), but 1 were passed"),
    ("ij->k", [(2, 3)], r"output index 'k' appears in no operand"),
    ("ij->ii", [(2, 3)], r"output index 'i' appears more than once"),
    ("ijk->i", [(2, 3)], r"operand 0 has 2 dimension\(s\) but its subscripts 'ijk' name 3"),
    ("i..j->i", [(2, 3)], r"lone '\.'"),
    ("ij->i->j", [(2, 3)], r"'->' must appear at most once"),
    ("...i,...i->...", [(2, 3), (4, 3)], r"do not broadcast"),
    ("...ijk->i", [(2, 3)], r"operand 0 has 2 dimension\(s\) but its subscripts '...ijk' name 3 or more"),
    ("ij,jk->ik", [(2, 3), (3,)], r"operand 1 has 1 dimension\(s\) but its subscripts 'jk' name 2"),
])
def test_errors_name_the_problem(subscripts, shapes, message):
    with pytest.raises(ValueError, match=message):
        tg.einsum(subscripts, *[np.ones(s) for s in shapes])


def test_mixed_dtypes_and_libraries_are_refused():
    with pytest.raises(TypeError, match=r"different dtypes \(operand 0: float64, operand 1: float32\)"):
        tg.einsum("ij,jk", np.ones((2, 2)), np.ones((2, 2), dtype=np.float32))
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match="operand 0 is a numpy.ndarray but another operand is a torch tensor"):
        tg.einsum("ij,jk", np.ones((2, 2)), torch.ones(2, 2, dtype=torch.float64))
    with pytest.raises(TypeError, match="unsupported dtype"):
        tg.einsum("ij->i", np.ones((2, 2), dtype=np.complex64))
    with pytest.raises(TypeError, match="optimize=3 is not one of the accepted forms"):
        tg.einsum("ij->i", np.ones((2, 2)), optimize=3)
    with pytest.raises(ValueError, match=r"name 1 operand\(s\), but 0 were passed"):
        tg.einsum("")
    with pytest.raises(ValueError, match="leaves 2 operands"):
        tg.einsum("i,i,i->", np.ones(2), np.ones(2), np.ones(2), optimize=[(0, 1)])
    with pytest.raises(TypeError, match="interleaved form"):
        tg.einsum(np.ones(2), "i")


@pytest.mark.parametrize("first", [None, 3, b"ij,jk->ik"])
def test_subscripts_that_are_no_string_are_named_as_such(first):
    """Not "the interleaved form takes a list of labels for operand 0, got ndarray"."""
    with pytest.raises(TypeError, match=f"einsum subscripts must be a string such as 'ij,jk->ik', got "
                                        f"{type(first).__name__}"):
        tg.einsum(first, np.ones((2, 2)), np.ones((2, 2)))


def test_an_interleaved_output_with_two_ellipses_says_so():
    with pytest.raises(ValueError, match="interleaved einsum: the output has more than one Ellipsis"):
        tg.einsum(np.ones((2, 2)), [Ellipsis, 0], np.ones((2, 2)), [0, 1], [Ellipsis, Ellipsis, 1])


@pytest.mark.torch
def test_mixed_torch_dtypes_name_torch_s_cast():
    torch = pytest.importorskip("torch")
    with pytest.raises(TypeError, match=r"different dtypes \(operand 0: torch.float32, operand 1: torch.float64\); "
                                        r"cast them to one, e.g. x.to\(...\)"):
        tg.einsum("ij,jk", torch.ones(2, 2), torch.ones(2, 2, dtype=torch.float64))


# ----------------------------------------------------------------------- torch


@pytest.mark.torch
@pytest.mark.parametrize("semiring", SEMIRINGS)
def test_torch_gradients_equal_those_of_the_composed_products(semiring):
    torch = pytest.importorskip("torch")
    from tropical_gemm.torch import tropical_matmul

    rng = np.random.default_rng(3)
    low = 0.1 if semiring == "max_mul" else -1
    xs = [rng.uniform(low, 1, size=s) for s in [(3, 4), (4, 5), (5, 2)]]
    leaves = [torch.tensor(x, requires_grad=True) for x in xs]
    out = tg.einsum("ij,jk,kl->il", *leaves, semiring=semiring, optimize=[(0, 1), (0, 1)])
    out.sum().backward()
    composed = [torch.tensor(x, requires_grad=True) for x in xs]
    want = tropical_matmul(tropical_matmul(composed[0], composed[1], semiring), composed[2], semiring)
    want.sum().backward()
    torch.testing.assert_close(out, want, rtol=0, atol=0)
    for got, ref in zip(leaves, composed):
        torch.testing.assert_close(got.grad, ref.grad, rtol=0, atol=0)


@pytest.mark.torch
def test_torch_reductions_and_diagonals_route_the_gradient_to_the_winner():
    torch = pytest.importorskip("torch")
    x = torch.tensor([[1.0, 3.0, 3.0], [0.0, -1.0, 2.0], [5.0, 0.0, 0.0]], requires_grad=True)
    tg.einsum("ij->i", x).sum().backward()
    assert x.grad.tolist() == [[0, 1, 0], [0, 0, 1], [1, 0, 0]]
    x.grad = None
    tg.einsum("ii->", x).backward()
    assert x.grad.tolist() == [[1, 0, 0], [0, 0, 0], [0, 0, 0]]  # diagonal 1, -1, 0


@pytest.mark.torch
def test_torch_integers_and_every_dtype_match_numpy():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(11)
    for dtype in ("float32", "float64", "int32", "int64"):
        xs = [small_ints(rng, s, dtype, "max_plus") for s in [(3, 4), (4, 4, 5), (5,)]]
        got = tg.einsum("ij,jjk,k->i", *map(torch.from_numpy, xs))
        np.testing.assert_array_equal(got.numpy(), tg.einsum("ij,jjk,k->i", *xs))


@pytest.mark.torch
def test_torch_compile_and_configuration():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(4)
    a, b = (torch.tensor(rng.standard_normal(s)) for s in [(3, 4), (4, 5)])
    compiled = torch.compile(lambda x, y: tg.einsum("ij,jk->i", x, y))
    torch.testing.assert_close(compiled(a, b), tg.einsum("ij,jk->i", a, b), rtol=0, atol=0)
    value, config = tg.einsum("ij,jk->i", a, b, return_configuration=True)
    want_value, want_config = tg.einsum("ij,jk->i", a.numpy(), b.numpy(), return_configuration=True)
    np.testing.assert_array_equal(value.numpy(), want_value)
    for name in want_config:
        np.testing.assert_array_equal(config[name].numpy(), want_config[name])


# ------------------------------------------------------------------------- GPU


@pytest.mark.gpu
@pytest.mark.parametrize("semiring", SEMIRINGS)
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64"])
def test_gpu_values_and_configurations_equal_the_cpu(semiring, dtype):
    import cupy

    rng = np.random.default_rng(5)
    for subscripts, shapes in CASES + [("ij->i", [(7, 3000)]), ("abc,cd,de,ea->b", [(3, 4, 5), (5, 6), (6, 7), (7, 3)])]:
        ops = [small_ints(rng, s, dtype, semiring) for s in shapes]
        want, want_config = tg.einsum(subscripts, *ops, semiring=semiring, return_configuration=True)
        got, config = tg.einsum(subscripts, *map(cupy.asarray, ops), semiring=semiring, return_configuration=True)
        np.testing.assert_array_equal(cupy.asnumpy(got), want)
        assert set(config) == set(want_config)
        for name in want_config:
            np.testing.assert_array_equal(cupy.asnumpy(config[name]), want_config[name])


@pytest.mark.gpu
def test_gpu_reduce_kernel_rules():
    import cupy

    from tropical_gemm.einsum.lower import reduce_rows_cpu, reduce_rows_cuda
    from tropical_gemm.semirings import get_semiring

    rng = np.random.default_rng(6)
    x = rng.integers(-3, 3, size=(37, 1000)).astype(np.float32)
    x[3] = np.nan
    x[4, ::7] = np.nan
    x[5] = -np.inf
    x[6, 500] = np.inf
    for name in SEMIRINGS:
        sr = get_semiring(name)
        want_v, want_i = reduce_rows_cpu(x, sr)
        got_v, got_i = reduce_rows_cuda(cupy.asarray(x)[:, ::1], sr)
        np.testing.assert_array_equal(cupy.asnumpy(got_v), want_v)
        np.testing.assert_array_equal(cupy.asnumpy(got_i), want_i)
        got_v, got_i = reduce_rows_cuda(cupy.asarray(np.asfortranarray(x)), sr)  # strided rows
        np.testing.assert_array_equal(cupy.asnumpy(got_i), want_i)


@pytest.mark.gpu
@pytest.mark.torch
def test_gpu_torch_gradients_match_cpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA here")
    rng = np.random.default_rng(7)
    xs = [rng.standard_normal(s) for s in [(3, 4), (4, 5, 2), (2,)]]
    grads = []
    for device in ("cpu", "cuda"):
        leaves = [torch.tensor(x, device=device, requires_grad=True) for x in xs]
        tg.einsum("ij,jkl,l->ik", *leaves).sum().backward()
        grads.append([t.grad.cpu() for t in leaves])
    for g_cpu, g_gpu in zip(*grads):
        torch.testing.assert_close(g_cpu, g_gpu, rtol=0, atol=0)


@pytest.mark.parametrize("module", ["tropical_gemm.einsum", "tropical_gemm.einsum.parse"])
def test_docstring_examples_run(module):
    import doctest
    import sys

    __import__(module)
    failures, tried = doctest.testmod(sys.modules[module])
    assert tried > 0 and failures == 0


def test_an_opt_einsum_optimizer_object_is_accepted():
    import opt_einsum

    ops = [np.arange(6.0).reshape(2, 3), np.arange(12.0).reshape(3, 4), np.arange(8.0).reshape(4, 2)]
    got = tg.einsum("ij,jk,kl->il", *ops, optimize=opt_einsum.paths.DynamicProgramming())
    np.testing.assert_array_equal(got, naive_einsum("ij,jk,kl->il", *ops))


@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "float16"])
@pytest.mark.parametrize("argmax", [False, True])
def test_the_planned_product_equals_matmul_bitwise(dtype, argmax):
    from tropical_gemm.api import planned_product
    from tropical_gemm.engines import cpu

    rng = np.random.default_rng(17)
    a = rng.integers(-3, 3, size=(2, 5, 7)).astype(dtype)   # small integers: many ties for the argmax
    b = rng.integers(-3, 3, size=(2, 7, 4)).astype(dtype)
    got = planned_product(cpu, a, b, tg.get_semiring("max_plus"), argmax)
    want = tg.matmul(a, b, "max_plus", argmax=argmax)
    for g, w in zip(got if argmax else (got,), want if argmax else (want,)):
        assert g.dtype == w.dtype and g.shape == w.shape
        np.testing.assert_array_equal(g, w)

