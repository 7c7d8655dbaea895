"""The CUDA engine against the CPU engine: bit for bit, on every kernel the catalogue has.

The CPU engine is itself checked against a naive reference (test_semantics),
so agreement here means the kernels compute the documented function.  Inputs
are fresh random data seasoned with the values that break kernels: ±inf, NaN,
signed zeros, integer extremes, and numbers large enough to saturate.
"""

from __future__ import annotations

import itertools
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tropical_gemm as tg
from reference import assert_same_bits
from tropical_gemm.engines.cuda import gpu as cuda_gpu
from tropical_gemm.engines.cuda import plan as cuda_plan

pytestmark = pytest.mark.gpu

SEMIRINGS = tuple(s for s in tg.semirings() if not tg.get_semiring(s).boolean)  # and_or: test_boolean.py
DTYPES = ("float32", "float64", "int32", "int64")


@pytest.fixture(scope="module")
def cp():
    import cupy

    return cupy


@pytest.fixture(params=["chosen", "square"])
def family(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Each shape through the tile family the engine picks, and through the tuned square kernels.

    Shapes this small pick the small family on a real GPU; reporting one SM,
    and taking the square tiles however much of them lies outside C, sends
    every shape that is not skinny to the square family instead.
    """
    if request.param == "square":
        monkeypatch.setattr(cuda_gpu, "sm_count", lambda device_id: 1)
        monkeypatch.setattr(cuda_plan, "_USEFUL", {})
    return request.param


def seasoned(rng: np.random.Generator, shape: tuple[int, ...], dtype: str, *, wild: bool = True) -> np.ndarray:
    """Random values in the dtype's working range, a fraction replaced by edge values."""
    dt = np.dtype(dtype)
    if dt.kind == "f":
        x = rng.normal(0, 4, size=shape).astype(dt)
        specials = np.array([np.inf, -np.inf, np.nan, 0.0, -0.0, 1e30, -1e30], dtype=dt)
    else:
        info = np.iinfo(dt)
        x = rng.integers(-1000, 1000, size=shape, dtype=dt)
        specials = np.array([info.min, info.max, info.min + 1, info.max - 1, 0, info.max // 2, info.min // 2], dtype=dt)
    if wild and x.size:
        mask = rng.random(shape) < 0.08
        x[mask] = rng.choice(specials, size=int(mask.sum()))
    return x




def both_engines(cp, a: np.ndarray, b: np.ndarray, semiring: str, argmax: bool):
    cpu = tg.matmul(a, b, semiring, argmax=argmax)
    gpu = tg.matmul(cp.asarray(a), cp.asarray(b), semiring, argmax=argmax)
    return cpu, gpu


@pytest.mark.parametrize("semiring,dtype", list(itertools.product(SEMIRINGS, DTYPES)))
@pytest.mark.parametrize("argmax", [False, True])
@pytest.mark.parametrize("shape", [(1, 1, 1), (67, 45, 133), (130, 9, 257), (3, 300, 5), (200, 17, 2),
                                   (1, 133, 67), (45, 257, 1), (300, 8, 5), (5, 3, 400),
                                   # a K of one square slice: the argmax exact in one launch
                                   (67, 8, 133), (33, 1, 40)])
def test_forward_matches_cpu_bitwise(cp, family, semiring, dtype, argmax, shape):
    rng = np.random.default_rng(hash((semiring, dtype, argmax, shape)) % 2**32)
    m, k, n = shape
    a, b = seasoned(rng, (m, k), dtype), seasoned(rng, (k, n), dtype)
    cpu, gpu = both_engines(cp, a, b, semiring, argmax)
    if argmax:
        assert_same_bits(gpu[0], cpu[0])
        assert_same_bits(gpu[1], cpu[1])
    else:
        assert_same_bits(gpu, cpu)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("semiring", ["max_plus", "min_plus", "max_mul"])
def test_tame_and_wild_tiles_mix(cp, family, semiring, dtype):
    """Integer kernels switch per tile between fast and exact paths; both must agree."""
    rng = np.random.default_rng(7)
    a = seasoned(rng, (150, 70), dtype, wild=False)
    b = seasoned(rng, (70, 140), dtype, wild=False)
    a[3, 40] = np.iinfo(a.dtype).max if a.dtype.kind == "i" else np.inf  # one wild k-tile only
    for argmax in (False, True):
        cpu, gpu = both_engines(cp, a, b, semiring, argmax)
        for g, c in zip(gpu if argmax else (gpu,), cpu if argmax else (cpu,)):
            assert_same_bits(g, c)


@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt", "strided", "negative"])
@pytest.mark.parametrize("dtype", ["float32", "int64"])
def test_layouts_without_copies(cp, family, layout, dtype):
    rng = np.random.default_rng(11)
    m, k, n = 70, 33, 90
    a = seasoned(rng, (m, k), dtype)
    b = seasoned(rng, (k, n), dtype)
    a_dev, b_dev = cp.asarray(a), cp.asarray(b)
    if layout[0] == "t":
        a_dev = cp.asfortranarray(a_dev)
    if layout[1:] == "t":
        b_dev = cp.asfortranarray(b_dev)
    if layout == "strided":
        a_dev = cp.asarray(np.repeat(a, 3, axis=1))[:, ::3]
        b_dev = cp.asarray(np.repeat(b, 2, axis=0))[::2]
    if layout == "negative":
        a_dev = cp.asarray(a[::-1].copy())[::-1]
        b_dev = cp.asarray(b[:, ::-1].copy())[:, ::-1]
    cpu = tg.matmul(a, b, "max_plus", argmax=True)
    gpu = tg.matmul(a_dev, b_dev, "max_plus", argmax=True)
    assert_same_bits(gpu[0], cpu[0])
    assert_same_bits(gpu[1], cpu[1])


@pytest.mark.parametrize(
    "a_shape,b_shape",
    [((4, 20, 30), (30, 25)), ((2, 1, 20, 30), (3, 30, 25)), ((2, 3, 1, 2, 5, 7), (3, 2, 2, 7, 4)), ((1, 9, 5), (6, 5, 9))],
)
def test_batch_broadcasting(cp, family, a_shape, b_shape):
    rng = np.random.default_rng(3)
    a = seasoned(rng, a_shape, "float32")
    b = seasoned(rng, b_shape, "float32")
    cpu, gpu = both_engines(cp, a, b, "min_plus", True)
    assert_same_bits(gpu[0], cpu[0])
    assert_same_bits(gpu[1], cpu[1])


def test_batch_count_above_grid_y_limit(cp):
    rng = np.random.default_rng(5)
    a = seasoned(rng, (70000, 3, 4), "int32")
    b = seasoned(rng, (70000, 4, 2), "int32")
    cpu, gpu = both_engines(cp, a, b, "max_plus", False)
    assert_same_bits(gpu, cpu)


@pytest.mark.parametrize("shape", [(2**16, 4, 4), (4, 4, 2**16), (8, 2000, 300), (300, 2000, 8), (16, 5, 17)])
def test_skinny_shapes(cp, shape):
    rng = np.random.default_rng(13)
    m, k, n = shape
    a, b = seasoned(rng, (m, k), "float32"), seasoned(rng, (k, n), "float32")
    cpu, gpu = both_engines(cp, a, b, "max_plus", True)
    assert_same_bits(gpu[0], cpu[0])
    assert_same_bits(gpu[1], cpu[1])


@pytest.mark.parametrize("dtype", ["float32", "int32", "float64"])
@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("shape", [(1, 5000, 300), (300, 5000, 1), (1, 33, 1000), (7, 1, 1)])
def test_vector_shapes(cp, shape, order, dtype):
    """One row or one column (the vector tile), K slices included, with B in either layout."""
    rng = np.random.default_rng(14)
    m, k, n = shape
    a, b = seasoned(rng, (m, k), dtype), seasoned(rng, (k, n), dtype)
    repeated = rng.integers(0, k, size=k // 3 + 1)
    a[:, repeated], b[repeated] = a[:, :1], b[0]  # equal candidates: ties, which the smallest k must win
    b = np.asarray(b, order=order)
    cpu, gpu = both_engines(cp, a, b, "max_plus", True)
    assert_same_bits(gpu[0], cpu[0])
    assert_same_bits(gpu[1], cpu[1])


@pytest.mark.parametrize("dtype", ["float32", "int32", "float64", "int64"])
@pytest.mark.parametrize("shape", [(5000, 4, 4), (4, 4, 5000), (3000, 8, 8), (600, 1, 3), (2, 7, 1)])
def test_thin_shapes_batched_and_transposed(cp, shape, dtype):
    """A short K and a short side (the thin tile), batched with a broadcast B, transposed operands, ties."""
    rng = np.random.default_rng(15)
    m, k, n = shape
    a, b = seasoned(rng, (3, m, k), dtype), seasoned(rng, (k, n), dtype)
    a[..., -1] = a[..., 0]  # equal candidates (b's rows too): ties, which the smallest k must win
    b[-1] = b[0]
    for semiring in SEMIRINGS:
        for x, y in ((a, b), (np.asarray(a, order="F"), np.asarray(b, order="F"))):
            cpu, gpu = both_engines(cp, x, y, semiring, True)
            assert_same_bits(gpu[0], cpu[0])
            assert_same_bits(gpu[1], cpu[1])
            assert_same_bits(tg.matmul(cp.asarray(x), cp.asarray(y), semiring), cpu[0])


def test_k_zero_and_empty(cp):
    a = cp.zeros((3, 0), "f4")
    b = cp.zeros((0, 4), "f4")
    c, idx = tg.matmul(a, b, "min_plus", argmax=True)
    assert (c.get() == np.inf).all() and (idx.get() == -1).all()
    assert tg.matmul(cp.zeros((0, 5), "i4"), cp.zeros((5, 2), "i4")).shape == (0, 2)


@pytest.mark.parametrize("semiring,dtype", list(itertools.product(SEMIRINGS, ["float32", "float64"])))
@pytest.mark.parametrize("batched", [False, True])
def test_backward_deterministic_matches_cpu_bitwise(cp, semiring, dtype, batched):
    rng = np.random.default_rng(17)
    a_shape, b_shape = ((3, 1, 40, 23), (2, 23, 37)) if batched else ((40, 23), (23, 37))
    a, b = seasoned(rng, a_shape, dtype), seasoned(rng, b_shape, dtype)
    c, idx = tg.matmul(a, b, semiring, argmax=True)
    g = rng.normal(size=c.shape).astype(dtype)
    cpu = tg.matmul_backward(g, a, b, idx, semiring)
    gpu = tg.matmul_backward(cp.asarray(g), cp.asarray(a), cp.asarray(b), cp.asarray(idx), semiring, deterministic=True)
    assert_same_bits(gpu[0], cpu[0])
    assert_same_bits(gpu[1], cpu[1])


@pytest.mark.parametrize("semiring", SEMIRINGS)
def test_backward_atomic_exact_on_integer_valued_grads(cp, semiring):
    """Atomics add in any order; with small integer values every order gives the same bits."""
    rng = np.random.default_rng(19)
    a = rng.integers(-50, 50, size=(2, 64, 48)).astype("f4")
    b = rng.integers(1, 50, size=(48, 80)).astype("f4")
    c, idx = tg.matmul(a, b, semiring, argmax=True)
    g = rng.integers(-8, 8, size=c.shape).astype("f4")
    cpu = tg.matmul_backward(g, a, b, idx, semiring)
    gpu = tg.matmul_backward(cp.asarray(g), cp.asarray(a), cp.asarray(b), cp.asarray(idx), semiring)
    assert_same_bits(gpu[0], cpu[0])
    assert_same_bits(gpu[1], cpu[1])


def test_backward_atomic_close_on_random_grads(cp):
    rng = np.random.default_rng(23)
    a, b = rng.normal(size=(300, 50)), rng.normal(size=(50, 310))
    c, idx = tg.matmul(a, b, "max_plus", argmax=True)
    g = rng.normal(size=c.shape)
    cpu = tg.matmul_backward(g, a, b, idx)
    gpu = tg.matmul_backward(cp.asarray(g), cp.asarray(a), cp.asarray(b), cp.asarray(idx))
    np.testing.assert_allclose(gpu[0].get(), cpu[0], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gpu[1].get(), cpu[1], rtol=1e-12, atol=1e-12)


def test_out_argument_and_stream(cp):
    rng = np.random.default_rng(29)
    a, b = seasoned(rng, (50, 20), "float32"), seasoned(rng, (20, 60), "float32")
    out = cp.empty((50, 60), "f4")
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        result = tg.matmul(cp.asarray(a), cp.asarray(b), "max_min", out=out)
    stream.synchronize()
    assert result is out
    assert_same_bits(out, tg.matmul(a, b, "max_min"))


def test_torch_like_cuda_array_interface_inputs(cp):
    class Wrapped:
        def __init__(self, x):
            self.__cuda_array_interface__ = x.__cuda_array_interface__

    rng = np.random.default_rng(31)
    a, b = seasoned(rng, (20, 8), "float64"), seasoned(rng, (8, 9), "float64")
    a_dev, b_dev = cp.asarray(a), cp.asarray(b)  # the wrappers only borrow this memory
    got = tg.matmul(Wrapped(a_dev), Wrapped(b_dev))
    assert isinstance(got, cp.ndarray)
    assert_same_bits(got, tg.matmul(a, b))


def test_64bit_indexing_output_over_2_31_elements(cp):
    """C with more than 2**31 elements: offsets must not wrap at 32 bits."""
    free, _ = cp.cuda.Device().mem_info
    if free < 12 * 2**30:
        pytest.fail(f"this test needs 12 GiB of free GPU memory, {free / 2**30:.1f} GiB free")
    m, n = 2**16 + 3, 2**15 + 1
    rng = np.random.default_rng(37)
    a = cp.asarray(rng.integers(-100, 100, size=(m, 2)).astype("i4"))
    b = cp.asarray(rng.integers(-100, 100, size=(2, n)).astype("i4"))
    c = tg.matmul(a, b, "max_plus")
    rows = np.array([0, 1, m // 2, m - 2, m - 1])
    expected = tg.matmul(a[rows].get(), b.get(), "max_plus")
    assert_same_bits(c[rows], expected)
    del c


def _sanitizer() -> str | None:
    import shutil

    found = shutil.which("compute-sanitizer")
    for candidate in ("/usr/local/cuda/bin/compute-sanitizer", "/usr/local/cuda/compute-sanitizer/compute-sanitizer"):
        if found is None and Path(candidate).exists():
            found = candidate
    return found


def test_kernels_pass_memcheck():
    """Every kernel family, on edge shapes, under compute-sanitizer's memcheck."""
    tool = _sanitizer()
    if tool is None:
        pytest.skip("compute-sanitizer is not installed")
    script = Path(__file__).with_name("memcheck_kernels.py")
    done = subprocess.run([tool, "--tool", "memcheck", "--error-exitcode", "3", sys.executable, str(script)],
                          capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "ERROR SUMMARY: 0 errors" in done.stdout + done.stderr


@pytest.mark.parametrize("dtype", ["float32", "int32", "float64"])
@pytest.mark.parametrize("a_shape,b_shape", [((64, 5000), (5000, 64)), ((3, 40, 3000), (3000, 20)),
                                             ((8, 4096), (4096, 300)), ((4096, 1000), (1000, 2))])
def test_split_k_keeps_values_and_earliest_argmax(cp, dtype, a_shape, b_shape):
    """Few output tiles and a long K run as K slices side by side; ties must still go to the smallest k."""
    rng = np.random.default_rng(41)
    a = rng.integers(-3, 3, size=a_shape).astype(dtype)  # small range: many ties across slices
    b = rng.integers(-3, 3, size=b_shape).astype(dtype)
    for semiring in ("max_plus", "min_max"):
        cpu, gpu = both_engines(cp, a, b, semiring, True)
        assert_same_bits(gpu[0], cpu[0])
        assert_same_bits(gpu[1], cpu[1])


@pytest.mark.parametrize("dtype", ["float32", "int32", "float64", "int64"])
@pytest.mark.parametrize("a_shape,b_shape,b_layout", [((637, 557), (557, 157), "row"), ((637, 557), (557, 157), "col"),
                                                      ((2, 320, 560), (560, 157), "row")])
def test_split_k_resolves_the_argmax_once_in_the_combine(cp, dtype, a_shape, b_shape, b_layout):
    """Resolved tiles (square, small) cut into K slices leave the argmax to the combine, which resolves it from
    the slice's first k for the whole product, reading a transposed copy of a row-major B.

    637×557×157 runs as two slices and a rest of one k; the batch shares B.
    Ties across slices and within a slice must still go to the smallest k.
    """
    from tropical_gemm.engines.cuda import prepare_product
    from tropical_gemm.engines.cuda.prepared import PreparedSplitK

    rng = np.random.default_rng(43)
    a = rng.integers(-3, 3, size=a_shape).astype(dtype)
    b = rng.integers(-3, 3, size=b_shape).astype(dtype)
    device_b = cp.asarray(b) if b_layout == "row" else cp.asfortranarray(cp.asarray(b))
    strides = tuple(s // b.itemsize for s in device_b.strides)
    prepared = prepare_product(a.shape, tuple(s // a.itemsize for s in a.strides), b.shape, strides, dtype,
                               "max_plus", True, 0)
    assert isinstance(prepared, PreparedSplitK) and prepared.slices.plan.resolve is None
    assert prepared.plan.combine.spec.op == "combine_resolve"
    assert prepared.plan.combine.int32_scalars == (8,)  # the small tile's slice depth
    assert (prepared.plan.b_copy is not None) == (b_layout == "row")
    for semiring in ("max_plus", "min_plus", "max_min"):
        want = tg.matmul(a, b, semiring, argmax=True)
        got = tg.matmul(cp.asarray(a), device_b, semiring, argmax=True)
        assert_same_bits(got[0], want[0])
        assert_same_bits(got[1], want[1])


@pytest.mark.parametrize("dtype", ["float32", "int32", "float64", "int64"])
@pytest.mark.parametrize("b_layout", ["row", "col"])
def test_an_argmax_resolve_reads_a_transposed_copy_of_a_row_major_b(cp, dtype, b_layout):
    """One launch of the small tile (no K slices) whose resolve reads B^T from scratch memory; ties to the
    smallest k, and the plan without a copy where B is already k-contiguous."""
    from tropical_gemm.engines.cuda import plan_forward

    rng = np.random.default_rng(47)
    a = rng.integers(-3, 3, size=(509, 301)).astype(dtype)
    b = rng.integers(-3, 3, size=(301, 509)).astype(dtype)
    device_b = cp.asarray(b) if b_layout == "row" else cp.asfortranarray(cp.asarray(b))
    plan = plan_forward(a.shape, (301, 1), b.shape, tuple(s // b.itemsize for s in device_b.strides), (), dtype,
                        "max_plus", True, cp.cuda.Device().attributes["MultiProcessorCount"], True)
    assert plan.splits == 1 and plan.resolve is not None
    assert (plan.scratch_bytes > 0) == (b_layout == "row")
    for semiring in ("max_plus", "min_plus", "max_min"):
        want = tg.matmul(a, b, semiring, argmax=True)
        got = tg.matmul(cp.asarray(a), device_b, semiring, argmax=True)
        assert_same_bits(got[0], want[0])
        assert_same_bits(got[1], want[1])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("b_order", ["C", "F"])
def test_a_batched_short_k_argmax_compares_every_k_or_resolves_from_shared_memory(cp, family, dtype, b_order):
    """Batches of products whose K (45) the float kernels compare every candidate of (no resolve) and the
    staged resolve takes for the integers: each batch's B row-major or column-major, seasoned values in one
    batch and small integers (many ties) in the others; values and winners as the CPU engine's, bit for bit."""
    from tropical_gemm.engines.cuda import plan_forward
    from tropical_gemm.jit.source import each_k_depth, tile_shape

    rng = np.random.default_rng(hash((dtype, b_order)) % 2**32)
    a = np.stack([seasoned(rng, (70, 45), dtype)] + [rng.integers(-3, 3, (70, 45)).astype(dtype) for _ in range(3)])
    b = np.stack([seasoned(rng, (45, 90), dtype)] + [rng.integers(-3, 3, (45, 90)).astype(dtype) for _ in range(3)])
    device_b = cp.asarray(b) if b_order == "C" else cp.asarray(np.ascontiguousarray(b.transpose(0, 2, 1)))
    if b_order == "F":
        device_b = device_b.transpose(0, 2, 1)  # each batch column-major
    plan = plan_forward(a.shape, (70 * 45, 45, 1), b.shape, tuple(s // b.itemsize for s in device_b.strides), (4,),
                        dtype, "max_plus", True, cuda_gpu.sm_count(0), True)
    assert plan.splits == 1 and plan.b_copy is None
    if dtype.startswith("float"):
        assert plan.resolve is None and each_k_depth(plan.spec) >= 45 > tile_shape(plan.spec).bk
    else:
        assert plan.resolve.spec.op == "argmax_resolve_staged"
    for semiring in ("max_plus", "min_plus", "max_min"):
        want = tg.matmul(a, b, semiring, argmax=True)
        got = tg.matmul(cp.asarray(a), device_b, semiring, argmax=True)
        assert_same_bits(got[0], want[0])
        assert_same_bits(got[1], want[1])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("k", [17, 100, 256, 257])
@pytest.mark.parametrize("a_order,b_order", [("C", "C"), ("C", "F"), ("F", "C"), ("F", "F")])
def test_a_float_argmax_compares_every_k_up_to_each_k_depth_over_several_slices(cp, family, dtype, k, a_order,
                                                                                b_order):
    """K of several slices up to ``each_k_depth`` (the winners compared in the product's kernel, no resolve)
    and one past it (slices recorded and resolved), in every layout, tiles ragged at both edges: seasoned
    values (±inf, NaN, ±0, huge) and small integers (ties, the smallest k wins); bit for bit as the CPU
    engine."""
    from tropical_gemm.engines.cuda import plan_forward
    from tropical_gemm.jit.source import each_k_depth

    rng = np.random.default_rng(k * 7 + len(a_order + b_order))
    a = np.where(rng.random((130, k)) < 0.5, seasoned(rng, (130, k), dtype), rng.integers(-3, 3, (130, k)))
    b = np.where(rng.random((k, 150)) < 0.5, seasoned(rng, (k, 150), dtype), rng.integers(-3, 3, (k, 150)))
    a, b = a.astype(dtype), b.astype(dtype)
    device_a, device_b = (cp.asarray(x, order=order) for x, order in ((a, a_order), (b, b_order)))
    plan = plan_forward(a.shape, tuple(s // a.itemsize for s in device_a.strides), b.shape,
                        tuple(s // b.itemsize for s in device_b.strides), (), dtype, "max_plus", True,
                        cuda_gpu.sm_count(0), True)
    assert plan.spec.tile in ("square", "small")
    assert (plan.resolve is None) == (k <= each_k_depth(plan.spec)), (k, each_k_depth(plan.spec))
    for semiring in ("max_plus", "min_plus", "max_min"):
        want = tg.matmul(a, b, semiring, argmax=True)
        got = tg.matmul(device_a, device_b, semiring, argmax=True)
        assert_same_bits(got[0], want[0])
        assert_same_bits(got[1], want[1])


@pytest.mark.torch
def test_a_torch_argmax_product_gives_the_resolve_its_scratch(cp):
    """The prepared path allocates the resolve's copy of B from torch's allocator."""
    torch = pytest.importorskip("torch")
    from tropical_gemm.torch import tropical_matmul_with_argmax

    rng = np.random.default_rng(48)
    a, b = rng.integers(-3, 3, size=(509, 301)).astype("float32"), rng.integers(-3, 3, size=(301, 509)).astype("float32")
    values, argmax = tropical_matmul_with_argmax(torch.tensor(a, device="cuda"), torch.tensor(b, device="cuda"),
                                                 "max_plus")
    want = tg.matmul(a, b, "max_plus", argmax=True)
    assert_same_bits(values.cpu().numpy(), want[0])
    np.testing.assert_array_equal(argmax.cpu().numpy(), want[1])


@pytest.mark.parametrize("dtype", ["float32", "int32", "float64", "int64"])
@pytest.mark.parametrize("shape", [(1, 1), (33, 70), (64, 32), (557, 157)])
@pytest.mark.parametrize("order", ["C", "F"])
def test_transpose_copies_a_matrix_of_either_layout_exactly(cp, dtype, shape, order):
    """The combine's B^T: tiles ragged at both edges, rows or columns contiguous, extreme values kept."""
    from tropical_gemm.jit import make_spec, tiers

    rng = np.random.default_rng(sum(shape))
    info = np.iinfo(dtype) if dtype.startswith("int") else np.finfo(dtype)
    host = rng.integers(-1000, 1000, shape).astype(dtype)
    host.flat[0], host.flat[-1] = info.min, info.max
    x = cp.asarray(host, order=order)
    y = cp.full(shape[::-1], 7, dtype)
    rows, cols = shape
    tiles = -(-rows // 32) * -(-cols // 32)
    kernel = tiers().get_function(make_spec("transpose", "max_plus", dtype), 0)
    kernel((tiles,), (256,), (x, y, rows, cols, x.strides[0] // x.itemsize, x.strides[1] // x.itemsize))
    np.testing.assert_array_equal(y.get(), host.T)


@pytest.mark.parametrize("rank, dtype", [(3, "float32"), (14, "float64"), (20, "int64"), (25, "int32")])
def test_gather_copies_views_of_many_axes_in_one_launch_or_by_leading_index(cp, rank, dtype):
    """An einsum intermediate has an axis per label: permuted, it folds into up to ``rank`` dims.

    Up to ``GATHER_DIMS`` the registry's gather copies it in one launch, beyond
    that a leading index at a time; either way the copy is exact.
    """
    from tropical_gemm.engines import cuda_aux

    rng = np.random.default_rng(rank)
    shape = tuple(int(s) for s in rng.integers(1, 4, rank)) if rank < 14 else (2,) * rank
    host = rng.integers(-10**6, 10**6, shape).astype(dtype)
    perm = tuple(int(p) for p in rng.permutation(rank))
    device_view = cp.asarray(host).transpose(perm)[..., ::-1]  # a reversed last axis: a negative stride too
    want = np.ascontiguousarray(host.transpose(perm)[..., ::-1])
    got = cuda_aux.contiguous(device_view)
    assert got.flags.c_contiguous and got.dtype == want.dtype
    np.testing.assert_array_equal(got.get(), want)
    if dtype in ("int32", "int64"):  # an argmax of either width, copied to int32
        np.testing.assert_array_equal(cuda_aux.contiguous(device_view, index=True).get(), want.astype(np.int32))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_a_gpu_with_less_shared_memory_runs_the_small_family(cp, monkeypatch, dtype):
    """Where a block may opt into 64 KiB (sm_75), square products take the small family: the same bits, plain
    and with the argmax, through the array path and the prepared one."""
    from tropical_gemm.engines.cuda import plan_forward, prepared

    monkeypatch.setattr(cuda_gpu, "shared_limit", lambda device_id: 64 * 1024)
    prepared.prepare_product.cache_clear()
    try:
        rng = np.random.default_rng(53)
        a, b = seasoned(rng, (700, 300), dtype), seasoned(rng, (300, 900), dtype)
        plan = plan_forward(a.shape, (300, 1), b.shape, (900, 1), (), dtype, "max_plus", False, 132, True, 64 * 1024)
        assert plan.spec.tile == "small"
        for argmax in (False, True):
            cpu, gpu = both_engines(cp, a, b, "max_plus", argmax)
            for got, want in zip(gpu if argmax else (gpu,), cpu if argmax else (cpu,)):
                assert_same_bits(got, want)
    finally:
        prepared.prepare_product.cache_clear()
