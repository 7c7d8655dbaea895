"""The maximum independent set of a graph, and the set itself, from a tropical tensor network.

Each vertex v carries a variable x_v ∈ {0, 1} (1: in the set) and a vector
``W_v = [0, 1]`` (what it adds to the set's size); each edge (u, v) carries a
matrix ``B = [[0, 0], [0, -inf]]`` that forbids both ends.  The max-plus
contraction of all of them over every x_v is the size of the largest
independent set, and ``return_configuration=True`` gives the x_v that win:
the set.  It is checked for independence with networkx, and for size by brute
force (up to 24 vertices) or networkx's exact maximum clique of the complement.

    python examples/einsum_mis.py [--vertices 60] [--degree 3] [--device cpu|cuda|auto]
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
import time

import networkx as nx
import numpy as np

import tropical_gemm as tg

CHECK = "the set is independent and as large as the exact maximum"


def network(graph: nx.Graph, xp, dtype=np.float32) -> list:
    """The interleaved einsum arguments: one vector per vertex, one matrix per edge, labels = vertices."""
    vertex = xp.asarray(np.array([0, 1], dtype=dtype))
    edge = xp.asarray(np.array([[0, 0], [0, -np.inf]], dtype=dtype))
    args: list = []
    for v in graph.nodes:
        args += [vertex, [v]]
    for u, v in graph.edges:
        args += [edge, [u, v]]
    return args + [[]]


def mis(graph: nx.Graph, xp, optimize="auto") -> tuple[int, set]:
    size, config = tg.einsum(*network(graph, xp), semiring="max_plus", optimize=optimize,
                             return_configuration=True)
    chosen = {v for v in graph.nodes if int(config[v]) == 1}
    return int(size), chosen


def independent_set_sizes(graph: nx.Graph) -> np.ndarray:
    """The size of every independent subset of the vertices, over all 2^n subsets as bit masks."""
    n = graph.number_of_nodes()
    index = {v: i for i, v in enumerate(graph.nodes)}
    masks = np.arange(2**n, dtype=np.int64)
    ok = np.ones(2**n, dtype=bool)
    for u, v in graph.edges:
        ok &= ((masks >> index[u]) & 1) * ((masks >> index[v]) & 1) == 0
    popcount = np.zeros(2**n, dtype=np.int64)
    for i in range(n):
        popcount += (masks >> i) & 1
    return popcount[ok]


def brute_force_size(graph: nx.Graph) -> int:
    """The largest independent set, by brute force."""
    return int(independent_set_sizes(graph).max())


def exact_size(graph: nx.Graph) -> int:
    if graph.number_of_nodes() <= 24:
        return brute_force_size(graph)
    _, weight = nx.max_weight_clique(nx.complement(graph), weight=None)
    return int(weight)


def array_module(device: str):
    """numpy, or cupy for --device cuda (and for auto where cupy finds a GPU)."""
    gpu = device == "cuda" or (device == "auto" and importlib.util.find_spec("cupy") is not None
                               and importlib.import_module("cupy").is_available())
    return importlib.import_module("cupy") if gpu else np


def graph_from_arguments(description: str, argv: "list[str] | None") -> tuple[argparse.Namespace, nx.Graph, object]:
    """The command line of the graph examples: the options, their random regular graph, and the array module."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--vertices", type=int, default=60)
    parser.add_argument("--degree", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--device", choices=["cpu", "cuda", "auto"], default="cpu")
    parser.add_argument("--optimize", default="auto")
    args = parser.parse_args(argv)
    return args, nx.random_regular_graph(args.degree, args.vertices, seed=args.seed), array_module(args.device)


def main(argv: "list[str] | None" = None) -> int:
    args, graph, xp = graph_from_arguments(__doc__.splitlines()[0], argv)
    start = time.perf_counter()
    size, chosen = mis(graph, xp, args.optimize)
    seconds = time.perf_counter() - start
    independent = not any(graph.has_edge(u, v) for u in chosen for v in chosen)
    want = exact_size(graph)
    print(f"{args.vertices}-vertex {args.degree}-regular graph on {xp.__name__}: maximum independent set "
          f"{size} in {seconds:.3f} s (first call, planning included): {sorted(chosen)}")
    ok = independent and len(chosen) == size == want
    print(CHECK if ok else f"MISMATCH: independent={independent}, |set|={len(chosen)}, value={size}, exact={want}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
