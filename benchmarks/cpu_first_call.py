"""The CPU engine's first call, cold and warm, and its throughput against the Rust crate: the issue-31 targets.

Designs measured in one run (``--designs``):

* ``native``: the kernels compiled ahead of time (the ``_native`` extension);
* ``numba``: the kernels numba compiles on first use (``TROPICAL_GEMM_CPU_KERNELS=numba``);
* ``numpy``: the vectorised numpy engine of tests/numpy_engine.py, which is
  what CPU tiering would serve while numba compiled in a background process
  (that process's work is the ``numba`` column's compile, and its warm start
  the ``numba`` column's: the numpy design has no warm run of its own).

Cold: one fresh process per design with an empty kernel cache, timing
``import tropical_gemm`` and then the first call of every semiring × dtype ×
argmax at ``--n``³ in turn (the first includes whatever the engine imports).
Warm: fresh processes with the cache the cold run filled, each timing the
script's own ``import numpy``, then ``import tropical_gemm`` plus one float32
``max_plus`` product at 64³ (the ``tropical_gemm`` figure), best of
``--repeats`` by the whole.  The package's bytecode is written first, as an
installed wheel has it.  Throughput: float32 ``max_plus`` at 1024³ and 2048³, plain
and with argmax, on every core, against the Rust crate tropical-gemm 0.4.0
(benchmarks/cpu.py's runner, same saved inputs, results checked equal).

    python benchmarks/cpu_first_call.py [--designs native numba numpy] [--note after]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from cpu import operands, ours, rust  # noqa: E402
from cpu_peers import RUST_FUNCTIONS, cpu_model, environment, rust_python  # noqa: E402
from results_file import RESULTS, save_report  # noqa: E402

SEMIRINGS = ("max_plus", "min_plus", "max_mul", "max_min", "min_max")
DTYPES = ("float32", "float64", "int32", "int64")
KERNELS = {"native": "native", "numba": "numba", "numpy": "native"}
THROUGHPUT = [(1024, False), (2048, False), (1024, True), (2048, True)]

_COLD = """
import json, sys, time
start = time.perf_counter()
import numpy as np
import tropical_gemm as tg
times = {"import tropical_gemm": time.perf_counter() - start}
if sys.argv[1] == "numpy":
    sys.path.insert(0, sys.argv[3])
    import numpy_engine
    def call(a, b, semiring, argmax):
        sr = tg.get_semiring(semiring)
        out = np.empty((a.shape[0], b.shape[1]), a.dtype)
        numpy_engine.forward(a, b, sr, out, np.empty(out.shape, np.int32) if argmax else None)
else:
    def call(a, b, semiring, argmax):
        tg.matmul(a, b, semiring, argmax=argmax)
n = int(sys.argv[2])
rng = np.random.default_rng(0)
for semiring in %r:
    for dtype in %r:
        a, b = (rng.integers(-100, 100, (n, n)).astype(dtype) for _ in range(2))
        for argmax in (False, True):
            start = time.perf_counter()
            call(a, b, semiring, argmax)
            first = time.perf_counter() - start
            start = time.perf_counter()
            call(a, b, semiring, argmax)
            times[f"{semiring} {dtype}{' argmax' if argmax else ''}"] = [first, time.perf_counter() - start]
times["numba imported"] = "numba" in sys.modules
print(json.dumps(times))
""" % (SEMIRINGS, DTYPES)

_WARM = """
import json, time
start = time.perf_counter()
import numpy as np
numpy_imported = time.perf_counter()
import tropical_gemm as tg
imported = time.perf_counter()
a = np.ones((64, 64), np.float32)
tg.matmul(a, a, "max_plus")
done = time.perf_counter()
print(json.dumps({"import numpy": numpy_imported - start, "import tropical_gemm": imported - numpy_imported,
                  "first call": done - imported, "tropical_gemm": done - numpy_imported, "total": done - start}))
