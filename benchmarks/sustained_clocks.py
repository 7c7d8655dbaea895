"""The f32 max_plus kernel against its register-only ceiling, each run for seconds, with the SM clock sampled.

``ceilings.py`` times its probes in bursts of a few milliseconds, and
``throughput.py`` its products in batches; a GPU's clock can differ between
such runs (power and thermal limits act over tens of milliseconds and more).
Here both run back to back for ``--seconds`` each while NVML samples the SM
clock every 20 ms, so that the kernel's share of the ceiling can be read at
equal clocks: ``share_at_equal_clocks`` = (kernel T / kernel MHz) / (ceiling
T / ceiling MHz).  Needs ``nvidia-ml-py`` (``pynvml``).

    python benchmarks/sustained_clocks.py [--size 8192] [--seconds 3] [--out DIR]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Callable

import numpy as np

from ceilings import _load_all, probe_name, probe_source
from results_file import save_report


def sampled(run_once: Callable[[], None], seconds: float, device: int) -> dict[str, float]:
    """Calls ``run_once`` (each synchronised) for ``seconds``; calls per second and the SM clocks seen meanwhile."""
    import cupy as cp
    import pynvml

    pynvml.nvmlInit()
    handle = pynvml.nvmlDeviceGetHandleByIndex(device)
    clocks: list[int] = []
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            clocks.append(pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM))
            time.sleep(0.02)

    run_once()
    cp.cuda.Device().synchronize()
    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    calls, started = 0, time.perf_counter()
    while time.perf_counter() - started < seconds:
        run_once()
        cp.cuda.Device().synchronize()
        calls += 1
    elapsed = time.perf_counter() - started
    done.set()
    sampler.join()
    return {"calls_per_s": calls / elapsed, "sm_mhz_median": statistics.median(clocks), "sm_mhz_min": min(clocks),
            "sm_mhz_max": max(clocks), "samples": len(clocks)}


def measure(size: int, seconds: float) -> dict[str, object]:
    import cupy as cp

    import tropical_gemm as tg
    from throughput import random_operands

    device = cp.cuda.Device().id
    probe = _load_all(probe_source([("max_plus", "float32")]), [probe_name("max_plus", "float32")])
    kernel = probe[probe_name("max_plus", "float32")]
    blocks, threads, iters = cp.cuda.Device().attributes["MultiProcessorCount"] * 8, 256, 4096
    out = cp.empty(blocks * threads, np.float32)
    one = np.float32(1)
    ceiling = sampled(lambda: kernel((blocks,), (threads,), (out, one, one, np.int32(iters))), seconds, device)
    ceiling["tops"] = ceiling["calls_per_s"] * 2 * 16 * blocks * threads * iters / 1e12
    a, b = random_operands((size, size), (size, size), "float32")
    c = tg.matmul(a, b, "max_plus")
    product = sampled(lambda: tg.matmul(a, b, "max_plus", out=c), seconds, device)
    product["tops"] = product["calls_per_s"] * 2.0 * size**3 / 1e12
    share = product["tops"] / ceiling["tops"]
    at_equal_clocks = share * ceiling["sm_mhz_median"] / product["sm_mhz_median"]
    return {"size": size, "seconds_each": seconds, "ceiling": ceiling, "product": product, "share": share,
            "share_at_equal_clocks": at_equal_clocks}


def table(report: dict) -> list[str]:
    rows = [f"f32 max_plus, {report['seconds_each']} s each ({report['environment']['device']})",
            f"{'':<24}{'T ops/s':>9}{'SM MHz median':>15}{'min':>7}{'max':>7}"]
    for label, key in (("FADD+FMNMX ceiling", "ceiling"), (f"product {report['size']}^3", "product")):
        r = report[key]
        rows.append(f"{label:<24}{r['tops']:9.2f}{r['sm_mhz_median']:15.0f}{r['sm_mhz_min']:7.0f}{r['sm_mhz_max']:7.0f}")
    rows.append(f"share of the ceiling {report['share']:.1%}; at equal clocks {report['share_at_equal_clocks']:.1%}")
    return rows


def main(argv: list[str] | None = None) -> int:
    from throughput import environment

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=8192)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args(argv)
    report = {"environment": environment(), "benchmark": "sustained_clocks", **measure(args.size, args.seconds)}
    save_report(report, args.out, "sustained-clocks", table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
