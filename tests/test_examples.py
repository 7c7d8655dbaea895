"""The examples in examples/: each runs as a script, checks itself, and gets textbook cases right."""

from __future__ import annotations

import itertools
import math
import subprocess
import sys
from functools import partial
from pathlib import Path

import numpy as np
import pytest
from script_modules import load_script

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
INF = np.inf

#: Each example, and the line it prints once its own independent check passed.
SELF_CHECKS = {
    "apsp.py": "distances agree with Floyd–Warshall, and every first hop lies on a shortest route",
    "viterbi.py": "every path and score equals the dynamic-programming loop's",
    "widest_paths.py": "every entry equals the widest-route Dijkstra's",
}
load = partial(load_script, "examples")  # an example script as a module


@pytest.mark.parametrize("script", sorted(SELF_CHECKS))
def test_example_runs_as_a_script_and_its_check_passes(script):
    done = subprocess.run([sys.executable, str(EXAMPLES / script)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    assert SELF_CHECKS[script] in done.stdout


@pytest.mark.parametrize("name, argv", [
    ("apsp", ["--nodes", "60", "--degree", "2"]),
    ("viterbi", ["--states", "3", "--symbols", "2", "--sequences", "30", "--length", "25"]),
    ("widest_paths", ["--routers", "50", "--degree", "1.5"]),
])
@pytest.mark.parametrize("seed", ["1", "2", "3"])
def test_other_seeds_and_sparser_inputs_pass_their_check(name, argv, seed, capsys):
    assert load(name).main([*argv, "--seed", seed]) == 0, capsys.readouterr().out


# ---- textbook cases, worked by hand ------------------------------------------------------------


def test_apsp_on_the_readme_graph():
    apsp = load("apsp")
    edge = np.array([[INF, 4, INF, 1],
                     [INF, INF, 1, INF],
                     [2, INF, INF, INF],
                     [INF, 2, 6, INF]], dtype=np.float32)
    dist = apsp.shortest_distances(edge)
    assert dist[0].tolist() == [0, 3, 4, 1]
    assert np.array_equal(dist, apsp.floyd_warshall(edge))
    hop = apsp.first_hops(edge, dist)
    assert apsp.route(hop, 0, 2) == [0, 3, 1, 2]  # 1 + 2 + 1 = 4 beats the direct-looking 0 -> 1 -> 2 (5)
    assert apsp.route(hop, 2, 3) == [2, 0, 3]
    assert apsp.hops_are_consistent(edge, dist, hop)


def test_apsp_routes_to_unreachable_nodes_are_empty():
    apsp = load("apsp")
    edge = np.array([[INF, 1], [INF, INF]], dtype=np.float32)
    dist = apsp.shortest_distances(edge)
    hop = apsp.first_hops(edge, dist)
    assert apsp.route(hop, 0, 1) == [0, 1] and apsp.route(hop, 1, 0) == [] and apsp.route(hop, 1, 1) == [1]


def test_apsp_consistency_check_catches_a_wrong_hop():
    apsp = load("apsp")
    edge = np.array([[INF, 1, 5], [INF, INF, 1], [INF, INF, INF]], dtype=np.float32)
    dist = apsp.shortest_distances(edge)
    hop = apsp.first_hops(edge, dist)
    assert hop[0, 2] == 1
    hop[0, 2] = 2  # the direct road: 5, not the shortest 2
    assert not apsp.hops_are_consistent(edge, dist, hop)


def test_viterbi_on_the_textbook_healthy_fever_model():
    """Wikipedia's example: normal, cold, dizzy -> Healthy, Healthy, Fever, with probability 0.01512."""
    viterbi = load("viterbi")
    hmm = viterbi.HMM.from_probabilities([0.6, 0.4], [[0.7, 0.3], [0.4, 0.6]], [[0.5, 0.4, 0.1], [0.1, 0.3, 0.6]])
    paths, scores = viterbi.viterbi(hmm, np.array([[0, 1, 2]]))
    assert paths.tolist() == [[0, 0, 1]]
    assert math.isclose(math.exp(scores[0]), 0.01512, rel_tol=1e-12)
    assert viterbi.viterbi_loop(hmm, [0, 1, 2]) == ([0, 0, 1], scores[0])


def test_viterbi_handles_impossible_emissions():
    """State 0 cannot emit symbol 1 (log 0 = -inf, the max_plus zero); the best of all 32 paths is found."""
    viterbi = load("viterbi")
    start, trans, emit = [0.5, 0.5], [[0.9, 0.1], [0.1, 0.9]], [[1.0, 0.0], [0.1, 0.9]]
    observed = [0, 0, 1, 1, 0]
    hmm = viterbi.HMM.from_probabilities(start, trans, emit)
    paths, scores = viterbi.viterbi(hmm, np.array([observed]))

    def probability(path):
        p = start[path[0]] * emit[path[0]][observed[0]]
        for t in range(1, len(path)):
            p *= trans[path[t - 1]][path[t]] * emit[path[t]][observed[t]]
        return p

    best = max(itertools.product((0, 1), repeat=len(observed)), key=probability)
    assert paths.tolist() == [list(best)] == [[0, 0, 1, 1, 0]]
    assert math.isclose(math.exp(scores[0]), probability(best), rel_tol=1e-12)
    assert viterbi.viterbi_loop(hmm, observed) == (paths[0].tolist(), scores[0])


def test_widest_paths_on_a_small_network():
    widest = load("widest_paths")
    no, same = widest.NO_LINK, widest.SAME_ROUTER
    capacity = np.array([[same, 5, 1, no],
                         [5, same, 3, no],
                         [1, 3, same, 4],
                         [no, no, 4, same]], dtype=np.int32)
    width = widest.widest(capacity)
    assert width[0].tolist() == [same, 5, 3, 3]  # 0 -> 2 through 1 is 3 wide, the direct link only 1
    assert width[1, 3] == 3 and width[3, 2] == 4
    assert all(width[s].tolist() == widest.widest_from(capacity, s) for s in range(4))


def test_widest_paths_of_separate_networks_stay_separate():
    widest = load("widest_paths")
    no, same = widest.NO_LINK, widest.SAME_ROUTER
    capacity = np.array([[same, 7, no], [7, same, no], [no, no, same]], dtype=np.int32)
    width = widest.widest(capacity)
    assert width[0, 2] == no and width[2, 2] == same and width[1, 0] == 7
