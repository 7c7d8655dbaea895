"""How the CUDA engine maps a call onto kernels: pure decisions, testable without a GPU."""

from __future__ import annotations

import pytest

from tropical_gemm.engines import cuda as cuda_engine
from tropical_gemm.shapes import product_shape


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
    [(4096, 4096, 4096, 1, ("square", False)), (8, 4096, 64, 1, ("skinny", False)), (2**21, 4, 4, 1, ("thin", False)),
     (16, 16, 16, 1, ("skinny", False)), (1, 1, 1, 1, ("thin", False)),
     # a short K and a short side: all of B in shared memory, the long side as rows
     (4, 2**21, 4, 1, ("thin", True)), (2**21, 8, 8, 1, ("thin", False)), (2**21, 9, 8, 1, ("skinny", True)),
     (2**21, 8, 9, 1, ("skinny", True)),
     # one row, or one column (transposed): the vector tile
     (1, 4096, 4096, 1, ("vector", False)), (4096, 1, 4096, 1, ("vector", True)), (2, 4096, 64, 1, ("skinny", False)),
     # 4 square tiles and no K split: the small family's 64 blocks instead
     (256, 256, 256, 1, ("small", False)), (17, 17, 17, 1, ("small", False)),
     # 128x128 tiles, two blocks an SM: 64 tiles x 4 K slices fill 3/4 of 264 (1024^3); 16 x 9 do not
     (1024, 1024, 4096, 1, ("square", False)), (512, 512, 2304, 1, ("small", False)),
     (1024, 1024, 1024, 1, ("square", False)), (512, 512, 512, 1, ("small", False)),
     (1000, 777, 3000, 1, ("square", False)),  # 1000x3000x777: 56 tiles x 4 K slices
     # a batch of tiles fills 3/4 of the resident blocks (198 of 264) by itself
     (128, 128, 64, 198, ("square", False)), (128, 128, 64, 197, ("small", False))],
)
def test_choose_tile(m, n, k, batches, expected):
    assert cuda_engine.choose_tile(m, n, k, batches, "float32", "forward", sms=132) == expected


def test_one_sm_takes_the_square_family_where_a_quarter_of_its_tiles_lies_inside_c(monkeypatch):
    """What the GPU tests use to run every shape through the tuned kernels too (with ``_USEFUL`` empty), and the
    padding rule: batches of 64² float32 matrices fill the GPU but a quarter of each 128 × 128 tile, 96² more."""
    from tropical_gemm.engines.cuda import plan as cuda_plan

    assert cuda_engine.choose_tile(33, 33, 1, 1, "int64", "forward_argmax", sms=1) == ("square", False)
    assert cuda_engine.choose_tile(17, 17, 1, 1, "int64", "forward_argmax", sms=1) == ("small", False)
    assert cuda_engine.choose_tile(64, 64, 64, 4096, "float32", "forward", sms=132) == ("small", False)
    assert cuda_engine.choose_tile(96, 96, 96, 1213, "float32", "forward", sms=132) == ("square", False)
    assert cuda_engine.choose_tile(64, 64, 64, 4096, "int32", "forward", sms=132) == ("square", False)  # 1/8
    assert cuda_engine.choose_tile(32, 32, 32, 32768, "int32", "forward", sms=132) == ("small", False)
    monkeypatch.setattr(cuda_plan, "_USEFUL", {})
    assert cuda_engine.choose_tile(17, 17, 1, 1, "int64", "forward_argmax", sms=1) == ("square", False)


@pytest.mark.parametrize(
    "tiles,k,expected",
    [(1024, 4096, 1), (16, 4096, 16), (16, 300, 1), (2, 2000, 7), (1, 100_000, 264),
     # 262 blocks in one wave of 264 beat 393 in two
     (131, 10_000, 2),
     # 56 tiles: 4 slices fill one wave (224 blocks); 5 would leave 16 blocks to a second
     (56, 3000, 4)],
)
def test_k_splits_fill_whole_waves(tiles, k, expected):
    assert cuda_engine.k_splits(tiles, k, sms=132) == expected


def test_k_splits_count_the_kernels_residency():
    """One block per SM (a 128x256 tile): 32 tiles of 1024 ks take 4 slices, 128 blocks."""
    assert cuda_engine.k_splits(32, 1024, sms=132, waves=1) == 4
    assert cuda_engine.k_splits(600, 1024, sms=132, waves=1) == 1  # over 4 waves of tiles: never sliced


