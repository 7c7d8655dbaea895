"""einsum over the boolean semiring on cupy arrays: the CPU einsum's values and configurations, bit for bit.

The GPU runs each pairwise step as the engine's packed-bit product, each
single-operand step as the registry's ``reduce`` kernel of dtype bool, each
copy as its bool ``gather`` (which also turns uint8 operands into bools) and
the configuration walk as its bool ``walk``; the CPU einsum, tested against
the definition in test_boolean.py, is the reference.  Inputs are random
truth values at densities that leave both true and false entries.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import pytest

import tropical_gemm as tg
from test_boolean import truth
from test_einsum import CASES
from tropical_gemm.dtypes import dtype_name
from tropical_gemm.einsum import parse_call, replay
from tropical_gemm.jit import catalogue, kernel_source, make_spec
from tropical_gemm.jit.source import kernel_options

#: The kernels einsum adds to and_or's (its products are matmul's).
EINSUM_OPS = ("reduce", "gather", "walk")


def operands(seed: int, shapes: list[tuple[int, ...]], dtype: str = "bool") -> list[np.ndarray]:
    """Random truth values, about half of each product's entries true (k: the operand's largest axis)."""
    rng = np.random.default_rng(seed)
    return [truth(rng, s, max(s, default=1), dtype) for s in shapes]


def compare(subscripts: str, ops: list[np.ndarray], *, view: Callable[[Any], Any] = lambda x: x,
            configuration: bool = True) -> None:
    """The cupy einsum of ``view`` of each operand equals the numpy einsum of the same views.

    ``view`` takes numpy and cupy arrays alike (slices, transposes), so the
    GPU reads strided memory where the CPU reads the same values.
    """
    import cupy

    want = tg.einsum(subscripts, *map(view, ops), semiring="and_or", return_configuration=configuration)
    got = tg.einsum(subscripts, *(view(cupy.asarray(x)) for x in ops), semiring="and_or",
                    return_configuration=configuration)
    want_value, want_config = want if configuration else (want, {})
    got_value, got_config = got if configuration else (got, {})
    assert isinstance(got_value, cupy.ndarray) and got_value.dtype == np.bool_
    np.testing.assert_array_equal(cupy.asnumpy(got_value), want_value)
    assert set(got_config) == set(want_config)
    for name, idx in want_config.items():
        assert isinstance(got_config[name], cupy.ndarray) and got_config[name].dtype == idx.dtype, name
        np.testing.assert_array_equal(cupy.asnumpy(got_config[name]), idx, err_msg=f"{subscripts}: {name}")


# ----------------------------------------------------------------- GPU against the CPU


@pytest.mark.gpu
@pytest.mark.parametrize("subscripts, shapes", CASES)
def test_every_subscript_feature_equals_the_cpu(subscripts, shapes):
    for configuration in (False, True):
        compare(subscripts, operands(len(subscripts), shapes), configuration=configuration)


@pytest.mark.gpu
@pytest.mark.parametrize("subscripts, shapes", [
    ("ij,jk,kl->il", [(9, 40), (40, 70), (70, 6)]),        # k crosses the 32-bit words
    ("bij,bjk->bik", [(3, 17, 65), (3, 65, 5)]),
    ("ij->i", [(7, 3000)]),                                  # a warp per row, many ks each
    ("ij->", [(33, 40)]),
    ("ij->j", [(50, 9)]),
    ("ii->i", [(40, 40)]),                                   # a diagonal: a view, no step
    ("ii->", [(40, 40)]),                                    # a trace: the diagonal's OR
    ("...ij,...jk", [(2, 1, 5, 40), (3, 40, 6)]),            # broadcast batch dims
    ("...ij,...jk->...ik", [(40, 6), (4, 6, 3)]),
    ("abc,cd,de,ea->b", [(3, 4, 5), (5, 6), (6, 7), (7, 3)]),
    ("ab,bc,cd,da->", [(5, 40), (40, 6), (6, 33), (33, 5)]),  # a ring: a scalar, walked on the GPU
])
def test_networks_and_reductions_equal_the_cpu(subscripts, shapes):
    compare(subscripts, operands(sum(map(sum, shapes)), shapes))


@pytest.mark.gpu
def test_transposed_and_strided_operands_equal_the_cpu():
    ops = operands(1, [(12, 90), (90, 140), (140, 14)])
    compare("ji,kj,lk->il", ops, view=lambda x: x.T)                       # column layouts
    compare("ij->i", ops[1:2], view=lambda x: x[:, ::-3])                  # a strided reduction
    sliced = operands(7, [(12, 90), (60, 21), (14, 15)])                   # (6, 30), (30, 7), (7, 5) once sliced
    compare("ij,jk,kl->il", sliced, view=lambda x: x[::-2, 1::3])          # negative and odd strides
    big = operands(2, [(4, 5, 60, 6)])
    compare("abjc,bjk->akc", [big[0], big[0][0, :, :, :5]], view=lambda x: x.swapaxes(0, -1))  # copies regroup


@pytest.mark.gpu
def test_uint8_operands_read_nonzero_as_true():
    ops = operands(3, [(8, 50), (50, 9), (9, 9)], "uint8")
    assert ops[0].max() > 1  # bytes other than 0 and 1
    compare("ij,jk->ik", ops[:2])
    compare("ij->i", ops[:1])
    compare("ii->i", ops[2:])                      # no step: the result is the operand's diagonal, as bools
    compare("ij->ji", ops[:1])
    compare("ij,jk,kl->il", [ops[0], operands(4, [(50, 9)])[0], ops[2]])  # mixed with bool
    compare("ij,jk->ik", ops[:2], view=lambda x: x.T.T[::-1])


@pytest.mark.gpu
def test_an_empty_contracted_index_is_false_and_configured_minus_one():
    compare("ij,jk->ik", [np.ones((3, 0), bool), np.ones((0, 4), bool)])
    compare("ij->i", [np.ones((3, 0), bool)])
    compare("ij->", [np.ones((0, 3), np.uint8)])
    compare("ij,jk,kl->il", [np.ones((2, 3), bool), np.ones((3, 0), bool), np.ones((0, 5), bool)])
    compare("ij,jk->ik", [np.ones((0, 7), bool), np.ones((7, 4), bool)])   # an empty output


@pytest.mark.gpu
def test_ties_go_to_the_smallest_index_at_every_step():
    import cupy

    a = np.zeros((2, 70), bool)
    a[:, 40:] = True
    b = np.zeros((70, 3), bool)
    b[40:, 0] = True
    b[[69, 45], 1] = True
    value, config = tg.einsum("ij,jk->ik", cupy.asarray(a), cupy.asarray(b), semiring="and_or",
                              return_configuration=True)
    assert cupy.asnumpy(config["j"]).tolist() == [[40, 45, -1]] * 2
    assert cupy.asnumpy(value).tolist() == [[True, True, False]] * 2
    compare("ij->i", [a])


@pytest.mark.gpu
def test_the_reduce_kernel_is_the_cpu_rule():
    import cupy

    from tropical_gemm.einsum.lower import reduce_rows_cpu, reduce_rows_cuda

    sr = tg.get_semiring("and_or")
    x = operands(5, [(37, 1000)])[0]
    x[3] = False
    x[4, 999] = True
    x[4, :999] = False
    for device in (cupy.asarray(x), cupy.asarray(np.ascontiguousarray(x.T)).T):  # contiguous and strided rows
        want_v, want_i = reduce_rows_cpu(x, sr)
        got_v, got_i = reduce_rows_cuda(device, sr)
        np.testing.assert_array_equal(cupy.asnumpy(got_v), want_v)
        np.testing.assert_array_equal(cupy.asnumpy(got_i), want_i)


@pytest.mark.gpu
def test_truth_values_copy_any_strides_as_bools():
    import cupy

    from tropical_gemm.engines.cuda_aux import truth_values

    x = operands(6, [(5, 6, 70)], "uint8")[0]
    got = truth_values(cupy.asarray(x).transpose(2, 0, 1)[::3])
    assert got.dtype == np.bool_ and got.flags.c_contiguous
    np.testing.assert_array_equal(cupy.asnumpy(got).view(np.uint8), (x.transpose(2, 0, 1)[::3] != 0))


# ----------------------------------------------------------------- without a GPU


def test_the_replay_leaves_and_or_to_the_array_path():
    """The engine packs and_or's operands per call, so no signature of it is bound on addresses."""
    ops = (np.ones((3, 4), bool), np.ones((4, 5), bool))
    parsed, _ = parse_call("ij,jk->ik", ops)
    assert replay.prepared(parsed, "auto", ((4, 1), (5, 1)), np.dtype(bool), "and_or", True, 0) is None


