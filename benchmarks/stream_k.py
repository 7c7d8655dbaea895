"""Stream-K against the schedules it replaced: products whose tiles leave the GPU's wave part empty.

The engine runs such a product as the stream family (``engines.cuda.plan.stream_work``): every tile's
slices shared out evenly over one wave of resident blocks.  This times each case under three schedules:

* ``tiles``: one block per output tile, all of K (no slicing);
* ``split-k``: K slices side by side and a combine launch (``plan.k_splits``, the engine's policy before
  stream-K, and still the small family's);
* ``stream-k``: the engine's plan (``plan.stream_work`` says where it takes stream-K: the rows whose family is
  "stream").

float32 max_plus, plain and with argmax, each as CUDA-graph replays of 20 ``matmul`` calls into
preallocated outputs (the kernels' time, not the host's); T = 2·M·N·K per second.  The engine's schedule alone
also runs 1000×3000×777 (777×3000×1000 where A is column-major) in the other stream kernels: int32 and
float64, float32 and int32 ``max_min`` with a column-major operand (``--engine-only``: these alone).  ``--label``
names a checkout's run, to compare commits; ``--shape LAYOUTS=BM,BN,BK,TM,TN,MIN_BLOCKS,UNROLL,STAGES`` tries a
4-byte plain stream tile (``jit.source.STREAM_SHAPES``) for those operand layouts (rc: A row-major, B column-major).

    python benchmarks/stream_k.py [--engine-only] [--shape rc=128,128,16,8,8,1,0,3 ...] [--label L] [--out DIR]
"""

from __future__ import annotations

import sys

import numpy as np

from ceilings import time_gpu
from results_file import LABEL_OPTION, run_and_save
from throughput import environment

import tropical_gemm as tg
from tropical_gemm.engines.cuda import plan as planning, prepared

#: (batches, M, K, N): the issue's odd shapes, square products of one wave or less, and the batched case.
SHAPES = [(1, 1000, 3000, 777), (1, 3000, 1000, 2047), (1, 1024, 1024, 1024), (1, 1024, 4096, 1024),
          (1, 2048, 2048, 2048), (256, 256, 256, 256), (1, 4096, 4096, 4096)]
#: (dtype, semiring, A's order, B's order, (M, K, N)) under the engine's schedule alone: its other stream kernels.
_ODD, _ODD_T = (1000, 3000, 777), (777, 3000, 1000)
ENGINE_CASES = [("int32", "max_plus", "C", "C", _ODD), ("float64", "max_plus", "C", "C", _ODD),
                ("float32", "max_plus", "C", "F", _ODD), ("float32", "max_plus", "F", "C", _ODD),
                ("float32", "max_plus", "F", "C", _ODD_T), ("float32", "max_min", "C", "F", _ODD),
                ("int32", "max_min", "C", "F", _ODD), ("int32", "max_min", "F", "C", _ODD_T)]
SHIPPED_STREAM, SHIPPED_SPLITS = planning.stream_work, planning.k_splits


def _schedule(name: str) -> None:
    """The engine's planner with one schedule (its caches cleared); "stream-k" is the engine's own."""
    planning.stream_work = SHIPPED_STREAM if name == "stream-k" else (lambda *args, **kwargs: None)
    planning.k_splits = (lambda *args, **kwargs: 1) if name == "tiles" else SHIPPED_SPLITS
    planning.plan_forward.cache_clear()
    prepared.prepare_product.cache_clear()


def _time(a, b, argmax: bool, semiring: str) -> float:
    import cupy as cp

    shape = (*a.shape[:-1], b.shape[-1])
    out = (cp.empty(shape, a.dtype), cp.empty(shape, np.int32)) if argmax else cp.empty(shape, a.dtype)
    return time_gpu(lambda: tg.matmul(a, b, semiring=semiring, argmax=argmax, out=out), reps=20, graph=True)


def _plan(a, b, argmax: bool, sms: int, semiring: str) -> planning.ForwardPlan:
    strides = [tuple(s // x.itemsize for s in x.strides) for x in (a, b)]
    batch = a.shape[:-2]
    return planning.plan_forward(a.shape, strides[0], b.shape, strides[1], batch, a.dtype.name, semiring, argmax,
                                 sms, True)


def _row(a, b, argmax: bool, name: str, sms: int, semiring: str = "max_plus", **tags) -> dict:
    """One case under schedule ``name``, timed."""
    _schedule(name)
    plan = _plan(a, b, argmax, sms, semiring)
    seconds = _time(a, b, argmax, semiring)
    batches = int(np.prod(a.shape[:-2]))
    m, k, n = a.shape[-2], a.shape[-1], b.shape[-1]
    return {"shape": [batches, m, k, n], "argmax": argmax, "schedule": name, "family": plan.spec.tile,
            "splits": plan.splits, "kernel": plan.spec.name, **tags, "seconds": seconds,
            "tops": 2 * batches * m * n * k / seconds / 1e12}


def _try_shapes(shapes: "list[str] | None") -> None:
    """Set ``--shape``'s tiles before any kernel is built: a tile is part of its kernel's source and cache key."""
    from tropical_gemm.jit import source

    for text in shapes or ():
        layouts, numbers = text.split("=")
        for dtype in ("float32", "int32"):
            source.STREAM_SHAPES[("forward", dtype, layouts)] = source.TileShape(*map(int, numbers.split(",")))


def run(label: str, engine_only: bool, shape: "list[str] | None") -> dict:
    import cupy as cp

    _try_shapes(shape)

    rng = np.random.default_rng(0)
    env = environment()
    sms = int(env["sms"])
    rows = []
    try:
        for batches, m, k, n in () if engine_only else SHAPES:
            batch = (batches,) if batches > 1 else ()
            a = cp.asarray(rng.integers(-99, 99, (*batch, m, k)).astype(np.float32))
            b = cp.asarray(rng.integers(-99, 99, (*batch, k, n)).astype(np.float32))
            for argmax in (False, True):
                rows += [_row(a, b, argmax, name, sms) for name in ("tiles", "split-k", "stream-k")]
        for dtype, semiring, a_order, b_order, (m, k, n) in ENGINE_CASES:
            a = cp.asarray(rng.integers(-99, 99, (m, k)).astype(dtype), order=a_order)
            b = cp.asarray(rng.integers(-99, 99, (k, n)).astype(dtype), order=b_order)
            rows += [_row(a, b, argmax, "stream-k", sms, semiring, orders=a_order + b_order)
                     for argmax in (False, True)]
    finally:
        _schedule("stream-k")
    return {"environment": env, "label": label, "stream_shapes": shape or [], "rows": rows}


def table(report: dict) -> list[str]:
    lines = ["| batches×M×K×N | argmax | schedule | kernel | K slices | µs | T ops/s |",
             "|---|---|---|---|---|---|---|"]
    for r in report["rows"]:
        lines.append(f"| {'x'.join(map(str, r['shape']))} | {r['argmax']} | {r['schedule']} | {r['kernel']} "
                     f"| {r['splits']} | {r['seconds'] * 1e6:.1f} | {r['tops']:.2f} |")
    return lines


if __name__ == "__main__":
    sys.exit(run_and_save(__doc__, None, "stream-k", run, table, {
        **LABEL_OPTION,
        "--engine-only": {"action": "store_true", "help": "the engine's schedule on ENGINE_CASES alone"},
        "--shape": {"action": "append", "help": "LAYOUTS=BM,BN,BK,TM,TN,MIN_BLOCKS,UNROLL,STAGES: a tile to try"}}))
