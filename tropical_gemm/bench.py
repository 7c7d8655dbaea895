"""``tropical-gemm bench``: a short throughput and start-up benchmark on the engine at hand.

Throughput: float32 ``max_plus`` products of a few square sizes, in tropical
ops per second (2·n³ per product: one ⊗ and one ⊕ per term).  The CPU
figure is the best of a few calls (G ops/s); the GPU figure is the median of
trials timed with CUDA events (T ops/s).  Each size is called once untimed
first, so compiling or loading the kernel is not counted.

Start-up: what a new process pays before its first result, measured in fresh
interpreters: ``import tropical_gemm``, on CUDA the CuPy import and context
creation, then the first 256³ product back on the host, checked bit for bit
against a numpy loop.  On CUDA it runs twice on a new, empty kernel cache:
cold (the kernel is compiled) and warm (it is read from the disk cache); the
user's own cache is never touched.

This is the minute-long answer to "what does this machine do?"; the scripts
in ``benchmarks/`` measure everything (every semiring and dtype, ceilings,
peers) and record it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ._version import __version__
from .api import matmul
from .options import whole_number

SEMIRING = "max_plus"
DTYPE = "float32"
#: The first product of a fresh process: big enough to need the square kernel, small enough to be instant.
FIRST_SIZE = 256
CPU_SIZES = (256, 512, 1024)
CUDA_SIZES = (1024, 2048, 4096, 8192)
#: The largest size n measured: three n x n float32 operands of this size take 48 GiB.
MAX_SIZE = 2**16
MATPLOTLIB_HINT = "--plot needs matplotlib, which is not installed: pip install matplotlib"

#: A fresh interpreter times its own import before anything else runs, then reports (see first_result).
_CHILD = ("import sys, time; t0 = time.perf_counter(); import tropical_gemm; t1 = time.perf_counter(); "
          "from tropical_gemm.bench import first_result; first_result(sys.argv[1], t0, t1)")


@dataclass(frozen=True)
class Engine:
    """Where the products run, described for the table, and the unit its throughput is quoted in."""

    name: str  # "cpu" or "cuda"
    device: str
    unit: str
    scale: float
    sizes: tuple[int, ...]


@dataclass(frozen=True)
class Throughput:
    size: int
    seconds: float
    ops_per_second: float


@dataclass(frozen=True)
class Startup:
    """One fresh process, from ``import tropical_gemm`` to the first product on the host."""

    cache: str  # "cold" or "warm" kernel cache on CUDA; "-" on the CPU, which compiles nothing
    import_seconds: float
    context_seconds: float  # CuPy import and CUDA context creation, inputs uploaded (0 on the CPU)
    first_result_seconds: float  # kernel ready (compile or cache), the product, the copy back
    total_seconds: float  # the three above
    process_seconds: float  # the whole child process, interpreter start-up and exit included
    kernels_compiled: int
    kernels_from_disk: int


Step = Callable[[str], None]


def add_bench_arguments(parser: argparse.ArgumentParser) -> None:
    """The bench's options (the CLI owns the parser; ``run_bench`` reads the namespace)."""
    parser.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto",
                        help="where to measure: auto uses a CUDA GPU when one is usable (default: auto)")
    parser.add_argument("--sizes", type=_positive, nargs="+",
                        help=f"square sizes n of the n^3 products (default: {' '.join(map(str, CPU_SIZES))} "
                             f"on the CPU, {' '.join(map(str, CUDA_SIZES))} on a GPU)")
    parser.add_argument("--plot", type=Path, metavar="FILE", help="also write a PNG plot (needs matplotlib)")
    parser.add_argument("--json", action="store_true", help="print the results as JSON on stdout, no table")


def _positive(text: str) -> int:
    return whole_number(1, MAX_SIZE, "a whole number of rows")(text)


