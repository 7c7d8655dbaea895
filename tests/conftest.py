"""Shared test machinery: GPU detection, the ``engine`` fixture, hypothesis profiles.

GPU tests carry ``@pytest.mark.gpu``.  Without a usable CUDA GPU they skip with
the reason, so a laptop run stays green and honest; ``--require-gpu`` turns
those skips into failures, so a GPU run cannot silently test nothing.  The GPU
is probed lazily (cupy is imported only when the first GPU test is set up).
Tests that need two GPUs also carry ``@pytest.mark.multi_gpu``: they skip
with the reason where fewer are usable, and ``--require-multi-gpu`` makes
that a failure too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Callable

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

# ``ci`` keeps the whole suite within a few minutes on 2 cores; ``thorough`` is
# for a local soak (HYPOTHESIS_PROFILE=thorough python -m pytest).
for _profile, _examples in (("ci", 75), ("thorough", 500)):
    settings.register_profile(
        _profile,
        deadline=None,
        max_examples=_examples,
        print_blob=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
    )
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--require-gpu",
        action="store_true",
        default=False,
        help="fail (instead of skip) tests marked gpu when no CUDA GPU is usable",
    )
    parser.addoption(
        "--require-multi-gpu",
        action="store_true",
        default=False,
        help="fail (instead of skip) tests marked multi_gpu when fewer than 2 CUDA GPUs are usable",
    )


@lru_cache(maxsize=1)
def gpu_unavailable_reason() -> str | None:
    """Why no CUDA GPU can be used, or None when one can.  Imports cupy on first call."""
    try:
        import cupy
    except Exception as exc:  # ImportError, or a CUDA library that fails to load
        return f"cupy is not importable ({type(exc).__name__}: {exc})"
    try:
        if not cupy.is_available():
            return "cupy.is_available() is False"
    except Exception as exc:
        return f"cupy.is_available() raised {type(exc).__name__}: {exc}"
    return None


@lru_cache(maxsize=1)
def multi_gpu_unavailable_reason() -> str | None:
    """Why two CUDA GPUs cannot be used, or None when they can."""
    reason = gpu_unavailable_reason()
    if reason is not None:
        return f"needs 2 CUDA GPUs, found none: {reason}"
    import cupy

    count = cupy.cuda.runtime.getDeviceCount()
    return None if count >= 2 else f"needs 2 CUDA GPUs, cupy sees {count}"


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("multi_gpu") is not None:
        reason = multi_gpu_unavailable_reason()
        if reason is not None:
            if item.config.getoption("--require-multi-gpu"):
                pytest.fail(f"--require-multi-gpu given, but this test {reason}", pytrace=False)
            if gpu_unavailable_reason() is None or not item.config.getoption("--require-gpu"):
                pytest.skip(reason)
    if item.get_closest_marker("gpu") is None:
        return
    reason = gpu_unavailable_reason()
    if reason is None:
        return
    if item.config.getoption("--require-gpu"):
        pytest.fail(f"--require-gpu given, but no CUDA GPU: {reason}", pytrace=False)
    pytest.skip(f"no CUDA GPU: {reason}")


@dataclass(frozen=True)
class Engine:
    """One engine as the tests see it: move numpy data in, and results back out."""

    name: str
    to_device: Callable[[np.ndarray], Any]
    to_host: Callable[[Any], np.ndarray]

    def put(self, *arrays: np.ndarray) -> tuple[Any, ...]:
        return tuple(self.to_device(x) for x in arrays)

    def get(self, *arrays: Any) -> tuple[np.ndarray, ...]:
        return tuple(self.to_host(x) for x in arrays)


def cpu_engine() -> Engine:
    return Engine("cpu", lambda x: x, np.asarray)


def cuda_engine() -> Engine:
    import cupy

    return Engine("cuda", cupy.asarray, cupy.asnumpy)


@pytest.fixture(params=["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def engine(request: pytest.FixtureRequest) -> Engine:
    """Each semantics test runs on every engine; the cuda one skips without a GPU."""
    return cuda_engine() if request.param == "cuda" else cpu_engine()


@pytest.fixture(autouse=True)
def _tiering_off_unless_marked(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tiered compilation off, in this process and in subprocesses, except in tests marked ``tiered``.

    With it on, which kernel serves a call depends on what a background
    compile has finished: tests that check kernels, counters or timings want
    the tuned kernel every time.  The tiering tests turn it on themselves.
    """
    if request.node.get_closest_marker("tiered") is None:
        monkeypatch.setenv("TROPICAL_GEMM_TIERED", "0")
    import tropical_gemm.jit as jit

    jit.set_tiered(None)  # follow the environment set above


@pytest.fixture
def cache_root(tmp_path: "os.PathLike[str]", monkeypatch: pytest.MonkeyPatch):
    """A private, empty kernel cache for one test; the other cache variables unset."""
    from pathlib import Path

    from tropical_gemm.jit import cache as dc

    root = Path(tmp_path) / "cache"
    monkeypatch.setenv(dc.ENV_CACHE_DIR, str(root))
    for name in (dc.ENV_DISABLE, dc.ENV_LOCK_TIMEOUT, dc.ENV_STRICT_NVRTC):
        monkeypatch.delenv(name, raising=False)
    return root


@pytest.fixture
def no_nvrtc_library(monkeypatch):
    """Make ``jit.nvrtc`` find no library anywhere, as on a machine without the NVRTC wheel."""
    from tropical_gemm.jit import compiler, nvrtc

    caches = (nvrtc.library, nvrtc.expected_identity, compiler.nvrtc_version, compiler.supported_archs)
    monkeypatch.setattr(nvrtc, "_wheel_libraries", lambda: [])
    monkeypatch.setattr(nvrtc, "_pathfinder_library", lambda: [])
    monkeypatch.setattr(nvrtc, "_SYSTEM_NAMES", ("libnvrtc-that-does-not-exist.so",))
    for cached in caches:
        cached.cache_clear()
    yield
    monkeypatch.undo()
    for cached in caches:
        cached.cache_clear()


@pytest.fixture
def cpu_threads(monkeypatch: pytest.MonkeyPatch):
    """``cpu_threads(n)``: the CPU engine's work from then on runs on ``n`` worker threads, however small.

    Below its work thresholds a product (or a backward) runs on the calling
    thread; with them at 0 the small operands of a property test are cut into
    tiles of C (and bands of the gradients) as a large product's would be.
    """
    from tropical_gemm.engines import cpu
    from tropical_gemm.engines.cpu import boolean, workers

    monkeypatch.setattr(cpu, "SERIAL_WORK", 0)
    monkeypatch.setattr(workers, "SERIAL_WORK", 0)
    monkeypatch.setattr(boolean, "SERIAL_WORDS", 0)
    yield cpu.set_num_threads
    cpu.set_num_threads(None)
