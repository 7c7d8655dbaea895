"""Who runs the CPU engine's kernels: which kind (the compiled extension or numba's) and on how many threads.

Its own module so that the engine's parts (products, backward, counting)
share one pool and one choice without importing the engine's package.
"""

from __future__ import annotations

import os
from functools import lru_cache
from types import ModuleType
from typing import TYPE_CHECKING, Callable

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

#: Environment variable that picks the kernels: ``numba`` always compiles them
#: with numba; unset (or ``native``), the extension module serves where built.
ENV_KERNELS = "TROPICAL_GEMM_CPU_KERNELS"

#: Environment variable that caps the worker threads (default: the CPUs this process may use).
ENV_THREADS = "TROPICAL_GEMM_NUM_THREADS"

#: Below this many candidates (M·N·K) a product runs on the calling thread:
#: handing work to the pool costs tens of microseconds.
SERIAL_WORK = 2**21

_threads_override: list[int] = []


def _available_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def num_threads() -> int:
    """Worker threads per product: ``set_num_threads``, else ``$TROPICAL_GEMM_NUM_THREADS``, else all CPUs."""
    if _threads_override:
        return _threads_override[-1]
    configured = os.environ.get(ENV_THREADS)
    if configured:
        try:
            value = int(configured)
        except ValueError:
            raise ValueError(f"{ENV_THREADS}={configured!r} is not a whole number of threads; "
                             f"set it to e.g. 2, or unset it to use every CPU") from None
        if value < 1:
            raise ValueError(f"{ENV_THREADS}={value} must be at least 1")
        return value
    return _available_cpus()


def set_num_threads(threads: "int | None") -> None:
    """Use ``threads`` workers from now on (``None`` goes back to the default)."""
    _threads_override.clear()
    if threads is not None:
        if int(threads) < 1:
            raise ValueError(f"threads must be at least 1, got {threads}")
        _threads_override.append(int(threads))


@lru_cache(maxsize=None)
def pool(workers: int) -> "ThreadPoolExecutor":
    # Imported here: concurrent.futures imports logging, which a small product's fresh process would pay for.
    from concurrent.futures import ThreadPoolExecutor

    return ThreadPoolExecutor(max_workers=workers, thread_name_prefix="tropical_gemm_cpu")


if hasattr(os, "register_at_fork"):
    # A forked child inherits the pools but none of their threads: work sent
    # to them would wait forever.  The child starts pools of its own.
    os.register_at_fork(after_in_child=pool.cache_clear)


@lru_cache(maxsize=1)
def native_kernels() -> "ModuleType | None":
    """The kernels compiled ahead of time, or None where the extension is not built or numba is asked for."""
    choice = os.environ.get(ENV_KERNELS, "native")
    if choice not in ("native", "numba"):
        raise ValueError(f"{ENV_KERNELS}={choice!r} is not a kind of CPU kernels; "
                         "set it to 'native' (the default) or 'numba'")
    if choice == "numba":
        return None
    try:
        from . import _native
    except ImportError:  # built without a C++ compiler, or a source checkout never built
        return None
    return _native


def run_jobs(tile: Callable, jobs: list[tuple], workers: int) -> None:
    """Run the tile jobs on the calling thread, or spread over ``workers`` threads."""
    if workers == 1 or len(jobs) == 1:
        for job in jobs:
            tile(*job)
        return
    for future in [pool(workers).submit(tile, *job) for job in jobs]:
        future.result()
