"""How many maximum independent sets a graph has, from a counting tropical tensor network.

The network of ``einsum_mis.py`` (a vector ``[0, 1]`` per vertex, a matrix
``[[0, 0], [0, -inf]]`` per edge), with every entry reached in one way:
each operand is a pair (values, counts) with counts 1, and ``count_max_plus``
contracts it to the size of the largest independent set and the number of
sets of that size.  Checked: the size against the plain ``max_plus``
contraction, the count by brute force over all subsets (up to 24 vertices),
by networkx's maximum cliques of the complement (up to 40), and beyond that
against a contraction in another order.

    python examples/count_mis.py [--vertices 60] [--degree 3] [--device cpu|cuda|auto]
"""

from __future__ import annotations

import sys
import time

import networkx as nx
import numpy as np

import tropical_gemm as tg
from einsum_mis import graph_from_arguments, independent_set_sizes
from einsum_mis import network as plain_network

CHECK = "the size and the count match an independent count"
#: The largest graphs whose count is checked by brute force, and by networkx's clique enumeration.
BRUTE_FORCE_VERTICES, NETWORKX_VERTICES = 24, 40


def network(graph: nx.Graph, xp, dtype=np.float32) -> list:
    """The interleaved einsum arguments: each vertex's and edge's values, each reached in one way."""
    args = plain_network(graph, xp, dtype)
    for i in range(0, len(args) - 1, 2):
        values = args[i]
        args[i] = (values, xp.ones(values.shape, dtype=np.int64))
    return args


def count_mis(graph: nx.Graph, xp, optimize="auto") -> tuple[int, int]:
    """(size of the largest independent set, how many independent sets have that size)."""
    size, count = tg.einsum(*network(graph, xp), semiring="count_max_plus", optimize=optimize)
    return int(size), int(count)


def brute_force_count(graph: nx.Graph) -> int:
    """The number of independent sets of the largest size, by brute force."""
    sizes = independent_set_sizes(graph)
    return int((sizes == sizes.max()).sum())


def networkx_count(graph: nx.Graph) -> int:
    """The maximum independent sets are the maximum cliques of the complement, each a maximal clique."""
    sizes = [len(c) for c in nx.find_cliques(nx.complement(graph))]
    return sizes.count(max(sizes))


def independent_count(graph: nx.Graph, xp) -> tuple[int, str]:
    """The count by the most independent method the graph's size allows, and its name."""
    n = graph.number_of_nodes()
    if n <= BRUTE_FORCE_VERTICES:
        return brute_force_count(graph), "brute force"
    if n <= NETWORKX_VERTICES:
        return networkx_count(graph), "networkx"
    return count_mis(graph, xp, optimize="greedy")[1], "the greedy contraction order"


def main(argv: "list[str] | None" = None) -> int:
    args, graph, xp = graph_from_arguments(__doc__.splitlines()[0], argv)
    start = time.perf_counter()
    size, count = count_mis(graph, xp, args.optimize)
    seconds = time.perf_counter() - start
    print(f"{args.vertices}-vertex {args.degree}-regular graph on {xp.__name__}: {count} maximum independent "
          f"sets of size {size} in {seconds:.3f} s (first call, planning included)")
    plain = int(tg.einsum(*plain_network(graph, xp), semiring="max_plus", optimize=args.optimize))
    want, method = independent_count(graph, xp)
    ok = size == plain and count == want
    print(f"{CHECK} ({method})" if ok else f"MISMATCH: size {size} (max_plus: {plain}), count {count} "
                                           f"({method}: {want})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
