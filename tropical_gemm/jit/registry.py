"""The in-memory registry: (spec, device) → a loaded CUDA function, built at most once.

The hot path (:meth:`Registry.get_function` for a kernel already loaded on
that device) is one dict lookup plus a counter: no source assembly, no
hashing of source, no file system access.  Everything else happens once per
(spec, device) per process, under a per-key lock so that concurrent first
requests from many threads build once and the others wait for it:

    spec → source (jit.source) → disk cache (jit.cache: verified read,
    or NVRTC compile through jit.compiler behind a file lock) → loader

The loader turns a binary into something callable.  The default one loads
the cubin (or PTX) bytes the cache has just verified straight into the
driver with ``cuModuleLoadData`` (``jit.driver``, no CuPy import): the bytes
that were checked are the bytes that run, and a disk hit costs one file read
and one module load.  Tests inject a loader so that the whole compile/cache/
registry path runs without a GPU.
"""

from __future__ import annotations

import itertools
import os
import threading
import time
import weakref
from pathlib import Path
from typing import Any, Callable

from .._version import __version__
from . import log
from .compiler import Target, compile_program, nvrtc_version, resolve_target
from .cache import BuildOutcome, BuildRequest, CachedBinary, KernelCache, default_cache
from .source import kernel_options, kernel_source
from .spec import KernelSpec

#: ``loader(binary, entry_name, device_id) -> function``
Loader = Callable[[bytes, str, int], Any]

#: What a loader raises when the driver refuses a binary (``driver.DriverError`` is a RuntimeError).
LOAD_ERRORS = (RuntimeError, OSError, ValueError)


class KernelLoadError(RuntimeError):
    """The CUDA driver refused a binary that NVRTC produced and the cache verified.

    Usually the driver is older than the NVRTC that compiled the binary:
    update the driver, or install the NVRTC wheel that matches it.

    Examples:
        Needs a GPU:

        >>> from tropical_gemm.jit import KernelLoadError, get_function, make_spec
        >>> try:                                                   # doctest: +SKIP
        ...     kernel = get_function(make_spec("forward", "max_plus", "float32"))
        ... except KernelLoadError as exc:
        ...     print(exc)         # which kernel, which target, which file, the driver's error
    """


def load_function(binary: bytes, entry_name: str, device_id: int) -> Any:
    """Load ``binary`` into ``device_id``'s primary context: a ``jit.driver.Function``.

    Launched as ``fn(grid, block, args, stream=None)``, like CuPy's ``Function``.
    """
    from . import driver

    return driver.load_function(binary, entry_name, device_id)


def current_device() -> int:
    """The id of this thread's current CUDA device (CuPy's and torch's current device alike)."""
    from . import driver

    return driver.current_device()


def device_target(device_id: int) -> Target:
    """The binary to build for a device: its own cubin, or PTX if NVRTC is older than the GPU."""
    from . import driver

    return resolve_target(f"sm_{driver.compute_capability(device_id)}")


def build_request(spec: KernelSpec, target: Target, source: str, *, probe: bool = False) -> BuildRequest:
    """Everything the cache key of ``spec``'s binary for ``target`` depends on.

    A probe leaves the NVRTC version open: it asks for this program from any
    NVRTC, without loading the NVRTC library to find its version (a ``dlopen``
    that would cost a warm start more than the rest of its lookup).
    """
    return BuildRequest(
        name=spec.name, source=source, target=target, nvrtc_version=None if probe else nvrtc_version(),
        package_version=__version__, spec=spec.as_dict(), extra_options=kernel_options(spec),
    )


def device_cubin_target(device_id: int) -> Target:
    """The GPU's own cubin target, known without asking NVRTC which archs it supports."""
    from . import driver

    return Target("cubin", driver.compute_capability(device_id))


