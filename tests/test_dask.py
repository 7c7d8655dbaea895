"""tropical_gemm.dask: chunked products equal one single-array product, bit for bit, argmax included.

Every case computes the dask product and compares it with
``tropical_gemm.matmul`` on the same data as whole numpy arrays.  Values mix
small integers (ties within and across K blocks), ±inf, NaN and the dtype's
extremes; K is cut into uneven blocks, so the tie rule (the smallest global
k wins) and the ``-1`` rule are checked across block boundaries.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
import dask  # noqa: E402

import tropical_gemm as tg  # noqa: E402
import tropical_gemm.dask as tgd  # noqa: E402
from strategies import DTYPES, SEMIRINGS, operand_pair, random_values  # noqa: E402

#: (M, K, N) and the chunks of a (M, K) and b (K, N): K in uneven blocks,
#: an odd number of them (an unpaired block at each tree level), or just one.
LAYOUTS = {
    "uneven": ((13, 29, 11), ((5, 8), (7, 3, 11, 8)), ((7, 3, 11, 8), (4, 7))),
    "odd-blocks": ((9, 25, 10), (4, 5), (5, 3)),
    "one-k-block": ((12, 10, 6), (5, 10), (10, 6)),
    "b-rechunked": ((8, 24, 7), (3, (6, 6, 6, 6)), ((10, 14), 7)),
}


def operands(dtype: str, shape: tuple[int, int, int], seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Half small integers, the rest wide values and specials (±inf, NaN, extremes)."""
    return operand_pair(dtype, shape, seed, 0.2)


def assert_identical(got: np.ndarray, want: np.ndarray) -> None:
    """Same dtype, shape and bits; NaN matches any NaN (the engines never return one in C)."""
    assert got.dtype == want.dtype and got.shape == want.shape
    if got.dtype.kind == "f":
        both_nan = np.isnan(got) & np.isnan(want)
        bits = f"u{got.dtype.itemsize}"
        assert np.array_equal(np.where(both_nan, 0, got.view(bits)), np.where(both_nan, 0, want.view(bits)))
    else:
        assert np.array_equal(got, want)


def check(a: np.ndarray, b: np.ndarray, a_chunks, b_chunks, semiring: str, **compute) -> None:
    """The dask product, values alone and with argmax, against the single-array product."""
    x, y = da.from_array(a, chunks=a_chunks), da.from_array(b, chunks=b_chunks)
    want_c, want_k = tg.matmul(a, b, semiring, argmax=True)
    c, k = tgd.matmul(x, y, semiring, argmax=True)
    assert isinstance(c, da.Array) and c.chunks[-2:] == (x.chunks[-2], y.chunks[-1]) and k.chunks == c.chunks
    got_c, got_k, values_only = dask.compute(c, k, tgd.matmul(x, y, semiring), **compute)
    assert_identical(got_c, want_c)
    assert_identical(got_k, want_k)
    assert_identical(values_only, want_c)


@pytest.mark.parametrize("layout", sorted(LAYOUTS))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("semiring", SEMIRINGS)
def test_equals_the_single_array_product(semiring, dtype, layout):
    shape, a_chunks, b_chunks = LAYOUTS[layout]
    a, b = operands(dtype, shape, seed=len(layout) + DTYPES.index(dtype))
    if semiring == "max_mul":  # its intended domain; negatives are covered by the next test
        a, b = np.abs(a), np.abs(b)
    check(a, b, a_chunks, b_chunks, semiring)


@pytest.mark.parametrize("semiring", SEMIRINGS)
def test_max_mul_outside_its_domain_and_every_scheduler(semiring):
    a, b = operands("float64", (10, 31, 9), seed=7)
    for scheduler in ("threads", "sync"):
        check(a, b, (4, 6), (6, 5), semiring, scheduler=scheduler)