def test_the_einsum_kernels_are_and_or_catalogue_specs_found_by_dtype():
    """Copies and walks are asked for by dtype (``dtype_name``), semiring-free: bool's are and_or's."""
    assert dtype_name(np.dtype(bool)) == "bool"
    specs = [make_spec(op, "max_plus", "bool") for op in ("gather", "walk")] + [make_spec("reduce", "and_or", "bool")]
    assert [s.name for s in specs] == ["tg_gather_b8", "tg_walk_b8", "tg_reduce_and_or_b8"]
    assert all(s.semiring == "and_or" for s in specs) and set(specs) <= set(catalogue(semirings_=["and_or"]))
    assert "Y[e] = (bool)X[at];" in kernel_source(specs[0])  # every nonzero byte becomes 1
    assert "tg::AndOr::better" in kernel_source(specs[2])
    with pytest.raises(ValueError, match="unknown dtype 'bool'"):
        make_spec("reduce", "max_plus", "bool")           # an ordered semiring has no truth values


@pytest.mark.nvrtc
@pytest.mark.parametrize("op", EINSUM_OPS)
def test_each_einsum_kernel_compiles_to_a_cubin_for_sm_90(op):
    from tropical_gemm.jit.compiler import compile_program, resolve_target

    spec = make_spec(op, "and_or", "bool")
    result = compile_program(kernel_source(spec), spec.name, resolve_target("sm_90"), kernel_options(spec))
    assert result.binary[:4] == b"\x7fELF" and spec.name.encode() in result.binary