class Registry:
    """Loaded kernels and the counters behind [`stats`][tropical_gemm.jit.stats].

    ``cache`` is called on every build (not on memory hits) so that a change
    of ``TROPICAL_GEMM_CACHE_DIR`` takes effect for kernels not yet loaded.
    ``source``, ``loader`` and ``target_for_device`` are the stages around the
    cache; tests replace them to run without the CUDA sources or a GPU.

    Examples:
        A registry whose "GPU" is an sm_90 that records what it would load:

        >>> from tropical_gemm.jit import Registry, make_spec, resolve_target
        >>> registry = Registry(loader=lambda binary, name, device: name,
        ...                     target_for_device=lambda device: resolve_target("sm_90"))
        >>> registry.get_function(make_spec("backward", "max_plus", "float32"), device=0)
        'tg_backward_max_plus_f32'
        >>> registry.stats()["kernels_in_memory"]
        1
    """

    def __init__(self, *, loader: Loader = load_function,
                 cache: Callable[[], KernelCache] = default_cache,
                 target_for_device: Callable[[int], Target] = device_target,
                 source: Callable[[KernelSpec], str] = kernel_source) -> None:
        self._source = source
        self._loader = loader
        self._cache = cache
        self._target_for_device = target_for_device
        # The warm-start probe takes the GPU's arch from the device, not from
        # NVRTC's list of archs; a replaced target stage (tests, no GPU) stands in for it.
        self._probe_target = device_cubin_target if target_for_device is device_target else target_for_device
        self._functions: dict[tuple[KernelSpec, int], Any] = {}
        # Entries ``available`` read and verified, kept until their first load: the
        # tiering check and the load of a warm first call read the disk once, not twice.
        self._verified: dict[tuple[KernelSpec, int], CachedBinary] = {}
        # Launches found loaded: a C-level counter, so the launch path takes no lock.
        self._memory_hits = itertools.count()
        self._build_locks: dict[tuple[KernelSpec, int], threading.Lock] = {}
        self._targets: dict[int, Target] = {}
        self._guard = threading.Lock()
        self._counts = {"compiled": 0, "disk_hits": 0, "loads": 0,
                        "foreign_nvrtc_hits": 0, "corrupt_replaced": 0}
        # ready_seconds: wall time of memory misses (source, disk cache and its lock, compile, load).
        self._seconds = {"compile_seconds": 0.0, "load_seconds": 0.0, "ready_seconds": 0.0}
        _instances.add(self)

    def _renew_locks(self) -> None:
        """After ``os.fork()``, in the child: a lock another thread held at the fork would never be released."""
        self._guard = threading.Lock()
        self._build_locks = {}

    def get_function(self, spec: KernelSpec, device: int | None = None) -> Any:
        """The loaded kernel for ``spec`` on ``device`` (default: CuPy's current device)."""
        key = (spec, current_device() if device is None else device)
        function = self._functions.get(key)
        if function is not None:
            next(self._memory_hits)
            return function
        return self._load(key)

    def _load(self, key: tuple[KernelSpec, int]) -> Any:
        spec, device = key
        started = time.perf_counter()
        with self._build_lock(key):
            function = self._functions.get(key)
            if function is not None:  # another thread built it while we waited
                next(self._memory_hits)
                return function
            cache = self._cache()
            found = self._verified.pop(key, None)  # read and checked by ``available`` just before
            source = None
            if found is None:
                source = self._source(spec)
                found = cache.lookup(build_request(spec, self._probe_target(device), source, probe=True))
            function = None if found is None else self._warm_load(spec, device, found)
            if function is not None:
                self._functions[key] = function
                with self._guard:
                    self._seconds["ready_seconds"] += time.perf_counter() - started
                return function
            target = self._target(device)
            outcome = self.build(spec, target, source=source, cache=cache)
            try:
                function = self._timed_load(outcome.binary, spec.name, device)
            except LOAD_ERRORS as exc:
                function = self._rebuild_once(spec, target, device, outcome, exc, source, cache)
            self._functions[key] = function
        with self._guard:
            self._seconds["ready_seconds"] += time.perf_counter() - started
        return function

    def _rebuild_once(self, spec: KernelSpec, target: Target, device: int, refused: BuildOutcome,
                      exc: Exception, source: str | None, cache: KernelCache) -> Any:
        """Heal a binary the driver refused: a cached one is evicted (if exact) and compiled afresh, once.

        A binary just compiled by this NVRTC that the driver refuses is a real
        driver problem: that is a ``KernelLoadError``, not a retry loop.
        """
        if refused.compiled:
            raise _load_error(spec, target, refused.path, exc) from exc
        if refused.exact and refused.path is not None:
            log.warning("cached kernel %s (%s) does not load (%s); evicting it and compiling it again",
                        spec.name, refused.path, exc)
            cache.evict(refused.path)
        else:
            log.warning("cubin for %s built by another NVRTC version does not load here (%s); "
                        "compiling it with this NVRTC", spec.name, exc)
        outcome = self.build(spec, target, accept_other_nvrtc=False, source=source, cache=cache)
        try:
            return self._timed_load(outcome.binary, spec.name, device)
        except LOAD_ERRORS as again:
            raise _load_error(spec, target, outcome.path, again) from again

    def _warm_load(self, spec: KernelSpec, device: int, found: CachedBinary) -> Any:
        """The common warm start: a verified cubin for this GPU's arch (found by a probe), loaded without a compile.

        Returns None (and the full path runs: target from NVRTC, exact key,
        compile on a miss) when the driver refuses it.  The probe finds
        nothing when there is no such entry for the running NVRTC (or a
        listed compatible one).
        """
        try:
            function = self._timed_load(found.binary, spec.name, device)
        except LOAD_ERRORS as exc:  # e.g. a cubin from a newer NVRTC than this driver loads
            log.info("cached cubin %s does not load here (%s); resolving with NVRTC", found.path, exc)
            return None
        with self._guard:
            self._counts["disk_hits"] += 1
        log.info("disk hit %s for %s: %s (found by the warm-start probe)", spec.name, found.metadata.target, found.path)
        return function

    # -- hooks of tiered compilation (jit.tiering): it asks, builds off-thread, and hands binaries back

    def available(self, spec: KernelSpec, device: int) -> bool:
        """Whether ``spec`` is ready on ``device`` without a compile: loaded, or verified on disk for its arch."""
        key = (spec, device)
        if key in self._functions or key in self._verified:
            return True
        request = build_request(spec, self._probe_target(device), self._source(spec), probe=True)
        found = self._cache().lookup(request)
        if found is None:
            return False
        with self._guard:
            self._verified[key] = found  # the load that follows takes these bytes, checked once
        return True

    def target(self, device: int) -> Target:
        """The binary target of ``device`` (resolved once per device)."""
        return self._target(device)

    def request_for(self, spec: KernelSpec, target: Target) -> BuildRequest:
        """What ``build`` would ask the cache for: a background compile hands it to a worker process."""
        return build_request(spec, target, self._source(spec))

    def cache_root(self) -> Path | None:
        """Where this registry's disk cache lives; None when caching is off."""
        return self._cache().root

    def adopt(self, spec: KernelSpec, device: int, binary: bytes) -> Any:
        """Load ``binary`` (built by ``build``, on any thread) as ``spec`` on ``device``; one per key."""
        key = (spec, device)
        with self._build_lock(key):
            function = self._functions.get(key)
            if function is None:
                function = self._functions[key] = self._timed_load(binary, spec.name, device)
            self._verified.pop(key, None)
        return function

    def _build_lock(self, key: tuple[KernelSpec, int]) -> threading.Lock:
        with self._guard:
            lock = self._build_locks.get(key)
            if lock is None:
                lock = self._build_locks[key] = threading.Lock()
            return lock

    def _target(self, device: int) -> Target:
        target = self._targets.get(device)
        if target is None:
            target = self._targets[device] = self._target_for_device(device)
        return target

    def _timed_load(self, binary: bytes, entry_name: str, device: int) -> Any:
        started = time.perf_counter()
        function = self._loader(binary, entry_name, device)
        with self._guard:
            self._counts["loads"] += 1
            self._seconds["load_seconds"] += time.perf_counter() - started
        return function

    def build(self, spec: KernelSpec, target: Target, *, accept_other_nvrtc: bool = True,
              source: str | None = None, cache: KernelCache | None = None) -> BuildOutcome:
        """The binary for ``spec`` on ``target``, from the disk cache or compiled into it (not loaded)."""
        request = build_request(spec, target, self._source(spec) if source is None else source)
        outcome = (self._cache() if cache is None else cache).get_or_build(
            request, lambda: compile_program(request.source, request.name, target, request.extra_options),
            accept_other_nvrtc=accept_other_nvrtc,
        )
        self.record(spec, target, outcome)
        return outcome

    def record(self, spec: KernelSpec, target: Target, outcome: BuildOutcome) -> None:
        """Count and log one build, made here or by a background worker for this process."""
        with self._guard:
            if outcome.compiled:
                self._counts["compiled"] += 1
                self._counts["corrupt_replaced"] += outcome.replaced_corrupt
                self._seconds["compile_seconds"] += outcome.compile_seconds
            else:
                self._counts["disk_hits"] += 1
                self._counts["foreign_nvrtc_hits"] += not outcome.exact
        if outcome.compiled:
            log.info("compiled %s for %s in %.3f s (%s)", spec.name, target.tag, outcome.compile_seconds,
                     f"cached at {outcome.path}" if outcome.stored else "not cached on disk")
        else:
            log.info("disk hit %s for %s: %s", spec.name, target.tag, outcome.path)

    def stats(self) -> dict[str, Any]:
        """Counters since the process started, plus where the disk cache is and whether it is usable."""
        cache = self._cache()
        with self._guard:
            snapshot: dict[str, Any] = {**self._counts, **self._seconds}
            snapshot["memory_hits"] = _count_of(self._memory_hits)
            snapshot["kernels_in_memory"] = len(self._functions)
        snapshot["disk_cache_enabled"] = cache.enabled
        snapshot["disk_cache_writable"] = cache.writable
        snapshot["cache_dir"] = str(cache.root) if cache.root is not None else None
        return snapshot


