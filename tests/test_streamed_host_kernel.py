"""The stream family's kernel (``cuda_src/forward_streamed.cu``: stream-K) and its fixup (``stream_fixup.cu``),
built for the host, against the CPU engine.

Built with the shim of ``host_cuda`` (blocks run one after another), they
run on numpy memory with the plans the CUDA engine makes (``plan_forward``,
which takes the stream family where a product's tiles would leave the last
wave part empty), so the shares of slices, the tiles run whole, the
partials' slots and their merge in k order are checked bit for bit on any
machine.  The workspace is filled with garbage, as the engine leaves it: a
fixup that read a slot nobody wrote would show.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import host_cuda
import tropical_gemm as tg
from tropical_gemm.engines.cuda.plan import StreamWork, plan_forward, stream_work
from tropical_gemm.jit import make_spec, source
from tropical_gemm.jit.source import TileShape, tile_shape
from test_pipelined_host_kernel import ALL_LAYOUTS, fresh_plans, operand  # noqa: F401 (a fixture)

_HEADERS = ("preamble.cuh", "semirings.cuh", "tiles.cuh", "staged.cuh", "pipelined.cuh", "streamed.cuh")
_LAUNCH = r"""
extern "C" void launch_streamed(long long grid, long long block, const void* A, const void* B, void* C, int* IDX,
                                unsigned char* WORK, const long long* s) {
  launch(grid, block, [=] { forward((const T_*)A, (const T_*)B, (T_*)C, IDX, WORK, s[0], s[1], s[2], s[3], s[4],
                                    s[5], s[6], s[7], s[8], s[9], s[10], s[11], s[12], s[13], s[14], s[15], s[16],
                                    s[17], s[18], s[19]); });
}
extern "C" void launch_fixup(long long grid, long long block, const unsigned char* WORK, void* C, int* IDX,
                             const long long* s) {
  launch(grid, block, [=] { fixup(WORK, (T_*)C, IDX, s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9]); });
}
"""
#: Small tiles, so that host-sized products have several tiles and many slices.
_SHAPES = {4: TileShape(32, 32, 8, 4, 4, min_blocks=2, stages=3), 8: TileShape(32, 32, 8, 4, 4, min_blocks=2, stages=2)}


@pytest.fixture(autouse=True)
def small_stream_tiles(monkeypatch, fresh_plans):
    """Every square and stream tile small (for plans made afresh: ``fresh_plans``)."""
    for table in (source.PIPELINED_SHAPES, source.PIPELINED_EXACT_SHAPES, source.STREAM_EXACT_SHAPES,
                  source.STREAM_SHAPES):
        for key in list(table):
            monkeypatch.setitem(table, key, _SHAPES[np.dtype(key[1]).itemsize])
    for key in list(source._STREAM_FALLBACK):
        monkeypatch.setitem(source._STREAM_FALLBACK, key, _SHAPES[key[1]])
    for family, dtype, op in list(source.TILE_SHAPES):  # the register-staged square tiles the planner weighs
        if family == "square" and dtype in host_cuda.C_TYPES:
            monkeypatch.setitem(source.TILE_SHAPES, (family, dtype, op), _SHAPES[np.dtype(dtype).itemsize])


@pytest.fixture(scope="module")
def host_kernels(tmp_path_factory):
    """Each stream spec's host build, with its dtype's fixup, built on first use."""
    return host_cuda.forward_builder(tmp_path_factory.mktemp("streamed"), _HEADERS, _LAUNCH, _fixup_of)


def _fixup_of(spec) -> str:
    """The fixup fragment that follows ``spec``'s stream kernel, its entry point renamed ``fixup``."""
    fixup = make_spec("stream_fixup", spec.semiring, spec.dtype)
    return source.fragment(fixup).replace(fixup.name, "fixup")


