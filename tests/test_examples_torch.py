"""The torch example learns what it claims to: loss down, identifiable road lengths recovered."""

from __future__ import annotations

import runpy
from pathlib import Path
from types import SimpleNamespace

import pytest

torch = pytest.importorskip("torch")

pytestmark = pytest.mark.torch

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "learn_shortest_paths.py"


@pytest.fixture(scope="module")
def example():
    return SimpleNamespace(**runpy.run_path(str(EXAMPLE)))


@pytest.mark.parametrize("seed", [0, 1])
def test_training_recovers_identifiable_road_lengths(example, seed):
    result = example.train(seed=seed)
    assert result.losses[-1] < 1e-4 * result.losses[0]
    assert result.identifiable.sum() >= 0.8 * torch.isfinite(result.true_lengths).sum()
    assert result.identifiable_error() < 0.02
    # Roads stay roads and non-roads stay absent.
    assert torch.equal(torch.isfinite(result.learned_lengths), torch.isfinite(result.true_lengths))


def test_shortest_distances_match_floyd_warshall(example):
    lengths = example.random_network(9, 12, torch.Generator().manual_seed(3))
    expected = lengths.clone().fill_diagonal_(0.0)
    for k in range(9):
        expected = torch.minimum(expected, expected[:, k : k + 1] + expected[k : k + 1, :])
    torch.testing.assert_close(example.shortest_distances(lengths), expected)


def test_script_runs_and_reports(capsys):
    runpy.run_path(str(EXAMPLE), run_name="__main__")
    out = capsys.readouterr().out
    assert "final      loss" in out and "identifiable" in out
