"""The boolean semiring (and_or) against the idioms a user would write instead, and against our f32 max_plus.

On the GPU (when one is usable), in one run on one device, at ``--size``³
(default 16384):

* ours: ``tg.matmul(a, b, "and_or")`` on bool cupy arrays (bit-packed, 32 ks a
  word; the packing of both operands is part of the time), plain and with argmax;
* the tensor-core idiom: ``(a.to(torch.bfloat16) @ b.to(torch.bfloat16)) > 0`` on
  cuBLAS, on the same memory (torch views of the cupy arrays through DLPack),
  casts and comparison included;
* our f32 max_plus product of the same shape.

issue 33's GPU targets: ours at least as fast as the idiom, and at least
10 times our max_plus rate (rates in multiply-adds, M·N·K per second).

On the CPU, at ``--cpu-size``³ (default 4096): ours on bool numpy arrays
(bit-packed, 64 ks a word) against ``(a.astype(np.float32) @ b.astype(np.float32)) > 0``
(BLAS, its own threads), casts included; the target: ours faster.

Inputs are random with density ``sqrt(ln 2 / K)``, so about half the
entries of each product are true (neither kernel's time depends on the
data; the density is recorded).  Every timed result is checked against the
idiom's.  Tiered compilation is off, so every time is the tuned kernel's.

    python benchmarks/boolean.py [--size 16384] [--cpu-size 4096] [--out DIR]
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import platform
import sys
import time
from pathlib import Path

import numpy as np

from results_file import RESULTS, save_report

import tropical_gemm as tg
from tropical_gemm import jit
from tropical_gemm.engines.cpu import num_threads


def density(k: int) -> float:
    """Each entry of a K-deep product is true with probability 1/2: 1 - (1 - p²)^K = 1/2."""
    return math.sqrt(math.log(2) / k)


def best_seconds(fn, reps: int = 3) -> float:
    """The fastest of ``reps`` calls after a warm-up (host timing: the CPU products are synchronous)."""
    fn()
    times = []
    for _ in range(reps):
        started = time.perf_counter()
        fn()
        times.append(time.perf_counter() - started)
    return min(times)


def cpu_rows(size: int) -> dict:
    rng = np.random.default_rng(0)
    p = density(size)
    a, b = rng.random((size, size)) < p, rng.random((size, size)) < p
    ours = tg.matmul(a, b, "and_or")
    idiom = (a.astype(np.float32) @ b.astype(np.float32)) > 0
    seconds = {
        "and_or": best_seconds(lambda: tg.matmul(a, b, "and_or")),
        "and_or_argmax": best_seconds(lambda: tg.matmul(a, b, "and_or", argmax=True)),
        "blas_float32_idiom": best_seconds(lambda: (a.astype(np.float32) @ b.astype(np.float32)) > 0),
    }
    work = float(size) ** 3
    return {"size": size, "density": p, "true_fraction": float(ours.mean()),
            "agree": bool(np.array_equal(ours, idiom)), "threads": num_threads(),
            "seconds": seconds, "rate_multiply_adds_per_s": {k: work / s for k, s in seconds.items()},
            "speedup_over_idiom": seconds["blas_float32_idiom"] / seconds["and_or"],
            "target_met": seconds["and_or"] < seconds["blas_float32_idiom"]}


def gpu_rows(size: int) -> dict:
    import cupy as cp
    import torch

    from ceilings import time_gpu

    jit.set_tiered(False)
    rng = cp.random.default_rng(0)
    p = density(size)
    a, b = rng.random((size, size), dtype=cp.float32) < p, rng.random((size, size), dtype=cp.float32) < p
    # the same memory in torch, through DLPack as bytes (every DLPack version carries uint8)
    ta, tb = (torch.from_dlpack(x.view(cp.uint8)).view(torch.bool) for x in (a, b))
    c, c_arg = cp.empty((size, size), bool), (cp.empty((size, size), bool), cp.empty((size, size), cp.int32))
    tg.matmul(a, b, "and_or", out=c)
    idiom = (ta.to(torch.bfloat16) @ tb.to(torch.bfloat16)) > 0
    agree = bool(cp.array_equal(c.view(cp.uint8), cp.from_dlpack(idiom.view(torch.uint8))))
    del idiom
    seconds = {
        "and_or": time_gpu(lambda: tg.matmul(a, b, "and_or", out=c), reps=5, trials=5),
        "and_or_argmax": time_gpu(lambda: tg.matmul(a, b, "and_or", argmax=True, out=c_arg), reps=3, trials=3),
        "cublas_bf16_idiom": time_gpu(lambda: (ta.to(torch.bfloat16) @ tb.to(torch.bfloat16)) > 0, reps=5, trials=5),
    }
    true_fraction = float(c.mean())
    agree_argmax = bool(cp.array_equal(c_arg[0], c))
    del c, c_arg, ta, tb, a, b
    af, bf = rng.standard_normal((size, size), dtype=cp.float32), rng.standard_normal((size, size), dtype=cp.float32)
    cf = cp.empty((size, size), cp.float32)
    seconds["max_plus_float32"] = time_gpu(lambda: tg.matmul(af, bf, "max_plus", out=cf), reps=2, trials=3)
    work = float(size) ** 3
    rates = {k: work / s for k, s in seconds.items()}
    return {"size": size, "density": p, "true_fraction": true_fraction, "agree": agree, "agree_argmax": agree_argmax,
            "seconds": seconds, "rate_multiply_adds_per_s": rates,
            "of_idiom": rates["and_or"] / rates["cublas_bf16_idiom"],
            "of_max_plus": rates["and_or"] / rates["max_plus_float32"],
            "targets_met": {"at_least_the_idiom": rates["and_or"] >= rates["cublas_bf16_idiom"],
                            "at_least_10x_max_plus": rates["and_or"] >= 10 * rates["max_plus_float32"]}}


def gpu_problem() -> "str | None":
    try:
        import cupy as cp
        import torch
    except ImportError as exc:
        return f"{exc.name} is not importable"
    if not cp.is_available() or not torch.cuda.is_available():
        return "no CUDA GPU usable by both cupy and torch"
    return None


def environment(gpu: bool) -> dict:
    from cpu_peers import cpu_model

    env = {"cpu": cpu_model(), "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
           "versions": {"tropical_gemm": tg.__version__, "numpy": np.__version__,
                        "python": platform.python_version()}}
    if not gpu:
        return {**env, "device": env["cpu"]}
    from throughput import environment as gpu_environment

    gpu_env = gpu_environment()
    return {**env, **gpu_env, "versions": {**env["versions"], **gpu_env["versions"]}}


def table(report: dict) -> list[str]:
    lines = []
    for where, part in (("GPU", report["gpu"]), ("CPU", report["cpu"])):
        if part is None:
            lines.append(f"GPU: skipped ({report['gpu_skipped']})")
            continue
        n = part["size"]
        lines.append(f"{where} {n}x{n}x{n}, density {part['density']:.4f} ({part['true_fraction']:.0%} true), "
                     f"results agree: {part['agree']}")
        for name, seconds in part["seconds"].items():
            rate = part["rate_multiply_adds_per_s"][name]
            lines.append(f"  {name:<22} {seconds * 1e3:10.2f} ms  {rate / 1e12:9.2f} T multiply-adds/s")
    if report["gpu"] is not None:
        gpu = report["gpu"]
        lines.append(f"GPU and_or: {gpu['of_idiom']:.2f}x the cuBLAS bf16 idiom, {gpu['of_max_plus']:.1f}x f32 "
                     f"max_plus; targets met: {gpu['targets_met']}")
    cpu = report["cpu"]
    lines.append(f"CPU and_or: {cpu['speedup_over_idiom']:.1f}x the BLAS float32 idiom; "
                 f"target met: {cpu['target_met']}")
    return lines


def main(argv: "list[str] | None" = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=16384, help="M = K = N of the GPU products")
    parser.add_argument("--cpu-size", type=int, default=4096, help="M = K = N of the CPU products")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    problem = gpu_problem()
    report = {"environment": environment(problem is None), "benchmark": "boolean",
              "gpu": gpu_rows(args.size) if problem is None else None, "gpu_skipped": problem,
              "cpu": cpu_rows(args.cpu_size)}
    save_report(report, args.out, "boolean", table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