@pytest.mark.parametrize(("a_shape", "b_shape", "argmax", "expected"), [
    ((16, 16), (16, 16), True, True),
    ((2, 3, 4, 16, 8), (8, 5), True, True),          # three batch dims: indexed by the kernel
    ((2, 1, 3, 4, 16, 8), (8, 5), False, False),     # four: the cupy path splits or folds them
    ((3, 0), (0, 4), False, False),                  # K = 0: filled, nothing launched
    ((0, 4), (4, 5), True, False),                   # no outputs
    ((1, 2**31), (2**31, 1), True, False),           # an argmax that needs int64
    ((1, 2**31), (2**31, 1), False, True),           # the values alone still take one launch
], ids=str)
def test_prepared_products_only_for_one_launch_signatures(a_shape, b_shape, argmax, expected):
    """Which signatures the engine prepares (everything else goes through cupy arrays); shapes only, no GPU."""
    shape = product_shape(a_shape, b_shape)
    assert cuda_engine.one_launch_each(shape, argmax) is expected


def test_square_products_whose_k_slices_leave_a_wave_part_empty_take_stream_k():
    """1000x3000x777: 56 tiles of 128x128 whose 4 K slices would fill 224 of 264 slots (its argmax: 3 waves of 7
    slices, one block an SM), as slices shared out over all of them; 1024³ and 1024x4096x1024 (K slices fill
    256), 3000x1000x2047 (384 tiles), 2048³, 4096³ and 256 batches of 256³ stay in the square family."""
    from tropical_gemm.engines.cuda.plan import plan_forward

    def plan(m: int, k: int, n: int, batches: int = 1, argmax: bool = False):
        batch = (batches,) if batches > 1 else ()
        return plan_forward((*batch, m, k), (*((m * k,) if batch else ()), k, 1), (*batch, k, n),
                            (*((k * n,) if batch else ()), n, 1), batch, "float32", "max_plus", argmax, 132, True)

    for argmax in (False, True):
        streamed = plan(1000, 3000, 777, argmax=argmax)
        assert streamed.spec.tile == "stream" and streamed.splits == 1
        assert streamed.product.grid == streamed.work.grid == (132 if argmax else 264)
        assert streamed.scratch_bytes >= streamed.work.nbytes > 0
        assert streamed.fixup.spec.op == "stream_fixup" and streamed.fixup.grid % streamed.work.grid == 0
        assert streamed.companions[0] == streamed.fixup.spec  # compiled with the product, launched after it
        for square in (plan(1024, 1024, 1024, argmax=argmax), plan(1024, 4096, 1024, argmax=argmax),
                       plan(3000, 1000, 2047, argmax=argmax), plan(2048, 2048, 2048, argmax=argmax),
                       plan(4096, 4096, 4096, argmax=argmax), plan(256, 256, 256, batches=256, argmax=argmax)):
            assert square.spec.tile == "square" and square.work is None


def test_without_room_for_the_stream_kernel_square_products_slice_k():
    """A GPU whose blocks may not take the pipelined kernel's shared memory: the register-staged square kernel,
    whose products slice K where their tiles leave the waves part empty (int64 512x2048x512: 64 tiles of 64x64,
    two blocks an SM, in four slices)."""
    from tropical_gemm.engines.cuda.plan import plan_forward

    plan = plan_forward((512, 2048), (2048, 1), (2048, 512), (512, 1), (), "int64", "max_plus", False, 132, True,
                        48 * 1024)
    assert plan.spec.tile == "square" and plan.work is None and plan.splits == 4
    assert cuda_engine.k_splits(128, 1024, sms=132, waves=1) == 1  # one wave of 128 blocks already


@pytest.mark.parametrize("dtype", ["float32", "int32", "float64", "int64"])
def test_a_square_argmax_no_deeper_than_each_k_depth_needs_no_resolve(dtype):
    """K no deeper than the argmax tile's slice (the integers) or its ``each_k`` (the floats, several slices):
    the kernel compares every candidate, and no resolve follows."""
    from tropical_gemm.engines.cuda.plan import plan_forward
    from tropical_gemm.jit.source import each_k_depth, tile_shape

    def plan(k: int):
        return plan_forward((300, k), (k, 1), (k, 300), (300, 1), (), dtype, "max_plus", True, 1, True)

    depth = each_k_depth(plan(64).spec)
    assert depth == (max(256, tile_shape(plan(64).spec).bk) if dtype.startswith("float") else
                     tile_shape(plan(64).spec).bk)
    assert plan(depth).spec.tile == "square" and plan(depth).resolve is None
    assert plan(depth + 1).resolve is not None


