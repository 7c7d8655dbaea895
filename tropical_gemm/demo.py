"""``python -m tropical_gemm demo``: all-pairs shortest paths by repeated min_plus squaring.

A random weighted directed graph becomes its distance matrix D (0 on the
diagonal, the edge weight where there is an edge, +inf elsewhere).  In the
min_plus semiring D ⊗ D holds the shortest paths of at most two edges, so
squaring until nothing changes gives every shortest path: about log2 of the
longest shortest path's hop count products of n^3.  The answer is checked
against Dijkstra's algorithm (heapq, plain Python) from a sample of sources.

Weights are small integers stored as float32, so every path length is exact
and the two methods must agree to the bit.
"""

from __future__ import annotations

import argparse
import heapq
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from .api import matmul
from .options import real_number, whole_number

MAX_WEIGHT = 100
#: The distance matrix is dense: this many nodes already take 16 GiB of float32.
MAX_NODES = 2**16


def add_demo_arguments(parser: argparse.ArgumentParser) -> None:
    """The demo's options (the CLI owns the parser; ``run_demo`` reads the namespace)."""
    parser.add_argument("--nodes", type=whole_number(2, MAX_NODES, "a number of nodes"), default=2000,
                        help="number of nodes (default: 2000)")
    parser.add_argument("--degree", type=real_number(0, "an average degree"), default=8.0,
                        help="average out-degree (default: 8)")
    parser.add_argument("--seed", type=whole_number(0, what="a seed"), default=0,
                        help="random seed of the graph (default: 0)")
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="where to compute: auto uses a CUDA GPU when one is usable (default: auto)")
    parser.add_argument("--check-sources", type=whole_number(0, what="a number of sources"), default=8,
                        help="sources whose distances Dijkstra recomputes (default: 8; 0: no check)")


@dataclass(frozen=True)
class Graph:
    """A directed graph as edge lists; weights are integers 1..MAX_WEIGHT."""

    nodes: int
    src: np.ndarray
    dst: np.ndarray
    weight: np.ndarray


def random_graph(nodes: int, degree: float, seed: int) -> Graph:
    """Each ordered pair (i != j) is an edge with probability degree / (nodes - 1)."""
    rng = np.random.default_rng(seed)
    p = min(1.0, degree / max(nodes - 1, 1))
    mask = rng.random((nodes, nodes)) < p
    np.fill_diagonal(mask, False)
    src, dst = np.nonzero(mask)
    weight = rng.integers(1, MAX_WEIGHT + 1, size=src.size)
    return Graph(nodes, src, dst, weight)


def distance_matrix(graph: Graph) -> np.ndarray:
    d = np.full((graph.nodes, graph.nodes), np.inf, dtype=np.float32)
    d[graph.src, graph.dst] = graph.weight
    np.fill_diagonal(d, 0.0)
    return d


def dijkstra(graph: Graph, source: int) -> np.ndarray:
    """Shortest distances from ``source``, the textbook way: an independent check."""
    adjacency: list[list[tuple[int, int]]] = [[] for _ in range(graph.nodes)]
    for u, v, w in zip(graph.src.tolist(), graph.dst.tolist(), graph.weight.tolist()):
        adjacency[u].append((v, w))
    dist = [float("inf")] * graph.nodes
    dist[source] = 0.0
    heap = [(0.0, source)]
    while heap:
        d, u = heapq.heappop(heap)
        if d > dist[u]:
            continue
        for v, w in adjacency[u]:
            if d + w < dist[v]:
                dist[v] = d + w
                heapq.heappush(heap, (d + w, v))
    return np.array(dist, dtype=np.float32)


@dataclass(frozen=True)
class Backend:
    """Where the squarings run: moves the matrix there and back, and waits for it."""

    name: str
    description: str
    to_device: Any
    to_host: Any
    synchronize: Any


def cpu_backend() -> Backend:
    from .engines.cpu import kernels_description, num_threads

    return Backend("cpu", f"{kernels_description()} on {num_threads()} CPU threads", np.asarray, np.asarray,
                   lambda: None)


def cuda_backend() -> Backend:
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return Backend("cuda", f"cupy {cupy.__version__} on {name}", cupy.asarray, cupy.asnumpy,
                   cupy.cuda.Device().synchronize)


def choose_backend(device: str) -> Backend:
    if device == "cpu":
        return cpu_backend()
    from .info import cuda_report  # the one rule for whether a GPU is usable, and why not (as bench's)

    cuda = cuda_report(nvrtc_usable=False)
    if cuda["gpus"]:
        return cuda_backend()
    if device == "cuda":
        raise RuntimeError(f"--device cuda, but {cuda['problem']}")
    return cpu_backend()


@dataclass(frozen=True)
class Closure:
    distances: np.ndarray
    squarings: int
    seconds: float
    warmup_seconds: float


def shortest_paths(d: np.ndarray, backend: Backend) -> Closure:
    """Square D in min_plus until it stops changing; D then holds all shortest paths.

    The first (tiny) product runs untimed, so a GPU's one-off kernel compile or
    cache load is reported apart from the throughput.
    """
    started = time.perf_counter()
    tiny = backend.to_device(d[:2, :2].copy())
    matmul(tiny, tiny, "min_plus")
    backend.synchronize()
    warmup = time.perf_counter() - started

    current = backend.to_device(d)
    squarings = 0
    started = time.perf_counter()
    while True:
        squared = matmul(current, current, "min_plus")
        squarings += 1
        if bool((squared == current).all()):
            break
        current = squared
    backend.synchronize()
    return Closure(backend.to_host(squared), squarings, time.perf_counter() - started, warmup)


def check(graph: Graph, distances: np.ndarray, sources: np.ndarray) -> list[int]:
    """The sources whose row differs from Dijkstra's distances (empty: all agree)."""
    return [int(s) for s in sources if not np.array_equal(distances[s], dijkstra(graph, int(s)))]


def run_demo(args: argparse.Namespace) -> int:
    """Build the graph, close it by squaring, check it, and report; 0 when the check passes."""
    try:
        backend = choose_backend(args.device)
    except RuntimeError as exc:
        print(f"demo: error: {exc}", file=sys.stderr)
        return 2
    n = args.nodes
    graph = random_graph(n, args.degree, args.seed)
    print(f"All-pairs shortest paths on a random directed graph: {n} nodes, {graph.src.size} edges "
          f"(weights 1..{MAX_WEIGHT}, seed {args.seed}), by repeated min_plus squaring.")
    print(f"engine: {backend.name} ({backend.description})")

    closure = shortest_paths(distance_matrix(graph), backend)
    ops = 2.0 * n**3 * closure.squarings
    print(f"{closure.squarings} squarings of {n}x{n} in {closure.seconds:.2f} s "
          f"(+{closure.warmup_seconds:.2f} s first-call warm-up): {ops / closure.seconds / 1e9:.2f} G ops/s")

    finite = closure.distances[np.isfinite(closure.distances)]
    print(f"reachable pairs: {finite.size} of {n * n}, longest shortest path: {finite.max():.0f}")
    if args.check_sources == 0:
        print("not checked against Dijkstra (--check-sources 0)")
        return 0
    rng = np.random.default_rng(args.seed + 1)
    sources = rng.choice(n, size=min(args.check_sources, n), replace=False)
    wrong = check(graph, closure.distances, sources)
    if wrong:
        print(f"check FAILED: rows {wrong} differ from Dijkstra's distances")
        return 1
    print(f"check passed: Dijkstra from {sources.size} random sources gives exactly the same distances")
    return 0