def _count_of(counter: "itertools.count[int]") -> int:
    """How many times ``next`` was called on a counter started at 0, without advancing it."""
    return int(repr(counter)[len("count("):-1])


def _load_error(spec: KernelSpec, target: Target, path: Path | None, exc: Exception) -> KernelLoadError:
    return KernelLoadError(f"the CUDA driver could not load kernel {spec.name} ({target.tag}) "
                           f"from {path or 'memory'}: {exc}")


_registry: Registry | None = None
_registry_guard = threading.Lock()
_instances: "weakref.WeakSet[Registry]" = weakref.WeakSet()


def _renew_locks_in_child() -> None:
    global _registry_guard
    _registry_guard = threading.Lock()
    for registry in list(_instances):
        registry._renew_locks()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renew_locks_in_child)


def default_registry() -> Registry:
    """The process-wide registry behind [`get_function`][tropical_gemm.jit.get_function] and
    [`stats`][tropical_gemm.jit.stats].

    Examples:
        >>> from tropical_gemm.jit import default_registry
        >>> default_registry() is default_registry()
        True
    """
    global _registry
    if _registry is None:
        with _registry_guard:
            if _registry is None:
                _registry = Registry()
    return _registry


def set_default_registry(registry: Registry) -> None:
    """Make ``registry`` the process-wide one (``jit.reset`` pairs it with fresh tiers)."""
    global _registry
    with _registry_guard:
        _registry = registry
