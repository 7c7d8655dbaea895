"""How many K slices a product that cannot fill the GPU should run: the slices' target in blocks per SM.

The engine cuts a product whose output tiles leave the GPU's waves part
empty into K slices (``engines.cuda.plan.k_splits``), modelling the waves
of ``waves`` blocks per SM (the square kernels' residency) that each count
of slices needs.  This times each case with the model filling 0 (no
slicing), 1, 2 and 4 blocks per SM,
plain and with argmax, float32 max_plus, as CUDA-graph replays of 20
``matmul`` calls into preallocated outputs (the kernels' time, not the
host's), and marks the policy the engine uses.

    python benchmarks/split_k.py [--out DIR]
"""

from __future__ import annotations

import sys

import numpy as np

from ceilings import time_gpu
from results_file import run_and_save
from throughput import environment

import tropical_gemm as tg
from tropical_gemm.engines.cuda import plan as planning, prepared

SHAPES = [(512, 512, 512), (1024, 1024, 1024), (1024, 4096, 1024), (16, 8192, 8192)]
WAVES = (0, 1, 2, 4)
SHIPPED = planning.k_splits  # the engine's own policy, which each run puts back


def _policy(waves: int):
    """``k_splits`` with every product aiming at ``waves`` blocks per SM (0: never slice)."""
    def k_splits(tiles: int, k: int, sms: int, _waves: int = 2) -> int:
        return SHIPPED(tiles, k, sms, waves) if waves else 1
    return k_splits


def _time(a, b, argmax: bool) -> float:
    import cupy as cp

    m, n = a.shape[0], b.shape[1]
    out = (cp.empty((m, n), np.float32), cp.empty((m, n), np.int32)) if argmax else cp.empty((m, n), np.float32)
    return time_gpu(lambda: tg.matmul(a, b, argmax=argmax, out=out), reps=20, graph=True)


def _splits(shape: tuple[int, int, int], argmax: bool, sms: int) -> int:
    m, k, n = shape
    return planning.plan_forward((m, k), (k, 1), (k, n), (n, 1), (), "float32", "max_plus", argmax, sms, True).splits


def run() -> dict:
    import cupy as cp

    rng = np.random.default_rng(0)
    env = environment()
    sms = int(env["sms"])
    rows = []
    try:
        for m, k, n in SHAPES:
            a = cp.asarray(rng.integers(-99, 99, (m, k)).astype(np.float32))
            b = cp.asarray(rng.integers(-99, 99, (k, n)).astype(np.float32))
            for argmax in (False, True):
                planning.k_splits = SHIPPED
                engine_splits = _splits((m, k, n), argmax, sms)
                for waves in WAVES:
                    planning.k_splits = _policy(waves)
                    planning.plan_forward.cache_clear()
                    prepared.prepare_product.cache_clear()
                    seconds = _time(a, b, argmax)
                    splits = _splits((m, k, n), argmax, sms)
                    rows.append({"shape": [m, k, n], "argmax": argmax, "waves": waves, "splits": splits,
                                 "seconds": seconds, "tops": 2 * m * n * k / seconds / 1e12,
                                 "engine": splits == engine_splits})
    finally:
        planning.k_splits = SHIPPED
        planning.plan_forward.cache_clear()
        prepared.prepare_product.cache_clear()
    return {"environment": env, "rows": rows}


def table(report: dict) -> list[str]:
    lines = ["| shape | argmax | waves | K slices | µs | T ops/s | the engine's |", "|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        lines.append(f"| {'x'.join(map(str, r['shape']))} | {r['argmax']} | {r['waves']} | {r['splits']} "
                     f"| {r['seconds'] * 1e6:.1f} | {r['tops']:.2f} | {'yes' if r['engine'] else ''} |")
    return lines


if __name__ == "__main__":
    sys.exit(run_and_save(__doc__, None, "split-k", run, table))
