"""The square argmax's second phase (``argmax_resolve``), built for the host, against the CPU engine.

Given the product and, per output, the first k of the slice holding its
winner (what the square kernels record), the resolve must find the winner
itself: the smallest k whose candidate equals the result.  Its paths run
here on numpy memory: 16-byte loads where A's and B's runs are contiguous
and aligned (B column-major, or the transposed copy the plan makes of a
row-major B), one k at a time elsewhere (a strided B, a run that starts off
16 bytes), and the staged form, which copies a tile of outputs' rows and
columns into shared memory first (batched, ragged tiles, either B layout).
Small integers make ties within a slice common.
"""

from __future__ import annotations

import ctypes

import numpy as np
import pytest

import host_cuda
import tropical_gemm as tg
from tropical_gemm.jit import make_spec
from tropical_gemm.jit.source import fragment, header_sources

_HEADERS = ("preamble.cuh", "semirings.cuh", "tiles.cuh", "square.cuh", "staged.cuh")
_LAUNCH = r"""
extern "C" void launch_resolve(long long grid, long long block, const void* A, const void* B, const void* C,
                               int* IDX, const long long* s, int depth, int edge, int pitch) {
  launch(grid, block, [=] { resolve((const T_*)A, (const T_*)B, (const T_*)C, IDX, s[0], s[1], s[2], s[3], s[4],
                                    s[5], s[6], s[7], s[8], s[9], s[10], s[11], s[12], s[13], s[14], s[15], s[16],
                                    s[17], depth EXTRA); });
}
"""


@pytest.fixture(scope="module")
def host_resolve(tmp_path_factory):
    folder, built = tmp_path_factory.mktemp("resolve"), {}

    def get(semiring: str, dtype: str, staged: bool = False):
        spec = make_spec("argmax_resolve_staged" if staged else "argmax_resolve", semiring, dtype)
        if spec not in built:  # the staged kernel also takes the tile's edge and the lines' pitch
            headers = "".join(text + "\n" for name, text in header_sources() if name in _HEADERS)
            launcher = _LAUNCH.replace("EXTRA", ", edge, pitch" if staged else "")
            program = (host_cuda.SHIM + headers + fragment(spec).replace(spec.name, "resolve")
                       + f"typedef {host_cuda.C_TYPES[dtype]} T_;\n" + host_cuda.LAUNCH + launcher)
            built[spec] = host_cuda.build_library(program, folder / spec.name)
        return built[spec]

    return get


