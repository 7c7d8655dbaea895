"""Start-up cost of the lazy JIT against its peers (the user stories are benchmarks/startup.py): fresh processes.

Every measurement runs in a fresh interpreter (this script re-runs itself with
``--child``), because what matters is what a new process pays:

* ``import tropical_gemm`` and ``import cupy`` (seconds);
* CUDA context creation (the first allocation);
* kernel-ready time: everything spent making kernels ready (source assembly,
  cache lookup and lock, NVRTC, module load), from ``jit.stats()["ready_seconds"]``;
* time from a ready context (inputs already on the device) to the first
  correct 256×256×256 float32 max_plus product back on the host, checked
  bit for bit against numpy on sampled rows, split into the call (kernel
  ready, launch), the wait for the GPU and the copy back;
* how many kernels were compiled, and which.

256³ cannot fill a GPU with the tuned square tiles, so the engine runs it on
the small family, whose kernel also compiles faster.  The same cold
measurement at 2048³ shows what a first product pays for the tuned kernel.

Peers in the same run: CuPy's ``RawModule(code=...)`` on the same kernel
source, cold and warm (its own cache in a fresh ``CUPY_CACHE_DIR``), and
compiling all forward kernels of one layout in one NVRTC program, the way
libraries that build everything at start-up do (``--full-catalogue``: every
catalogue kernel).  Memory-hit cost: ``jit.get_function`` on a loaded kernel.

CuPy compiles some of its own kernels on first use (allocation helpers,
copies); a priming run fills CuPy's cache first so that the cold figures
measure our compile, not CuPy's.

    python benchmarks/startup_peers.py [--out DIR] [--cold-runs 3] [--warm-runs 5] [--no-gpu --arch sm_90]

``--no-gpu`` measures what a machine without a GPU can: compile from an
empty cache, a verified disk hit (read + checksum, no module load), the
memory hit (with a loader that does nothing) and the one-program peer.
Writes ``startup-peers-<device>-<date>.json`` under ``--out`` and prints a table.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

SIZE = 256
#: A product that fills the GPU, so its first call compiles the tuned square kernel.
LARGE_SIZE = 2048
#: The family the engine picks for the 256³ first product (too small to fill a GPU with square tiles).
FIRST_TILE = "small"
MEMORY_HIT_CALLS = 200_000


# ---- children: each runs in a fresh interpreter and prints one JSON line ------------------------


def child_first_product(size: int) -> dict[str, Any]:
    """The user's first product in a new process, with the cache the environment points at.

    The time to the first result is split into the call (kernel ready and
    launched), the wait for the GPU, and the copy back.
    """
    started = time.perf_counter()
    import tropical_gemm as tg

    imported_tg = time.perf_counter()
    import cupy
    import numpy as np

    imported_cupy = time.perf_counter()
    cupy.empty(1)
    cupy.cuda.Device().synchronize()
    context = time.perf_counter()
    rng = np.random.default_rng(0)
    a = rng.standard_normal((size, size), dtype=np.float32)
    b = rng.standard_normal((size, size), dtype=np.float32)
    a_dev, b_dev = cupy.asarray(a), cupy.asarray(b)
    cupy.cuda.Device().synchronize()
    ready = time.perf_counter()
    values = tg.matmul(a_dev, b_dev, semiring="max_plus")
    returned = time.perf_counter()
    cupy.cuda.Device().synchronize()
    computed = time.perf_counter()
    result = cupy.asnumpy(values)
    first_result = time.perf_counter()
    rows = np.unique(np.linspace(0, size - 1, min(size, 64)).astype(int))
    expected = np.max(a[rows, :, None] + b[None, :, :], axis=1)
    counters = tg.jit.stats()
    spec = _kernel_of_first_product(a_dev, b_dev)
    return {
        "size": size,
        "kernel": spec.name,
        "import_tropical_gemm_s": imported_tg - started,
        "import_cupy_s": imported_cupy - imported_tg,
        "context_s": context - imported_cupy,
        "kernel_ready_s": counters["ready_seconds"],
        "kernel_ready_per_kernel_s": counters["ready_seconds"] / max(counters["loads"], 1),
        "first_result_s": first_result - ready,
        "first_call_s": returned - ready,
        "first_gpu_wait_s": computed - returned,
        "first_copy_back_s": first_result - computed,
        "correct": bool(np.array_equal(result[rows], expected)),
        "compiled": counters["compiled"],
        "disk_hits": counters["disk_hits"],
        "loads": counters["loads"],
        "compile_s": counters["compile_seconds"],
        "load_s": counters["load_seconds"],
        "memory_hit_us": _memory_hit_us(tg.jit.get_function, spec),
    }


def _kernel_of_first_product(a_dev: Any, b_dev: Any):
    """The spec the engine launched for ``a_dev ⊗ b_dev`` (its plan is cached, so this asks again for free)."""
    from tropical_gemm.engines import cuda as cuda_engine
    from tropical_gemm.engines.cuda.gpu import sm_count

    size = a_dev.shape[0]
    plan = cuda_engine.plan_forward(a_dev.shape, (size, 1), b_dev.shape, (size, 1), (), "float32", "max_plus",
                                    False, sm_count(a_dev.device.id), True)
    return plan.spec


def _memory_hit_us(get_function, spec) -> float:
    """Best of five batches of ``get_function(spec)`` on a loaded kernel, in microseconds."""
    get_function(spec)
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(MEMORY_HIT_CALLS // 5):
            get_function(spec)
        best = min(best, (time.perf_counter() - started) / (MEMORY_HIT_CALLS // 5))
    return best * 1e6


def child_cupy_rawmodule() -> dict[str, Any]:
    """CuPy's own path for the same kernel source: compile (or CuPy-cache hit) and get_function."""
    import cupy

    from tropical_gemm.jit import COMPILE_OPTIONS, make_spec
    from tropical_gemm.jit.source import kernel_options, kernel_source

    spec = make_spec("forward", "max_plus", "float32", tile=FIRST_TILE)
    source = kernel_source(spec)
    cache = Path(os.environ["CUPY_CACHE_DIR"])
    files_before = _file_count(cache)
    cupy.empty(1)
    cupy.cuda.Device().synchronize()
    started = time.perf_counter()
    module = cupy.RawModule(code=source, options=COMPILE_OPTIONS + kernel_options(spec))
    module.get_function(spec.name)
    ready = time.perf_counter() - started
    return {"kernel_ready_s": ready, "compiled": int(_file_count(cache) > files_before)}


