"""Lazy, per-kernel JIT compilation with a persistent, verified disk cache.

Each CUDA kernel (a ``KernelSpec``) is compiled with NVRTC the first
time it is requested, stored on disk on its own behind a file lock, and
loaded into the GPU through the CUDA driver (``jit.driver``); later requests
in the process are a dict lookup, and later processes load the cached binary
without a compile.  See docs/jit.md.

Neither importing this module nor compiling or loading a kernel imports
CuPy: NVRTC and the driver are called through ctypes (``jit.nvrtc``,
``jit.driver``).

Examples:
    >>> import tropical_gemm.jit as jit
    >>> spec = jit.make_spec("forward", "max_plus", "float32")
    >>> jit.compile_spec(spec, "sm_90").binary[1:4]   # NVRTC only: no GPU needed
    b'ELF'
"""

from __future__ import annotations

import threading
from typing import Any

from .compiler import (
    COMPILE_OPTIONS,
    CompiledKernel,
    CompileError,
    NvrtcUnavailableError,
    Target,
    UnsupportedArchError,
    resolve_target,
)
from .cache import BuildOutcome, DiskCacheWarning, PruneResult, cache_dir, default_cache
from .cache.config import keep_cupy_cache_off_unusable_home
from .registry import KernelLoadError, Registry, default_registry
from .source import kernel_source
from .spec import OPS, KernelSpec, catalogue, make_spec
from .tiering import Tiers
from .warmup import WarmupResult, warmup

# CuPy creates ~/.cupy when imported and fails if it cannot; engines import CuPy
# after this package, so an unusable HOME is caught here, before that import.
keep_cupy_cache_off_unusable_home()

__all__ = [
    "COMPILE_OPTIONS",
    "OPS",
    "BuildOutcome",
    "CompileError",
    "CompiledKernel",
    "DiskCacheWarning",
    "KernelLoadError",
    "KernelSpec",
    "NvrtcUnavailableError",
    "PruneResult",
    "Registry",
    "Target",
    "UnsupportedArchError",
    "WarmupResult",
    "cache_dir",
    "catalogue",
    "compile_spec",
    "default_registry",
    "get_function",
    "kernel_source",
    "make_spec",
    "prune",
    "reset",
    "resolve_target",
    "set_tiered",
    "stats",
    "tiers",
    "wait",
    "warmup",
]

_tiers: Tiers | None = None
_tiers_guard = threading.Lock()

def tiers() -> Tiers:
    """The tiered-compilation state of the default registry (see ``jit.tiering``).

    Examples:
        >>> from tropical_gemm.jit import make_spec, tiers
        >>> tiers().compiling(make_spec("backward", "max_plus", "float32"), 0)
        False
    """
    global _tiers
    if _tiers is None:
        registry = default_registry()
        with _tiers_guard:
            if _tiers is None:
                _tiers = Tiers(registry)
    return _tiers


def reset(registry: Registry | None = None) -> Registry:
    """Start over as a fresh process would: no kernel loaded, no background compile known; returns the new registry.

    ``registry`` (default: a new ``Registry()``) becomes the default one that
    the engines use, with tiering as the environment says.  The disk cache
    is untouched, so the next call finds there what earlier ones stored.
    For tests and for measuring a first call without starting a process.

    Examples:
        >>> import tropical_gemm.jit as jit
        >>> fresh = jit.reset()
        >>> jit.default_registry() is fresh, jit.stats()["kernels_in_memory"]
        (True, 0)
    """
    global _tiers
    from . import registry as registry_module

    fresh = Registry() if registry is None else registry
    with _tiers_guard:
        registry_module.set_default_registry(fresh)
        _tiers = Tiers(fresh)
    return fresh


