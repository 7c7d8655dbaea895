"""Where the CPU engine's first call goes: each step timed in fresh processes, cold and warm.

The demo's first product (float32 ``min_plus``, 2x2) runs in a new process
with an empty kernel cache (cold), then with the filled one (warm), step by
step: ``import tropical_gemm``, ``import numba`` (numba's own import, which
also imports scipy where it is installed, to check its version), our
``tropical_gemm.jit`` package (the cache location), the kernels module, the
variant's tile function (numba compiles it, or loads it from the cache and
first sets up its compiler's target context), and the call itself.  Each
label is the best of ``--repeats`` processes, so other jobs on the machine
inflate it less.

    python benchmarks/cpu_first_call.py [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu_peers import cpu_model, environment  # noqa: E402
from results_file import RESULTS, save_report  # noqa: E402

_STEPS = """
import json, time
marks = [("start", time.perf_counter())]
import numpy as np
import tropical_gemm as tg
marks.append(("import tropical_gemm", time.perf_counter()))
import numba
marks.append(("import numba", time.perf_counter()))
import tropical_gemm.jit
marks.append(("import tropical_gemm.jit", time.perf_counter()))
from tropical_gemm.engines.cpu import kernels
marks.append(("import kernels (rest)", time.perf_counter()))
kernels.tile_function("min", "plus", False, False, np.dtype("float32"), np.dtype("int32"))
marks.append(("tile function: compile or load", time.perf_counter()))
d = np.array([[0, 3], [1, 0]], np.float32)
tg.matmul(d, d, "min_plus")
marks.append(("first call", time.perf_counter()))
tg.matmul(d, d, "min_plus")
marks.append(("second call", time.perf_counter()))
print(json.dumps({label: t - marks[i][1] for i, (label, t) in enumerate(marks[1:])}))
"""


def steps(cache: str) -> dict:
    done = subprocess.run([sys.executable, "-c", _STEPS], capture_output=True, text=True, check=True,
                          env={**os.environ, "TROPICAL_GEMM_CACHE_DIR": cache})
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--note", default="")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    runs: dict[str, list[dict]] = {"cold": [], "warm": []}
    for _ in range(args.repeats):
        with tempfile.TemporaryDirectory() as cache:
            runs["cold"].append(steps(cache))
            runs["warm"].append(steps(cache))
    best = {label: {step: min(run[step] for run in rs) for step in rs[0]} for label, rs in runs.items()}
    env = {**environment(), "device": cpu_model().split("(")[0].strip()}
    report = {"environment": env, "benchmark": "cpu-first-call", "note": args.note, "best_seconds": best,
              "runs": runs}
    table = [f"{'step':34} {'cold':>8} {'warm':>8}   (s, best of {args.repeats} processes)"]
    table += [f"{step:34} {best['cold'][step]:8.3f} {best['warm'][step]:8.3f}" for step in best["cold"]]
    table.append(f"{'total':34} {sum(best['cold'].values()):8.3f} {sum(best['warm'].values()):8.3f}")
    save_report(report, args.out, "cpu-first-call", table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
