"""A user's script, run as a user runs it: import, call once, exit; then run it again (issue 29).

Each story runs as real fresh processes: a first run on empty caches (ours,
``CUPY_CACHE_DIR``, the driver's with ``CUDA_CACHE_DISABLE=1``) that makes
one call, synchronises and exits without waiting for anything itself (its
background compiles are under way), then a second run on the cache the first
left.  For every process it records the exit status and stderr (anything but
the script's own output is a failure), the time to the first result (from
before ``import tropical_gemm``, the CUDA context already up, to the result
synchronised on the GPU), which tier served the first launch, our compiles
in the call, and what was on disk after the run.  Second runs also time one
more call on the GPU's clock (for torch, the forward alone): the tuned kernel
at work.

    python benchmarks/lifecycle.py [--out DIR] [--repeats 20] [--jobs 4] [--stories NAME ...]

``--jobs`` runs that many first-and-second pairs side by side (each on its
own caches); the report says how many.  Writes ``lifecycle-<device>-<date>.json``
and prints the table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results_file import RESULTS, save_report  # noqa: E402
import startup  # noqa: E402
from startup import compile_bytecode, environment  # noqa: E402

#: name -> (front end, dtype, M=K=N, argmax): startup.py's stories and three larger or wider ones.
STORIES: dict[str, tuple[str, str, int, bool]] = {
    **startup.STORIES,
    "cupy f32 max_plus 4096³": ("cupy", "float32", 4096, False),
    "cupy f64 max_plus 1024³": ("cupy", "float64", 1024, False),
    "torch f32 max_plus 4096³, forward + backward": ("torch", "float32", 4096, True),
}


# ------------------------------------------------------------------ child


def child(story: str, timed_call: bool) -> dict[str, Any]:
    """One script: import, one call, synchronise; report, and return (the exit is the script's own)."""
    front, dtype, size, _ = STORIES[story]
    import numpy as np

    rng = np.random.default_rng(0)
    host = [rng.integers(-1000, 1000, (size, size)).astype(dtype) for _ in range(2)]
    if front == "torch":
        import torch

        inputs = [torch.tensor(x, device="cuda", requires_grad=True) for x in host]
        sync = torch.cuda.synchronize
    else:
        import cupy

        inputs = [cupy.asarray(x) for x in host]
        sync = cupy.cuda.Device().synchronize
    sync()
    started = time.perf_counter()
    import tropical_gemm as tg

    if front == "torch":
        from tropical_gemm.torch import tropical_matmul

        tropical_matmul(inputs[0], inputs[1], "max_plus").sum().backward()
    else:
        tg.matmul(inputs[0], inputs[1], "max_plus", argmax=STORIES[story][3])
    sync()
    first = time.perf_counter() - started
    stats = tg.jit.stats()
    report = {"first_result_s": first, "compiled": stats["compiled"], "baseline_launches": stats["baseline_launches"],
              "background_compiles": stats["background_compiles"],
              "first_tier": "baseline" if stats["baseline_launches"] else "tuned"}
    if timed_call:
        report["call_gpu_ms"] = gpu_ms(front, inputs, STORIES[story][3])
    return report


def gpu_ms(front: str, inputs: list, argmax: bool) -> float:
    """One more call on the GPU's clock (events around it); for torch, the forward alone (inputs require grad)."""
    import tropical_gemm as tg

    if front == "torch":
        import torch

        from tropical_gemm.torch import tropical_matmul

        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()  # with grad, as the first call: the same forward kernel (with its argmax)
        tropical_matmul(inputs[0], inputs[1], "max_plus")
        end.record()
        end.synchronize()
        return begin.elapsed_time(end)
    import cupy

    begin, end = cupy.cuda.Event(), cupy.cuda.Event()
    begin.record()
    tg.matmul(inputs[0], inputs[1], "max_plus", argmax=argmax)
    end.record()
    end.synchronize()
    return cupy.cuda.get_elapsed_time(begin, end)


# ----------------------------------------------------------------- parent


def run_process(story: str, cache: Path, cupy_cache: Path, second: bool) -> dict[str, Any]:
    env = {**os.environ, "TROPICAL_GEMM_CACHE_DIR": str(cache), "CUPY_CACHE_DIR": str(cupy_cache),
           "CUDA_CACHE_DISABLE": "1"}
    for name in ("TROPICAL_GEMM_TIERED", "TROPICAL_GEMM_EXIT_WAIT"):  # the defaults, as a user has them
        env.pop(name, None)
    code = ("import sys, json; sys.path.insert(0, sys.argv[1]); import lifecycle; "
            "print(json.dumps(lifecycle.child(sys.argv[2], sys.argv[3] == 'second')), flush=True)")
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code, str(Path(__file__).resolve().parent), story,
                           "second" if second else "first"], env=env, capture_output=True, text=True, timeout=300)
    lines = done.stdout.strip().splitlines()
    row: dict[str, Any] = json.loads(lines[-1]) if done.returncode == 0 and lines else {}
    row.update(status=done.returncode, stderr=done.stderr[-2000:], process_s=time.perf_counter() - started,
               on_disk=sum(1 for p in cache.rglob("*") if p.suffix in (".cubin", ".ptx")))
    row["clean"] = done.returncode == 0 and not done.stderr
    return row


