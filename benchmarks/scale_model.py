"""How large a tropical product N GPUs can do in a time budget, by a model fed with one run's figures.

The model (docs/scale.md) is a float32 N×N×N product on P GPUs laid out as
a ``rows × cols`` grid (the most square factorisation of P), each GPU
computing one block of C, as ``tropical_gemm.dask`` does when C's chunks
are spread that way:

* compute: ``2·N³ / (P·R)`` seconds, R the ops/s one GPU sustains on a
  large chunk product (a multiply-add counts 2 ops);
* transfer: A and B start spread evenly, each GPU holding its share of its
  grid row's A panel and of its grid column's B panel, and receives the rest
  of both panels: ``4·N²·((1 − 1/cols)/rows + (1 − 1/rows)/cols)`` bytes at
  W bytes/s per GPU (all GPUs receive at once, each on its own link);
* memory: its shares of A and B, its block of C and one partial block of
  the ⊕ combine, ``16·N²/P`` bytes, must fit the device memory a dask-cuda
  worker keeps before spilling.

Transfers may overlap the chunk products (Dask fetches a task's inputs
while others compute) or not; so the answer is a range: the largest N with
``compute + transfer`` within the budget (no overlap) and with
``max(compute, transfer)`` within it (full overlap), each capped by memory.

R, W and the memory come from a ``dask_scaling.py`` report (its ``model``
entry); this script prints the answers for the GPU counts asked:

    python benchmarks/scale_model.py benchmarks/results/dask-scaling-<device>-<date>.json [--gpus 8 64] [--seconds 60]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

BYTES = 4  # float32


@dataclass(frozen=True)
class Inputs:
    """What one run measured: ops/s per GPU, bytes/s one worker receives, device memory usable per GPU."""

    ops_per_gpu: float
    link_bytes_per_s: float
    memory_bytes: float


def grid(gpus: int) -> tuple[int, int]:
    """The most square ``rows × cols`` factorisation of ``gpus`` (rows ≤ cols)."""
    rows = max(d for d in range(1, math.isqrt(gpus) + 1) if gpus % d == 0)
    return rows, gpus // rows


def compute_s(n: int, gpus: int, inputs: Inputs) -> float:
    return 2.0 * n**3 / (gpus * inputs.ops_per_gpu)


def transfer_s(n: int, gpus: int, inputs: Inputs) -> float:
    rows, cols = grid(gpus)
    received = BYTES * n**2 * ((1 - 1 / cols) / rows + (1 - 1 / rows) / cols)
    return received / inputs.link_bytes_per_s


def memory_limit_n(gpus: int, inputs: Inputs) -> int:
    """The largest N whose ``16·N²/P`` bytes per GPU fit."""
    return math.isqrt(int(inputs.memory_bytes * gpus / (4 * BYTES)))


def largest_n(gpus: int, inputs: Inputs, seconds: float, overlap: bool) -> dict[str, Any]:
    """The largest N (a multiple of 1024) done within ``seconds``; what bounds it, and its time split."""

    def total(n: int) -> float:
        c, t = compute_s(n, gpus, inputs), transfer_s(n, gpus, inputs)
        return max(c, t) if overlap else c + t

    low, high = 0, 1024
    while total(high) <= seconds:
        low, high = high, 2 * high
    while high - low > 1024:  # total() grows with N: bisect on multiples of 1024
        middle = (low + high) // 2 // 1024 * 1024
        low, high = (middle, high) if total(middle) <= seconds else (low, middle)
    by_memory = memory_limit_n(gpus, inputs) // 1024 * 1024
    n, bound = (low, "time") if low <= by_memory else (by_memory, "memory")
    return {"gpus": gpus, "grid": list(grid(gpus)), "overlap": overlap, "n": n, "bound": bound,
            "compute_s": compute_s(n, gpus, inputs), "transfer_s": transfer_s(n, gpus, inputs)}


def answers(inputs: Inputs, gpu_counts: list[int], seconds: float) -> list[dict[str, Any]]:
    return [largest_n(p, inputs, seconds, overlap) for p in gpu_counts for overlap in (False, True)]


def model_of_run(report: dict[str, Any], memory_share: float) -> dict[str, Any]:
    """The ``model`` entry of a dask_scaling.py report: this model's inputs, its answers for 8 and 64 GPUs
    in a minute, and its time for the run's moving-chunks case beside the time measured.

    R is the one-GPU point of the strong scaling, W the moving-chunks case's
    bytes over the time its transfers took, the memory ``memory_share`` of
    the GPU (what a dask-cuda worker keeps before spilling).
    """
    moving = report.get("moving")
    inputs = {"ops_per_gpu": report["scaling"]["strong"][0]["tops"] * 1e12,
              "memory_bytes": memory_share * report["environment"]["memory_bytes"],
              "link_bytes_per_s": moving["link_bytes_per_s"] if moving else None}
    if inputs["link_bytes_per_s"] is None:
        return {**inputs, "answers": None, "why": "one GPU: no transfer between workers was measured"}
    levels = (moving["gpus"] - 1).bit_length()  # the depth of the ⊕ tree: one partial C crosses per level
    predicted = (2.0 * moving["m"] * moving["n"] * moving["k"] / (moving["gpus"] * inputs["ops_per_gpu"])
                 + levels * BYTES * moving["m"] * moving["n"] / inputs["link_bytes_per_s"])
    return {**inputs, "answers": answers(Inputs(**inputs), [8, 64], 60.0),
            "moving_check": {"predicted_s": predicted, "measured_s": moving["seconds"]}}


def inputs_of(report: dict[str, Any]) -> Inputs:
    model = report["model"]
    return Inputs(model["ops_per_gpu"], model["link_bytes_per_s"], model["memory_bytes"])


def table(inputs: Inputs, rows: list[dict[str, Any]], seconds: float) -> list[str]:
    lines = [f"model: R = {inputs.ops_per_gpu / 1e12:.1f} T ops/s per GPU, W = {inputs.link_bytes_per_s / 1e9:.2f} "
             f"GB/s per GPU, {inputs.memory_bytes / 2**30:.0f} GiB per GPU; largest N×N×N float32 in {seconds:g} s",
             "  GPUs  grid   transfers      N        compute (s)  transfer (s)  bound"]
    for r in rows:
        transfers = "overlapped" if r["overlap"] else "after"
        lines.append(f"  {r['gpus']:<5} {r['grid'][0]}×{r['grid'][1]:<4} {transfers:<11} {r['n']:>8}"
                     f"  {r['compute_s']:11.1f}  {r['transfer_s']:12.1f}  {r['bound']}")
    return lines


def main(argv: "list[str] | None" = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("report", type=Path, help="a dask-scaling JSON report")
    parser.add_argument("--gpus", type=int, nargs="+", default=[8, 64])
    parser.add_argument("--seconds", type=float, default=60.0)
    args = parser.parse_args(argv)
    inputs = inputs_of(json.loads(args.report.read_text()))
    print("\n".join(table(inputs, answers(inputs, args.gpus, args.seconds), args.seconds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
