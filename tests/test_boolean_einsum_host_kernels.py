"""and_or's einsum kernels (``reduce``, ``gather`` and ``walk`` of dtype bool), compiled for the host.

As in test_boolean_host_kernels.py, each rendered fragment (with the
generated ``tg::AndOr`` functor) is built by the system's C++ compiler with
``host_cuda``'s shim, where ``__shfl_down_sync`` is an exchange through a
block-wide buffer between two barriers (lanes past the warp's end keep their
own value, as on the device).  The launches get the arguments the library
builds (``reduce_launch``, ``cuda_aux.truth_values`` and ``contiguous``,
``device_walk.encode``), on numpy memory, and must give the CPU einsum's
answers: so the kernels' bool instantiations are checked on any machine,
and test_boolean_einsum.py checks the same on a GPU.
"""

from __future__ import annotations

import ctypes
from contextlib import nullcontext

import numpy as np
import pytest

import host_cuda
import tropical_gemm as tg
from test_boolean import truth
from tropical_gemm.einsum import device_walk, einsum_plan, parse_call
from tropical_gemm.einsum.lower import array_ops, element_strides, execute, reduce_launch, reduce_rows_cpu
from tropical_gemm.engines import cuda_aux
from tropical_gemm.jit import make_spec
from tropical_gemm.jit.functors import functor
from tropical_gemm.jit.source import ELEMENTWISE_THREADS, fragment
from tropical_gemm.semirings import get_semiring

AND_OR = get_semiring("and_or")

SHIM = host_cuda.SHIM + r"""
typedef long long i64;
static long long shuffled[1024];
template <class T> static T __shfl_down_sync(unsigned, T v, int offset) {
  const i64 t = threadIdx.x;
  shuffled[t] = (long long)v;
  block_barrier->arrive_and_wait();
  const T out = (t & 31) + offset < 32 ? (T)shuffled[t + offset] : v;
  block_barrier->arrive_and_wait();
  return out;
}
inline unsigned acc_or(unsigned acc, unsigned c) { return acc | c; }
namespace tg {
template <class SR> struct MulKind;
template <class T> struct IsFloat { static constexpr bool value = false; };
template <class T> inline T canonical(T x) { return x; }
"""

LAUNCHER = host_cuda.LAUNCH + r"""
extern "C" void launch_reduce(i64 grid, i64 block, const unsigned char* X, unsigned char* OUT, int* IDX,
                              const i64* s) {
  launch(grid, block, [=] { reduce(X, OUT, IDX, s[0], s[1], s[2], s[3]); });
}
extern "C" void launch_gather(i64 grid, i64 block, const unsigned char* X, bool* Y, const i64* s) {
  launch(grid, block, [=] { gather(X, Y, GATHER_SCALARS); });
}
extern "C" void launch_walk(i64 grid, i64 block, const i64* table, const unsigned char* result, unsigned char zero,
                            i64 total) {
  launch(grid, block, [=] { walk(table, result, zero, total); });
}
"""


@pytest.fixture(scope="module")
def kernels(tmp_path_factory) -> ctypes.CDLL:
    body = "".join(fragment(spec).replace(spec.name, spec.op)
                   for spec in (make_spec(op, "and_or", "bool") for op in ("reduce", "gather", "walk")))
    scalars = ", ".join(f"s[{i}]" for i in range(2 + 2 * cuda_aux.GATHER_DIMS))
    source = SHIM + functor("and_or") + "\n}  // namespace tg\n" + body + LAUNCHER.replace("GATHER_SCALARS", scalars)
    return host_cuda.build_library(source, tmp_path_factory.mktemp("einsum_bits") / "einsum_bits")


def _i64s(values) -> np.ndarray:  # noqa: ANN001
    return np.array([int(v) for v in values], dtype=np.int64)


def _address(x: np.ndarray) -> ctypes.c_void_p:
    """Where element 0 lies (also for negative strides), as cupy's ``data.ptr`` says."""
    return ctypes.c_void_p(x.__array_interface__["data"][0])


# ----------------------------------------------------------------- reduce


