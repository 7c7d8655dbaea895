"""benchmarks/einsum.py's own parts, on the CPU and tiny inputs: the GPU run is no place to find a typo."""

from __future__ import annotations

import numpy as np
import pytest
from script_modules import load_script

import tropical_gemm as tg
from tropical_gemm.einsum import einsum_plan


@pytest.fixture(scope="module")
def bench():
    return load_script("benchmarks", "einsum")


def test_left_fold_is_a_valid_chain_order(bench):
    args = bench.chain_args(7, 3)
    plan = einsum_plan(*args, optimize=bench.left_fold(7))
    assert all(s.out_shape == (3, 3) for s in plan.steps)  # never an outer product of far-apart matrices
    # float32 sums associate differently in another order: equal to rounding
    np.testing.assert_allclose(tg.einsum(*args, optimize=bench.left_fold(7)), tg.einsum(*args), rtol=1e-6)


def test_labels_of_undoes_the_grouping(bench):
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((2, 3, 4, 5)), rng.standard_normal((5, 2, 6, 3))
    plan = einsum_plan(a, [0, 1, 2, 3], b, [3, 0, 4, 1], [0, 2, 4])
    step = plan.steps[-1]
    assert (bench._labels_of(step, "a"), bench._labels_of(step, "b")) == ((0, 1, 2, 3), (3, 0, 4, 1))


def test_a_small_run_checks_and_reports(bench, tmp_path):
    dev = bench.Device("cpu")
    args, check = bench.mis_args(12)
    row = bench.network_case(dev, "mis-12", args, bench.tse_module(), 1, check)
    assert row["checked"] is True and row["value"] > 0
    if "tse_seconds" in row:
        assert row["identical"] is True
    report = {"environment": {"device": "test", "date": "2026-01-01", "note": None}, "rows": [
        row, bench.case_single(dev, "matmul-8", "ij,jk->ik", [(8, 8), (8, 8)], None, 1), bench.overhead(dev, 1)]}
    assert any("mis-12" in line for line in bench.table(report))
    assert bench.svg(report).startswith("<svg") and "mis-12" in bench.svg(report)


def test_large_cases_run_sized_down_on_the_cpu(bench):
    """The large rows' code paths (several contracted indices, a chain, a many-state HMM) on the CPU sizes."""
    rows = bench.large_cases(bench.Device("cpu"), bench.tse_module(), 1, gpu=False)
    assert [r["size"] for r in rows] == [bench.SIZE_LARGE] * 3 + [bench.SIZE_MEMORY]
    assert rows[-1]["checked"] is True
    hmm = rows[-1]  # its floor: 15 matrices of 256² float32 and the start vector, read once at 1 byte/s here
    assert hmm["operand_bytes"] == 15 * 256 * 256 * 4 + 256 * 4
    floor = bench.bandwidth_floor(hmm, hmm["operand_bytes"], 1.0)
    assert floor["floor_seconds"] == hmm["operand_bytes"]
    assert floor["of_bandwidth"] == floor["floor_seconds"] / hmm["seconds"]
    assert ("speedup_ceiling" in floor) == ("tse_seconds" in hmm)
    for r in rows:
        if "tse_seconds" in r:
            assert r["identical"] is True and r.get("same_argmax", True) is True
    assert all(r["case"] in line for r, line in zip(rows, bench.table({"environment": {"note": None},
                                                                            "rows": rows})[1:]))
