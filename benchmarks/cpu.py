"""CPU throughput and memory of float32 max_plus products, against numpy idioms.

For each square size n it measures, in the same run and on the same data:

* ``tropical_gemm.matmul`` (the CPU engine), with and without argmax;
* the numpy broadcast idiom ``np.max(a[:, :, None] + b[None], axis=1)``, only
  where its (n, n, n) temporary fits in ``--broadcast-limit-gib``;
* the naive numpy k-loop ``c = np.maximum(c, a[:, k:k+1] + b[k])``.

Throughput is in G tropical ops/s (2 n^3 per product, one ⊗ and one ⊕ per
term); memory is the peak of numpy allocations during the call (tracemalloc,
output included).  Results go to ``benchmarks/results/cpu-<host>-<date>.json``
with the CPU, the versions and the date, so figures are quoted as ratios
against the peers measured here.

    python benchmarks/cpu.py                    # 256 ... 4096
    python benchmarks/cpu.py --sizes 256 1024   # quicker
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import socket
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Callable

import numpy as np

import tropical_gemm as tg

Product = Callable[[np.ndarray, np.ndarray], object]


def broadcast_idiom(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.max(a[:, :, None] + b[None], axis=1)


def naive_k_loop(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    c = np.full((a.shape[0], b.shape[1]), -np.inf, dtype=a.dtype)
    for k in range(a.shape[1]):
        np.maximum(c, a[:, k : k + 1] + b[k], out=c)
    return c


def tropical(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return tg.matmul(a, b, "max_plus")


def tropical_argmax(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    return tg.matmul(a, b, "max_plus", argmax=True)


def wall_times(fn: Product, a: np.ndarray, b: np.ndarray, repeats: int) -> list[float]:
    """Wall time of each of ``repeats`` calls; the best is the least disturbed by other processes."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn(a, b)
        times.append(time.perf_counter() - start)
    return times


def peak_bytes(fn: Product, a: np.ndarray, b: np.ndarray) -> int:
    """Peak numpy memory allocated during one call (numpy reports to tracemalloc)."""
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        fn(a, b)
        return tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_commit() -> str | None:
    try:
        done = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).parent, timeout=10)
    except OSError:
        return None
    return done.stdout.strip() or None


def environment() -> dict:
    return {
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "host": socket.gethostname(),
        "device": {
            "kind": "cpu",
            "model": cpu_model(),
            "logical_cores": os.cpu_count(),
            "machine": platform.machine(),
            "system": platform.platform(),
        },
        "versions": {
            "python": platform.python_version(),
            "numpy": np.__version__,
            "tropical_gemm": tg.__version__,
            "git_commit": git_commit(),
        },
    }


def measure_size(n: int, repeats: int, broadcast_limit: float, rng: np.random.Generator) -> list[dict]:
    """Every peer at size n, checked against the k-loop, timed ``repeats`` times."""
    a = rng.standard_normal((n, n)).astype(np.float32)
    b = rng.standard_normal((n, n)).astype(np.float32)
    peers: dict[str, Product] = {"tropical_gemm": tropical, "tropical_gemm_argmax": tropical_argmax,
                                 "numpy_k_loop": naive_k_loop}
    if 4 * n**3 <= broadcast_limit:
        peers["numpy_broadcast"] = broadcast_idiom
    expected = naive_k_loop(a, b)
    rows = []
    for name, fn in peers.items():
        result = fn(a, b)  # warm-up, and the check that every peer computes the same product
        values = result[0] if isinstance(result, tuple) else result
        if not np.array_equal(values, expected):
            raise AssertionError(f"{name} disagrees with the naive k-loop at n={n}")
        times = wall_times(fn, a, b, repeats)
        seconds = min(times)
        rows.append({
            "n": n,
            "engine": name,
            "seconds": seconds,
            "all_seconds": times,
            "gops": 2 * n**3 / seconds / 1e9,
            "peak_bytes": peak_bytes(fn, a, b),
            "output_bytes": 4 * n * n * (2 if name.endswith("argmax") else 1),
        })
        print(f"n={n:5d} {name:22s} {seconds:9.4f} s {rows[-1]['gops']:7.2f} G ops/s "
              f"peak {rows[-1]['peak_bytes'] / 2**20:9.1f} MiB", flush=True)
    loop = next(r for r in rows if r["engine"] == "numpy_k_loop")
    for row in rows:
        row["speedup_vs_numpy_k_loop"] = loop["seconds"] / row["seconds"]
    return rows


def repeats_for(n: int, args: argparse.Namespace) -> int:
    return args.repeats if n <= 1024 else args.large_repeats


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[256, 512, 1024, 2048, 4096])
    parser.add_argument("--repeats", type=int, default=5, help="timed calls per size up to 1024 (best is kept)")
    parser.add_argument("--large-repeats", type=int, default=2, help="timed calls per size above 1024")
    parser.add_argument("--broadcast-limit-gib", type=float, default=1.0,
                        help="largest (n, n, n) float32 temporary the broadcast idiom may allocate")
    parser.add_argument("--out", type=Path, default=None, help="JSON path (default benchmarks/results/...)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    report = environment()
    report.update({"benchmark": "cpu", "semiring": "max_plus", "dtype": "float32",
                   "ops_per_product": "2*n^3", "command": " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])})
    # Other processes skew timings; the load averages let a reader judge a run.
    report["load_average_before"] = os.getloadavg()
    rng = np.random.default_rng(args.seed)
    report["results"] = [row for n in args.sizes
                         for row in measure_size(n, repeats_for(n, args), args.broadcast_limit_gib * 2**30, rng)]
    report["load_average_after"] = os.getloadavg()
    out = args.out or Path(__file__).parent / "results" / f"cpu-{report['host']}-{report['date'][:10]}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
