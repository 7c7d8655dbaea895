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
    "m,n,k,batches,expected",
    [(4096, 4096, 4096, 1, ("square", False)), (8, 4096, 64, 1, ("skinny", False)), (2**21, 4, 4, 1, ("skinny", True)),
     (16, 16, 16, 1, ("skinny", False)), (1, 1, 1, 1, ("skinny", False)),
     # 4 square tiles and no K split: the small family's 64 blocks instead
     (256, 256, 256, 1, ("small", False)), (17, 17, 17, 1, ("small", False)),
     # 16 tiles x 9 K slices = 144 blocks fill 132 SMs; 16 x 2 do not
     (512, 512, 2304, 1, ("square", False)), (512, 512, 512, 1, ("small", False)),
     # a batch of tiles fills the GPU by itself
     (128, 128, 64, 132, ("square", False)), (128, 128, 64, 131, ("small", False))],
)
def test_choose_tile(m, n, k, batches, expected):
    assert cuda_engine.choose_tile(m, n, k, batches, "float32", "forward", sms=132) == expected


def test_one_sm_always_takes_the_square_family():
    """What the GPU tests use to run every shape through the tuned kernels too."""
    assert cuda_engine.choose_tile(17, 17, 1, 1, "int64", "forward_argmax", sms=1) == ("square", False)


@pytest.mark.parametrize(
    "tiles,k,expected",
    [(1024, 4096, 1), (16, 4096, 16), (16, 300, 1), (2, 2000, 7), (1, 100_000, 264), (131, 10_000, 3)],
)
def test_k_splits_only_when_the_output_cannot_fill_the_gpu(tiles, k, expected):
    assert cuda_engine.k_splits(tiles, k, sms=132) == expected
