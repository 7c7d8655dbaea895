"""The CPU engine's kernels against the numpy engine they replaced (tests/numpy_engine.py), bit for bit,
and against the naive reference (tests/reference.py) with C cut over 1 to 4 threads.

Every test runs with each kind of kernel this machine has: numba, and the
extension module's build for each instruction set the CPU supports.

Fresh random data for every case: ragged sizes around the kernels' blocking
(2 rows, 4 ks, panels of KB x NB), size 1, K = 0, strided and transposed
operands, broadcast batches, ±inf, NaN, integer extremes that saturate, and
many ties.  Both engines write into fresh buffers; values and argmax must
match to the bit.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import numpy_engine
import tropical_gemm as tg
from reference import assert_same_bits, reference_backward, reference_matmul
from strategies import DTYPES, FLOAT_DTYPES, LAYOUTS, SEMIRINGS, Case, cases, operand_pair, random_values
from tropical_gemm.engines import cpu
from tropical_gemm.engines.cpu import kernels

pytestmark = [pytest.mark.filterwarnings("error"), pytest.mark.usefixtures("kernel_kind")]


def _native_isas() -> list[str]:
    try:
        from tropical_gemm.engines.cpu import _native
    except ImportError:  # not built here: test_cpu_native.py says whether it should have been
        return []
    return _native.supported_isas()


@pytest.fixture(params=["numba", *_native_isas()])
def kernel_kind(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    """numba's kernels, or the extension's for one instruction set."""
    monkeypatch.setenv(cpu.ENV_KERNELS, "numba" if request.param == "numba" else "native")
    cpu._native_kernels.cache_clear()
    cpu._native_variant.cache_clear()
    native = cpu._native_kernels()
    if native is not None:
        best = native.isa()
        native.use_isa(request.param)
    yield request.param
    if native is not None:
        native.use_isa(best)
    monkeypatch.undo()
    cpu._native_kernels.cache_clear()
    cpu._native_variant.cache_clear()

SHAPES = [(1, 1, 1), (1, 7, 1), (3, 0, 5), (2, 5, 1), (7, 5, 9), (33, 17, 70), (5, 260, 3),
          (65, kernels.KB + 3, kernels.NB + 17), (3, kernels.KB_ARGMAX + 13, 9)]


def both_engines(a: np.ndarray, b: np.ndarray, semiring: str, argmax: bool) -> tuple:
    """(our values, our argmax, numpy values, numpy argmax) for the same operands."""
    sr = tg.get_semiring(semiring)
    shape = (*np.broadcast_shapes(a.shape[:-2], b.shape[:-2]), a.shape[-2], b.shape[-1])
    got = np.empty(shape, a.dtype), np.empty(shape, np.int32) if argmax else None
    want = np.empty(shape, a.dtype), np.empty(shape, np.int32) if argmax else None
    cpu.forward(a, b, sr, *got)
    numpy_engine.forward(a, b, sr, *want)
    return (*got, *want)


def check(a: np.ndarray, b: np.ndarray, semiring: str, argmax: bool) -> None:
    c, idx, c_ref, idx_ref = both_engines(a, b, semiring, argmax)
    assert_same_bits(c, c_ref)
    if argmax:
        np.testing.assert_array_equal(idx, idx_ref)


@pytest.mark.parametrize("argmax", [False, True], ids=["values", "argmax"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("semiring", SEMIRINGS)
def test_every_semiring_and_dtype_matches_the_numpy_engine(semiring: str, dtype: str, argmax: bool) -> None:
    for seed, shape in enumerate(SHAPES):
        a, b = operand_pair(dtype, shape, seed=1000 + seed, special_rate=0.1)
        check(a, b, semiring, argmax)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("semiring", SEMIRINGS)
def test_ties_keep_the_smallest_k(semiring: str, dtype: str) -> None:
    rng = np.random.default_rng(7)
    # The second K crosses an argmax panel, ending in a group cut short.
    for m, k, n in [(37, 41, 29), (5, kernels.KB_ARGMAX + 13, 7)]:
        a = rng.integers(0, 3, (m, k)).astype(dtype)
        b = rng.integers(0, 3, (k, n)).astype(dtype)
        check(a, b, semiring, True)


@pytest.mark.parametrize("dtype", ["int32", "int64"])
@pytest.mark.parametrize("semiring", ["max_plus", "min_plus", "max_mul"])
def test_integer_extremes_saturate_as_before(semiring: str, dtype: str) -> None:
    info = np.iinfo(dtype)
    rng = np.random.default_rng(11)
    values = np.array([info.min, info.min + 1, -(2 ** (info.bits // 2)), -3, -1, 0, 1, 2,
                       2 ** (info.bits // 2), info.max - 1, info.max], dtype=dtype)
    a = rng.choice(values, (19, 23))
    b = rng.choice(values, (23, 21))
    for argmax in (False, True):
        check(a, b, semiring, argmax)


@pytest.mark.parametrize("semiring", SEMIRINGS)
def test_nan_and_infinities_follow_the_numpy_engine(semiring: str) -> None:
    rng = np.random.default_rng(3)
    specials = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 1.0, -1.0], dtype=np.float32)
    a = rng.choice(specials, (13, 24))
    b = rng.choice(specials, (24, 15))
    check(a, b, semiring, True)
    check(np.full((4, 6), np.nan, np.float64), np.full((6, 5), np.nan, np.float64), semiring, True)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_strided_and_batched_operands(layout: str) -> None:
    rng = np.random.default_rng(5)
    a = LAYOUTS[layout](random_values(rng, (3, 1, 10, 13), "float32", 0.05), lambda x: x)
    b = LAYOUTS[layout](random_values(rng, (1, 2, 13, 11), "float32", 0.05), lambda x: x)
    check(a, b, "max_plus", True)
    a = LAYOUTS[layout](random_values(rng, (2, 9, 14), "int64", 0.1), lambda x: x)
    b = LAYOUTS[layout](random_values(rng, (14, 12), "int64", 0.1), lambda x: x)
    check(a, b, "min_plus", True)


@pytest.mark.parametrize("threads", [1, 2, 3, 16])
def test_thread_splits_give_the_same_bits(threads: int) -> None:
    """Large enough for the pool; row splits (tall C) and column splits (short, wide C)."""
    cpu.set_num_threads(threads)
    try:
        for shape in [(130, 181, 97), (3, 700, 1100)]:
            a, b = operand_pair("float32", shape, seed=threads, special_rate=0.02)
            assert shape[0] * shape[1] * shape[2] >= cpu.SERIAL_WORK
            check(a, b, "min_plus", True)
    finally:
        cpu.set_num_threads(None)


def test_splits_cover_c_exactly_once() -> None:
    for m, n, workers in [(1, 1, 4), (7, 3, 2), (100, 5, 3), (3, 1000, 4), (9, 9, 16),
                             (130, 181, 16), (1024, 1024, 12), (2000, 2000, 16)]:
        covered = np.zeros((m, n), int)
        for r0, r1, c0, c1 in cpu._splits(m, n, workers):
            covered[r0:r1, c0:c1] += 1
        assert (covered == 1).all(), (m, n, workers)


@pytest.mark.parametrize("n", [1024, 2048])
@pytest.mark.parametrize("argmax", [False, True])
def test_sixteen_threads_get_equal_square_tiles(monkeypatch: pytest.MonkeyPatch, n: int, argmax: bool) -> None:
    """At 16 threads each worker gets one tile of C of the same size, a quarter of its rows and of its columns.

    So no worker waits on another, and each packs a quarter of B rather than all
    of it.  The jobs are recorded, not run: this machine may have fewer cores.
    """
    jobs: list[tuple] = []
    monkeypatch.setattr(cpu, "_run", lambda tile, batch, workers: jobs.extend((workers, *job[4:8]) for job in batch))
    a = np.zeros((n, n), np.float32)
    cpu.set_num_threads(16)
    try:
        tg.matmul(a, a, "max_plus", argmax=argmax)
    finally:
        cpu.set_num_threads(None)
    assert len(jobs) == 16
    assert {(workers, r1 - r0, c1 - c0) for workers, r0, r1, c0, c1 in jobs} == {(16, n // 4, n // 4)}


def test_thread_count_setting_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cpu.ENV_THREADS, "two")
    with pytest.raises(ValueError, match="TROPICAL_GEMM_NUM_THREADS='two'"):
        cpu.num_threads()
    monkeypatch.setenv(cpu.ENV_THREADS, "3")
    assert cpu.num_threads() == 3
    with pytest.raises(ValueError, match="at least 1"):
        cpu.set_num_threads(0)


def test_the_backward_runs_the_kind_of_kernels_the_products_run() -> None:
    """The backward kept the first choice it saw (a cache of its own), whatever the products then ran."""
    backward = importlib.import_module("tropical_gemm.engines.cpu.backward")
    assert backward._native() is cpu._native_kernels()


def test_kernels_are_cached_under_the_cache_root(cache_root) -> None:
    """A fresh process compiles into TROPICAL_GEMM_CACHE_DIR/numba-cpu; the next one loads from it."""
    script = textwrap.dedent(f"""
        import os
        os.environ[{cpu.ENV_KERNELS!r}] = "numba"
        import numpy as np, tropical_gemm as tg
        from tropical_gemm.engines.cpu import kernels
        tg.matmul(np.ones((3, 4), np.float64), np.ones((4, 2), np.float64), "max_min")
        tile = kernels.tile_function("max", "min", False, False, np.dtype("float64"), np.dtype("int32"))
        print(sum(tile.stats.cache_hits.values()), sum(tile.stats.cache_misses.values()))
    """)
    runs = [subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.split()
            for _ in range(2)]
    assert runs == [["0", "1"], ["1", "0"]]
    assert any((cache_root / "numba-cpu").rglob("*.nbi"))


# ------------------------------------------- every kind and split against the naive reference


@settings(max_examples=15)
@given(case=cases(max_size=24), threads=st.integers(1, 4))
def test_products_on_every_split_match_the_naive_reference(cpu_threads, case: Case, threads: int) -> None:
    """Fresh operands of every semiring, dtype, layout and batch, cut over 1 to 4 threads, against reference.py."""
    cpu_threads(threads)
    want_c, want_idx = reference_matmul(case.a, case.b, case.semiring)
    c, idx = tg.matmul(*case.on(np.asarray), case.semiring, argmax=True)
    assert_same_bits(c, want_c)
    np.testing.assert_array_equal(idx, want_idx)
    assert_same_bits(tg.matmul(*case.on(np.asarray), case.semiring), want_c)


@settings(max_examples=10)
@given(case=cases(dtypes=FLOAT_DTYPES, max_size=24), threads=st.integers(1, 4), seed=st.integers(0, 2**32 - 1))
def test_gradients_on_every_split_match_the_naive_reference(cpu_threads, case: Case, threads: int,
                                                            seed: int) -> None:
    """The backward's bands of rows and columns over 1 to 4 threads add in the documented order, to the bit."""
    a, b = case.on(np.asarray)
    _, idx = tg.matmul(a, b, case.semiring, argmax=True)
    grad_c = random_values(np.random.default_rng(seed), idx.shape, str(case.a.dtype), special_rate=0.05)
    cpu_threads(threads)
    for got, want in zip(tg.matmul_backward(grad_c, a, b, idx, case.semiring),
                         reference_backward(grad_c, case.a, case.b, idx, case.semiring), strict=True):
        assert_same_bits(got, want)
