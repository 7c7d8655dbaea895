"""The counting semirings on the GPU (``count_forward.cu``) against the CPU engine, value for value and count for count.

The CPU engine is checked against the naive reference in test_counting.py.
Inputs have many ties (small integer values), the zero, the other infinity
and NaN; sizes are ragged against the kernel's 16 × 16 tile.
"""

from __future__ import annotations

import os
import subprocess
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest

import tropical_gemm as tg
from script_modules import load_script
from test_counting import DTYPES, SEMIRINGS, random_pair

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def cp():
    import cupy

    return cupy


def on_gpu(cp, pair: tuple) -> tuple:
    return cp.asarray(pair[0]), cp.asarray(pair[1])


def assert_same(cp, got: tuple, want: tuple) -> None:
    values, counts = got
    assert isinstance(values, cp.ndarray) and isinstance(counts, cp.ndarray)
    assert values.dtype == want[0].dtype and counts.dtype == np.int64
    np.testing.assert_array_equal(cp.asnumpy(values), want[0])
    assert not np.signbit(cp.asnumpy(values)[want[0] == 0]).any()
    np.testing.assert_array_equal(cp.asnumpy(counts), want[1])


SHAPES = [((1, 1), (1, 1)), ((1, 33), (33, 1)), ((17, 15), (15, 31)), ((16, 16), (16, 16)), ((33, 47), (47, 18)),
          ((4, 0), (0, 6)), ((0, 3), (3, 2)), ((100, 3), (3, 70)), ((3, 5, 17, 9), (9, 20)),
          ((2, 1, 17, 20), (3, 20, 19)), ((1, 130), (130, 1))]


@pytest.mark.parametrize("semiring", SEMIRINGS)
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shapes", SHAPES, ids=str)
def test_matmul_matches_the_cpu_engine(cp, semiring, dtype, shapes):
    rng = np.random.default_rng(zlib.crc32(repr((semiring, dtype, shapes)).encode()))
    a, b = (random_pair(rng, s, dtype, semiring) for s in shapes)
    assert_same(cp, tg.matmul(on_gpu(cp, a), on_gpu(cp, b), semiring), tg.matmul(a, b, semiring))


@pytest.mark.parametrize("semiring", SEMIRINGS)
def test_transposed_strided_and_broadcast_operands(cp, semiring):
    rng = np.random.default_rng(7)
    av, ac = random_pair(rng, (20, 37), "float32", semiring)
    bv, bc = random_pair(rng, (19, 37), "float32", semiring)
    want = tg.matmul((av, ac), (bv.T, bc.T), semiring)
    gav, gac, gbv, gbc = (cp.asarray(x) for x in (av, ac, bv, bc))
    assert_same(cp, tg.matmul((gav, gac), (gbv.T, cp.asfortranarray(gbc).T), semiring), want)
    assert_same(cp, tg.matmul((gav, gac), (gbv.T, gbc.T.astype(cp.int32)), semiring), want)
    wide_v, wide_c = cp.zeros((20, 74), cp.float32), cp.zeros((20, 74), cp.int64)
    wide_v[:, ::2], wide_c[:, ::2] = gav, gac
    assert_same(cp, tg.matmul((wide_v[:, ::2], wide_c[:, ::2]), (gbv.T, gbc.T), semiring), want)
    # a batch of four dims that does not fold (split into launches) and a broadcast one
    bav, bac = random_pair(rng, (2, 3, 2, 2, 5, 6), "float64", semiring)
    bbv, bbc = random_pair(rng, (3, 1, 2, 6, 4), "float64", semiring)
    perm = (0, 2, 1, 3, 4, 5)
    a = (np.ascontiguousarray(bav.transpose(perm)).transpose(perm), bac)
    assert_same(cp, tg.matmul(on_gpu(cp, a), on_gpu(cp, (bbv, bbc)), semiring), tg.matmul(a, (bbv, bbc), semiring))