def host_reduce(kernels: ctypes.CDLL, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``reduce_rows_cuda``'s launch (``reduce_launch``) of the host build over a bool (R, K) view."""
    rows, k = x.shape
    values, idx = np.full(rows, 7, np.uint8), np.full(rows, 7, np.int32)
    launch = reduce_launch("and_or", "bool", rows, k, element_strides(x))
    scalars = _i64s(launch.scalars)
    kernels.launch_reduce(ctypes.c_int64(launch.grid), ctypes.c_int64(launch.block), _address(x),
                          _address(values), _address(idx), _address(scalars))
    return values, idx


@pytest.mark.parametrize("shape", [(37, 1000), (9, 31), (8, 1), (3, 0), (1, 65)])
def test_reduce_gives_each_row_s_or_and_first_true_k(kernels, shape):
    rng = np.random.default_rng(sum(shape))
    x = truth(rng, shape, max(shape[1], 1) * 4)  # sparse: first true ks fall in every lane
    if shape[0] > 4 and shape[1] > 1:
        x[3] = False
        x[4] = False
        x[4, -1] = True
    for view in (x, np.ascontiguousarray(x.T).T, x[::-1], x[:, ::-1]):
        want_v, want_i = reduce_rows_cpu(view, AND_OR)
        got_v, got_i = host_reduce(kernels, view)
        np.testing.assert_array_equal(got_v.view(bool), want_v)
        np.testing.assert_array_equal(got_v <= 1, True)
        np.testing.assert_array_equal(got_i, want_i)


# ----------------------------------------------------------------- gather


class _Device(nullcontext):
    """Device 0, as a context (``with x.device``) and by its ``id``."""

    id = 0


class _DeviceArray(np.ndarray):
    """A numpy array that answers ``.device`` as a cupy array does."""

    device = _Device()


class _HostTiers:
    """Stands for ``jit.tiers()``: the gathers the library launches run the host build."""

    def __init__(self, kernels: ctypes.CDLL) -> None:
        self.kernels, self.launched = kernels, []

    def get_function(self, spec, device):  # noqa: ANN001, ANN201
        def run(grid, block, args, stream=None):  # noqa: ANN001
            self.launched.append(spec.name)
            x, out, *scalars = args
            self.kernels.launch_gather(ctypes.c_int64(grid[0]), ctypes.c_int64(block[0]), _address(x),
                                       _address(out), _address(_i64s(scalars)))
        return run


@pytest.fixture
def host_gathers(kernels, monkeypatch) -> _HostTiers:
    tiers = _HostTiers(kernels)
    monkeypatch.setattr(cuda_aux, "tiers", lambda: tiers)
    monkeypatch.setattr(cuda_aux, "cupy_module", lambda: np)
    return tiers


def test_truth_values_write_every_nonzero_byte_as_one(host_gathers):
    x = truth(np.random.default_rng(3), (5, 6, 70), 70, "uint8")
    assert x.max() > 1
    for view in (x, x.transpose(2, 0, 1)[::3], x[:, ::-1, 1::2]):
        got = cuda_aux.truth_values(view.view(_DeviceArray))
        assert got.dtype == np.bool_ and got.flags.c_contiguous
        np.testing.assert_array_equal(got.view(np.uint8), view != 0)
    assert set(host_gathers.launched) == {"tg_gather_b8"}
    assert cuda_aux.truth_values(np.ones((0, 3), np.uint8).view(_DeviceArray)).shape == (0, 3)


def test_contiguous_copies_bool_views_with_the_bool_gather(host_gathers):
    """What einsum's regroup calls for a bool view that no reshape can express."""
    x = truth(np.random.default_rng(4), (4, 5, 33), 33)
    view = x.transpose(1, 2, 0)[:, ::2].view(_DeviceArray)
    got = cuda_aux.contiguous(view)
    assert got.flags.c_contiguous and host_gathers.launched == ["tg_gather_b8"]
    np.testing.assert_array_equal(got, view)


# ----------------------------------------------------------------- walk


def host_walk(kernels: ctypes.CDLL, subscripts: str, ops: list[np.ndarray], optimize) -> dict:  # noqa: ANN001
    """The configuration by the walk kernel's host build, over the CPU steps' argmaxes (``device_walk``'s table)."""
    parsed, _ = parse_call(subscripts, tuple(ops))
    plan = einsum_plan(subscripts, *ops, optimize=optimize)
    result, argmaxes = execute(plan, parsed, ops, array_ops("cpu"), AND_OR, True)
    walk = device_walk.plan_walk(plan, parsed)
    held = {s.index: np.ascontiguousarray(argmaxes[s.index]) for s in walk.steps}
    config = [np.full(result.shape, 7, dtype=np.int32) for _ in walk.labels]
    table = device_walk.encode(walk, result.shape, element_strides(result),
                               {t: (idx.ctypes.data, idx.dtype == np.int64) for t, idx in held.items()},
                               [c.ctypes.data for c in config], False)
    kernels.launch_walk(ctypes.c_int64(1), ctypes.c_int64(ELEMENTWISE_THREADS), _address(table),
                        _address(result), ctypes.c_ubyte(0), ctypes.c_int64(result.size))
    return dict(zip(walk.names, config))


@pytest.mark.parametrize("subscripts, shapes, optimize", [
    ("ij,jk,kl->il", [(6, 40), (40, 50), (50, 5)], [(0, 1), (0, 1)]),
    ("ij,jk,kl->li", [(6, 40), (40, 50), (50, 5)], [(1, 2), (0, 1)]),
    ("ij,jk,l->ikl", [(5, 40), (40, 4), (3,)], [(0, 1), (0, 1)]),   # the last step chooses nothing: reads the zero
    ("ab,bc,cd,da->", [(5, 40), (40, 6), (6, 33), (33, 5)], "auto"),  # a scalar output: one thread
    ("ab,bc,cd,da->", [(5, 40), (40, 6), (6, 33), (33, 5)], "greedy"),
    ("ij,jk,kl->il", [(2, 3), (3, 0), (0, 5)], [(0, 1), (0, 1)]),   # an empty k: nothing wins anywhere
    ("iij,jk->ik", [(7, 7, 30), (30, 4)], "auto"),
])
def test_walk_gives_the_host_walk_s_configuration(kernels, subscripts, shapes, optimize):
    rng = np.random.default_rng(len(shapes) + sum(map(sum, shapes)))
    ops = [truth(rng, s, 4 * max(s, default=1)) for s in shapes]  # sparse: false outputs, dead elements
    _, want = tg.einsum(subscripts, *ops, semiring="and_or", optimize=optimize, return_configuration=True)
    got = host_walk(kernels, subscripts, ops, optimize)
    assert set(got) == set(want)
    for name, values in want.items():
        np.testing.assert_array_equal(got[name], values, err_msg=name)
