"""The warm first call's host cost, piece by piece, in fresh processes (runs without a GPU).

A warm process finds its kernels on disk: what it pays before the first
result is imports, the registry's lookup (trust checks, metadata, the
cubin's SHA-256) and the module load.  This script byte-compiles the
package first (as an install does) and measures, in fresh interpreters with
numpy and cupy (where installed) imported before the clock starts, torch
too for the torch bridge's column:

* ``import_s``: ``import tropical_gemm``;
* ``engine_import_s``: then ``import tropical_gemm.engines.cuda`` (the JIT
  package and the engine that a first device call imports);
* ``device_imports_s``: the two together, what a warm first device call imports;
* ``lookup_s``: the tiering check plus the registry's ``get_function`` for
  the tuned f32 max-plus forward, from a pre-filled cache (compiled here for
  sm_90), up to the loader (a stand-in that takes the verified bytes);
  ``disk_lookups`` counts the cache reads it made;
* ``torch_import_s``: ``import tropical_gemm.torch`` with torch imported;
* ``first_call_s`` (GPU only): a real 256³ ``matmul`` and its copy to host;

and, in one process, ``hot_launch_us``: the per-launch lookup (tiering check
and ``get_function``) once the tuned kernel is servable, after a background
swap and in a warm process.  Medians over ``--runs`` fresh processes.

    python benchmarks/warm_path.py [--runs 7] [--out benchmarks/results]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results_file import run_and_save  # noqa: E402
from startup import compile_bytecode  # noqa: E402

SPEC = ("forward", "max_plus", "float32")
HOT_LAUNCHES = 20000


def _preimport(torch: bool = False) -> None:
    """What the user's process holds before the clock: numpy and cupy (where installed), as in the cupy
    stories of ``startup.py``; torch too for the torch bridge's import.  torch alone imports much of what
    the library would (``logging``, for one), so a torch import before the clock would hide those costs
    from the cupy columns."""
    import numpy  # noqa: F401

    for name in ("cupy", "torch") if torch else ("cupy",):
        try:
            __import__(name)
        except ImportError:
            pass


def _child_import() -> dict[str, Any]:
    _preimport()
    started = time.perf_counter()
    import tropical_gemm  # noqa: F401

    imported = time.perf_counter()
    import tropical_gemm.engines.cuda  # noqa: F401

    done = time.perf_counter()
    return {"import_s": imported - started, "engine_import_s": done - imported, "device_imports_s": done - started}


def _child_lookup() -> dict[str, Any]:
    _preimport()
    from tropical_gemm.jit import Registry, make_spec, resolve_target
    from tropical_gemm.jit.cache import default_cache
    from tropical_gemm.jit.tiering import Tiers

    target = resolve_target("sm_90")
    lookups = []

    def counting_cache():
        cache = default_cache()
        if not lookups:
            real = cache.lookup
            cache.lookup = lambda request: lookups.append(1) or real(request)
        return cache

    registry = Registry(loader=lambda binary, name, device: (len(binary), name), cache=counting_cache,
                        target_for_device=lambda device: target)
    tiers, spec = Tiers(registry), make_spec(*SPEC)
    started = time.perf_counter()
    tiers.serve_baseline(spec, 0, start=False)
    size, _ = tiers.get_function(spec, 0)
    return {"lookup_s": time.perf_counter() - started, "disk_lookups": len(lookups), "cubin_bytes": size}


def _child_torch() -> dict[str, Any]:
    _preimport(torch=True)
    if "torch" not in sys.modules:
        return {}
    started = time.perf_counter()
    import tropical_gemm.torch  # noqa: F401

    return {"torch_import_s": time.perf_counter() - started}


def _child_gpu() -> dict[str, Any]:
    _preimport()
    import cupy
    import numpy as np

    if not cupy.is_available():
        return {}
    rng = np.random.default_rng(0)
    a, b = (cupy.asarray(rng.standard_normal((256, 256), dtype=np.float32)) for _ in range(2))
    cupy.cuda.Device().synchronize()
    started = time.perf_counter()
    import tropical_gemm as tg

    tg.matmul(a, b, "max_plus").get()
    return {"first_call_s": time.perf_counter() - started}


def _hot_launch() -> dict[str, Any]:
    """Per-launch lookups once the tuned kernel is servable: after a background swap, and warm."""
    from tropical_gemm.jit import Registry, make_spec, resolve_target
    from tropical_gemm.jit.cache import NullCache
    from tropical_gemm.jit.tiering import Tiers

    target = resolve_target("sm_90")
    spec = make_spec(*SPEC)
    result = {}
    for state in ("after_swap", "warm"):
        registry = Registry(loader=lambda binary, name, device: name, cache=NullCache,
                            target_for_device=lambda device: target, source=lambda s: "")
        tiers = Tiers(registry)
        if state == "after_swap":
            registry.adopt(spec, 0, b"tuned")  # what a settled background job leaves
            tiers._ready.add((spec, 0))
        else:
            registry.adopt(spec, 0, b"tuned")  # loaded by the first call
        tiers.serve_baseline(spec, 0)
        started = time.perf_counter()
        for _ in range(HOT_LAUNCHES):
            tiers.serve_baseline(spec, 0)
            tiers.get_function(spec, 0)
        result[state] = (time.perf_counter() - started) / HOT_LAUNCHES * 1e6
    return result


_CHILDREN = {"import": _child_import, "lookup": _child_lookup, "torch": _child_torch, "gpu": _child_gpu}


def _run_child(kind: str, env: dict[str, str]) -> dict[str, Any]:
    code = ("import sys, json; sys.path.insert(0, sys.argv[1]); import warm_path; "
            "print(json.dumps(warm_path._CHILDREN[sys.argv[2]]()))")
    done = subprocess.run([sys.executable, "-c", code, str(Path(__file__).resolve().parent), kind],
                          env=env, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        raise RuntimeError(f"child {kind!r} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _medians(rows: list[dict[str, Any]]) -> dict[str, Any]:
    keys = {k for row in rows for k in row}
    return {k: statistics.median(row[k] for row in rows if k in row) for k in sorted(keys)}


def _device() -> str:
    try:
        import cupy

        if cupy.is_available():
            return cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
    except ImportError:
        pass
    return "cpu-" + os.uname().machine


def run(runs: int) -> dict[str, Any]:
    compile_bytecode()
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "TROPICAL_GEMM_CACHE_DIR": cache}
        prefill = ("from tropical_gemm.jit import compile_spec, make_spec; "
                   f"compile_spec(make_spec(*{SPEC!r}), 'sm_90')")
        subprocess.run([sys.executable, "-c", prefill], env=env, check=True, timeout=300)
        kinds = ["import", "lookup", "torch"] + ([] if _device().startswith("cpu-") else ["gpu"])
        if "gpu" in kinds:
            _run_child("gpu", env)  # fills the cache for this GPU's own arch
        rows = {kind: [_run_child(kind, env) for _ in range(runs)] for kind in kinds}
    medians = {k: v for kind in kinds for k, v in _medians(rows[kind]).items()}
    return {
        "environment": {"device": _device(), "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                        "python": sys.version.split()[0], "runs": runs, "bytecode": "compiled first",
                        "imported_before_the_clock": "numpy, cupy (and torch for torch_import_s)"},
        "median": medians, "hot_launch_us": _hot_launch(), "runs": rows,
    }


def table(report: dict[str, Any]) -> list[str]:
    med = report["median"]
    lines = [f"warm path on {report['environment']['device']} (median of {report['environment']['runs']} "
             "fresh processes)"]
    for key in ("import_s", "engine_import_s", "device_imports_s", "lookup_s", "torch_import_s", "first_call_s"):
        if key in med:
            lines.append(f"  {key:16s} {med[key] * 1e3:8.2f} ms")
    lines.append(f"  disk_lookups     {med['disk_lookups']:8.0f}")
    hot = report["hot_launch_us"]
    lines.append(f"  per launch: after swap {hot['after_swap']:.2f} µs, warm {hot['warm']:.2f} µs")
    return lines


def main(argv: "list[str] | None" = None) -> int:
    return run_and_save(__doc__, argv, "warm-path", run, table, {"--runs": {"type": int, "default": 7}})


if __name__ == "__main__":
    sys.exit(main())
