"""einsum's configurations by each of their paths: the argmax returned directly, the walk over views and
gathers, and the scalar walk that reads argmaxes where they lie."""

from __future__ import annotations

import numpy as np
import pytest

import tropical_gemm as tg


def small_ints(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Small integers: exact under any association of ⊗, ties likely."""
    return rng.integers(-3, 4, size=shape).astype(dtype)



@pytest.mark.parametrize("subscripts, shapes", [
    ("ij,jk->ik", [(5, 6), (6, 7)]), ("bij,bjk->kbi", [(2, 3, 4), (2, 4, 5)]), ("ij->j", [(6, 3)]), ("i->", [(5,)])])
def test_direct_configuration_equals_the_walk(subscripts, shapes):
    """Where one step chose everything the argmax is returned as it is; the general walk must agree."""
    from tropical_gemm.einsum import parse_call, backtrack, einsum_plan
    from tropical_gemm.einsum.lower import array_ops, execute
    from tropical_gemm.semirings import get_semiring

    rng = np.random.default_rng(11)
    ops = [small_ints(rng, s, "float64") for s in shapes]
    ops[0][0] = -np.inf  # some outputs are the zero: -1 everywhere there
    plan = einsum_plan(subscripts, *ops)
    assert backtrack.direct(plan) is not None
    value, config = tg.einsum(subscripts, *ops, return_configuration=True)
    parsed, _ = parse_call(subscripts, tuple(ops))
    _, argmaxes = execute(plan, parsed, ops, array_ops("cpu"), get_semiring("max_plus"), True)
    walked = backtrack.walk(plan, parsed, argmaxes, lambda: value == -np.inf)
    assert set(config) == set(walked)
    for name in config:
        assert config[name].dtype == np.int32 and config[name].flags.c_contiguous
        np.testing.assert_array_equal(config[name], walked[name])
    torch = pytest.importorskip("torch")
    _, from_torch = tg.einsum(subscripts, *map(torch.tensor, ops), return_configuration=True)
    for name in config:
        assert from_torch[name].dtype == torch.int32 and from_torch[name].is_contiguous()
        np.testing.assert_array_equal(from_torch[name].numpy(), walked[name])


def test_walk_marks_every_label_of_a_zero_output_and_reads_views_and_gathers():
    """A chain whose middle steps are read through data-dependent labels (gathers) and output labels (views)."""
    rng = np.random.default_rng(12)
    ops = [small_ints(rng, (4, 5), "float32"), small_ints(rng, (5, 6), "float32"),
           small_ints(rng, (6, 3), "float32"), small_ints(rng, (3, 4), "float32")]
    ops[0][1] = -np.inf
    value, config = tg.einsum("ij,jk,kl,lm->im", *ops, optimize=[(0, 1), (0, 1), (0, 1)], return_configuration=True)
    assert set(config) == {"j", "k", "l"}
    for name in config:
        assert config[name].dtype == np.int32
        assert (config[name][1] == -1).all() and (config[name][0] >= 0).all()
    for i in (0, 2, 3):
        for m in range(4):
            j, k, l = (int(config[c][i, m]) for c in "jkl")
            assert ops[0][i, j] + ops[1][j, k] + ops[2][k, l] + ops[3][l, m] == value[i, m]


def test_scalar_configuration_is_read_from_the_argmaxes_where_they_lie():
    """A network's optimum walks each step's argmax in place (torch tensors here, cupy arrays on the GPU)."""
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(13)
    a, b, c, d = (small_ints(rng, s, "float32") for s in [(3, 4), (4, 5), (5,), (3,)])
    for subscripts, ops in [("ij,jk,k,i->", [a, b, c, d]), ("ij,jk,k->", [a, b, c]), ("i->", [c]), ("ij->", [a])]:
        want, want_config = tg.einsum(subscripts, *ops, return_configuration=True)
        got, config = tg.einsum(subscripts, *map(torch.tensor, ops), return_configuration=True)
        assert float(got) == float(want) and set(config) == set(want_config)
        for name in want_config:
            assert config[name].dtype == torch.int32 and int(config[name]) == int(want_config[name])


@pytest.mark.gpu
@pytest.mark.parametrize("subscripts, shapes", [
    ("ij,jk->ik", [(50, 60), (60, 70)]), ("bij,bjk->kbi", [(2, 3, 40), (2, 40, 5)]), ("ij->j", [(600, 3)]),
    ("ij,jk,k,i->", [(3, 4), (4, 5), (5,), (3,)]), ("ij,jk,kl->il", [(30, 40), (40, 50), (50, 6)])])
def test_gpu_configurations_by_every_path_equal_the_cpu(subscripts, shapes):
    """The direct argmax (a registry gather on the device), the scalar walk on device arrays, and the walk
    over several steps (the registry's walk kernel, einsum.device_walk)."""
    import cupy

    rng = np.random.default_rng(14)
    ops = [small_ints(rng, s, "float32") for s in shapes]
    ops[0][0] = -np.inf
    want, want_config = tg.einsum(subscripts, *ops, return_configuration=True)
    got, config = tg.einsum(subscripts, *map(cupy.asarray, ops), return_configuration=True)
    np.testing.assert_array_equal(cupy.asnumpy(got), want)
    assert set(config) == set(want_config)
    for name in want_config:
        assert isinstance(config[name], cupy.ndarray) and config[name].dtype == np.int32
        np.testing.assert_array_equal(cupy.asnumpy(config[name]), want_config[name])


def test_walk_survives_several_unwon_labels_indexing_one_step():
    """Labels that no step won (-1), chosen by separate later steps, index one earlier step's argmax together:
    they are dead (-1), not an out-of-range read."""
    p, q, v = np.zeros((1, 2)), np.zeros((2, 3)), np.zeros((3, 2))
    u = np.full((1,), -np.inf)  # nothing wins anywhere
    # X(j,k) = P(j,m) Q(m,k), then Y(k) = u(j) X(j,k), then Z(i) = Y(k) v(k,i): X is read at (j, k) = (-1, -1)
    value, config = tg.einsum("jm,mk,j,ki->i", p, q, u, v, optimize=[(0, 1), (0, 2), (0, 1)],
                              return_configuration=True)
    assert (value == -np.inf).all() and set(config) == {"j", "m", "k"}
    assert all((c == -1).all() for c in config.values())


@pytest.mark.parametrize("semiring", ["max_plus", "and_or"])
def test_an_empty_contraction_after_an_empty_step_reads_no_argmax(semiring):
    """ij,jk -> ik (k of size 0: an empty argmax), then ik,kl -> il over that empty k: every label is -1.

    The host walk went on to read the first step's empty argmax and raised
    IndexError ("cannot do a non-empty take from an empty axes").
    """
    ops = [np.ones((2, 3)), np.ones((3, 0)), np.ones((0, 5))]
    if semiring == "and_or":
        ops = [x.astype(bool) for x in ops]
    value, config = tg.einsum("ij,jk,kl->il", *ops, semiring=semiring, optimize=[(0, 1), (0, 1)],
                              return_configuration=True)
    assert (value == tg.get_semiring(semiring).zero(value.dtype)).all() and value.shape == (2, 5)
    assert set(config) == {"j", "k"} and all((c == -1).all() and c.shape == (2, 5) for c in config.values())