def run_bench(args: argparse.Namespace, progress: Any) -> int:
    """Measure, then print the table (or JSON) and write the plot if asked; ``progress`` is a ProgressBar."""
    if args.plot and not args.plot.resolve().parent.is_dir():  # fail before measuring, not after
        raise RuntimeError(f"--plot {args.plot}: the directory {args.plot.resolve().parent} does not exist; "
                           "create it first")
    pyplot = _pyplot() if args.plot else None
    engine = choose_engine(args.device)
    sizes = tuple(args.sizes or engine.sizes)
    runs = 2 if engine.name == "cuda" else 1
    total = len(sizes) + runs
    done = 0

    def step(label: str) -> None:
        nonlocal done
        done += 1
        progress.update(done, total, label)

    throughput = measure_throughput(engine, sizes, step)
    startup = measure_startup(engine, step)
    progress.finish()
    report = build_report(engine, throughput, startup)
    print(json.dumps(report, indent=2) if args.json else format_table(report))
    if pyplot is not None:
        write_plot(report, args.plot, pyplot)
        if not args.json:
            print(f"plot written to {args.plot}")
    return 0


# ---- engines -----------------------------------------------------------------------------------


def choose_engine(device: str) -> Engine:
    """The CPU, or the current GPU when one is usable (``auto``) or demanded (``cuda``, else an error)."""
    if device == "cpu":
        return cpu_engine()
    from .info import cuda_report

    cuda = cuda_report(nvrtc_usable=False)
    if cuda["gpus"]:
        return cuda_engine(cuda["gpus"])
    if device == "cuda":
        raise RuntimeError(f"--device cuda, but {cuda['problem']}")
    return cpu_engine()


def cpu_engine() -> Engine:
    return Engine("cpu", f"{_cpu_model()}, {os.cpu_count() or 1} threads", "G ops/s", 1e9, CPU_SIZES)


def cuda_engine(gpus: list[dict[str, Any]]) -> Engine:
    import cupy

    gpu = gpus[cupy.cuda.Device().id]
    return Engine("cuda", f"{gpu['name']}, {gpu['arch']}", "T ops/s", 1e12, CUDA_SIZES)