def streamed_product(host_kernels, a: np.ndarray, b: np.ndarray, semiring: str, sms: int, argmax: bool = False):
    """``a ⊗ b`` by the stream-K launch the CUDA engine plans on a GPU of ``sms`` SMs, and its recorded argmax."""
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    strides = [tuple(s // x.itemsize for s in x.strides) for x in (a, b)]
    plan = plan_forward(a.shape, strides[0], b.shape, strides[1], batch, a.dtype.name, semiring, argmax, sms, True)
    assert plan.product.spec.tile == "stream" and plan.work is not None, plan
    c = np.empty((*batch, a.shape[-2], b.shape[-1]), dtype=a.dtype)
    idx = np.full(c.shape, -7, dtype=np.int32)
    work = np.full(plan.work.nbytes, 0xA7, dtype=np.uint8)
    first, second = (b, a) if plan.swap_operands else (a, b)
    kernels = host_kernels(plan.product.spec)
    scalars = np.array(plan.product.scalars, dtype=np.int64)
    c_idx = ctypes.c_void_p(idx.ctypes.data if argmax else None)
    kernels.launch_streamed(
        ctypes.c_longlong(plan.product.grid), ctypes.c_longlong(plan.product.block),
        *(ctypes.c_void_p(x.ctypes.data) for x in (first, second, c)), c_idx, ctypes.c_void_p(work.ctypes.data),
        ctypes.c_void_p(scalars.ctypes.data))
    fixup_scalars = np.array(plan.fixup.scalars, dtype=np.int64)
    kernels.launch_fixup(
        ctypes.c_longlong(plan.fixup.grid), ctypes.c_longlong(plan.fixup.block), ctypes.c_void_p(work.ctypes.data),
        ctypes.c_void_p(c.ctypes.data), c_idx, ctypes.c_void_p(fixup_scalars.ctypes.data))
    return c, idx, plan


@pytest.mark.parametrize("dtype,semiring,m,k,n,sms,layouts", [
    ("float32", "max_plus", 150, 301, 30, 3, ALL_LAYOUTS),        # 5 tiles on 6 slots: each cut
    ("float32", "max_plus", 100, 97, 130, 12, ALL_LAYOUTS[::3]),  # 20 tiles on 24 slots, a ragged last slice
    ("float32", "min_plus", 33, 1100, 31, 5, ALL_LAYOUTS[1:2]),   # 2 tiles on 10 slots: 5 contributors a tile
    ("float64", "max_times", 70, 200, 70, 6, ALL_LAYOUTS[2:3]),
    ("int32", "max_min", 61, 600, 97, 5, ALL_LAYOUTS[:1]),
    ("int64", "min_max", 35, 90, 70, 4, ALL_LAYOUTS[3:])])
def test_stream_k_matches_the_cpu_engine(host_kernels, dtype, semiring, m, k, n, sms, layouts):
    """f32 max_plus in every layout, the other cases in one or two (each layout is a host build); aligned
    operands and not, with ±inf and NaN or the integer extremes."""
    rng = np.random.default_rng(m * k + n)
    for a_layout, b_layout in layouts:
        for offset in (0, 1):
            a = operand(rng, m, k, dtype, a_layout, offset)
            b = operand(rng, k, n, dtype, b_layout, offset)
            got, _, plan = streamed_product(host_kernels, a, b, semiring, sms)
            want = tg.matmul(np.ascontiguousarray(a), np.ascontiguousarray(b), semiring)
            np.testing.assert_array_equal(got, want, err_msg=f"{a_layout} {b_layout} offset {offset} {plan.work}")


@pytest.mark.parametrize("semiring", ["max_plus", "max_times"])
def test_stream_k_keeps_the_exact_integer_path(host_kernels, semiring):
    """int32 ⊗ that saturates: values near the ends of the range in a few slices, on both sides of a cut."""
    bound = 2**31 - 1 if semiring == "max_plus" else 2**16
    rng = np.random.default_rng(3)
    m, k, n = 64, 603, 96
    a = rng.integers(-60, 60, (m, k)).astype(np.int32)
    b = rng.integers(-60, 60, (k, n)).astype(np.int32)
    for kk in (5, 300, 301, 602):
        a[rng.integers(0, m, 9), kk] = rng.choice([-bound - 1, bound, bound // 2 + 7, -(bound // 2) - 9], 9)
        b[kk, rng.integers(0, n, 9)] = rng.choice([-bound - 1, bound, bound // 2 + 5, -(bound // 2) - 3], 9)
    for argmax in (False, True):
        got, got_k, plan = streamed_product(host_kernels, a, b, semiring, 4, argmax)
        want = tg.matmul(a, b, semiring, argmax=argmax)
        np.testing.assert_array_equal(got, want[0] if argmax else want)
        if argmax:
            depth = tile_shape(plan.product.spec).bk
            np.testing.assert_array_equal(got_k, np.where(want[1] < 0, -1, want[1] // depth * depth))


@pytest.mark.parametrize("dtype,semiring", [("float32", "max_plus"), ("float64", "min_plus"), ("int32", "max_plus")])
def test_stream_k_argmax_records_the_first_slice_holding_the_winner(host_kernels, dtype, semiring):
    """Small integers: ties within and across the blocks that share a tile, where the earliest slice wins (the
    slice argmax_resolve then searches); the resolve follows in the plan."""
    rng = np.random.default_rng(11)
    for a_layout, b_layout in ALL_LAYOUTS[::3]:
        with np.errstate(invalid="ignore"):  # ±inf % 7: NaN, which stays a special
            a = np.round(operand(rng, 70, 500, dtype, a_layout, 0) % 7)
            b = np.round(operand(rng, 500, 30, dtype, b_layout, 0) % 7)
        got, got_k, plan = streamed_product(host_kernels, a, b, semiring, 2, argmax=True)
        want, want_k = tg.matmul(np.ascontiguousarray(a), np.ascontiguousarray(b), semiring, argmax=True)
        depth = tile_shape(plan.product.spec).bk
        assert plan.resolve is not None and plan.resolve.int32_scalars == (depth,)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(got_k, np.where(want_k < 0, -1, want_k // depth * depth))


def test_stream_k_batches_broadcast(host_kernels):
    rng = np.random.default_rng(8)
    a, b = operand(rng, 40, 120, "float32", "row", 0), rng.standard_normal((3, 120, 50)).astype(np.float32)
    got, _, _ = streamed_product(host_kernels, a, b, "max_plus", 7)
    np.testing.assert_array_equal(got, tg.matmul(a, b, "max_plus"))


def test_stream_work_lays_out_the_fixup_jobs_then_two_partials_per_block_then_their_argmaxes():
    shape = TileShape(128, 128, 32, 8, 8, min_blocks=2, stages=2)
    work = stream_work(56, 3000, 132, shape, 4, True, 224, 264)
    jobs = 10752  # a FixupJob of 40 bytes per block, 10,560 bytes rounded up to 256
    assert work == StreamWork(grid=264, values_offset=jobs, index_offset=jobs + 2 * 264 * 128 * 128 * 4,
                              nbytes=jobs + 2 * 2 * 264 * 128 * 128 * 4)
    assert stream_work(56, 3000, 132, shape, 4, False, 224, 264).nbytes == work.index_offset


def test_stream_k_only_where_the_square_family_leaves_slots_empty_or_takes_waves():
    """One wave of tiles or less, at least 8 slices a block, and the square family under 90% of one wave's slots
    or over one wave."""
    shape = TileShape(128, 128, 32, 8, 8, min_blocks=2, stages=2)
    assert stream_work(56, 3000, 132, shape, 4, False, 256, 264) is None  # K slices fill the slots already
    assert stream_work(56, 3000, 132, shape, 4, False, 392, 132) is not None  # in 3 waves
    assert stream_work(265, 3000, 132, shape, 4, False, 265, 264) is None  # more tiles than one wave
    assert stream_work(56, 1024, 132, shape, 4, False, 56, 264) is None  # 6.8 slices a block
    assert stream_work(56, 1300, 132, shape, 4, False, 56, 264) is not None  # 8.7


@pytest.mark.parametrize("tiles", [1, 7, 132, 264])
def test_stream_k_never_takes_a_product_one_slice_deep(tiles):
    """The stream kernel (streamed.cuh) leaves out the one-slice argmax (pipelined.cuh: accumulate<false>), so no plan
    may send it a K of one slice, whatever the square family would leave empty."""
    for shape in (TileShape(128, 128, 32, 8, 8, min_blocks=2, stages=2), TileShape(128, 128, 16, 8, 8, 1, stages=3)):
        for k in (1, shape.bk // 2, shape.bk):
            for argmax in (False, True):
                assert stream_work(tiles, k, 132, shape, 4, argmax, tiles, 10_000) is None
