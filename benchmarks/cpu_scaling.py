"""The CPU engine's scaling with threads, and the two ways of cutting C among them.

For each thread count and size: float32 ``max_plus``, with and without
argmax, once with C cut into square-ish tiles (the engine's ``_grid``: at 16
threads 4x4, each worker packing a quarter of B) and once into row strips
(every worker packing all of B, the engine's cut before), interleaved, best
of ``--repeats`` warm calls.  The speedup column is against the 1-thread
figure of the same cut; the issue-19 target is 12x at 2048³ on 16 cores.
Also records logical and physical cores (SMT siblings share SIMD units).

    python benchmarks/cpu_scaling.py                      # 1, 2, 4, 8 and all cores
    python benchmarks/cpu_scaling.py --threads 1 16 --sizes 2048
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tropical_gemm as tg  # noqa: E402
from cpu_peers import cpu_model, environment  # noqa: E402
from results_file import RESULTS, save_report  # noqa: E402
from tropical_gemm.engines import cpu as cpu_engine  # noqa: E402

GRID = cpu_engine._grid


def rows_only(m: int, n: int, workers: int) -> tuple[int, int]:
    """The cut before tiles: row strips, one per worker."""
    return max(1, min(workers, m // 2)), 1


def best_seconds(a: np.ndarray, argmax: bool, threads: int, cut, repeats: int) -> float:  # noqa: ANN001
    cpu_engine._grid = cut
    cpu_engine.set_num_threads(threads)
    try:
        tg.matmul(a, a, "max_plus", argmax=argmax)
        times = []
        for _ in range(repeats):
            start = time.perf_counter()
            tg.matmul(a, a, "max_plus", argmax=argmax)
            times.append(time.perf_counter() - start)
    finally:
        cpu_engine.set_num_threads(None)
        cpu_engine._grid = GRID
    return min(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    parser.add_argument("--threads", type=int, nargs="+",
                        default=sorted({t for t in (1, 2, 4, 8, cores) if t <= cores}))
    parser.add_argument("--sizes", type=int, nargs="+", default=[1024, 2048])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--note", default="")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    rows, table = [], [f"{'case':24} {'threads':>7} {'tiles G ops/s':>14} {'x1':>6} {'strips G ops/s':>15} {'x1':>6}"]
    for n in args.sizes:
        a = np.random.default_rng(0).standard_normal((n, n)).astype(np.float32)
        for argmax in (False, True):
            one = {}
            for threads in args.threads:
                rate = {name: 2 * n**3 / best_seconds(a, argmax, threads, cut, args.repeats) / 1e9
                        for name, cut in (("tiles", GRID), ("strips", rows_only))}
                one = one or rate
                rows.append({"n": n, "argmax": argmax, "threads": threads, "gops": rate,
                             "speedup_vs_1": {k: rate[k] / one[k] for k in rate}})
                table.append(f"f32 {n}³ {'argmax' if argmax else 'plain':8} {threads:7} {rate['tiles']:14.1f} "
                             f"{rate['tiles'] / one['tiles']:6.1f} {rate['strips']:15.1f} "
                             f"{rate['strips'] / one['strips']:6.1f}")
    env = {**environment(), "device": cpu_model().split("(")[0].strip() + f"-{cores}cores"}
    report = {"environment": env, "benchmark": "cpu-scaling", "semiring": "max_plus", "note": args.note,
              "unit": "G ops/s (2·M·N·K per second)", "repeats": args.repeats, "results": rows}
    save_report(report, args.out, "cpu-scaling", table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
