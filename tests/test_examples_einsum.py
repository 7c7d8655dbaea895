"""The einsum examples: each runs as a script and checks its own answer (CPU here, GPU on the device)."""

from __future__ import annotations

import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
from script_modules import load_script

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
load = partial(load_script, "examples")  # an example script as a module


@pytest.mark.parametrize("script", ["einsum_viterbi.py", "einsum_mis.py"])
def test_runs_as_a_script_with_its_defaults_and_its_check_passes(script):
    done = subprocess.run([sys.executable, str(EXAMPLES / script)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert load(script[:-3]).CHECK in done.stdout


@pytest.mark.parametrize("seed", ["1", "2"])
def test_brute_force_sized_graphs_and_short_chains(seed, capsys):
    assert load("einsum_mis").main(["--vertices", "20", "--seed", seed]) == 0, capsys.readouterr().out
    assert load("einsum_viterbi").main(["--steps", "50", "--states", "5", "--seed", seed]) == 0, \
        capsys.readouterr().out


def test_the_checks_can_fail():
    mis = load("einsum_mis")
    import networkx as nx

    graph = nx.random_regular_graph(3, 12, seed=0)
    assert mis.brute_force_size(graph) == mis.exact_size(graph)
    assert mis.brute_force_size(nx.complete_graph(5)) == 1
    vit = load("einsum_viterbi")
    import numpy as np

    hmm = vit.make_hmm(3, 2, 10, np.random.default_rng(0))
    score, path = vit.dp_viterbi(*hmm)
    assert vit.viterbi_einsum(*hmm, np) == (pytest.approx(score), path)


@pytest.mark.gpu
@pytest.mark.parametrize("script, argv", [("einsum_viterbi.py", []), ("einsum_mis.py", []),
                                          ("einsum_mis.py", ["--vertices", "20"])])
def test_gpu_versions_check_their_answers(script, argv):
    done = subprocess.run([sys.executable, str(EXAMPLES / script), "--device", "cuda", *argv],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert load(script[:-3]).CHECK in done.stdout


def test_viterbi_is_the_same_in_either_order(capsys):
    assert load("einsum_viterbi").main(["--steps", "200", "--states", "8", "--optimize", "auto"]) == 0
    assert load("einsum_viterbi").main(["--steps", "200", "--states", "8", "--optimize", "fold"]) == 0
