"""The square family's pipelined kernel (``cuda_src/pipelined.cuh``), built for the host, against the CPU engine.

``forward_pipelined.cu`` serves the plain square-tile products of every
(semiring, dtype), with the integer ⊗ that saturates checked slice by slice.  Built with the shim of
``host_cuda`` (its cp.async copies become synchronous copies, with the same
zero fill of a partial 16-byte run), it runs on numpy memory with the
arguments the CUDA engine's own plan gives (``plan_forward``), so its tiles,
slices, both copy paths (16-byte runs where an operand is aligned, one
element a copy where it is not), the tile swizzle and the batch strides are
checked bit for bit on any machine, for the tuned shapes and for the other
shapes and pipeline depths that the tuning tries; the GPU tests run the same
kernels on a device.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import host_cuda
import tropical_gemm as tg
from tropical_gemm.engines.cuda.plan import plan_forward
from tropical_gemm.jit import source
from tropical_gemm.jit.source import TileShape, fragment, tile_shape

_HEADERS = ("preamble.cuh", "semirings.cuh", "tiles.cuh", "staged.cuh", "pipelined.cuh")
#: The host build's entry point of a forward kernel (its 18 scalars); the square kernel's tests share it.
FORWARD_LAUNCH = r"""
extern "C" void launch_forward(long long grid, long long block, const void* A, const void* B, void* C, int* IDX,
                               const long long* s) {
  launch(grid, block, [=] { forward((const T_*)A, (const T_*)B, (T_*)C, IDX, s[0], s[1], s[2], s[3], s[4],
                                    s[5], s[6], s[7], s[8], s[9], s[10], s[11], s[12], s[13], s[14], s[15], s[16],
                                    s[17]); });
}
"""


@pytest.fixture(autouse=True)
def fresh_plans():
    """Plans are cached by shape: the tests that swap a tile shape must not meet another test's plans."""
    plan_forward.cache_clear()
    yield
    plan_forward.cache_clear()


@pytest.fixture(scope="module")
def host_kernels(tmp_path_factory):
    """Each spec's host build, built on first use."""
    return host_cuda.forward_builder(tmp_path_factory.mktemp("pipelined"), _HEADERS, FORWARD_LAUNCH)