def pair(story: str, scratch: Path) -> dict[str, Any]:
    cache = Path(tempfile.mkdtemp(dir=scratch))
    first = run_process(story, cache, Path(tempfile.mkdtemp(dir=scratch)), second=False)
    second = run_process(story, cache, Path(tempfile.mkdtemp(dir=scratch)), second=True)
    return {"first": first, "second": second}


def summary(story: str, pairs: list[dict[str, Any]]) -> dict[str, Any]:
    firsts, seconds = [p["first"] for p in pairs], [p["second"] for p in pairs]
    runs = firsts + seconds

    def median(rows: list[dict], key: str) -> "float | None":
        values = [r[key] for r in rows if key in r]
        return statistics.median(values) if values else None

    return {"story": story, "processes": len(runs), "abnormal": sum(not r["clean"] for r in runs),
            "signals": sum(r["status"] < 0 for r in runs),
            "first_s": median(firsts, "first_result_s"), "second_s": median(seconds, "first_result_s"),
            "second_compiles": sum(r.get("compiled", 1) for r in seconds),
            "second_baseline_launches": sum(r.get("baseline_launches", 1) for r in seconds),
            "first_tiers": sorted({r.get("first_tier", "?") for r in firsts}),
            "second_tiers": sorted({r.get("first_tier", "?") for r in seconds}),
            "on_disk_after_first": sorted({r["on_disk"] for r in firsts}),
            "second_call_gpu_ms": median(seconds, "call_gpu_ms")}


def table(report: dict[str, Any]) -> list[str]:
    env = report["environment"]
    lines = [f"Lifecycle: {report['repeats']} first runs (empty caches) and their second runs per story, "
             f"{report['jobs']} pairs side by side ({env['device']}, {env.get('commit', '')[:7]})",
             "| story | processes | abnormal exits | first result, first run | first result, second run "
             "| second runs: compiles / baseline launches | tier of the first launch (first / second) "
             "| kernels on disk after the first run | one more call, second run (GPU) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in report["stories"]:
        def ms(value: "float | None", scale: float = 1e3) -> str:
            return "—" if value is None else f"{value * scale:.1f} ms"
        lines.append(f"| {row['story']} | {row['processes']} | {row['abnormal']} ({row['signals']} by a signal) "
                     f"| {ms(row['first_s'])} | {ms(row['second_s'])} "
                     f"| {row['second_compiles']} / {row['second_baseline_launches']} "
                     f"| {'/'.join(row['first_tiers'])} / {'/'.join(row['second_tiers'])} "
                     f"| {', '.join(map(str, row['on_disk_after_first']))} | {ms(row['second_call_gpu_ms'], 1)} |")
    total = sum(r["processes"] for r in report["stories"])
    lines.append(f"{total} processes, {sum(r['abnormal'] for r in report['stories'])} abnormal exits")
    return lines


def main(argv: "list[str] | None" = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--stories", nargs="*", choices=list(STORIES), default=list(STORIES))
    args = parser.parse_args(argv)
    compile_bytecode()
    report: dict[str, Any] = {"environment": environment(), "repeats": args.repeats, "jobs": args.jobs,
                              "stories": [], "runs": {}}
    with tempfile.TemporaryDirectory(prefix="tg-lifecycle-") as scratch, ThreadPoolExecutor(args.jobs) as pool:
        for story in args.stories:
            pairs = list(pool.map(lambda _: pair(story, Path(scratch)), range(args.repeats)))
            report["runs"][story] = pairs
            report["stories"].append(summary(story, pairs))
            print(f"done: {story}: {report['stories'][-1]['abnormal']} abnormal", flush=True)
    save_report(report, args.out, "lifecycle", table(report))
    return 0 if all(r["abnormal"] == 0 for r in report["stories"]) else 1


if __name__ == "__main__":
    sys.exit(main())
