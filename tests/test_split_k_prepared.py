"""Products cut into K slices, on addresses alone (the torch bridge's path): plans without a GPU, results on one.

The array path slices its operands with ``as_strided`` views; the prepared
path derives the same launches from shapes and strides (``split.plan_split_k``).
The first test checks that both give the same launches (the prepared path
resolving the argmax once, in its combine); the GPU tests check the
values and the first-k argmax against the independent reference, on
integer-valued floats (many ties) and random ones.
"""

from __future__ import annotations

import numpy as np
import pytest
from numpy.lib.stride_tricks import as_strided

from reference import reference_matmul
from tropical_gemm.engines.cuda import plan_forward
from tropical_gemm.engines.cuda.plan import FORWARD_SCALARS
from tropical_gemm.engines.cuda.split import k_slices, plan_split_k

SMS = 132
#: (a shape, b shape): small outputs with long K, so that plan_forward asks for K slices; some with a rest.
CASES = [((64, 1000), (1000, 80)), ((2, 48, 1537), (1537, 40)), ((96, 2048), (2048, 64))]


def _element_strides(x: np.ndarray) -> tuple[int, ...]:
    return tuple(s // x.itemsize for s in x.strides)


@pytest.mark.parametrize("a_shape,b_shape", CASES)
@pytest.mark.parametrize("transposed_b", [False, True])
def test_the_prepared_slices_are_the_array_paths_slices(a_shape, b_shape, transposed_b):
    a = np.zeros(a_shape, np.float32)
    b = np.zeros(b_shape[::-1], np.float32).T if transposed_b else np.zeros(b_shape, np.float32)
    batch = a_shape[:-2]
    plan = plan_forward(a.shape, _element_strides(a), b.shape, _element_strides(b), batch, "float32", "max_plus",
                        True, SMS, True)
    assert plan.splits > 1
    split = plan_split_k(a.shape, _element_strides(a), b.shape, _element_strides(b), batch, "float32", "max_plus",
                         True, SMS, plan.splits, 4)
    chunk, rest, count = k_slices(a.shape[-1], plan.splits)
    # what engine._split_k builds from views
    a_full = a[(None,) * (len(batch) + 2 - a.ndim)]
    b_full = b[(None,) * (len(batch) + 2 - b.ndim)]
    a_slices = as_strided(a_full, (plan.splits, *a_full.shape[:-1], chunk), (chunk * a.strides[-1], *a_full.strides))
    b_slices = as_strided(b_full, (plan.splits, *b_full.shape[:-2], chunk, b.shape[-1]),
                          (chunk * b.strides[-2], *b_full.strides))
    expected = plan_forward(a_slices.shape, _element_strides(a_slices), b_slices.shape, _element_strides(b_slices),
                            (plan.splits, *batch), "float32", "max_plus", True, SMS, False)
    # the same launches, but the slices leave their argmax to the combine, which resolves the whole product's
    assert expected.resolve is not None
    assert split.slices == expected.without_resolve()
    assert (split.rest is None) == (rest == 0)
    assert split.rest is None or split.rest.resolve is None
    whole = plan_forward(a.shape, _element_strides(a), b.shape, _element_strides(b), batch, "float32", "max_plus",
                         True, SMS, False)
    assert split.combine.scalars == (count, int(np.prod(batch, dtype=int)) * a.shape[-2] * b.shape[-1], chunk,
                                     *whole.product.scalars)
    assert split.combine.int32_scalars == expected.resolve.int32_scalars
    assert split.combine.spec.op == "combine_resolve"
    assert len(whole.product.scalars) == FORWARD_SCALARS


@pytest.mark.gpu
@pytest.mark.torch
@pytest.mark.parametrize("a_shape,b_shape", CASES)
@pytest.mark.parametrize("ties", [True, False])
def test_a_k_sliced_torch_product_runs_prepared_and_matches_the_reference(a_shape, b_shape, ties):
    torch = pytest.importorskip("torch")
    from tropical_gemm.engines import cuda
    from tropical_gemm.engines.cuda.prepared import PreparedSplitK
    from tropical_gemm.torch import tropical_matmul_with_argmax

    rng = np.random.default_rng(7)
    draw = (lambda s: rng.integers(-4, 5, s).astype(np.float32)) if ties else (lambda s: rng.standard_normal(s)
                                                                               .astype(np.float32))
    a_host, b_host = draw(a_shape), draw(b_shape)
    a, b = torch.tensor(a_host, device="cuda"), torch.tensor(b_host, device="cuda")
    prepared = cuda.prepare_product(a.shape, a.stride(), b.shape, b.stride(), "float32", "max_plus", True,
                                    a.get_device())
    assert isinstance(prepared, PreparedSplitK) and prepared.scratch_bytes > 0
    values, argmax = tropical_matmul_with_argmax(a, b, "max_plus")
    expected_values, expected_argmax = reference_matmul(a_host, b_host, "max_plus")
    np.testing.assert_array_equal(values.cpu().numpy(), expected_values)
    np.testing.assert_array_equal(argmax.cpu().numpy(), expected_argmax)