def host_product(host_kernels, a: np.ndarray, b: np.ndarray, semiring: str, argmax: bool = False):
    """``a ⊗ b`` by the kernel the CUDA engine would launch (on a GPU of one SM: the square tile); with the
    argmax, also the k it recorded per output (before any resolve) and the plan."""
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    strides = [tuple(s // x.itemsize for s in x.strides) for x in (a, b)]
    plan = plan_forward(a.shape, strides[0], b.shape, strides[1], batch, a.dtype.name, semiring, argmax, 1, False)
    assert plan.product.spec.tile == "square" and "PipelinedKernel" in fragment(plan.product.spec)
    c = np.empty((*batch, a.shape[-2], b.shape[-1]), dtype=a.dtype)
    idx = np.full(c.shape, -7, dtype=np.int32)
    first, second = (b, a) if plan.swap_operands else (a, b)
    scalars = np.array(plan.product.scalars, dtype=np.int64)
    host_kernels(plan.product.spec).launch_forward(
        ctypes.c_longlong(min(plan.product.grid, 3)), ctypes.c_longlong(plan.product.block),
        *(ctypes.c_void_p(x.ctypes.data) for x in (first, second, c)),
        ctypes.c_void_p(idx.ctypes.data if argmax else None), ctypes.c_void_p(scalars.ctypes.data))
    return (c, idx, plan) if argmax else c


def draw(rng: np.random.Generator, shape: tuple[int, ...], dtype: str) -> np.ndarray:
    """Random values with about 2% specials: ±inf and NaN, or the integer extremes."""
    floats = dtype.startswith("float")
    x = (rng.standard_normal(shape) if floats else rng.integers(-50, 50, shape)).astype(dtype)
    specials = [np.inf, -np.inf, np.nan] if floats else [np.iinfo(dtype).min, np.iinfo(dtype).max]
    if x.size:
        x.flat[rng.integers(0, x.size, x.size // 50 + 1)] = rng.choice(specials, x.size // 50 + 1)
    return x


def operand(rng: np.random.Generator, rows: int, cols: int, dtype: str, layout: str, offset: int) -> np.ndarray:
    """A rows × cols view in ``layout``, starting ``offset`` elements into its buffer (1: not 16-byte aligned)."""
    if layout == "row":
        return draw(rng, (rows + offset, cols + offset), dtype)[offset:, offset:]
    return draw(rng, (cols + offset, rows + offset), dtype).T[offset:, offset:]


ALL_LAYOUTS = (("row", "row"), ("row", "col"), ("col", "row"), ("col", "col"))


@pytest.mark.parametrize("dtype,semiring,m,k,n,layouts", [
    ("float32", "max_plus", 130, 50, 131, ALL_LAYOUTS), ("float32", "max_plus", 128, 16, 128, ALL_LAYOUTS),
    ("float32", "max_plus", 1157, 33, 70, ALL_LAYOUTS), ("float32", "max_plus", 129, 0, 140, ALL_LAYOUTS),
    ("float64", "min_plus", 130, 50, 131, ALL_LAYOUTS[::3]), ("float64", "min_plus", 1030, 18, 70, ALL_LAYOUTS[1:3]),
    ("float32", "max_times", 129, 35, 130, ALL_LAYOUTS[2:3]), ("int32", "max_min", 130, 50, 131, ALL_LAYOUTS[1:2]),
    ("int64", "min_max", 129, 21, 66, ALL_LAYOUTS[:1])])
def test_every_layout_and_alignment_matches_the_cpu_engine(host_kernels, dtype, semiring, m, k, n, layouts):
    """f32 max_plus in every layout; the other dtypes and semirings in some (each layout is a host build)."""
    rng = np.random.default_rng(m + 7 * k + 31 * n)
    for a_layout, b_layout in layouts:
        for offset in (0, 1):
            a = operand(rng, m, k, dtype, a_layout, offset)
            b = operand(rng, k, n, dtype, b_layout, offset)
            want = tg.matmul(np.ascontiguousarray(a), np.ascontiguousarray(b), semiring)
            got = host_product(host_kernels, a, b, semiring)
            np.testing.assert_array_equal(got, want, err_msg=f"{a_layout} {b_layout} offset {offset}")


def padded(rng: np.random.Generator, rows: int, cols: int, dtype: str, layout: str) -> np.ndarray:
    """A rows × cols view in ``layout`` whose contiguous axis is padded to 16 bytes: 16-byte runs, the last
    of each line only part inside the operand."""
    v = 16 // np.dtype(dtype).itemsize
    if layout == "row":
        return draw(rng, (rows, -(-cols // v) * v), dtype)[:, :cols]
    return draw(rng, (cols, -(-rows // v) * v), dtype)[:, :rows].T


@pytest.mark.parametrize("dtype,semiring,m,k,n", [("float32", "max_plus", 130, 50, 131),
                                                  ("float32", "min_plus", 257, 67, 125),
                                                  ("float64", "max_plus", 67, 35, 69)])
def test_runs_that_end_past_the_operand_copy_only_what_is_inside(host_kernels, dtype, semiring, m, k, n):
    """Aligned operands whose lines end part way through a 16-byte run: those runs copy their part (and
    zeros), every other run all 16 bytes."""
    rng = np.random.default_rng(m * n + k)
    for a_layout, b_layout in ALL_LAYOUTS:
        a, b = padded(rng, m, k, dtype, a_layout), padded(rng, k, n, dtype, b_layout)
        want = tg.matmul(np.ascontiguousarray(a), np.ascontiguousarray(b), semiring)
        np.testing.assert_array_equal(host_product(host_kernels, a, b, semiring), want,
                                      err_msg=f"{a_layout} {b_layout}")


@pytest.mark.parametrize("semiring", ["max_plus", "min_plus", "max_times"])
def test_the_exact_integer_path_takes_the_slices_that_need_it(host_kernels, monkeypatch, semiring):
    """int32 ⊗ that saturates: values near the ends of the range in a few slices only, among small ones, so
    that tame slices take the fast ⊗ and the others the exact one, in every layout and alignment; the
    ragged last slice and the K short of one slice carry them too.  The plain product (the argmax's slices
    run the same code) with the plain float shapes, as benchmarks/tune_tiles.py tries them."""
    for layouts in ("rr", "rc", "cr", "cc"):
        monkeypatch.setitem(source.PIPELINED_EXACT_SHAPES, ("forward", "int32", layouts),
                            source.PIPELINED_SHAPES[("forward", "float32", layouts)])
    bound = 2**31 - 1 if semiring != "max_times" else 2**16
    for m, k, n, wild_ks in ((132, 76, 136, (20, 75)), (124, 12, 72, (3,))):  # offset 0: 16-byte runs
        rng = np.random.default_rng(k)
        for a_layout, b_layout in ALL_LAYOUTS:
            for offset in (0, 1):
                a = operand(rng, m, k, "int32", a_layout, offset)
                b = operand(rng, k, n, "int32", b_layout, offset)
                a[...] = rng.integers(-60, 60, a.shape)
                b[...] = rng.integers(-60, 60, b.shape)
                for kk in wild_ks:  # the extremes, and values whose ⊗ overflows without meeting them
                    a[rng.integers(0, m, 9), kk] = rng.choice([-bound - 1, bound, bound // 2 + 7, -(bound // 2) - 9], 9)
                    b[kk, rng.integers(0, n, 9)] = rng.choice([-bound - 1, bound, bound // 2 + 5, -(bound // 2) - 3], 9)
                want = tg.matmul(np.ascontiguousarray(a), np.ascontiguousarray(b), semiring)
                got = host_product(host_kernels, a, b, semiring)
                np.testing.assert_array_equal(got, want, err_msg=f"{m}x{k}x{n} {a_layout} {b_layout} offset {offset}")


@pytest.mark.parametrize("shape", [TileShape(128, 128, 16, 8, 8, 2, stages=2), TileShape(128, 256, 16, 8, 16, 1, stages=4),
                                   TileShape(128, 128, 32, 8, 8, 1, stages=3)])
def test_other_tiles_and_pipeline_depths(host_kernels, monkeypatch, shape):
    """Shapes and stage counts benchmarks/tune_tiles.py tries: K of several rounds of the stages, ragged edges."""
    for layouts in ("rr", "rc", "cr", "cc"):
        monkeypatch.setitem(source.PIPELINED_SHAPES, ("forward", "float32", layouts), shape)
    rng = np.random.default_rng(shape.bn + shape.stages)
    m, k, n = shape.bm + 3, 5 * shape.stages * shape.bk + 7, shape.bn + 5
    for a_layout, b_layout in (("row", "row"), ("col", "col")):
        a = operand(rng, m, k, "float32", a_layout, 0)
        b = operand(rng, k, n, "float32", b_layout, 0)
        want = tg.matmul(np.ascontiguousarray(a), np.ascontiguousarray(b), "max_plus")
        np.testing.assert_array_equal(host_product(host_kernels, a, b, "max_plus"), want,
                                      err_msg=f"{shape} {a_layout} {b_layout}")


@pytest.mark.parametrize("dtype,semiring", [("float32", "max_plus"), ("float64", "min_plus"), ("int32", "max_min"),
                                           ("int32", "max_plus")])
@pytest.mark.parametrize("k,each_k", [(1, 0), (16, 0), (77, 0), (40, 48), (77, 48)])
def test_the_argmax_records_the_winners_slice_or_the_winner(host_kernels, monkeypatch, dtype, semiring, k, each_k):
    """Values as the CPU engine's; the recorded k is the first of the slice holding the winner (the smallest
    k attaining the result), which argmax_resolve searches, or, for a K one slice deep or at most the tile's
    ``each_k`` (over several slices), the winner itself and no resolve in the plan.  Small integers: many
    ties, across slices and within them.  The layouts taken run the pipelined argmax here, also where the
    table leaves them to the register-staged kernel; int32 keeps its record in shared memory, as its table
    does."""
    shape = TileShape(128, 128, 16, 8, 8, 1, stages=3) if dtype.endswith("32") else TileShape(64, 64, 16, 4, 4, 2,
                                                                                                 stages=3)
    shape = shape._replace(each_k=each_k, shared_record=dtype == "int32")
    table = source.pipelined_table(semiring, dtype)
    for a_layout, b_layout in ALL_LAYOUTS:  # a K of 1 may plan another layout than the operands were drawn in
        monkeypatch.setitem(table, ("forward_argmax", dtype, a_layout[0] + b_layout[0]), shape)
    rng = np.random.default_rng(k)
    for a_layout, b_layout in ALL_LAYOUTS[::3] if dtype == "float32" else ALL_LAYOUTS[2:3]:
        a = operand(rng, 131, k, dtype, a_layout, 0)
        b = operand(rng, k, 133, dtype, b_layout, 0)
        if dtype != "int32":
            a, b = np.round(a), np.round(b)
        want, want_k = tg.matmul(np.ascontiguousarray(a), np.ascontiguousarray(b), semiring, argmax=True)
        got, got_k, plan = host_product(host_kernels, a, b, semiring, argmax=True)
        depth = tile_shape(plan.product.spec).bk
        np.testing.assert_array_equal(got, want)
        if k <= max(depth, each_k):
            assert plan.resolve is None and source.each_k_depth(plan.product.spec) == max(depth, each_k)
            np.testing.assert_array_equal(got_k, want_k)
        else:
            assert plan.resolve is not None
            np.testing.assert_array_equal(got_k, np.where(want_k < 0, -1, want_k // depth * depth))


def test_batches_broadcast_with_their_own_strides(host_kernels):
    rng = np.random.default_rng(5)
    a, b = draw(rng, (3, 1, 130, 40), "float32"), draw(rng, (4, 40, 140), "float32")
    np.testing.assert_array_equal(host_product(host_kernels, a, b, "max_plus"), tg.matmul(a, b, "max_plus"))
    odd = draw(rng, (2, 131, 41), "float32")[:, :130, :40]  # batch and row strides not multiples of 4
    np.testing.assert_array_equal(host_product(host_kernels, odd, b[:2], "max_plus"), tg.matmul(odd, b[:2], "max_plus"))
