"""The boolean semiring's CUDA kernels themselves, compiled for the host, under the GPU engine's own launch code.

``cuda_src/pack_bits.cu`` and ``cuda_src/forward_bits.cu`` (with the
generated ``tg::AndOr`` functor and ``tg::Batch`` of ``tiles.cuh``) are built
by the system's C++ compiler with a small shim: each block's threads are real
threads meeting at ``__syncthreads`` (a barrier), ``__shared__`` arrays are
the block's (blocks run one at a time).  ``engines/cuda/boolean.py`` then runs
unchanged on numpy memory: its kernel launches go to these host builds.  So
the kernels' indexing (tiles, packed words, batch strides, edges) and the
engine's arguments are checked against the definition on any machine; the GPU
tests (test_boolean.py) check the same on a device.
"""

from __future__ import annotations

import ctypes
import re
from string import Template
from types import SimpleNamespace

import numpy as np
import pytest

import host_cuda
from test_boolean import reference, truth
from tropical_gemm.engines.cuda import boolean as cuda_boolean
from tropical_gemm.jit.functors import functor
from tropical_gemm.jit.source import ELEMENTWISE_THREADS, fragment, read_cuda_file, tile_shape
from tropical_gemm.jit import make_spec

SHIM = host_cuda.SHIM + r"""
typedef long long i64;
typedef unsigned long long u64;
__device__ __forceinline__ unsigned acc_or(unsigned acc, unsigned c) { return acc | c; }
namespace tg {
template <class SR> struct MulKind;
template <class T> struct Limits;
"""

LAUNCHER = host_cuda.LAUNCH + r"""
extern "C" void launch_pack(i64 grid, i64 block, const unsigned char* X, unsigned* P, const i64* s) {
  launch(grid, block, [=] { pack(X, P, s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9], s[10], s[11],
                                 s[12]); });
}
extern "C" void launch_forward(i64 grid, i64 block, const unsigned* A, const unsigned* B, bool* C, int* IDX,
                               const i64* s) {
  launch(grid, block, [=] { forward(A, B, C, IDX, s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7], s[8], s[9], s[10],
                                    s[11]); });
}
"""


def _batch_struct() -> str:
    """``tg::Batch`` as tiles.cuh defines it."""
    return re.search(r"struct Batch \{.*?\n\};\n", read_cuda_file("tiles.cuh"), re.S).group(0)


@pytest.fixture(scope="module")
def host_launchers(tmp_path_factory) -> dict:
    folder = tmp_path_factory.mktemp("bits")
    launchers = {}
    for argmax in (False, True):
        spec = make_spec("forward_argmax" if argmax else "forward", "and_or", "bool")
        kernels = (fragment(spec).replace(spec.name, "forward")
                   + Template(read_cuda_file("pack_bits.cu")).substitute(name="pack", threads=ELEMENTWISE_THREADS))
        source = SHIM + _batch_struct() + functor("and_or") + "\n}  // namespace tg\n" + kernels + LAUNCHER
        launchers[argmax] = host_cuda.build_library(source, folder / f"bits_{argmax}")
    return launchers


class _DeviceArray(np.ndarray):
    """A numpy array that answers ``.device.id`` and ``.data.ptr`` as a cupy array does."""

    device = SimpleNamespace(id=0)

    @property
    def data(self) -> SimpleNamespace:  # type: ignore[override]
        return SimpleNamespace(ptr=self.ctypes.data)


def _on_device(x: np.ndarray) -> _DeviceArray:
    return x.view(_DeviceArray)


def _pointer(x) -> "int | None":
    return None if isinstance(x, int) else x.ctypes.data


class _HostTiers:
    """Stands for ``jit.tiers()``: each kernel the engine asks for runs its host build."""

    def __init__(self, launchers: dict) -> None:
        self.launchers, self.launches, self.vector_packs = launchers, [], 0

    def get_function(self, spec, device):
        def run(grid, block, args):
            self.launches.append(spec.op)
            if spec.tile == "tensor":  # its words, on the integer-pipe build (the same arguments and tiles)
                block = (tile_shape(make_spec(spec.op, spec.semiring, spec.dtype)).threads,)
            count = 13 if spec.op == "pack_bits" else 12
            arrays, scalars = args[:-count], np.array([int(v) for v in args[-count:]], dtype=np.int64)
            if spec.op == "pack_bits":
                self.vector_packs += int(scalars[-1])
                self.launchers[False].launch_pack(ctypes.c_int64(grid[0]), ctypes.c_int64(block[0]),
                                                  *(ctypes.c_void_p(_pointer(x)) for x in arrays[:2]),
                                                  ctypes.c_void_p(scalars.ctypes.data))
                return
            library = self.launchers[spec.op == "forward_argmax"]
            library.launch_forward(ctypes.c_int64(grid[0]), ctypes.c_int64(block[0]),
                                   *(ctypes.c_void_p(_pointer(x)) for x in arrays),
                                   ctypes.c_void_p(scalars.ctypes.data))
        return run