def _file_count(directory: Path) -> int:
    return sum(len(files) for _, _, files in os.walk(directory)) if directory.is_dir() else 0


def child_registry_no_gpu(arch: str) -> dict[str, Any]:
    """Without a GPU: the registry with a do-nothing loader; compile or verified disk hit, then memory hits."""
    started = time.perf_counter()
    import tropical_gemm  # noqa: F401  (timed: what an import costs)

    imported = time.perf_counter()
    from tropical_gemm.jit import Registry, make_spec, resolve_target
    from tropical_gemm.jit.compiler import nvrtc_version

    nvrtc_version()  # loads NVRTC (and CuPy's library finder); a GPU process pays this in import cupy
    nvrtc_loaded = time.perf_counter()
    target = resolve_target(arch)
    registry = Registry(loader=lambda binary, name, device: (name, len(binary)),
                        target_for_device=lambda device: target)
    spec = make_spec("forward", "max_plus", "float32", tile=FIRST_TILE)
    registry.get_function(spec, 0)
    counters = registry.stats()
    return {
        "import_tropical_gemm_s": imported - started,
        "load_nvrtc_s": nvrtc_loaded - imported,
        "kernel_ready_s": counters["ready_seconds"],
        "compiled": counters["compiled"],
        "disk_hits": counters["disk_hits"],
        "compile_s": counters["compile_seconds"],
        "memory_hit_us": _memory_hit_us(lambda s: registry.get_function(s, 0), spec),
    }


def child_one_program(arch: str, full: bool) -> dict[str, Any]:
    """All forward kernels of one layout (or the whole catalogue) in one NVRTC program."""
    from tropical_gemm.jit import catalogue, resolve_target
    from tropical_gemm.jit.compiler import compile_program
    from tropical_gemm.jit.source import fragment, preamble

    specs = catalogue() if full else [s for s in catalogue(ops=["forward"])
                                      if (s.a_layout, s.b_layout) == ("row", "row")]
    program = preamble() + "\n".join(fragment(s) for s in specs)
    compiled = compile_program(program, specs[0].name, resolve_target(arch))
    return {"kernels": len(specs), "compile_s": compiled.compile_seconds, "binary_bytes": len(compiled.binary),
            "scope": "full catalogue" if full else "forward, row-major A and B"}


CHILDREN = {
    "first_product": lambda args: child_first_product(args.size),
    "cupy_rawmodule": lambda args: child_cupy_rawmodule(),
    "registry_no_gpu": lambda args: child_registry_no_gpu(args.arch),
    "one_program": lambda args: child_one_program(args.arch, args.full_catalogue),
}


# ---- parent --------------------------------------------------------------------------------------


