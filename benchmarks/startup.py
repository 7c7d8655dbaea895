"""The first call in each user story: fresh processes, every cache empty, nothing primed (issue 15).

Each story runs in a fresh interpreter (this script re-runs itself with
``--child``) whose CUDA context is already up and whose inputs are already on
the GPU, so the clock measures what the library adds: from before
``import tropical_gemm`` (``tropical_gemm.torch`` for the torch stories) to
the first result, computed and synchronised on the GPU (for torch: forward
and backward done), and on to the result copied to the host, a cost of the
copy (a 4096² result takes longer to copy than to compute) rather than of
the library, reported beside it.

* **cold**: an empty kernel cache of ours, an empty ``CUPY_CACHE_DIR`` and
  the driver's JIT cache off (``CUDA_CACHE_DISABLE=1``); once with tiered
  compilation on (the default: baseline kernels first, tuned ones in the
  background) and once with it off (``TROPICAL_GEMM_TIERED=0``);
* **warm**: the same, but our cache holds what a cold run left (tuned kernels
  included: the cold child waits for its background compiles before exit).

Besides the time to the first result, and the part of it that imports the
library, each run reports our compiles (in the
call, and in the background), CuPy's own compiles (files in its cache: the
target is none), the launches served by baseline kernels, and the time per
call once the background compiles are done (calls back to back, as
``throughput.py`` times them), to compare with the warm process's.  Nothing here primes any cache.

    python benchmarks/startup.py [--out DIR] [--warm-runs 3] [--stories NAME ...]

Writes ``startup-<device>-<date>.json`` under ``--out`` and prints the table.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results_file import RESULTS, save_report  # noqa: E402

#: name -> (front end, dtype, M=K=N, argmax): the issue's story matrix.
STORIES: dict[str, tuple[str, str, int, bool]] = {
    "cupy f32 max_plus 256³": ("cupy", "float32", 256, False),
    "cupy f32 max_plus 1024³": ("cupy", "float32", 1024, False),
    "cupy f32 max_plus 1024³, argmax": ("cupy", "float32", 1024, True),
    "cupy i32 max_plus 4096³": ("cupy", "int32", 4096, False),
    "torch f32 max_plus 1024³, forward + backward": ("torch", "float32", 1024, True),
    "torch f32 max_plus 256³, forward + backward": ("torch", "float32", 256, True),
}
#: Calls timed after the background compiles, for the per-call time on tuned kernels: the median of
#: STEADY_BLOCKS blocks of STEADY_CALLS calls each.
STEADY_CALLS = 10
STEADY_BLOCKS = 5


# ------------------------------------------------------------------ child


def _child(story: str) -> dict[str, Any]:
    front, dtype, size, argmax = STORIES[story]
    import numpy as np

    rng = np.random.default_rng(0)
    host = [rng.integers(-1000, 1000, (size, size)).astype(dtype) for _ in range(2)]
    if front == "torch":
        import torch

        inputs = [torch.tensor(x, device="cuda", requires_grad=True) for x in host]
        torch.cuda.synchronize()
        sync, to_host = torch.cuda.synchronize, torch.Tensor.cpu
    else:
        import cupy

        inputs = [cupy.asarray(x) for x in host]  # a copy: no kernel of CuPy's
        cupy.cuda.Device().synchronize()
        sync, to_host = cupy.cuda.Device().synchronize, cupy.ndarray.get
    started = time.perf_counter()
    importlib.import_module("tropical_gemm.torch" if front == "torch" else "tropical_gemm")
    imported = time.perf_counter() - started
    call = _torch_call(inputs) if front == "torch" else _cupy_call(inputs, argmax)
    results = call()
    sync()
    first = time.perf_counter() - started
    for x in results:
        to_host(x)
    on_host = time.perf_counter() - started
    import tropical_gemm.jit as jit

    in_call = jit.stats()
    jit.wait()
    steady = []  # back to back, as benchmarks/throughput.py times calls: blocks of STEADY_CALLS, then a sync
    for _ in range(STEADY_BLOCKS):
        sync()
        t = time.perf_counter()
        for _ in range(STEADY_CALLS):
            call()
        sync()
        steady.append((time.perf_counter() - t) / STEADY_CALLS)
    done = jit.stats()
    cupy_cache = Path(os.environ["CUPY_CACHE_DIR"])
    return {
        "first_result_s": first, "on_host_s": on_host, "import_s": imported,
        "steady_call_s": statistics.median(steady),
        "compiled_in_call": in_call["compiled"], "compiled_total": done["compiled"],
        "compile_seconds_total": done["compile_seconds"], "baseline_launches": in_call["baseline_launches"],
        "tuned_swaps": done["tuned_swaps"], "tiered": done["tiered"],
        "cupy_compiles": sum(1 for p in cupy_cache.rglob("*") if p.is_file()) if cupy_cache.exists() else 0,
        # import cupy imports the bare cupyx package; its submodules are what products must not import
        "imported_cupyx_submodules": sorted(m for m in sys.modules if m.startswith("cupyx.")),
        "imported_scipy": "scipy" in sys.modules,
    }


def _cupy_call(inputs: list, argmax: bool):
    """A call that imports the library (first time only) and queues the product; its results."""
    def call() -> tuple:
        import tropical_gemm as tg

        result = tg.matmul(inputs[0], inputs[1], "max_plus", argmax=argmax)
        return result if argmax else (result,)
    return call


def _torch_call(inputs: list):
    """A forward and backward; the gradient, whose copy to the host is the story's last step."""
    def call() -> tuple:
        from tropical_gemm.torch import tropical_matmul

        for x in inputs:
            x.grad = None
        tropical_matmul(inputs[0], inputs[1], "max_plus").sum().backward()
        return (inputs[0].grad,)
    return call