def test_a_short_k_argmax_resolves_tiles_of_outputs_from_shared_memory():
    """4096 batches of 64³ integer products: the resolve stages each 64 × 64 tile's rows of A and columns of B,
    every k, and copies no B (on an sm_75's 64 KiB, int64 in 32 × 32 tiles).  Where staging would move more
    than a quarter of the values the two slices hold (256 batches of 256³), or K is too long to stage (4096³),
    it reads each output's two slices, from B's transposed copy where B is one row-major matrix.  The floats
    compare every candidate at these K (``source.each_k_depth``), so the resolve is the integers'."""
    from tropical_gemm.engines.cuda.plan import plan_forward
    from tropical_gemm.jit.source import PIPELINED_SHARED_LIMIT

    def plan(batch: int, m: int, k: int, n: int, dtype: str = "int32", limit: "int | None" = None):
        lead = (batch,) if batch > 1 else ()
        return plan_forward((*lead, m, k), (m * k,) * len(lead) + (k, 1), (*lead, k, n),
                            (k * n,) * len(lead) + (n, 1), lead, dtype, "max_plus", True, 132, True, limit)

    short = plan(4096, 64, 64, 64)
    depth = short.resolve.int32_scalars[0]
    assert short.resolve.spec.op == "argmax_resolve_staged" and short.b_copy is None
    assert short.resolve.int32_scalars == (depth, 64, 68) and short.resolve.grid == 4096
    assert short.resolve.shared_bytes == 2 * 64 * 68 * 4 <= PIPELINED_SHARED_LIMIT
    assert plan(4096, 64, 64, 64, "int64").resolve.int32_scalars[1:] == (64, 66)
    assert plan(4096, 64, 64, 64, "int64", 64 * 1024).resolve.int32_scalars[1:] == (32, 66)  # sm_75
    assert plan(256, 256, 256, 256).resolve.spec.op == "argmax_resolve"
    assert plan(4096, 64, 64, 64, "float32").resolve is None
    long = plan(1, 4096, 4096, 4096, "float32")
    assert long.resolve.int32_scalars == (16,) and long.resolve.shared_bytes == 0 and long.b_copy is not None


def test_every_pipelined_shape_fits_the_smallest_opt_in_of_sm_80_and_later():
    from tropical_gemm.jit import make_spec
    from tropical_gemm.jit.source import (PIPELINED_EXACT_SHAPES, PIPELINED_SHAPES, PIPELINED_SHARED_LIMIT,
                                          STREAM_EXACT_SHAPES, STREAM_SHAPES, dynamic_shared_bytes, pipelined,
                                          tile_shape)

    layouts = {"r": "row", "c": "col"}
    for semiring, table, tile in (("max_min", PIPELINED_SHAPES, "square"), ("max_plus", PIPELINED_EXACT_SHAPES, "square"),
                                  ("max_plus", STREAM_EXACT_SHAPES, "stream"), ("max_min", STREAM_SHAPES, "stream")):
        for (op, dtype, (a, b)), shape in table.items():
            spec = make_spec(op, semiring, dtype, a_layout=layouts[a], b_layout=layouts[b], tile=tile)
            assert pipelined(spec) and tile_shape(spec) == shape, spec.name
            assert 0 < dynamic_shared_bytes(spec) <= PIPELINED_SHARED_LIMIT, spec.name


def test_a_gpu_with_less_shared_memory_takes_the_small_family():
    """sm_75 lets a block opt into 64 KiB: the pipelined tile needs more, so the plan takes the small family."""
    from tropical_gemm.engines.cuda.plan import plan_forward
    from tropical_gemm.jit.source import dynamic_shared_bytes

    def plan(limit):
        return plan_forward((4096, 4096), (4096, 1), (4096, 4096), (4096, 1), (), "float32", "max_plus", False, 132,
                            True, limit)

    assert plan(None).spec.tile == plan(227 * 1024).spec.tile == "square"
    assert dynamic_shared_bytes(plan(None).spec) > 64 * 1024
    small = plan(64 * 1024)
    assert small.spec.tile == "small" and small.product.shared_bytes == 0
    assert plan_forward((4096, 4096), (4096, 1), (4096, 4096), (4096, 1), (), "float64", "max_plus", True, 132,
                        True, 64 * 1024).spec.tile == "square"  # the register-staged kernel: static shared memory


def test_an_argmax_slices_k_deeper_than_its_kernel_compares_every_candidate():
    """A float argmax's K slices are deeper than ``each_k_depth`` (the combine resolves the whole product's
    winners once), where the plain product's may be ``MIN_SPLIT_K`` deep."""
    from tropical_gemm.engines.cuda.plan import MIN_SPLIT_K, plan_forward, slice_least
    from tropical_gemm.engines.cuda.split import k_slices
    from tropical_gemm.jit import make_spec
    from tropical_gemm.jit.source import each_k_depth

    def splits(argmax: bool) -> int:
        return plan_forward((64, 1024), (1024, 1), (1024, 80), (80, 1), (), "float32", "max_plus", argmax, 132,
                            True).splits

    assert k_slices(1024, splits(False))[0] == MIN_SPLIT_K
    argmax = make_spec("forward_argmax", "max_plus", "float32", tile="small")
    assert slice_least(argmax) == each_k_depth(argmax) + 1 > MIN_SPLIT_K
    assert splits(True) > 1 and k_slices(1024, splits(True))[0] > each_k_depth(argmax)
    assert slice_least(make_spec("forward", "max_plus", "float32")) == MIN_SPLIT_K