def run_child(name: str, env: dict[str, str], extra: list[str] = ()) -> dict[str, Any]:
    """Run one child in a fresh interpreter; its wall time includes interpreter start-up."""
    inherited = {k: v for k, v in os.environ.items() if not k.startswith(("TROPICAL_GEMM_", "CUPY_CACHE"))}
    started = time.perf_counter()
    done = subprocess.run([sys.executable, __file__, "--child", name, *extra], env={**inherited, **env},
                          capture_output=True, text=True, timeout=1800)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"child {name} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    result = json.loads(done.stdout.strip().splitlines()[-1])
    result["process_wall_s"] = wall
    return result


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median of every numeric field over the runs, and the runs themselves."""
    keys = [k for k, v in runs[0].items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    summary: dict[str, Any] = {k: statistics.median(r[k] for r in runs) for k in keys}
    for flag in ("correct",):
        if flag in runs[0]:
            summary[flag] = all(r[flag] for r in runs)
    summary["runs"] = runs
    return summary


def environment(gpu: bool, arch: str | None) -> dict[str, Any]:
    from tropical_gemm import __version__
    from tropical_gemm.jit.compiler import nvrtc_version

    info: dict[str, Any] = {
        "tropical_gemm": __version__, "python": platform.python_version(), "host": platform.node(),
        "nvrtc": "%d.%d" % nvrtc_version(), "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
    }
    try:
        import cupy

        info["cupy"] = cupy.__version__
    except ImportError:
        info["cupy"] = None
    if gpu:
        import cupy

        props = cupy.cuda.runtime.getDeviceProperties(0)
        info["device"] = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
        info["arch"] = f"sm_{props['major']}{props['minor']}"
        driver = cupy.cuda.runtime.driverGetVersion()
        info["driver_cuda"] = f"{driver // 1000}.{driver % 1000 // 10}"
        info["driver"] = _nvidia_driver_version()
    else:
        info["device"] = "no-gpu"
        info["arch"] = arch
    return info


def _nvidia_driver_version() -> str | None:
    try:
        done = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip().splitlines()[0] if done.returncode == 0 and done.stdout.strip() else None


def measure_gpu(args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    cupy_cache = scratch / "cupy-cache"
    # The driver's own JIT cache must not make a compile look cheaper than it is.
    base = {"CUPY_CACHE_DIR": str(cupy_cache), "CUDA_CACHE_DISABLE": "1"}
    run_child("first_product", {**base, "TROPICAL_GEMM_CACHE_DIR": str(scratch / "priming")})  # fills CuPy's cache
    cold = [run_child("first_product", {**base, "TROPICAL_GEMM_CACHE_DIR": str(scratch / f"cold-{i}")})
            for i in range(args.cold_runs)]
    warm_dir = scratch / "cold-0"
    warm = [run_child("first_product", {**base, "TROPICAL_GEMM_CACHE_DIR": str(warm_dir)})
            for _ in range(args.warm_runs)]
    large = [run_child("first_product", {**base, "TROPICAL_GEMM_CACHE_DIR": str(scratch / f"large-{i}")},
                       ["--size", str(LARGE_SIZE)]) for i in range(args.cold_runs)]
    results = {"cold": summarize(cold), "warm": summarize(warm), "cold_large": summarize(large)}
    try:  # a peer that fails is reported, not allowed to sink our own figures
        cupy_cold = [run_child("cupy_rawmodule", {"CUPY_CACHE_DIR": str(scratch / f"cupy-peer-{i}"),
                                                  "CUDA_CACHE_DISABLE": "1"})
                     for i in range(args.cold_runs)]
        cupy_warm = [run_child("cupy_rawmodule", {"CUPY_CACHE_DIR": str(scratch / "cupy-peer-0"),
                                                  "CUDA_CACHE_DISABLE": "1"})
                     for _ in range(args.warm_runs)]
    except RuntimeError as exc:
        results["cupy_rawmodule_error"] = str(exc)
    else:
        results["cupy_rawmodule_cold"], results["cupy_rawmodule_warm"] = summarize(cupy_cold), summarize(cupy_warm)
    return results


def measure_no_gpu(args: argparse.Namespace, scratch: Path) -> dict[str, Any]:
    extra = ["--arch", args.arch]
    cold = [run_child("registry_no_gpu", {"TROPICAL_GEMM_CACHE_DIR": str(scratch / f"cold-{i}")}, extra)
            for i in range(args.cold_runs)]
    warm = [run_child("registry_no_gpu", {"TROPICAL_GEMM_CACHE_DIR": str(scratch / "cold-0")}, extra)
            for _ in range(args.warm_runs)]
    return {"cold": summarize(cold), "warm": summarize(warm)}


def table(results: dict[str, Any]) -> str:
    """A Markdown table of the medians, for the terminal and for docs/jit.md."""
    rows = ["| scenario | import tropical_gemm | import cupy | context | kernel ready | first result "
            "| kernels compiled | process wall |", "|---|---|---|---|---|---|---|---|"]

    def cell(summary: dict[str, Any], key: str, unit: str = "s") -> str:
        if key not in summary:
            return "–"
        value = summary[key]
        return f"{value * 1e3:.1f} ms" if unit == "ms" else f"{value:.3f} s"

    for label, key in (("tropical_gemm, empty cache", "cold"), ("tropical_gemm, warm cache", "warm"),
                       (f"tropical_gemm {LARGE_SIZE}³ (square kernel), empty cache", "cold_large"),
                       ("CuPy RawModule(code=…), empty CuPy cache", "cupy_rawmodule_cold"),
                       ("CuPy RawModule(code=…), warm CuPy cache", "cupy_rawmodule_warm")):
        s = results.get(key)
        if s is None:
            continue
        compiled = f"{s['compiled']:.0f}" if "compiled" in s else "–"
        rows.append(f"| {label} | {cell(s, 'import_tropical_gemm_s')} | {cell(s, 'import_cupy_s')} "
                    f"| {cell(s, 'context_s')} | {cell(s, 'kernel_ready_s', 'ms')} | {cell(s, 'first_result_s')} "
                    f"| {compiled} | {cell(s, 'process_wall_s')} |")
    lines = rows + [f"{key}: {results[key].splitlines()[0]}" for key in results if key.endswith("_error")]
    one = results.get("one_program")
    if one:
        lines.append("")
        lines.append(f"One NVRTC program with {one['kernels']} kernels ({one['scope']}): "
                     f"{one['compile_s']:.2f} s to compile, {one['binary_bytes'] / 1e6:.1f} MB of cubin.")
    for key in ("cold", "warm", "cold_large"):
        s = results.get(key)
        if s and "first_call_s" in s:
            lines.append(f"{key}: first result {s['first_result_s']:.3f} s = call {s['first_call_s']:.3f} s "
                         f"(kernel ready {s['kernel_ready_s']:.3f} s) + GPU wait {s['first_gpu_wait_s']:.3f} s "
                         f"+ copy back {s['first_copy_back_s']:.3f} s; kernel {s['runs'][0]['kernel']}")
    hits = [results[k]["memory_hit_us"] for k in ("warm",) if k in results and "memory_hit_us" in results[k]]
    if hits:
        lines.append(f"Memory hit (`jit.get_function` on a loaded kernel): {hits[0]:.2f} µs.")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results", help="results directory")
    parser.add_argument("--cold-runs", type=int, default=3, help="fresh processes on an empty cache")
    parser.add_argument("--warm-runs", type=int, default=5, help="fresh processes on a warm cache")
    parser.add_argument("--no-gpu", action="store_true", help="measure only compile and disk paths (no GPU)")
    parser.add_argument("--arch", default=None, help="target for --no-gpu and the one-program peer "
                                                    "(default: the GPU's, or sm_90 without one)")
    parser.add_argument("--full-catalogue", action="store_true",
                        help="the one-program peer compiles every catalogue kernel (slow) instead of one layout")
    parser.add_argument("--skip-one-program", action="store_true", help="leave out the one-program peer")
    parser.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    parser.add_argument("--size", type=int, default=SIZE, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(CHILDREN[args.child](args)))
        return 0

    from startup import compile_bytecode  # the same .pyc an installed package has

    compile_bytecode()
    gpu = not args.no_gpu
    info = environment(gpu, args.arch or "sm_90")
    args.arch = args.arch or info["arch"]
    with tempfile.TemporaryDirectory(prefix="tg-startup-") as scratch:
        results: dict[str, Any] = measure_gpu(args, Path(scratch)) if gpu else measure_no_gpu(args, Path(scratch))
        if not args.skip_one_program:
            try:
                results["one_program"] = run_child("one_program", {}, ["--arch", args.arch]
                                                   + (["--full-catalogue"] if args.full_catalogue else []))
            except RuntimeError as exc:
                results["one_program_error"] = str(exc)
    results["environment"] = info
    results["targets"] = {"cold_ready_to_result_s": 0.6, "warm_kernel_ready_s_per_kernel": 0.002,
                          "memory_hit_us": 5.0}
    args.out.mkdir(parents=True, exist_ok=True)
    slug = re.sub(r"[^a-z0-9]+", "-", info["device"].lower()).strip("-")
    path = args.out / f"startup-peers-{slug}-{dt.date.today().isoformat()}.json"
    path.write_text(json.dumps(results, indent=2) + "\n")
    print(f"{info['device']} ({info['arch']}), NVRTC {info['nvrtc']}, CuPy {info['cupy']}, "
          f"tropical_gemm {info['tropical_gemm']}, Python {info['python']}")
    print(table(results))
    if gpu and not all(results[key]["correct"] for key in ("cold", "warm", "cold_large")):
        print("ERROR: a first product did not match numpy", file=sys.stderr)
        return 1
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