@pytest.mark.parametrize("semiring", SEMIRINGS)
def test_ties_across_blocks_go_to_the_smallest_global_k(semiring):
    """Every candidate of a row equal: k = 0 wins, in whichever block the tree combines it."""
    a = np.full((3, 12), 2.0)
    b = np.full((12, 4), 3.0)
    a[1, :5] = tg.get_semiring(semiring).zero("float64")  # row 1: the first winner lies in block 2
    check(a, b, (1, (2, 3, 4, 3)), ((2, 3, 4, 3), 2), semiring)
    _, k = tgd.matmul(da.from_array(a, chunks=(1, 3)), da.from_array(b, chunks=(3, 2)), semiring, argmax=True)
    assert (k.compute()[[0, 2]] == 0).all() and (k.compute()[1] == 5).all()


@pytest.mark.parametrize("semiring", SEMIRINGS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_minus_one_exactly_where_the_product_is_the_zero(semiring, dtype):
    """Rows that are the zero in every block, or in all blocks but one."""
    zero = tg.get_semiring(semiring).zero(dtype)
    a = np.ones((4, 9), dtype)
    a[0] = zero  # every candidate of row 0 is the zero (it absorbs), so C is the zero: -1
    a[1, :6] = zero  # row 1 wins only in the last block
    a[2, 3:] = zero  # row 2 wins only in the first block
    b = np.ones((9, 3), dtype)
    b[:, 0] = zero
    check(a, b, (2, 3), (3, 2), semiring)
    _, k = tgd.matmul(da.from_array(a, chunks=(2, 3)), da.from_array(b, chunks=(3, 2)), semiring, argmax=True)
    k = k.compute()
    assert (k[:, 0] == -1).all() and (k[0] == -1).all()
    assert (k[1, 1:] == 6).all() and (k[2, 1:] == 0).all() and (k[3, 1:] == 0).all()


def test_batched_with_broadcasting_and_chunked_batch_dims():
    rng = np.random.default_rng(3)
    a = random_values(rng, (3, 1, 7, 10), "float32", 0.2)
    b = random_values(rng, (4, 10, 5), "float32", 0.2)
    check(a, b, (2, 1, 4, (3, 3, 4)), (3, 4, 2), "max_plus")
    check(b[:, :, :5], a[..., :5, :], (1, 5, 5), (1, 1, 3, 2), "min_plus")


@pytest.mark.parametrize("shape", [(4, 0, 3), (0, 5, 3), (4, 5, 0)])
def test_empty_dimensions(shape):
    m, k, n = shape
    check(np.ones((m, k)), np.ones((k, n)), (2, 2), (2, 2), "max_plus")


def test_numpy_operands_are_wrapped_and_the_result_stays_lazy():
    a, b = operands("float64", (6, 8, 5), seed=1)
    c = tgd.matmul(a, da.from_array(b, chunks=4), "min_plus")
    assert isinstance(c, da.Array)
    assert_identical(c.compute(), tg.matmul(a, b, "min_plus"))


def test_argmax_is_int64_when_k_needs_it():
    """The dtype follows the global K, not each block's; checked on the graph, nothing runs."""
    a = da.zeros((1, 2**31), dtype="int32", chunks=(1, 2**30))
    b = da.zeros((2**31, 1), dtype="int32", chunks=(2**30, 1))
    c, k = tgd.matmul(a, b, argmax=True)
    assert c.dtype == np.int32 and k.dtype == np.int64


def test_the_k_blocks_are_reduced_as_a_pairwise_tree():
    """8 K blocks: 8 products, then 4 + 2 combines and the root per output block, log2(8) = 3 levels deep."""
    c = tgd.matmul(da.ones((4, 16), chunks=(2, 2)), da.ones((16, 2), chunks=(2, 2)))
    kinds = Counter(key[0].removeprefix(c.name) for key in dict(c.dask) if key[0].startswith(c.name))
    per_block = len(c.chunks[0]) * len(c.chunks[1])
    assert kinds == {"-partial": 8 * per_block, "-combine-0": 4 * per_block, "-combine-1": 2 * per_block,
                     "": per_block}


def test_distributed_local_cluster_with_processes():
    """Two worker processes: the graph's tasks, and a user's closure that names the package, run there."""
    distributed = pytest.importorskip("distributed")
    a, b = operands("float32", (20, 33, 14), seed=5)
    want_c, want_k = tg.matmul(a, b, "max_plus", argmax=True)
    semiring = "max_plus"  # the graph's: the workers have its kernel already

    def rows_and_pid(x: np.ndarray, y: np.ndarray) -> tuple:  # pickled by value, with ``tg`` and ``semiring``
        return tg.matmul(x, y, semiring, argmax=True), os.getpid()

    with distributed.LocalCluster(n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None,
                                  timeout="60s") as cluster, distributed.Client(cluster, timeout="60s") as client:
        c, k = tgd.matmul(da.from_array(a, chunks=(7, 9)), da.from_array(b, chunks=(9, 5)), "max_plus", argmax=True)
        futures = client.compute([c, k])
        distributed.wait(futures, timeout=120)
        got_c, got_k = client.gather(futures)
        closure = client.submit(rows_and_pid, a[:6], b, pure=False)
        (closure_c, closure_k), worker_pid = closure.result(timeout=120)
        assert len(client.scheduler_info()["workers"]) == 2
    assert_identical(got_c, want_c)
    assert_identical(got_k, want_k)
    want_rows = tg.matmul(a[:6], b, semiring, argmax=True)
    assert_identical(closure_c, want_rows[0])
    assert_identical(closure_k, want_rows[1])
    assert worker_pid != os.getpid()


# ---- errors: the core's, raised when the graph is built --------------------------------------------


def test_mismatched_k_names_both_shapes():
    with pytest.raises(ValueError, match=r"inner dimensions differ: a has shape \(3, 4\) .* \(5, 2\)"):
        tgd.matmul(da.ones((3, 4), chunks=2), da.ones((5, 2), chunks=2))


def test_unknown_semiring_lists_the_valid_ones():
    with pytest.raises(ValueError, match="unknown semiring 'max_pluss'.*max_plus, min_plus"):
        tgd.matmul(da.ones((3, 4), chunks=2), da.ones((4, 2), chunks=2), "max_pluss")


def test_different_or_unsupported_dtypes_raise_type_error():
    with pytest.raises(TypeError, match="different dtypes"):
        tgd.matmul(da.ones((3, 4), chunks=2), da.ones((4, 2), dtype="f4", chunks=2))
    with pytest.raises(TypeError, match="unsupported dtype"):
        tgd.matmul(da.ones((3, 4), dtype=bool, chunks=2), da.ones((4, 2), dtype=bool, chunks=2))


def test_one_dimensional_operands_follow_numpy_matmul():
    rng = np.random.default_rng(11)
    v, m = rng.normal(size=4), rng.normal(size=(4, 3))
    c, k = tgd.matmul(da.from_array(v, chunks=2), da.from_array(m, chunks=2), argmax=True)
    assert c.shape == k.shape == (3,)
    want_c, want_k = tg.matmul(v, m, argmax=True)
    np.testing.assert_array_equal(c.compute(), want_c)
    np.testing.assert_array_equal(k.compute(), want_k)
    with pytest.raises(ValueError, match="at least 1 dimension"):
        tgd.matmul(da.ones((), chunks=()), da.ones((4, 2), chunks=2))


def test_unknown_chunk_sizes_raise_value_error():
    x = da.ones((6, 4), chunks=2)
    with pytest.raises(ValueError, match="unknown chunk sizes; call a.compute_chunk_sizes"):
        tgd.matmul(x[x[:, 0] > 0], da.ones((4, 2), chunks=2))


def test_import_tropical_gemm_does_not_import_dask():
    code = ("import sys, tropical_gemm as tg; assert 'dask' not in sys.modules; "
            "tg.dask; print('dask' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"
