"""How the CUDA engine maps a call onto kernels: pure decisions, testable without a GPU."""

from __future__ import annotations

import pytest

from tropical_gemm.engines import cuda as cuda_engine


def test_fold_batch_merges_only_uniform_strides():
    dims, strides = cuda_engine.fold_batch((2, 3, 4), [(12, 4, 1), (0, 0, 1)])
    assert dims == (6, 4) and strides == [(4, 1), (0, 1)]


def test_fold_batch_drops_unit_dims_and_merges_across_them():
    dims, strides = cuda_engine.fold_batch((2, 1, 3), [(3, 3, 1), (3, 0, 1)])
    assert dims == (6,) and strides == [(1,), (1,)]


def test_fold_batch_keeps_broadcast_dims_apart():
    dims, strides = cuda_engine.fold_batch((5, 7), [(7, 1), (1, 0)])
    assert dims == (5, 7) and strides == [(7, 1), (1, 0)]


def test_batch_strides_zero_where_operand_broadcasts():
    # a: (3, 1, M, K) over batch (2, 3, 4): missing leading dim and a size-1 dim broadcast.
    assert cuda_engine.batch_strides((3, 1, 5, 6), (30, 30, 6, 1), (2, 3, 4)) == (0, 30, 0)


@pytest.mark.parametrize(
    "m,n,expected",
    [(4096, 4096, ("square", False)), (8, 4096, ("skinny", False)), (2**21, 4, ("skinny", True)),
     (16, 16, ("skinny", False)), (17, 17, ("square", False)), (1, 1, ("skinny", False))],
)
def test_choose_tile(m, n, expected):
    assert cuda_engine.choose_tile(m, n) == expected


@pytest.mark.parametrize(
    "tiles,k,expected",
    [(1024, 4096, 1), (16, 4096, 16), (16, 300, 1), (2, 2000, 7), (1, 100_000, 264), (131, 10_000, 3)],
)
def test_k_splits_only_when_the_output_cannot_fill_the_gpu(tiles, k, expected):
    assert cuda_engine.k_splits(tiles, k, sms=132) == expected