# ----------------------------------------------------------------- parent


def _run_child(story: str, cache: Path, cupy_cache: Path, tiered: bool) -> dict[str, Any]:
    env = {**os.environ, "TROPICAL_GEMM_CACHE_DIR": str(cache), "CUPY_CACHE_DIR": str(cupy_cache),
           "CUDA_CACHE_DISABLE": "1", "TROPICAL_GEMM_TIERED": "1" if tiered else "0"}
    code = ("import sys, json; sys.path.insert(0, sys.argv[1]); import startup; "
            "print(json.dumps(startup._child(sys.argv[2])))")
    done = subprocess.run([sys.executable, "-c", code, str(Path(__file__).resolve().parent), story], env=env,
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"story {story!r} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(story: str, warm_runs: int, scratch: Path) -> dict[str, Any]:
    """Cold with tiering on, cold with it off, then warm runs on what the tiered cold run cached."""
    row: dict[str, Any] = {"story": story}
    for label, tiered in (("cold_tiered", True), ("cold_untiered", False)):
        cache = Path(tempfile.mkdtemp(dir=scratch))
        row[label] = _run_child(story, cache, Path(tempfile.mkdtemp(dir=scratch)), tiered)
        if tiered:
            warm_cache = cache
    row["warm"] = [_run_child(story, warm_cache, Path(tempfile.mkdtemp(dir=scratch)), True)
                   for _ in range(warm_runs)]
    return row


def environment() -> dict[str, Any]:
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(0)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    return {"device": name, "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "python": sys.version.split()[0], "cupy": cupy.__version__,
            "caches": "ours empty, CUPY_CACHE_DIR empty, CUDA_CACHE_DISABLE=1; CUDA context up before the clock"}


def table(report: dict[str, Any]) -> list[str]:
    lines = [f"First result per story, fresh processes ({report['environment']['device']})",
             "| story | cold, tiered | cold, not tiered | warm (median) | of which the import | warm, on the host "
             "| our compiles in the call (tiered / not) | CuPy's compiles | per call after the swap | per call warm |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for row in report["stories"]:
        on, off, warm = row["cold_tiered"], row["cold_untiered"], row["warm"]
        cupy = max(on["cupy_compiles"], off["cupy_compiles"], *(w["cupy_compiles"] for w in warm))

        def median_ms(key: str) -> float:
            return statistics.median(w[key] for w in warm) * 1e3
        lines.append(f"| {row['story']} | {on['first_result_s']:.3f} s | {off['first_result_s']:.3f} s "
                     f"| {median_ms('first_result_s'):.1f} ms | {median_ms('import_s'):.1f} ms "
                     f"| {median_ms('on_host_s'):.1f} ms | {on['compiled_in_call']} / {off['compiled_in_call']} "
                     f"| {cupy} | {on['steady_call_s'] * 1e3:.2f} ms | {median_ms('steady_call_s'):.2f} ms |")
    return lines


def compile_bytecode() -> None:
    """Byte-compile the package first, as ``pip install`` does: a checkout copied fresh has no ``.pyc``.

    Without this every child would compile our sources on import (Python may
    not write ``.pyc`` files there), a cost no installed user pays.
    """
    import compileall

    import tropical_gemm

    compileall.compile_dir(str(Path(tropical_gemm.__file__).parent), quiet=1)


def main(argv: "list[str] | None" = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--warm-runs", type=int, default=3)
    parser.add_argument("--stories", nargs="*", choices=list(STORIES), default=list(STORIES))
    args = parser.parse_args(argv)
    compile_bytecode()
    report: dict[str, Any] = {"environment": environment(), "stories": []}
    with tempfile.TemporaryDirectory(prefix="tg-stories-") as scratch:
        for story in args.stories:
            report["stories"].append(measure(story, args.warm_runs, Path(scratch)))
            print(f"done: {story}", flush=True)
    save_report(report, args.out, "startup", table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
