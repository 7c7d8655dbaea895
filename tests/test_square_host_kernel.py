"""The register-staged square kernel's argmax (``cuda_src/square.cuh``), built for the host, against the CPU engine.

The square and small families' argmax either compares every candidate and keeps the winner's k (a K no
deeper than ``source.each_k_depth``: one slice, or the tile's ``each_k`` over several slices) or records, per
output, the first k of the slice where its value last improved, for the resolve.  Built with the shim of
``host_cuda``, the kernel runs on numpy memory with the arguments of the CUDA engine's own plan, so both
records, the slice offsets of the compared ks and the plan's choice of a resolve are checked on any machine.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import host_cuda
import tropical_gemm as tg
from tropical_gemm.engines.cuda.plan import plan_forward
from tropical_gemm.jit import source
from tropical_gemm.jit.source import fragment, tile_shape
from test_pipelined_host_kernel import FORWARD_LAUNCH, fresh_plans, operand  # noqa: F401 (a fixture)

_HEADERS = ("preamble.cuh", "semirings.cuh", "tiles.cuh", "square.cuh")


@pytest.fixture(scope="module")
def host_kernels(tmp_path_factory):
    return host_cuda.forward_builder(tmp_path_factory.mktemp("square"), _HEADERS, FORWARD_LAUNCH)


def square_argmax(host_kernels, a: np.ndarray, b: np.ndarray, semiring: str):
    """``a ⊗ b`` and the k recorded per output (before any resolve) by the register-staged kernel the engine
    plans on a GPU of one SM, and the plan."""
    strides = [tuple(s // x.itemsize for s in x.strides) for x in (a, b)]
    plan = plan_forward(a.shape, strides[0], b.shape, strides[1], (), a.dtype.name, semiring, True, 1, False)
    assert plan.product.spec.tile == "square" and "SquareKernel" in fragment(plan.product.spec)
    c = np.empty((a.shape[0], b.shape[1]), dtype=a.dtype)
    idx = np.full(c.shape, -7, dtype=np.int32)
    first, second = (b, a) if plan.swap_operands else (a, b)
    scalars = np.array(plan.product.scalars, dtype=np.int64)
    host_kernels(plan.product.spec).launch_forward(
        ctypes.c_longlong(min(plan.product.grid, 3)), ctypes.c_longlong(plan.product.block),
        *(ctypes.c_void_p(x.ctypes.data) for x in (first, second, c, idx)), ctypes.c_void_p(scalars.ctypes.data))
    return c, idx, plan


@pytest.mark.parametrize("dtype,semiring", [("float32", "max_plus"), ("float64", "min_plus")])
@pytest.mark.parametrize("k", [5, 30, 77])
def test_the_argmax_compares_every_k_up_to_each_k_and_records_slices_past_it(host_kernels, monkeypatch, dtype,
                                                                              semiring, k):
    """A tile of 16-deep slices with ``each_k`` 40: K = 30 compares every candidate over two slices, K = 77
    records slices, K = 5 is one slice.  Rounded values: many ties, across slices and within them (the
    smallest k wins)."""
    shape = tile_shape(plan_forward((300, 64), (64, 1), (64, 300), (300, 1), (), dtype, semiring, True, 1,
                                    False).product.spec)._replace(bk=16, each_k=40)
    monkeypatch.setitem(source.TILE_SHAPES, ("square", dtype, "forward_argmax"), shape)
    rng = np.random.default_rng(k)
    a = np.round(operand(rng, 70, k, dtype, "col", 1))  # column-major A: the register-staged kernel's layout
    b = np.round(operand(rng, k, 75, dtype, "row", 0))
    want, want_k = tg.matmul(np.ascontiguousarray(a), np.ascontiguousarray(b), semiring, argmax=True)
    got, got_k, plan = square_argmax(host_kernels, a, b, semiring)
    np.testing.assert_array_equal(got, want)
    if k <= 40:
        assert plan.resolve is None
        np.testing.assert_array_equal(got_k, want_k)
    else:
        assert plan.resolve is not None
        np.testing.assert_array_equal(got_k, np.where(want_k < 0, -1, want_k // 16 * 16))
