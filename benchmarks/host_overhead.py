"""Host-side cost of one call, where the GPU work is negligible (16³), and where it goes.

Two measurements, each in this process:

* per call: the median wall time of ``tropical_gemm.matmul`` on 16×16×16
  float32 cupy arrays (with and without ``out=``, with the argmax, and the
  backward), next to a bare CuPy ``RawKernel`` launch with the same number of
  arguments, so the library's own share is visible;
* a cProfile of many such calls, top entries by own time.

Run with ``--cold-start`` to profile instead the first product of a fresh
process against a warm disk cache: its kernel-ready time and everything else
the first call pays.

    python benchmarks/host_overhead.py [--calls 2000] [--out DIR] [--cold-start]
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import statistics
import sys
import time
from pathlib import Path

import numpy as np


def median_us(fn, calls: int) -> float:
    import cupy as cp

    for _ in range(20):
        fn()
    cp.cuda.Device().synchronize()
    samples = []
    for _ in range(calls):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    cp.cuda.Device().synchronize()
    return statistics.median(samples) * 1e6


def profile_text(fn, calls: int, top: int = 25) -> str:
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        fn()
    profiler.disable()
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("tottime").print_stats(top)
    return out.getvalue()


def per_call(calls: int) -> dict[str, object]:
    import cupy as cp

    import tropical_gemm as tg

    a = cp.asarray(np.random.default_rng(0).standard_normal((16, 16)), dtype=cp.float32)
    b = cp.asarray(np.random.default_rng(1).standard_normal((16, 16)), dtype=cp.float32)
    out = cp.empty((16, 16), cp.float32)
    c, idx = tg.matmul(a, b, argmax=True)
    g = cp.ones_like(c)
    bare = cp.RawKernel(r'''extern "C" __global__ void k(const float* a, const float* b, float* c, int* i,
        long long x0, long long x1, long long x2, long long x3, long long x4, long long x5, long long x6,
        long long x7, long long x8, long long x9, long long x10, long long x11, long long x12, long long x13,
        long long x14, long long x15, long long x16, long long x17) {}''', "k")
    bare_args = (a, b, out, np.uintp(0)) + tuple(np.int64(v) for v in range(18))
    cases = {
        "matmul": lambda: tg.matmul(a, b),
        "matmul_out": lambda: tg.matmul(a, b, out=out),
        "matmul_argmax": lambda: tg.matmul(a, b, argmax=True),
        "matmul_backward": lambda: tg.matmul_backward(g, a, b, idx),
        "bare_cupy_launch_22_args": lambda: bare((1,), (32,), bare_args),
    }
    results = {name: median_us(fn, calls) for name, fn in cases.items()}
    return {"median_us": results, "profile_matmul": profile_text(cases["matmul"], calls)}


def cold_start() -> dict[str, object]:
    """The first product of this process, 256³ float32 on the GPU; the disk cache is assumed warm.

    startup.py shows this call costing far more than its kernel-ready time;
    the profile, by cumulative time, shows where the rest goes.
    """
    import cupy as cp

    import tropical_gemm as tg

    a = cp.random.default_rng(0).standard_normal((256, 256), dtype=np.float32)  # context first: not ours to count
    b = a.copy()
    cp.cuda.Device().synchronize()
    profiler = cProfile.Profile()
    t0 = time.perf_counter()
    profiler.enable()
    tg.matmul(a, b)
    cp.cuda.Device().synchronize()
    profiler.disable()
    seconds = time.perf_counter() - t0
    out = io.StringIO()
    pstats.Stats(profiler, stream=out).sort_stats("cumtime").print_stats(40)
    return {"first_product_ms": seconds * 1e3, "stats": tg.jit.stats(), "profile": out.getvalue()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--cold-start", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    from throughput import environment  # benchmarks/ is this script's own directory

    report = {"environment": environment(), **(cold_start() if args.cold_start else per_call(args.calls))}
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        name = "host-overhead-cold-start.json" if args.cold_start else "host-overhead.json"
        (args.out / name).write_text(json.dumps(report, indent=2, default=str))
    for key, value in report.items():
        if isinstance(value, dict) and key == "median_us":
            for name, us in value.items():
                print(f"{name:<28} {us:8.1f} µs per call")
        elif isinstance(value, str):
            print(value)
        elif key == "environment":
            continue
        else:
            print(f"{key}: {value}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