def resolved(library, a: np.ndarray, b: np.ndarray, c: np.ndarray, starts: np.ndarray, depth: int,
             edge: int = 0) -> np.ndarray:
    """The resolve's winners: its arguments as the plan's, strides in elements; a batch of products where
    ``a`` (then also ``b``, ``c`` and ``starts``) has a leading batch axis, each batch contiguous.  ``edge``:
    the staged kernel's tile edge (the other kernel ignores it)."""
    batches, (m, k), n = (a.shape[0] if a.ndim == 3 else 1), a.shape[-2:], b.shape[-1]
    idx = starts.astype(np.int32).copy()
    run = 16 // a.itemsize
    pitch = -(-k // run) * run + run
    scalars = np.array([m, n, k, a.strides[-2] // a.itemsize, a.strides[-1] // a.itemsize,
                        b.strides[-2] // b.itemsize, b.strides[-1] // b.itemsize, n, 1, batches, 1, batches,
                        0, 0, m * k if a.ndim == 3 else 0, 0, 0, k * n if a.ndim == 3 else 0], dtype=np.int64)
    library.launch_resolve(ctypes.c_longlong(2), ctypes.c_longlong(64), *(ctypes.c_void_p(x.ctypes.data)
                           for x in (a, b, c, idx, scalars)), ctypes.c_int(depth), ctypes.c_int(edge),
                           ctypes.c_int(pitch))
    return idx


def operand(rng: np.random.Generator, rows: int, cols: int, dtype: str, order: str, offset: int) -> np.ndarray:
    """Small values (many ties), laid out in ``order`` and starting ``offset`` elements into the buffer."""
    base = rng.integers(-3, 3, size=(rows * cols + offset,)).astype(dtype)
    return np.lib.stride_tricks.as_strided(base[offset:], (rows, cols),
                                           (cols * base.itemsize, base.itemsize) if order == "C"
                                           else (base.itemsize, rows * base.itemsize))


@pytest.mark.parametrize("dtype,semiring", [("float32", "max_plus"), ("int32", "max_plus"), ("float64", "min_plus"),
                                            ("int64", "max_min")])
@pytest.mark.parametrize("depth", [8, 16, 32])
def test_the_resolve_finds_the_first_winner_from_its_slice(host_resolve, dtype, semiring, depth):
    rng = np.random.default_rng(depth)
    m, n = 9, 11
    for k, b_order, offset in ((3 * depth + 4, "F", 0), (3 * depth + 5, "F", 0), (3 * depth + 4, "C", 0),
                               (3 * depth + 4, "F", 1)):  # vector loads (every run, then some); a strided B; off 16
        a = operand(rng, m, k, dtype, "C", offset)
        b = operand(rng, k, n, dtype, b_order, offset)
        c, want = tg.matmul(np.ascontiguousarray(a), np.ascontiguousarray(b), semiring, argmax=True)
        starts = np.where(want < 0, -1, want // depth * depth)
        got = resolved(host_resolve(semiring, dtype), a, b, c, starts, depth)
        np.testing.assert_array_equal(got, want, err_msg=f"K {k}, B {b_order}, offset {offset}")


@pytest.mark.parametrize("dtype,semiring", [("float32", "max_plus"), ("int32", "min_plus"), ("float64", "max_min")])
@pytest.mark.parametrize("b_order", ["C", "F"])
@pytest.mark.parametrize("edge", [4, 16])
@pytest.mark.parametrize("values", ["ties", "spread"])
def test_the_staged_resolve_finds_the_first_winner_in_every_tile(host_resolve, dtype, semiring, b_order, edge,
                                                                 values):
    """Two products of 9×11 outputs: with an edge of 4, tiles ragged on both sides; B read along its rows
    (row-major) or its ks (column-major), the last slice part past K.  Small values tie often; spread ones
    put winners on every k, the last included."""
    rng = np.random.default_rng(edge)
    depth, m, n, k = 16, 9, 11, 3 * 16 + 7

    def draw(rows: int, cols: int) -> np.ndarray:
        if values == "ties":
            return operand(rng, rows, cols, dtype, "C", 0)
        return rng.integers(-10**6, 10**6, size=(rows, cols)).astype(dtype)

    a = np.stack([draw(m, k) for _ in range(2)])
    bs = [draw(k, n) for _ in range(2)]
    if values == "spread":  # the last k wins output (0, 0) of each product
        a[:, 0, k - 1] = -10**7 if semiring.startswith("min") else 10**7
        for x in bs:
            x[k - 1, 0] = a[0, 0, k - 1]
    # each batch contiguous: row-major, or column-major (the transpose of an n × k row-major matrix)
    b = np.stack(bs) if b_order == "C" else np.stack([np.ascontiguousarray(x.T) for x in bs]).transpose(0, 2, 1)
    products = [tg.matmul(np.ascontiguousarray(x), np.ascontiguousarray(y), semiring, argmax=True)
                for x, y in zip(a, b)]
    c, want = np.stack([p[0] for p in products]), np.stack([p[1] for p in products])
    assert values == "ties" or (want[:, 0, 0] == k - 1).all()
    starts = np.where(want < 0, -1, want // depth * depth)
    got = resolved(host_resolve(semiring, dtype, staged=True), a, b, c, starts, depth, edge)
    np.testing.assert_array_equal(got, want)
