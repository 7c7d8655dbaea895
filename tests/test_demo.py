"""The demo (all-pairs shortest paths by min_plus squaring), small and fast."""

from __future__ import annotations

import argparse
import subprocess
import sys

import numpy as np
import pytest

from conftest import gpu_unavailable_reason


@pytest.fixture
def demo():
    """Imported per test, not at collection: test_cli_cache swaps in a fake demo module."""
    from tropical_gemm import demo

    return demo


def parse(demo, *argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    demo.add_demo_arguments(parser)
    return parser.parse_args(list(argv))


def test_one_node_is_refused_by_the_option_itself(demo, capsys):
    """The demo needs two nodes: argparse says so (one rule), naming the option."""
    with pytest.raises(SystemExit):
        parse(demo, "--nodes", "1")
    assert "argument --nodes: a number of nodes must be at least 2, got '1'" in capsys.readouterr().err


def test_no_check_is_not_reported_as_a_passed_check(demo, capsys):
    assert demo.run_demo(parse(demo, "--nodes", "12", "--device", "cpu", "--check-sources", "0")) == 0
    out = capsys.readouterr().out
    assert "not checked against Dijkstra (--check-sources 0)" in out and "check passed" not in out


def test_defaults_are_a_few_thousand_nodes_on_the_best_device(demo):
    args = parse(demo)
    assert args.nodes >= 1000 and args.device == "auto"


def test_small_run_on_the_cpu_passes_its_check(demo, capsys):
    assert demo.run_demo(parse(demo, "--nodes", "150", "--device", "cpu", "--seed", "3")) == 0
    out = capsys.readouterr().out
    from tropical_gemm.engines.cpu import kernels_description

    assert f"engine: cpu ({kernels_description()} on " in out  # the kernels that served, by name
    assert "G ops/s" in out
    assert "check passed" in out


def test_auto_uses_cuda_exactly_when_a_gpu_is_usable(demo, capsys):
    assert demo.run_demo(parse(demo, "--nodes", "40", "--device", "auto")) == 0
    expected = "engine: cpu" if gpu_unavailable_reason() else "engine: cuda"
    assert expected in capsys.readouterr().out


@pytest.mark.gpu
def test_small_run_on_cuda_passes_its_check(demo, capsys):
    assert demo.run_demo(parse(demo, "--nodes", "150", "--device", "cuda")) == 0
    assert "engine: cuda" in capsys.readouterr().out


def test_cuda_without_a_gpu_is_an_error(demo, capsys):
    reason = gpu_unavailable_reason()
    status = demo.run_demo(parse(demo, "--nodes", "10", "--device", "cuda"))
    if reason is None:
        assert status == 0
    else:
        from tropical_gemm.info import cuda_report  # bench's rule and words: the driver, and what to do

        assert status == 2 and f"--device cuda, but {cuda_report(nvrtc_usable=False)['problem']}" in capsys.readouterr().err


def test_the_check_catches_a_wrong_distance(demo):
    graph = demo.random_graph(60, 4.0, seed=1)
    exact = np.stack([demo.dijkstra(graph, s) for s in range(60)])
    assert demo.check(graph, exact, np.arange(60)) == []
    wrong = exact.copy()
    wrong[17, 5] += 1
    assert demo.check(graph, wrong, np.arange(60)) == [17]


def test_squaring_matches_floyd_warshall(demo):
    """A second independent method, over every pair of a small graph."""
    graph = demo.random_graph(50, 3.0, seed=2)
    d = demo.distance_matrix(graph).astype(np.float64)
    closure = demo.shortest_paths(demo.distance_matrix(graph), demo.cpu_backend())
    for k in range(graph.nodes):
        d = np.minimum(d, d[:, k : k + 1] + d[k : k + 1, :])
    np.testing.assert_array_equal(closure.distances, d.astype(np.float32))
    assert np.isinf(d).any() and np.isfinite(d).sum() > graph.nodes  # both kinds of pairs occur


def test_python_dash_m_demo():
    done = subprocess.run([sys.executable, "-m", "tropical_gemm", "demo", "--nodes", "64", "--device", "cpu"],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "check passed" in done.stdout