def test_grids_loop_past_their_limits(cp):
    rng = np.random.default_rng(8)
    many = random_pair(rng, (70000, 1, 2), "float32", "count_max_plus")
    other = random_pair(rng, (70000, 2, 1), "float32", "count_max_plus")
    assert_same(cp, tg.matmul(on_gpu(cp, many), on_gpu(cp, other), "count_max_plus"),
                tg.matmul(many, other, "count_max_plus"))
    tall = random_pair(rng, (1_100_000, 2), "float32", "count_min_plus")
    column = random_pair(rng, (2, 1), "float32", "count_min_plus")
    assert_same(cp, tg.matmul(on_gpu(cp, tall), on_gpu(cp, column), "count_min_plus"),
                tg.matmul(tall, column, "count_min_plus"))


def test_overflow_and_negative_counts_raise_on_the_gpu(cp):
    big = 2**62
    zeros = cp.zeros((1, 2)), cp.zeros((2, 1))
    ones = cp.ones((2, 1), dtype=cp.int64)
    _, c = tg.matmul((zeros[0], cp.asarray([[big, big - 1]])), (zeros[1], ones), "count_max_plus")
    assert int(c[0, 0]) == 2**63 - 1
    with pytest.raises(OverflowError):
        tg.matmul((zeros[0], cp.asarray([[big, big]])), (zeros[1], ones), "count_max_plus")
    with pytest.raises(OverflowError):
        tg.matmul((zeros[0], cp.asarray([[2**32, 1]])), (zeros[1], cp.asarray([[2**31], [1]])), "count_min_plus")
    v, c = tg.matmul((cp.asarray([[0.0, -1.0]]), cp.asarray([[3, big]])), (zeros[1], cp.asarray([[5], [4]])),
                     "count_max_plus")
    assert (float(v[0, 0]), int(c[0, 0])) == (0.0, 15)
    with pytest.raises(ValueError, match="a count is negative"):
        tg.matmul((zeros[0], cp.asarray([[1, -1]])), (zeros[1], ones), "count_max_plus")
    v, c = tg.matmul((zeros[0], cp.asarray([[1, 2]])), (zeros[1], ones), "count_max_plus")  # flags start clean
    assert int(c[0, 0]) == 3


@pytest.mark.parametrize("semiring", SEMIRINGS)
@pytest.mark.parametrize("subscripts, shapes", [
    ("ij,jk,kl->il", [(5, 6), (6, 7), (7, 3)]), ("ij,jk->", [(9, 4), (4, 8)]), ("ii->i", [(6, 6)]),
    ("bij,bjk->bik", [(3, 4, 5), (3, 5, 2)]), ("ij,jk->ik", [(3, 0), (0, 2)]), ("ijk,jkl->il", [(2, 3, 4), (3, 4, 5)])])
def test_einsum_matches_the_cpu(cp, semiring, subscripts, shapes):
    rng = np.random.default_rng(zlib.crc32(repr((semiring, subscripts)).encode()))
    pairs = [random_pair(rng, s, "float32", semiring, specials=False) for s in shapes]
    on_device = [on_gpu(cp, p) for p in pairs]
    if subscripts.startswith("ijk"):  # a transposed operand: the einsum's copy to contiguous runs on the GPU
        values = on_device[1][0]
        on_device[1] = (cp.ascontiguousarray(values.transpose(0, 2, 1)).transpose(0, 2, 1), on_device[1][1])
        assert not on_device[1][0].flags.c_contiguous
    want = tg.einsum(subscripts, *pairs, semiring=semiring)
    assert_same(cp, tg.einsum(subscripts, *on_device, semiring=semiring), tuple(np.asarray(x) for x in want))


def test_count_mis_on_the_gpu_matches_the_cpu(cp):
    import networkx as nx

    count_mis = load_script("examples", "count_mis")

    for vertices, seed in ((20, 1), (60, 0)):
        graph = nx.random_regular_graph(3, vertices, seed=seed)
        assert count_mis.count_mis(graph, cp) == count_mis.count_mis(graph, np)


@pytest.mark.parametrize("argv", [[], ["--vertices", "20"], ["--vertices", "120"]])
def test_the_example_checks_its_answer_on_the_gpu(argv):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, str(ROOT / "examples" / "count_mis.py"), "--device", "cuda", *argv],
                          capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "match an independent count" in done.stdout