@pytest.fixture(params=[75, 90], ids=["sm_75", "sm_90-words"])
def host_engine(host_launchers, monkeypatch, request):
    tiers = _HostTiers(host_launchers)
    monkeypatch.setattr(cuda_boolean, "tiers", lambda: tiers)
    monkeypatch.setattr(cuda_boolean, "compute_capability", lambda device: request.param)
    monkeypatch.setattr(cuda_boolean, "cupy_module", lambda: np)
    return tiers


def run(a: np.ndarray, b: np.ndarray, argmax: bool, view=lambda x: x):
    """``engines.cuda.boolean.forward`` on host copies of ``a`` and ``b`` (``view`` applied to each)."""
    a_dev, b_dev = view(_on_device(a.copy())), view(_on_device(b.copy()))
    batch = np.broadcast_shapes(a_dev.shape[:-2], b_dev.shape[:-2])
    shape = (*batch, a_dev.shape[-2], b_dev.shape[-1])
    c = _on_device(np.full(shape, True))
    idx = _on_device(np.full(shape, 7, dtype=np.int32)) if argmax else None
    cuda_boolean.forward(a_dev, b_dev, c, idx)
    return np.asarray(c), None if idx is None else np.asarray(idx)


@pytest.mark.parametrize("m,k,n", [(1, 1, 1), (3, 33, 5), (130, 70, 129), (129, 300, 2), (5, 0, 4), (2, 64, 257),
                                   (3, 160, 2), (17, 176, 3)])
def test_the_kernels_compute_the_definition(host_engine, m, k, n):
    rng = np.random.default_rng(m * 1000 + k * 10 + n)
    a, b = truth(rng, (m, k), k, "uint8"), truth(rng, (k, n), k)
    want_c, want_k = reference(a, b)
    for argmax in (False, True):
        c, idx = run(a, b, argmax)
        np.testing.assert_array_equal(c, want_c)
        if argmax:
            np.testing.assert_array_equal(idx, want_k)
    assert host_engine.launches.count("pack_bits") == (4 if k else 0)
    if k % 16 == 0 and k:  # A's rows start 16-byte aligned: its words load 16 bytes at a time
        assert host_engine.vector_packs == 2


def test_strided_operands_and_broadcast_batches(host_engine):
    rng = np.random.default_rng(11)
    big_a, big_b = truth(rng, (3, 1, 40, 140), 70), truth(rng, (4, 140, 66), 70)
    view = lambda x: x[..., ::-2, 1::2] if x.shape[-1] == 140 else x[..., ::2, ::-1]  # noqa: E731
    want_c, want_k = reference(view(big_a), view(big_b))
    c, idx = run(big_a, big_b, True, view)
    np.testing.assert_array_equal(c, want_c)
    np.testing.assert_array_equal(idx, want_k)
    np.testing.assert_array_equal(run(big_a, big_b, False, view)[0], want_c)
    transposed = lambda x: x.swapaxes(-1, -2).copy().swapaxes(-1, -2)  # noqa: E731
    a, b = truth(rng, (2, 131, 45), 45), truth(rng, (45, 3), 45)
    want_c, want_k = reference(a, b)
    c, idx = run(a, b, True, transposed)
    np.testing.assert_array_equal(c, want_c)
    np.testing.assert_array_equal(idx, want_k)


def test_unfoldable_batches_and_first_true_ties(host_engine):
    rng = np.random.default_rng(12)
    big_a, b = truth(rng, (4, 4, 4, 4, 3, 40), 40), truth(rng, (2, 1, 40, 5), 40)
    every_other = (slice(None, None, 2),) * 4
    want_c, want_k = reference(big_a[every_other], b)
    c, idx = run(big_a, b, True, lambda x: x[every_other] if x.ndim == 6 else x)
    np.testing.assert_array_equal(c, want_c)
    np.testing.assert_array_equal(idx, want_k)
    np.testing.assert_array_equal(run(big_a, b, False, lambda x: x[every_other] if x.ndim == 6 else x)[0], want_c)
    a = np.zeros((2, 100), bool)
    a[:, 40:] = True
    ties = np.zeros((100, 3), bool)
    ties[40:, 0] = True
    ties[[70, 99], 1] = True
    c, idx = run(a, ties, True)
    np.testing.assert_array_equal(idx, [[40, 70, -1]] * 2)
    np.testing.assert_array_equal(c, [[True, True, False]] * 2)