def _cpu_model() -> str:
    """The CPU's marketing name where Linux tells it, else what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


# ---- throughput --------------------------------------------------------------------------------


def measure_throughput(engine: Engine, sizes: tuple[int, ...], step: Step) -> list[Throughput]:
    """Seconds per ``n × n × n`` product and tropical ops per second, for each size."""
    results = []
    rng = np.random.default_rng(0)
    for n in sizes:
        a, b = (rng.standard_normal((n, n)).astype(DTYPE) for _ in range(2))
        seconds = _time_cuda(a, b) if engine.name == "cuda" else _time_cpu(a, b)
        results.append(Throughput(n, seconds, 2.0 * n**3 / seconds))
        step(f"{n}^3 product")
    return results


def _time_cpu(a: np.ndarray, b: np.ndarray) -> float:
    """The best of at least three calls and a tenth of a second, after one untimed call."""
    out = matmul(a, b, SEMIRING)
    best, spent, calls = float("inf"), 0.0, 0
    while calls < 3 or spent < 0.1:
        started = time.perf_counter()
        matmul(a, b, SEMIRING, out=out)
        seconds = time.perf_counter() - started
        best, spent, calls = min(best, seconds), spent + seconds, calls + 1
    return best


def _time_cuda(a: np.ndarray, b: np.ndarray) -> float:
    """The median of five trials timed with CUDA events, each of enough calls to last milliseconds."""
    import cupy

    da, db = cupy.asarray(a), cupy.asarray(b)
    out = matmul(da, db, SEMIRING)
    cupy.cuda.Device().synchronize()
    calls = max(1, min(50, int(1e11 / (2.0 * a.shape[0] ** 3))))
    samples = []
    for _ in range(5):
        start, stop = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        for _ in range(calls):
            matmul(da, db, SEMIRING, out=out)
        stop.record()
        stop.synchronize()
        samples.append(cupy.cuda.get_elapsed_time(start, stop) / 1e3 / calls)
    return statistics.median(samples)


# ---- start-up ----------------------------------------------------------------------------------


def measure_startup(engine: Engine, step: Step) -> list[Startup]:
    """Fresh processes up to their first result: a cold then a warm run on a new cache.

    On the CPU the compiled extension has nothing to compile, so the two
    match; where numba serves, the cold run waits for its compile.
    """
    cache = tempfile.mkdtemp(prefix="tropical-gemm-bench-")
    env = {k: v for k, v in os.environ.items() if k != "TROPICAL_GEMM_DISABLE_DISK_CACHE"}
    env["TROPICAL_GEMM_CACHE_DIR"] = cache
    # The driver's own JIT cache can serve a repeated compile; a cold start must not count on it.
    env["CUDA_CACHE_DISABLE"] = "1"
    try:
        runs = []
        for state in ("cold", "warm"):
            runs.append(_fresh_process(engine.name, state, env))
            step(f"start-up, {state} cache")
        return runs
    finally:
        shutil.rmtree(cache, ignore_errors=True)


def _fresh_process(engine: str, cache: str, env: dict[str, str]) -> Startup:
    package_root = str(Path(__file__).resolve().parents[1])  # the child imports this very package
    env = {**env, "PYTHONPATH": os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", _CHILD, engine], env=env, capture_output=True, text=True)
    process_seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"the start-up run failed ({engine}, {cache} cache):\n{done.stderr.strip()[-2000:]}")
    child = json.loads(done.stdout.strip().splitlines()[-1])
    if not child.pop("correct"):
        raise RuntimeError(f"the first product of a fresh process ({engine}) differs from numpy's")
    return Startup(cache=cache, process_seconds=process_seconds, **child)


def first_result(engine: str, t0: float, t1: float) -> None:
    """In a fresh process (``_CHILD``): time the first product after ``import tropical_gemm`` took ``t1 - t0``.

    Prints one JSON line for the parent.  The inputs are made before the
    clock runs again, so only the library's own work is timed.
    """
    rng = np.random.default_rng(1)
    a, b = (rng.standard_normal((FIRST_SIZE, FIRST_SIZE)).astype(DTYPE) for _ in range(2))
    compiled = from_disk = 0
    t2 = time.perf_counter()
    if engine == "cuda":
        import cupy

        da, db = cupy.asarray(a), cupy.asarray(b)
        t3 = time.perf_counter()
        c = cupy.asnumpy(matmul(da, db, SEMIRING))
        t4 = time.perf_counter()
        from .jit import stats

        compiled, from_disk = stats()["compiled"], stats()["disk_hits"]
    else:
        t3 = t2
        c = matmul(a, b, SEMIRING)
        t4 = time.perf_counter()
    print(json.dumps({
        "import_seconds": t1 - t0, "context_seconds": t3 - t2, "first_result_seconds": t4 - t3,
        "total_seconds": (t1 - t0) + (t4 - t2), "kernels_compiled": compiled, "kernels_from_disk": from_disk,
        "correct": bool(np.array_equal(c, _max_plus_loop(a, b))),
    }))


def _max_plus_loop(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The plainest max_plus product, one k at a time: the same float32 sums and maxima, so exact."""
    c = np.full((a.shape[0], b.shape[1]), -np.inf, dtype=a.dtype)
    for k in range(a.shape[1]):
        np.maximum(c, a[:, k:k + 1] + b[k], out=c)
    return c


# ---- report ------------------------------------------------------------------------------------


