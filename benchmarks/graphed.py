"""Calls back to back, eager against ``tropical_gemm.graphed`` replays, where the host's time per call shows.

For each product (float32 ``max_plus`` on cupy arrays, ``out=`` given), the
time per call of 2000 calls issued back to back and then waited for (the
wall clock, host included, as a user's loop sees it):

* ``eager``: ``tg.matmul(a, b, out=out)``;
* ``replay``: ``step()`` of ``step = tg.graphed(...)``, the graph's own inputs;
* ``replay_new_inputs``: ``step(a, b)``, which first copies the operands in;
* ``kernels``: the GPU time alone, from a graph of many calls replayed
  (``ceilings.time_gpu(graph=True)``): the floor every way of calling meets.

Each replay's values are checked against the eager product, bit for bit,
before anything is timed.  The shapes: one launch that is all host time
(16³), host-bound products (256³, with argmax: two launches), one where the
GPU's time dominates (1024³), and plans of several launches: stream-K (a
memset, then the kernel) and K slices (the slices, then their ⊕).

    python benchmarks/graphed.py [--calls 2000] [--out benchmarks/results]

Writes ``graphed-<device>-<date>.json``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

from ceilings import time_gpu  # benchmarks/ is this script's own directory
from results_file import RESULTS, save_report
from throughput import environment

#: name (M×K×N): (M, K, N, argmax)
CASES = {"16^3": (16, 16, 16, False), "256^3": (256, 256, 256, False), "256^3 argmax": (256, 256, 256, True),
         "1024^3": (1024, 1024, 1024, False), "1000x3000x777 (stream-K)": (1000, 3000, 777, False),
         "64x65536x64 (K slices)": (64, 65536, 64, False)}


def per_call(fn, calls: int) -> float:
    """Seconds per call of ``calls`` calls back to back, from the first issued to the last finished."""
    import cupy as cp

    for _ in range(10):
        fn()
    cp.cuda.Device().synchronize()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    cp.cuda.Device().synchronize()
    return (time.perf_counter() - t0) / calls


def measure(m: int, k: int, n: int, argmax: bool, calls: int) -> dict[str, float]:
    import cupy as cp

    import tropical_gemm as tg

    rng = np.random.default_rng(0)
    a = cp.asarray(rng.standard_normal((m, k)), dtype=cp.float32)
    b = cp.asarray(rng.standard_normal((k, n)), dtype=cp.float32)
    out = (cp.empty((m, n), cp.float32), cp.empty((m, n), cp.int32)) if argmax else cp.empty((m, n), cp.float32)

    def eager():
        return tg.matmul(a, b, argmax=argmax, out=out)

    step = tg.graphed(lambda x, y: tg.matmul(x, y, argmax=argmax), a, b)
    replayed, eagerly = step(a, b), eager()
    for got, want in zip(replayed, eagerly) if argmax else [(replayed, eagerly)]:
        if not np.array_equal(cp.asnumpy(got), cp.asnumpy(want), equal_nan=True):
            raise AssertionError(f"the replay of {m}x{k}x{n} differs from the eager product")
    seconds = {"eager": per_call(eager, calls), "replay": per_call(step, calls),
               "replay_new_inputs": per_call(lambda: step(a, b), calls),
               "kernels": time_gpu(eager, reps=50, graph=True)}
    return {name: s * 1e6 for name, s in seconds.items()}


def main(argv: "list[str] | None" = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    rows = {name: measure(*case, args.calls) for name, case in CASES.items()}
    table = [f"{'product (f32 max_plus)':<28}{'eager':>10}{'replay':>10}{'new inputs':>12}{'kernels':>10}"
             f"{'eager/replay':>14}  (µs per call)"]
    for name, us in rows.items():
        table.append(f"{name:<28}{us['eager']:10.1f}{us['replay']:10.1f}{us['replay_new_inputs']:12.1f}"
                     f"{us['kernels']:10.1f}{us['eager'] / us['replay']:13.2f}×")
    report = {"environment": environment(), "calls": args.calls, "us_per_call": rows}
    save_report(report, args.out, "graphed", table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
