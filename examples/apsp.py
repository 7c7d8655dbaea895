"""All-pairs shortest paths with min_plus, and the routes themselves from the argmax.

In the min_plus semiring (⊕ = min, ⊗ = +) the product of a distance matrix
with itself holds the shortest paths of at most two edges, so squaring it
log2(n) times gives every shortest path.  One more product, of the edge
matrix with the distances, picks for every pair (i, j) the best first hop:

    next[i, j] = argmin_k  edge[i, k] + dist[k, j]

which is exactly what ``matmul(..., argmax=True)`` returns.  Following
``next`` from i until j spells out the route.  Floyd–Warshall, a different
algorithm, checks the distances, and every first hop is checked to be a road
after which the rest of the way is exactly the remaining distance.

    python examples/apsp.py [--nodes 300] [--seed 0]
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

import tropical_gemm as tg


def random_edges(nodes: int, degree: float, rng: np.random.Generator) -> np.ndarray:
    """``edge[i, j]``: the length of the road i -> j (integers 1..9 stored as float32, so sums are exact), or inf."""
    edge = np.where(rng.random((nodes, nodes)) < degree / nodes, rng.integers(1, 10, (nodes, nodes)), np.inf)
    np.fill_diagonal(edge, np.inf)
    return edge.astype(np.float32)


def shortest_distances(edge: np.ndarray) -> np.ndarray:
    """Square ``edge`` with a zero diagonal in min_plus until it stops changing: at most log2(n) products."""
    dist = edge.copy()
    np.fill_diagonal(dist, 0)
    while True:
        longer = tg.matmul(dist, dist, "min_plus")
        if np.array_equal(longer, dist):
            return dist
        dist = longer


def first_hops(edge: np.ndarray, dist: np.ndarray) -> np.ndarray:
    """``next[i, j]``: the first node after i on a shortest route to j; -1 where j is unreachable."""
    _, hop = tg.matmul(edge, dist, "min_plus", argmax=True)
    return hop


def route(hop: np.ndarray, source: int, target: int) -> list[int]:
    """The nodes of a shortest route, ``source`` first, ``target`` last; empty if there is none."""
    if source == target:
        return [source]
    if hop[source, target] < 0:
        return []
    nodes = [source]
    while nodes[-1] != target:
        nodes.append(int(hop[nodes[-1], target]))
    return nodes


def hops_are_consistent(edge: np.ndarray, dist: np.ndarray, hop: np.ndarray) -> bool:
    """For every connected pair i != j, the hop k is a road with ``edge[i, k] + dist[k, j] == dist[i, j]``.

    Roads are at least 1 long, so dist[k, j] < dist[i, j]: following hops
    reaches j, and by induction every route adds up to its distance.
    """
    i, j = np.nonzero(np.isfinite(dist) & ~np.eye(len(dist), dtype=bool))
    k = hop[i, j]
    return bool((k >= 0).all() and np.array_equal(edge[i, k] + dist[k, j], dist[i, j]))


def floyd_warshall(edge: np.ndarray) -> np.ndarray:
    """The textbook O(n³) relaxation, one intermediate node at a time: an independent check."""
    dist = edge.copy()
    np.fill_diagonal(dist, 0)
    for k in range(len(dist)):
        np.minimum(dist, dist[:, k:k + 1] + dist[k], out=dist)
    return dist


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--nodes", type=int, default=300)
    parser.add_argument("--degree", type=float, default=4.0, help="average out-degree")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    edge = random_edges(args.nodes, args.degree, rng)
    dist = shortest_distances(edge)
    hop = first_hops(edge, dist)

    if not np.array_equal(dist, floyd_warshall(edge)):
        print("FAILED: min_plus squaring and Floyd–Warshall disagree")
        return 1
    if not hops_are_consistent(edge, dist, hop):
        print("FAILED: a first hop is not on a shortest route")
        return 1
    reachable = np.isfinite(dist)
    far = np.unravel_index(np.argmax(np.where(reachable, dist, -1)), dist.shape)
    print(f"{args.nodes} nodes, {int(np.isfinite(edge).sum())} roads; {int(reachable.sum())} of "
          f"{args.nodes ** 2} pairs are connected")
    print(f"the farthest pair: {far[0]} -> {far[1]}, distance {dist[far]:.0f}, "
          f"route {' -> '.join(map(str, route(hop, int(far[0]), int(far[1]))))}")
    print("distances agree with Floyd–Warshall, and every first hop lies on a shortest route")
    return 0


if __name__ == "__main__":
    sys.exit(main())