def build_report(engine: Engine, throughput: list[Throughput], startup: list[Startup]) -> dict[str, Any]:
    """Everything measured, with what it ran on, as ``--json`` prints it."""
    from .info import nvrtc_report, package_versions

    versions = {name: found["version"] for name, found in package_versions().items() if found is not None}
    if engine.name == "cuda":
        versions["nvrtc"] = nvrtc_report()["version"]
    return {
        "tropical_gemm": __version__,
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "engine": engine.name,
        "device": engine.device,
        "semiring": SEMIRING,
        "dtype": DTYPE,
        "unit": engine.unit,
        "unit_scale": engine.scale,
        "versions": {"python": platform.python_version(), **versions},
        "throughput": [asdict(t) for t in throughput],
        "startup": [asdict(s) for s in startup],
    }


def format_table(report: dict[str, Any]) -> str:
    """Two small tables: throughput per size, then the start-up runs."""
    scale = report["unit_scale"]
    lines = [f"tropical_gemm {report['tropical_gemm']} bench: {report['dtype']} {report['semiring']} "
             f"on {report['engine']} ({report['device']})", "",
             f"{'size':>6}  {'time per product':>16}  {report['unit']:>8}"]
    for row in report["throughput"]:
        lines.append(f"{row['size']:>6}  {_duration(row['seconds']):>16}  {row['ops_per_second'] / scale:>8.2f}")
    lines += ["", f"start-up of a fresh process, up to its first {FIRST_SIZE}^3 product on the host:",
              f"{'cache':>6}  {'import':>8}  {'context':>8}  {'first result':>12}  {'total':>8}  {'process':>8}  "
              "kernels compiled (from disk)"]
    for run in report["startup"]:
        kernels = "-" if report["engine"] == "cpu" else f"{run['kernels_compiled']} ({run['kernels_from_disk']})"
        context = "-" if report["engine"] == "cpu" else _duration(run["context_seconds"])
        lines.append(f"{run['cache']:>6}  {_duration(run['import_seconds']):>8}  {context:>8}  "
                     f"{_duration(run['first_result_seconds']):>12}  {_duration(run['total_seconds']):>8}  "
                     f"{_duration(run['process_seconds']):>8}  {kernels}")
    return "\n".join(lines)


def _duration(seconds: float) -> str:
    return f"{seconds * 1e3:.2f} ms" if seconds < 1 else f"{seconds:.2f} s"


def _pyplot() -> Any:
    """matplotlib's pyplot on the file-only Agg backend, or an error that says how to install it."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as pyplot
    except ImportError as exc:
        raise RuntimeError(MATPLOTLIB_HINT) from exc
    return pyplot


def write_plot(report: dict[str, Any], path: Path, pyplot: Any) -> None:
    """Throughput against size on the left, each start-up run's phases as stacked bars on the right."""
    figure, (left, right) = pyplot.subplots(1, 2, figsize=(10, 4))
    sizes = [row["size"] for row in report["throughput"]]
    left.plot(sizes, [row["ops_per_second"] / report["unit_scale"] for row in report["throughput"]], "o-")
    left.set_xscale("log", base=2)
    left.set_ylim(bottom=0)
    left.set_xlabel("n (n × n × n product)")
    left.set_ylabel(report["unit"])
    left.set_title(f"{report['dtype']} {report['semiring']} throughput")
    labels = [run["cache"] if run["cache"] != "-" else "fresh process" for run in report["startup"]]
    bottom = [0.0] * len(labels)
    phases = ("import_seconds", "context_seconds", "first_result_seconds") if report["engine"] == "cuda" else (
        "import_seconds", "first_result_seconds")  # the CPU has no context to create
    for phase in phases:
        heights = [run[phase] for run in report["startup"]]
        right.bar(labels, heights, bottom=bottom, label=phase.removesuffix("_seconds").replace("_", " "))
        bottom = [b + h for b, h in zip(bottom, heights)]
    right.set_ylabel("seconds")
    right.set_title(f"start-up to the first {FIRST_SIZE}³ result")
    right.legend()
    figure.suptitle(f"tropical_gemm {report['tropical_gemm']} on {report['engine']}: {report['device']}")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    pyplot.close(figure)
