"""Shared pieces of the JIT tests: a tiny real kernel, a GPU-free registry, subprocess runs.

The registry under test is the real one (real NVRTC, real disk cache); only
the two ends are replaced where there is no GPU: the device's architecture is
fixed (sm_90) and "loading" returns a record of what would have been loaded.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tropical_gemm.jit import KernelSpec, Registry, resolve_target
from tropical_gemm.jit.cache import default_cache

REPO = Path(__file__).resolve().parents[1]

#: A real kernel, small enough to compile in a few hundredths of a second.
#: ``{bias}`` lets a test change the program text the way a preamble edit would.
SMALL_SOURCE = """
extern "C" __global__ void {name}(const float* a, const float* b, float* out, long long n) {{
  long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (i < n) out[i] = fmaxf(a[i], b[i]) + (float)({bias});
}}
"""


def small_source(spec: KernelSpec, bias: float = 0.0) -> str:
    return SMALL_SOURCE.format(name=spec.name, bias=bias)


@dataclass(frozen=True)
class Loaded:
    """What the fake loader returns: enough to check that the right bytes were loaded."""

    binary: bytes
    name: str
    device: int

    def bind(self, grid: tuple, block: tuple, scalars: tuple, shared_bytes: int = 0) -> "BoundLoaded":
        """As ``jit.driver.Function.bind``: the engine binds what the registry loaded."""
        return BoundLoaded(self, grid, block, scalars, shared_bytes)


@dataclass(frozen=True)
class BoundLoaded:
    function: Loaded
    grid: tuple
    block: tuple
    scalars: tuple
    shared_bytes: int = 0


class RecordingLoader:
    """A loader that records its calls instead of touching a GPU."""

    def __init__(self) -> None:
        self.calls: list[Loaded] = []

    def __call__(self, binary: bytes, name: str, device: int) -> Loaded:
        loaded = Loaded(binary, name, device)
        self.calls.append(loaded)
        return loaded


def gpu_free_registry(*, source=small_source, loader=None, arch: str = "sm_90") -> Registry:
    target = resolve_target(arch)
    return Registry(loader=loader or RecordingLoader(), cache=default_cache,
                    target_for_device=lambda device: target, source=source)


def cache_files(root: Path, suffix: str) -> list[Path]:
    return sorted(p for p in root.rglob(f"*{suffix}") if not p.name.startswith("."))


def run_python(code: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess:
    """Run ``code`` in a fresh interpreter with the test's cache environment.

    The tests and this checkout come first on its path, then whatever the
    caller's ``PYTHONPATH`` held (packages a GPU machine is given as wheels).
    """
    path = os.pathsep.join(filter(None, (str(REPO / "tests"), str(REPO), os.environ.get("PYTHONPATH"))))
    full_env = {**os.environ, **env, "PYTHONPATH": path}
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full_env, capture_output=True,
                          text=True, timeout=timeout)


def slow_workers(monkeypatch: Any, delay: float, log: "Path | None" = None) -> None:
    """Compile workers started from now on sleep ``delay`` s before each compile and log it to ``log``.

    Through ``tests/slow_compile/sitecustomize.py``, which the worker's fresh
    interpreter imports from PYTHONPATH: the worker is another process, so
    patching this one would not reach it.
    """
    paths = [str(REPO / "tests" / "slow_compile"), str(REPO), os.environ.get("PYTHONPATH", "")]
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in paths if p))
    monkeypatch.setenv("TG_TEST_COMPILE_DELAY", str(delay))
    if log is not None:
        monkeypatch.setenv("TG_TEST_COMPILE_LOG", str(log))


def compile_log(log: Path) -> list[tuple[str, int, float, float]]:
    """``slow_workers``' log: (kernel name, worker pid, started, ended) per compile."""
    if not log.exists():
        return []
    return [(name, int(pid), float(start), float(end))
            for name, pid, start, end in (line.split() for line in log.read_text().splitlines())]


def last_json_line(output: str) -> dict:
    return json.loads(output.strip().splitlines()[-1])


@contextlib.contextmanager
def fresh_default_registry() -> Iterator[Registry]:
    """An empty ``Registry`` (nothing loaded on any device) as the process's default, inside the block.

    ``jit.reset`` swaps the registry behind ``jit.get_function`` and
    ``jit.stats`` and the tiers over it; the CUDA engine's prepared products
    (which hold kernels bound from the registry they were prepared with) are
    forgotten too, and the old registry comes back after the block.
    """
    import tropical_gemm.jit as jit
    from tropical_gemm.engines.cuda import prepared

    def forget_prepared() -> None:
        prepared.prepare_product.cache_clear()
        prepared.prepare_backward.cache_clear()

    saved = jit.default_registry()
    fresh = jit.reset(Registry())
    forget_prepared()
    try:
        yield fresh
    finally:
        jit.reset(saved)
        forget_prepared()


class Recorder:
    """A loaded kernel (``jit.driver.Function``'s ``bind``) whose bound launches are recorded, not run."""

    def __init__(self, spec: Any, launches: list) -> None:
        self.spec, self.launches = spec, launches

    def bind(self, grid: tuple, block: tuple, scalars: tuple, shared_bytes: int = 0) -> "BoundRecorder":
        return BoundRecorder(self, grid, block, scalars, shared_bytes)


class BoundRecorder:
    """A bound launch: each ``launch`` appends ``(family or op, grid, block, arguments, stream)``."""

    def __init__(self, function: Recorder, grid: tuple, block: tuple, scalars: tuple, shared_bytes: int = 0) -> None:
        self.function, self.grid, self.block, self.scalars = function, grid, block, scalars
        self.shared_bytes = shared_bytes

    def launch(self, addresses: tuple, stream: Any = None) -> None:
        spec = self.function.spec
        self.function.launches.append((spec.tile if spec.op.startswith("forward") else spec.op,
                                       self.grid, self.block, (*addresses, *self.scalars), stream))


class RecordingTiers:
    """Tiering that serves the baseline while ``compiling`` is set, over recorded kernels (one per spec)."""

    def __init__(self, launches: list) -> None:
        self.launches, self.compiling = launches, True
        self.loaded: dict = {}

    def serve_baseline(self, spec: Any, device: int, companions: tuple = (), *, start: bool = True) -> bool:
        return self.compiling

    def get_function(self, spec: Any, device: int) -> Recorder:
        return self.loaded.setdefault(spec, Recorder(spec, self.launches))

    def count_baseline(self, spec: Any) -> None:
        self.launches.append(("counted",))

    def prefetch(self, specs: Any, device: int) -> None:
        pass
