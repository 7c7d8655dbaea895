"""examples/apsp_dask.py: out-of-core all-pairs shortest paths with tropical_gemm.dask."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("dask")

import tropical_gemm as tg  # noqa: E402
from test_examples import EXAMPLES, load  # noqa: E402


def test_runs_as_a_script_within_its_budget_and_agrees_with_dijkstra():
    """A 9 MB matrix under a 6 MB budget: large enough for several chunks, small enough for ~10 s."""
    done = subprocess.run([sys.executable, str(EXAMPLES / "apsp_dask.py"), "--nodes", "1500", "--budget-mb", "6"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "distances from every sampled source equal Dijkstra's, within the memory budget" in done.stdout


def test_a_matrix_that_fits_the_budget_is_refused():
    done = subprocess.run([sys.executable, str(EXAMPLES / "apsp_dask.py"), "--nodes", "100", "--budget-mb", "8"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "fits the budget" in done.stderr


def test_squaring_on_disk_equals_squaring_in_memory(tmp_path):
    """The file-to-file squarings give exactly the single-array min_plus fixed point."""
    apsp = load("apsp_dask")
    graph = apsp.sparse_graph(90, 2.0, np.random.default_rng(4))
    dist, spare = tmp_path / "a.npy", tmp_path / "b.npy"
    apsp.write_distances(graph, dist, band=32)
    np.lib.format.open_memmap(spare, mode="w+", dtype=np.float32, shape=(90, 90)).flush()
    want = np.load(dist)
    while not np.array_equal(squared := tg.matmul(want, want, "min_plus"), want):
        want = squared
    result, rounds = apsp.square_until_stable(dist, spare, chunk=25)
    assert np.array_equal(np.load(result), want) and rounds >= 2
