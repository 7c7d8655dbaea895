"""Recover the edge lengths of a road network from its shortest-path distances.

All-pairs shortest-path distances are min-plus matrix powers of the edge
lengths: with ``W[u, u] = 0`` and ``W[u, v] = inf`` where there is no road,
``W ⊗ W`` holds the shortest routes of at most two roads, and squaring
``ceil(log2(n - 1))`` times covers every route.  The example observes only
the distance table of a random network and learns the edge lengths by
gradient descent straight through those products.

Each distance sends its gradient along its current shortest route, so only
roads that lie on some shortest route can be learned; a road that is the
unique shortest route between its two ends is pinned down exactly by the
distance table (any other route is strictly longer), and the example reports
the error on those.

    python examples/learn_shortest_paths.py
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from tropical_gemm.torch import tropical_matmul


def random_network(nodes: int, extra_roads: int, generator: torch.Generator) -> torch.Tensor:
    """Road lengths in [1, 3] on a directed ring (so every node reaches every other)
    plus ``extra_roads`` random shortcuts; ``inf`` where there is no road."""
    lengths = torch.full((nodes, nodes), math.inf, dtype=torch.float64)
    ring = torch.arange(nodes)
    lengths[ring, (ring + 1) % nodes] = 1 + 2 * torch.rand(nodes, generator=generator, dtype=torch.float64)
    for flat in torch.randperm(nodes * nodes, generator=generator).tolist():
        if extra_roads == 0:
            break
        u, v = divmod(flat, nodes)
        if u != v and math.isinf(lengths[u, v]):
            lengths[u, v] = 1 + 2 * torch.rand((), generator=generator, dtype=torch.float64)
            extra_roads -= 1
    return lengths


def shortest_distances(lengths: torch.Tensor) -> torch.Tensor:
    """All-pairs distances by repeated min-plus squaring of the one-road table."""
    nodes = lengths.shape[0]
    distances = lengths.clone()
    distances.fill_diagonal_(0.0)
    for _ in range(max(1, math.ceil(math.log2(max(nodes - 1, 1))))):
        distances = tropical_matmul(distances, distances, "min_plus")
    return distances


def uniquely_shortest_roads(lengths: torch.Tensor) -> torch.Tensor:
    """Roads strictly shorter than every route through a third node: the identifiable ones."""
    through_others = shortest_distances(lengths)
    through_others.fill_diagonal_(math.inf)  # forbids k = u and k = v below
    detour = tropical_matmul(through_others, through_others, "min_plus")
    return torch.isfinite(lengths) & (lengths < detour - 1e-9)


@dataclass
class Result:
    losses: list[float]
    true_lengths: torch.Tensor
    learned_lengths: torch.Tensor
    identifiable: torch.Tensor

    def identifiable_error(self) -> float:
        """Largest absolute error over the roads the distances determine."""
        diff = self.learned_lengths - self.true_lengths
        return diff[self.identifiable].abs().max().item()


def train(nodes: int = 12, extra_roads: int = 40, steps: int = 400, lr: float = 0.05, seed: int = 0) -> Result:
    """Fit road lengths to the observed distance table; returns the loss curve and both tables."""
    generator = torch.Generator().manual_seed(seed)
    true_lengths = random_network(nodes, extra_roads, generator)
    observed = shortest_distances(true_lengths)
    roads = torch.isfinite(true_lengths)
    # Start every road short (softplus(-0.5) ≈ 0.47, below all true lengths):
    # then each road is its own shortest route and receives gradient, and
    # training lengthens roads until detours start to compete.
    raw = torch.full((nodes, nodes), -0.5, dtype=torch.float64)
    raw += 0.1 * torch.randn(raw.shape, generator=generator, dtype=torch.float64)
    raw.requires_grad_()
    optimiser = torch.optim.Adam([raw], lr=lr)
    losses = []
    for _ in range(steps):
        lengths = torch.where(roads, torch.nn.functional.softplus(raw), math.inf)
        loss = (shortest_distances(lengths) - observed).square().mean()
        optimiser.zero_grad()
        loss.backward()
        optimiser.step()
        losses.append(loss.item())
    learned = torch.where(roads, torch.nn.functional.softplus(raw.detach()), math.inf)
    return Result(losses, true_lengths, learned, uniquely_shortest_roads(true_lengths))


def main() -> None:
    result = train()
    for step in range(0, len(result.losses), 50):
        print(f"step {step:4d}  loss {result.losses[step]:.3e}")
    print(f"final      loss {result.losses[-1]:.3e}")
    print(
        f"{int(result.identifiable.sum())} of {int(torch.isfinite(result.true_lengths).sum())} roads are "
        f"identifiable; largest error on them: {result.identifiable_error():.4f}"
    )


if __name__ == "__main__":
    main()