"""


def byte_compile_package() -> None:
    """Write the package's bytecode, as pip does when it installs the wheel.

    A checkout run with ``PYTHONDONTWRITEBYTECODE`` set (or read-only) would
    otherwise compile every module from source in every process, a cost no
    installed copy pays.
    """
    import compileall

    import tropical_gemm

    compileall.compile_dir(str(Path(tropical_gemm.__file__).parent), quiet=1)


def run_script(script: str, design: str, cache: str, *args: str) -> dict:
    env = {**os.environ, "TROPICAL_GEMM_CACHE_DIR": cache, "TROPICAL_GEMM_CPU_KERNELS": KERNELS[design]}
    done = subprocess.run([sys.executable, "-c", script, design, *args], capture_output=True, text=True,
                          check=True, env=env, timeout=3600)
    return json.loads(done.stdout.strip().splitlines()[-1])


def first_calls(design: str, n: int, repeats: int) -> dict:
    with tempfile.TemporaryDirectory() as cache:
        cold = run_script(_COLD, design, cache, str(n), str(HERE.parent / "tests"))
        warm = [run_script(_WARM, design, cache) for _ in range(repeats)] if design != "numpy" else []
    calls = {label: value for label, value in cold.items() if isinstance(value, list)}
    return {"cold": cold, "cold_worst_first_call": max(first for first, _ in calls.values()),
            "cold_total_first_calls": sum(first for first, _ in calls.values()),
            "warm_runs": warm, "warm_best": min(warm, key=lambda run: run["total"]) if warm else None}


def throughput(design: str, python: Path, repeats: int) -> list[dict]:
    from tropical_gemm.engines import cpu as cpu_engine

    os.environ["TROPICAL_GEMM_CPU_KERNELS"] = KERNELS[design]
    cpu_engine._native_kernels.cache_clear()
    cpu_engine._native_variant.cache_clear()
    threads = cpu_engine.num_threads()
    rows = []
    with tempfile.TemporaryDirectory() as work:
        workdir = Path(work)
        for n, argmax in THROUGHPUT:
            a, b = operands("float32", n, 0)
            np.save(workdir / "a.npy", a)
            np.save(workdir / "b.npy", b)
            mine = ours(a, b, argmax, threads, repeats)
            theirs = rust(python, workdir / "a.npy", workdir / "b.npy", "float32", argmax, threads, repeats, workdir)
            same = all(x is None or np.array_equal(x, y) for x, y in zip(mine[2], theirs[2]))
            rows.append({"n": n, "argmax": argmax, "threads": threads, "ours_seconds": mine[0],
                         "rust_seconds": theirs[0], "ours_gops": 2 * n**3 / mine[0] / 1e9,  # ops/s: 2·M·N·K
                         "rust_gops": 2 * n**3 / theirs[0] / 1e9, "ratio": theirs[0] / mine[0], "equal": same})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--designs", nargs="+", choices=list(KERNELS), default=list(KERNELS))
    parser.add_argument("--n", type=int, default=256, help="size of the cold first calls (n³)")
    parser.add_argument("--repeats", type=int, default=3, help="warm processes, and timed calls per throughput case")
    parser.add_argument("--skip-throughput", action="store_true")
    parser.add_argument("--rust-wheel", type=Path, default=None, help="install the Rust crate from this wheel")
    parser.add_argument("--rust-venv", type=Path, default=Path(tempfile.gettempdir()) / "tropical-gemm-rust-venv")
    parser.add_argument("--note", default="")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    python = None if args.skip_throughput else rust_python(args.rust_venv, args.rust_wheel)
    byte_compile_package()
    assert ("float32", True) in RUST_FUNCTIONS
    designs = {}
    for design in args.designs:
        designs[design] = first_calls(design, args.n, args.repeats)
        if python is not None and design != "numpy":
            designs[design]["throughput"] = throughput(design, python, args.repeats)
    env = {**environment(), "device": cpu_model().split("(")[0].strip(), "load_average": os.getloadavg()}
    report = {"environment": env, "benchmark": "cpu-first-call", "note": args.note, "n": args.n, "designs": designs}
    table = [f"{'design':8} {'import':>7} {'cold worst':>10} {'cold sum':>9} {'warm: numpy + ours':>19}  throughput / Rust"]
    for design, got in designs.items():
        best = got["warm_best"]
        warm = f"{best['import numpy']:.3f} + {best['tropical_gemm']:.3f}" if best else "as numba's"
        ratios = " ".join(f"{row['n']}{'a' if row['argmax'] else ''}:{row['ratio']:.2f}x"
                          for row in got.get("throughput", []))
        table.append(f"{design:8} {got['cold']['import tropical_gemm']:7.3f} {got['cold_worst_first_call']:10.3f} "
                     f"{got['cold_total_first_calls']:9.2f} {warm:>19}  {ratios}")
    save_report(report, args.out, "cpu-first-call", table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
