"""Widest (bottleneck) paths with max_min: the best bandwidth between every pair of routers.

A route is as wide as its narrowest link, and the widest route between two
routers is the best of those.  That is the max_min semiring (⊕ = max,
⊗ = min): ``W ⊗ W`` holds the widest routes of at most two links, and
squaring until nothing changes gives all of them.  Capacities are int32
here, to show integer products: the semiring's zero, the dtype's minimum,
stands for "no link", and its one, the dtype's maximum, for "the same
router".  A maximum-bottleneck variant of Dijkstra's algorithm, with a heap,
checks every entry.

    python examples/widest_paths.py [--routers 200] [--seed 0]
"""

from __future__ import annotations

import argparse
import heapq
import sys

import numpy as np

import tropical_gemm as tg

NO_LINK = np.iinfo(np.int32).min  # the max_min zero: no route at all
SAME_ROUTER = np.iinfo(np.int32).max  # the max_min one: no bottleneck at all


def random_network(routers: int, degree: float, rng: np.random.Generator) -> np.ndarray:
    """Symmetric link capacities in Mbit/s (10..1000), ``NO_LINK`` where two routers are not linked."""
    linked = np.triu(rng.random((routers, routers)) < degree / routers, 1)
    capacity = np.where(linked, rng.integers(1, 101, (routers, routers)) * 10, NO_LINK).astype(np.int32)
    capacity = np.maximum(capacity, capacity.T)
    np.fill_diagonal(capacity, SAME_ROUTER)
    return capacity


def widest(capacity: np.ndarray) -> np.ndarray:
    """Square in max_min until nothing changes: the bandwidth of the widest route between every pair."""
    width = capacity
    while True:
        wider = tg.matmul(width, width, "max_min")
        if np.array_equal(wider, width):
            return width
        width = wider


def widest_from(capacity: np.ndarray, source: int) -> list[int]:
    """Dijkstra with the widest route first instead of the shortest: an independent check of one row."""
    best = [int(NO_LINK)] * len(capacity)
    best[source] = int(SAME_ROUTER)
    heap = [(-best[source], source)]
    while heap:
        negative, u = heapq.heappop(heap)
        if -negative < best[u]:
            continue
        for v in np.flatnonzero(capacity[u] != NO_LINK).tolist():
            through = min(-negative, int(capacity[u, v]))
            if through > best[v]:
                best[v] = through
                heapq.heappush(heap, (-through, v))
    return best


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--routers", type=int, default=200)
    parser.add_argument("--degree", type=float, default=3.0, help="average links per router")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    capacity = random_network(args.routers, args.degree, np.random.default_rng(args.seed))
    width = widest(capacity)

    for source in range(args.routers):
        if width[source].tolist() != widest_from(capacity, source):
            print(f"FAILED: widest routes from router {source} differ from Dijkstra's")
            return 1
    links = int((capacity[np.triu_indices(args.routers, 1)] != NO_LINK).sum())
    off_diagonal = ~np.eye(args.routers, dtype=bool)
    connected = width[off_diagonal] != NO_LINK
    print(f"{args.routers} routers, {links} links of 10..1000 Mbit/s; "
          f"{int(connected.sum())} of {int(off_diagonal.sum())} ordered pairs are connected")
    print(f"median widest-route bandwidth between connected routers: "
          f"{int(np.median(width[off_diagonal][connected]))} Mbit/s")
    print("every entry equals the widest-route Dijkstra's")
    return 0


if __name__ == "__main__":
    sys.exit(main())
