"""The CPU engine's backward against its argmax forward, which it differentiates (issue 34.7: at most 50%).

For float32 products of 256³ and 1024³, in every semiring's ⊗ family
(``max_plus``, ``max_mul``, ``max_min``): ``tropical_gemm.matmul(a, b,
argmax=True)`` and ``tropical_gemm.matmul_backward`` on its argmax, in
interleaved rounds on the same operands, each the median of its round's
calls; each side keeps its best round, and the ratio is backward over forward.

    python benchmarks/cpu_backward.py [--out benchmarks/results]

Writes ``cpu-backward-<CPU>-<date>.json`` and prints a table.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from typing import Callable

import numpy as np

import tropical_gemm as tg
from tropical_gemm.engines import cpu as cpu_engine
from cpu_peers import cpu_model  # benchmarks/ is this script's own directory
from results_file import run_and_save

SIZES = (256, 1024)
SEMIRINGS = ("max_plus", "max_mul", "max_min")
ROUNDS = 3
#: Calls per round, by size: enough to take a median of at small sizes, few at large ones.
CALLS = {256: 15, 1024: 3}
#: The issue's target: the backward takes at most this share of the argmax forward's time.
TARGET = 0.5


def median_seconds(fn: Callable[[], object], calls: int) -> float:
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def case(n: int, semiring: str) -> dict[str, object]:
    rng = np.random.default_rng(n)
    low = 0.5 if semiring == "max_mul" else -2.0
    a, b = (rng.uniform(low, 2.0, size=(n, n)).astype(np.float32) for _ in range(2))
    c, k = tg.matmul(a, b, semiring, argmax=True)
    g = rng.standard_normal(c.shape).astype(np.float32)
    forward = lambda: tg.matmul(a, b, semiring, argmax=True)  # noqa: E731
    backward = lambda: tg.matmul_backward(g, a, b, k, semiring)  # noqa: E731
    backward()  # compiles or loads the scatter
    rounds = [{"forward_s": median_seconds(forward, CALLS[n]), "backward_s": median_seconds(backward, CALLS[n])}
              for _ in range(ROUNDS)]
    fwd, bwd = min(r["forward_s"] for r in rounds), min(r["backward_s"] for r in rounds)
    return {"n": n, "semiring": semiring, "rounds": rounds, "forward_argmax_s": fwd, "backward_s": bwd,
            "backward_over_forward": bwd / fwd, "target_met": bwd / fwd <= TARGET}


def run() -> dict[str, object]:
    env = {"device": cpu_model().split("(")[0].strip(), "date": time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime()),
           "threads": cpu_engine.num_threads(), "numpy": np.__version__, "tropical_gemm": tg.__version__,
           "load_average_before": os.getloadavg()}
    return {"environment": env, "benchmark": "cpu-backward", "dtype": "float32", "target": TARGET,
            "results": [case(n, sr) for n in SIZES for sr in SEMIRINGS]}


def table(report: dict[str, object]) -> list[str]:
    lines = [f"{'case':24} {'forward argmax (ms)':>20} {'backward (ms)':>14} {'backward / forward':>19}"]
    for r in report["results"]:
        lines.append(f"{r['semiring'] + ' ' + str(r['n']) + '³':24} {r['forward_argmax_s'] * 1e3:20.3f} "
                     f"{r['backward_s'] * 1e3:14.3f} {r['backward_over_forward']:18.1%}"
                     f"{'' if r['target_met'] else '  over the target'}")
    return lines


def main(argv: "list[str] | None" = None) -> int:
    return run_and_save(__doc__, argv, "cpu-backward", run, table)


if __name__ == "__main__":
    sys.exit(main())
