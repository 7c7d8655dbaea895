"""benchmarks/cpu.py's plumbing: the Rust crate's virtual environment, the host, first-call and demo timings."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import tempfile
import time
import venv
from pathlib import Path

import numpy as np

import tropical_gemm as tg

#: The Rust crate's functions by (dtype, argmax); it has no argmax for integers.
RUST_FUNCTIONS = {
    ("float32", False): "maxplus_matmul_2d",
    ("float64", False): "maxplus_matmul_2d_f64",
    ("int32", False): "maxplus_matmul_2d_i32",
    ("float32", True): "maxplus_matmul_with_argmax",
    ("float64", True): "maxplus_matmul_with_argmax_f64",
}

RUST_PACKAGE = "tropical-gemm==0.4.0"


def rust_python(venv_dir: Path, wheel: "Path | None") -> Path:
    """The interpreter of a virtual environment holding the Rust crate, made on first use.

    The environment sees the system's site-packages, and our pip installs the
    crate into it: that needs neither ensurepip in the venv nor, with
    ``wheel``, a package index.  Where the base interpreter has no numpy (ours
    may come from another venv), a folder of links to our numpy alone goes on
    the runner's path, so nothing else of ours can shadow the crate.
    """
    python = venv_dir / "bin" / "python"
    if not python.exists():
        venv.create(venv_dir, with_pip=False, system_site_packages=True)
    if _probe(python, venv_dir, "import numpy") != "":
        links = venv_dir / "numpy-only"
        links.mkdir(exist_ok=True)
        for name in ("numpy", "numpy.libs"):
            target = Path(np.__file__).parent.parent / name
            if target.exists() and not (links / name).exists():
                (links / name).symlink_to(target)
    if _probe(python, venv_dir, "import tropical_gemm; print(tropical_gemm.__version__)") != "0.4.0":
        site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                              capture_output=True, text=True, check=True, cwd=venv_dir).stdout.strip()
        source = [str(wheel.resolve()), "--no-index"] if wheel is not None else [RUST_PACKAGE]
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--upgrade", "--target", site,
                        *source], check=True)
    return python


def _probe(python: Path, venv_dir: Path, code: str) -> "str | None":
    """What ``code`` prints in the crate's environment, or None where it fails."""
    done = subprocess.run([str(python), "-c", code], capture_output=True, text=True, cwd=venv_dir,
                          env=runner_env(venv_dir))
    return done.stdout.strip() if done.returncode == 0 else None


def runner_env(venv_dir: Path) -> dict:
    """Our environment without our path (our tropical_gemm would shadow the crate's), numpy's links on it if made."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    links = venv_dir / "numpy-only"
    if links.is_dir():
        env["PYTHONPATH"] = str(links)
    return env


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def physical_cores() -> "int | None":
    """Distinct (package, core) pairs in sysfs: logical CPUs that are SMT siblings share a core, and its
    SIMD units, so 16 logical CPUs on 8 cores cannot give 16x the 1-core throughput."""
    cores = set()
    for topology in Path("/sys/devices/system/cpu").glob("cpu[0-9]*/topology"):
        try:
            cores.add(((topology / "physical_package_id").read_text().strip(),
                       (topology / "core_id").read_text().strip()))
        except OSError:
            return None
    return len(cores) or None


def environment() -> dict:
    import numba

    return {
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": platform.node(),
        "logical_cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        "physical_cores": physical_cores(),
        "system": platform.platform(),
        "versions": {"python": platform.python_version(), "numpy": np.__version__, "numba": numba.__version__,
                     "tropical_gemm": tg.__version__},
    }


_FIRST_CALL = """
import time
started = time.perf_counter()
import numpy as np
import tropical_gemm as tg
imported = time.perf_counter()
d = np.array([[0, 3], [1, 0]], np.float32)
tg.matmul(d, d, "min_plus")  # the demo's first product
first = time.perf_counter()
tg.matmul(d, d, "min_plus")
second = time.perf_counter()
print({"import_s": imported - started, "first_call_s": first - imported, "second_call_s": second - first})
"""


def first_call_costs() -> dict:
    """The demo's first product in fresh processes: an empty kernel cache (cold), then the filled one (warm)."""
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "TROPICAL_GEMM_CACHE_DIR": cache}
        runs = {}
        for label in ("cold", "warm"):
            done = subprocess.run([sys.executable, "-c", _FIRST_CALL], capture_output=True, text=True, env=env,
                                  check=True)
            runs[label] = eval(done.stdout.strip().splitlines()[-1])  # noqa: S307 - our own dict literal
    return runs


def time_demo() -> dict:
    """``python -m tropical_gemm demo --device cpu`` end to end, with the kernel cache already filled."""
    command = [sys.executable, "-m", "tropical_gemm", "demo", "--device", "cpu"]
    subprocess.run(command, capture_output=True, check=True)  # fills the cache if this run has not yet
    started = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return {"command": "python -m tropical_gemm demo --device cpu", "wall_s": time.perf_counter() - started,
            "output_tail": done.stdout.strip().splitlines()[-3:]}
