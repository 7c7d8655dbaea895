"""The configuration walk's cost (issue 17): each multi-step case of benchmarks/einsum.py, values alone and with
the configuration, warm, median of five synchronised runs; the walk itself is the difference.

Cases (max_plus, float32; sized down on the CPU): a chain of 8 N x N matrices, "ijk,jkl->il" (two indices chosen
by one step) and a chain of 100 64 x 64 matrices; the target is "with configuration" within about 2x of values.

    python benchmarks/einsum_walk.py [--device cuda|cpu]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import tropical_gemm as tg


def median_seconds(fn, sync, repeats: int = 5) -> float:
    fn()
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - start)
    return sorted(times)[repeats // 2]


def chain(xp, rng: np.random.Generator, length: int, n: int) -> list:
    args: list = []
    for t in range(length):
        args += [xp.asarray(rng.standard_normal((n, n)).astype(np.float32)), [t, t + 1]]
    return args + [[0, length]]


def cases(xp, gpu: bool) -> dict:
    rng = np.random.default_rng(1)
    n, ij, k = (2048, 1024, 64) if gpu else (256, 128, 16)
    two_k = ["ijk,jkl->il", xp.asarray(rng.standard_normal((ij, k, k)).astype(np.float32)),
             xp.asarray(rng.standard_normal((k, k, ij)).astype(np.float32))]
    # the optimize settings of benchmarks/einsum.py: greedy for the networks, auto for one einsum
    return {f"chain-8x{n}": (chain(xp, rng, 8, n), "greedy"), f"two-k-{ij}x{k}x{k}": (two_k, "auto"),
            "chain-100": (chain(xp, rng, 100, 64), "greedy")}


def main(argv: "list[str] | None" = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    gpu = parser.parse_args(argv).device == "cuda"
    if gpu:
        import cupy as xp

        sync = xp.cuda.Device().synchronize
    else:
        xp, sync = np, (lambda: None)
    print(f"{'case':<20} {'values (ms)':>12} {'with configuration (ms)':>24} {'ratio':>7}")
    for name, (args, optimize) in cases(xp, gpu).items():
        values = median_seconds(lambda: tg.einsum(*args, optimize=optimize), sync)
        config = median_seconds(lambda: tg.einsum(*args, optimize=optimize, return_configuration=True), sync)
        print(f"{name:<20} {values * 1e3:>12.2f} {config * 1e3:>24.2f} {config / values:>6.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