def set_tiered(on: "bool | None") -> None:
    """Tiered compilation on or off for this process (None: as ``TROPICAL_GEMM_TIERED`` says; default on).

    On: a launch whose tuned kernel is on no cache layer runs on the
    baseline kernel (same bits) while the tuned one compiles in the
    background.  Off: it waits for the tuned kernel, for benchmarks and
    reproducible timings.  Warm-up and AOT bundles build tuned kernels either way.

    Examples:
        >>> import tropical_gemm.jit as jit
        >>> jit.set_tiered(False); jit.stats()["tiered"]
        False
        >>> jit.set_tiered(None)
    """
    tiers().set_enabled(on)


def wait(timeout: "float | None" = None) -> bool:
    """Block until the background compiles started so far are done; False if ``timeout`` (s) ran out first.

    Examples:
        >>> import tropical_gemm.jit as jit
        >>> jit.wait()
        True
    """
    return tiers().wait(timeout)


def get_function(spec: KernelSpec, device: int | None = None) -> Any:
    """The loaded kernel (a ``jit.driver.Function``) for ``spec`` on ``device`` (default: current).

    Compiled on first use (or read from the disk cache), then held in memory.
    Launch it as ``fn(grid, block, args, shared_mem=0, stream=None)`` with
    ``grid`` and ``block`` tuples and ``args`` a tuple of CuPy arrays and
    NumPy scalars of the exact C types the kernel declares.

    Examples:
        Needs a GPU (this is what the CUDA engine calls for every launch):

        >>> from tropical_gemm.jit import get_function, make_spec
        >>> kernel = get_function(make_spec("forward", "max_plus", "float32"))  # doctest: +SKIP
        >>> kernel.__class__.__name__                                            # doctest: +SKIP
        'Function'
    """
    registry = default_registry()
    return registry.get_function(spec, device)


def compile_spec(spec: KernelSpec, arch: Any) -> BuildOutcome:
    """Compile ``spec`` for ``arch`` ("sm_90", "compute_90", (9, 0)...) into the disk cache; no GPU needed.

    Returns the binary and how it was obtained (``outcome.compiled`` is False
    when it came from the cache).  Nothing is loaded.

    Examples:
        >>> from tropical_gemm.jit import compile_spec, make_spec
        >>> spec = make_spec("backward", "max_plus", "float32")
        >>> first = compile_spec(spec, "sm_90")
        >>> again = compile_spec(spec, "sm_90")     # now from the disk cache
        >>> again.compiled, again.binary == first.binary
        (False, True)
    """
    return default_registry().build(spec, resolve_target(arch))


def stats() -> dict[str, Any]:
    """Counters for this process: ``compiled``, ``disk_hits``, ``memory_hits``,
    ``compile_seconds``, ``load_seconds``, ``ready_seconds`` (all time spent making
    kernels ready: source, cache, compile, load), ``loads``, ``kernels_in_memory``,
    ``foreign_nvrtc_hits``, ``corrupt_replaced``, and the cache's location and state; and the
    tiers: ``baseline_launches`` (launches served by a baseline kernel), ``tuned_swaps``,
    ``background_compiles``, ``background_failures``, ``prefetched``, ``pending_compiles`` and
    ``tiered`` (whether tiering is on).  Launches on tuned kernels are the ``memory_hits``.

    Examples:
        >>> from tropical_gemm.jit import compile_spec, make_spec, stats
        >>> def builds():
        ...     return stats()["compiled"] + stats()["disk_hits"]
        >>> before = builds()
        >>> _ = compile_spec(make_spec("backward_ordered_a", "min_plus", "float32"), "sm_90")
        >>> builds() - before                  # compiled now, or found on disk
        1
    """
    return {**default_registry().stats(), **tiers().stats()}


def prune(max_bytes: int) -> PruneResult:
    """Shrink the disk cache to at most ``max_bytes``, removing least recently used kernels first.

    Examples:
        >>> from tropical_gemm.jit import prune
        >>> result = prune(200 * 2**20)        # keep at most 200 MiB
        >>> result.remaining_bytes <= 200 * 2**20
        True
    """
    return default_cache().prune(max_bytes)
