"""Stream-K products on the GPU (the stream family) against the CPU engine, bit for bit.

Reporting 32 SMs, and taking stream-K wherever the planner allows it at
all (one wave of tiles or less, enough slices a block), makes products of a
few hundred rows run as the stream family, so that their slices are shared
out and cut tiles merged in every dtype, semiring, layout and batch form at
sizes the CPU engine checks quickly; the planner's own choice is tested on
the host (test_streamed_host_kernel), and one product runs as planned for
the GPU itself.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import tropical_gemm as tg
from reference import assert_same_bits
from test_cuda_engine import DTYPES, SEMIRINGS, seasoned
from tropical_gemm.engines.cuda import gpu as cuda_gpu
from tropical_gemm.engines.cuda import prepare_product
from tropical_gemm.engines.cuda import plan as planning
from tropical_gemm.engines.cuda.plan import plan_forward

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cp():
    import cupy

    return cupy


SMS = 32


@pytest.fixture
def stream_everywhere(monkeypatch: pytest.MonkeyPatch):
    """Plans for a GPU of ``SMS`` SMs, stream-K wherever it may run; plans and prepared products afresh."""
    monkeypatch.setattr(cuda_gpu, "sm_count", lambda device_id: SMS)
    monkeypatch.setattr(planning, "_SQUARE_FILLED", 1.01)
    planning.plan_forward.cache_clear()
    prepare_product.cache_clear()
    yield
    planning.plan_forward.cache_clear()
    prepare_product.cache_clear()


def streamed(a, b, semiring: str, argmax: bool, sms: int) -> bool:
    """Whether the engine plans ``a ⊗ b`` (cupy arrays) as the stream family."""
    strides = [tuple(s // x.itemsize for s in x.strides) for x in (a, b)]
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    plan = plan_forward(a.shape, strides[0], b.shape, strides[1], batch, a.dtype.name, semiring, argmax, sms, True)
    return plan.spec.tile == "stream"


@pytest.mark.parametrize("semiring,dtype", list(itertools.product(SEMIRINGS, DTYPES)))
@pytest.mark.parametrize("argmax", [False, True])
def test_stream_k_matches_cpu_bitwise(cp, stream_everywhere, semiring, dtype, argmax):
    """Ragged tiles and a ragged last slice, with ±inf, NaN, signed zeros and the integer extremes."""
    rng = np.random.default_rng(hash((semiring, dtype, argmax)) % 2**32)
    a, b = seasoned(rng, (300, 2003), dtype), seasoned(rng, (2003, 260), dtype)
    da, db = cp.asarray(a), cp.asarray(b)
    assert streamed(da, db, semiring, argmax, SMS)
    want, got = tg.matmul(a, b, semiring, argmax=argmax), tg.matmul(da, db, semiring, argmax=argmax)
    for w, g in zip(want, got) if argmax else [(want, got)]:
        assert_same_bits(g, w)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layouts", ["rc", "cr", "cc"])
def test_stream_k_reads_every_layout_without_copies(cp, stream_everywhere, dtype, layouts):
    """Transposed and column-major operands, and a B read backwards (a negative stride, copied first)."""
    rng = np.random.default_rng(7)
    a, b = seasoned(rng, (400, 1803), dtype), seasoned(rng, (1803, 300), dtype)  # plain and argmax: stream-K
    da = cp.asfortranarray(cp.asarray(a)) if layouts[0] == "c" else cp.asarray(a)
    db = cp.asfortranarray(cp.asarray(b)) if layouts[1] == "c" else cp.asarray(b)
    assert streamed(da, db, "max_plus", True, SMS) and streamed(da, db, "max_plus", False, SMS)
    for semiring in ("max_plus", "min_max"):
        want, got = tg.matmul(a, b, semiring, argmax=True), tg.matmul(da, db, semiring, argmax=True)
        assert_same_bits(got[0], want[0])
        assert_same_bits(got[1], want[1])
        assert_same_bits(tg.matmul(da, db, semiring), tg.matmul(a, b, semiring))
    assert_same_bits(tg.matmul(da, db[:, ::-1], "min_plus"), tg.matmul(a, b[:, ::-1], "min_plus"))


@pytest.mark.parametrize("dtype", ["float32", "int32", "float64"])
def test_stream_k_ties_go_to_the_smallest_k_across_the_blocks_sharing_a_tile(cp, stream_everywhere, dtype):
    rng = np.random.default_rng(43)
    a = rng.integers(-3, 3, size=(300, 3001)).astype(dtype)
    b = rng.integers(-3, 3, size=(3001, 130)).astype(dtype)
    assert streamed(cp.asarray(a), cp.asarray(b), "max_plus", True, SMS)
    for semiring in ("max_plus", "min_plus", "max_min"):
        want, got = tg.matmul(a, b, semiring, argmax=True), tg.matmul(cp.asarray(a), cp.asarray(b), semiring,
                                                                      argmax=True)
        assert_same_bits(got[0], want[0])
        assert_same_bits(got[1], want[1])


def test_stream_k_broadcasts_batches(cp, stream_everywhere):
    rng = np.random.default_rng(9)
    a, b = seasoned(rng, (3, 1, 130, 1100), "float32"), seasoned(rng, (2, 1100, 100), "float32")
    da, db = cp.asarray(a), cp.asarray(b)
    assert streamed(da, db, "max_plus", True, SMS)
    want, got = tg.matmul(a, b, "max_plus", argmax=True), tg.matmul(da, db, "max_plus", argmax=True)
    assert_same_bits(got[0], want[0])
    assert_same_bits(got[1], want[1])


@pytest.mark.parametrize("argmax", [False, True])
def test_stream_k_at_the_gpus_own_size(cp, argmax):
    """1000×3000×777 (the issue's odd shape) with the GPU's own SM count: one share per resident block."""
    rng = np.random.default_rng(5)
    a, b = seasoned(rng, (1000, 3000), "float32"), seasoned(rng, (3000, 777), "float32")
    da, db = cp.asarray(a), cp.asarray(b)
    assert streamed(da, db, "max_plus", argmax, cuda_gpu.sm_count(0))
    want, got = tg.matmul(a, b, "max_plus", argmax=argmax), tg.matmul(da, db, "max_plus", argmax=argmax)
    for w, g in zip(want, got) if argmax else [(want, got)]:
        assert_same_bits(g, w)


@pytest.mark.torch
def test_stream_k_through_torch_prepared_products(stream_everywhere):
    """The torch bridge's prepared launch gives the stream kernel its workspace, zeroes its counters, and puts
    the argmax resolve's copy of B after it (B smaller than the output: 1500x1100x60)."""
    torch = pytest.importorskip("torch")
    from tropical_gemm.torch import tropical_matmul_with_argmax

    rng = np.random.default_rng(12)
    a, b = seasoned(rng, (1500, 1100), "float32"), seasoned(rng, (1100, 60), "float32")
    plan = plan_forward(a.shape, (1100, 1), b.shape, (60, 1), (), "float32", "max_plus", True, SMS, True)
    assert plan.spec.tile == "stream" and plan.b_copy is not None and plan.b_copy_offset >= plan.work.nbytes
    want = tg.matmul(a, b, "max_plus", argmax=True)
    for _ in range(2):  # the second call reuses the prepared launch and a recycled workspace
        values, idx = tropical_matmul_with_argmax(torch.from_numpy(a).cuda(), torch.from_numpy(b).cuda(), "max_plus")
        assert_same_bits(values.cpu().numpy(), want[0])
        np.testing.assert_array_equal(idx.cpu().numpy(), want[1])
