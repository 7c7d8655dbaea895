"""Tiered compilation: a first call runs on a baseline kernel while the tuned one compiles in the background.

A tuned forward kernel takes NVRTC up to seconds (the integer square tiles
most), and a first call used to wait for it.  When the tuned kernel for a
launch is on no cache layer (not loaded, no verified entry on disk for the
GPU's arch), the engine asks this module, serves the launch with the
``baseline`` family of the same op, semiring and dtype (one thread per
output: same rules, same bits, a compile of a fraction of the time) and the
tuned kernel (with the kernels it launches with, such as the argmax resolve)
compiles in the background, through the disk cache and its file lock, so
that other processes neither compile it again nor read half an entry.
Later launches swap it in.

Background compiles run in worker processes (``jit.compile_worker``), not
threads: a process that exits while one is under way ends with its own
status, and the worker stores the kernel for the next process.  The caller
keeps running Python meanwhile, and independent compiles run side by side.

* ``wait()`` blocks until every background compile is done;
* ``set_tiered(False)`` (or ``TROPICAL_GEMM_TIERED=0`` in the environment)
  turns tiering off: every launch waits for its tuned kernel, as benchmarks
  and reproducible timings want;
* ``prefetch(specs, device)`` starts compiles that a later call will need
  (the backward of a torch forward that requires grad);
* a background compile that fails is logged and counted; the launches it
  would have served stay on the baseline kernel, and nothing is raised into
  another call.  Loading a binary into a GPU context happens on the calling
  thread, at the swap: the worker never touches a GPU.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from typing import Any, Iterable

from . import compile_worker, log
from .registry import LOAD_ERRORS
from .spec import KernelSpec

#: Environment switch: "0" turns tiering off for the process (``set_tiered`` overrides it).
ENV_SWITCH = "TROPICAL_GEMM_TIERED"

Key = tuple[KernelSpec, int]


def _from_environment() -> bool:
    """On unless ``TROPICAL_GEMM_TIERED`` is "0"; read when asked, not per launch (launches are hot)."""
    return os.environ.get(ENV_SWITCH, "1").strip() != "0"


class _Job:
    """One background compile of some kernels for one device, in a worker process.

    A plain class, not a dataclass: it is mutable state shared between the
    caller's threads, and a dataclass would cost every warm process its
    creation at import.
    """

    def __init__(self, specs: tuple[KernelSpec, ...], device: int) -> None:
        self.specs = specs
        self.device = device
        self.target: Any = None
        self.worker: compile_worker.Worker | None = None
        self.error: BaseException | None = None
        self.started = threading.Event()  # set once ``worker`` or ``error`` is; the job is listed before either
        self.settle_lock = threading.Lock()
        self.settled = False

    def done(self) -> bool:
        return self.error is not None or (self.worker is not None and self.worker.done())


class Tiers:
    """Which tuned kernels are servable, the background compiles, and the counters; one per registry.

    ``registry`` is a :class:`~tropical_gemm.jit.Registry` (anything with
    ``available``, ``build``, ``target`` and ``adopt``); tests pass one with a
    fake loader and made-up devices.
    """

    def __init__(self, registry: Any) -> None:
        self.registry = registry
        self._enabled = _from_environment()
        self._ready: set[Key] = set()       # tuned kernels that need no compile (loaded, on disk or adopted)
        self._failed: set[Key] = set()
        self._jobs: dict[Key, _Job] = {}     # unsettled background compiles, per kernel they build
        self._guard = threading.Lock()
        self._counts = {"baseline_launches": 0, "tuned_swaps": 0, "background_compiles": 0,
                        "background_failures": 0, "prefetched": 0}
        _instances.add(self)

    # ------------------------------------------------------------- switch

    def enabled(self) -> bool:
        return self._enabled

    def set_enabled(self, on: "bool | None") -> None:
        """True/False: on/off for this process; None: as ``TROPICAL_GEMM_TIERED`` says now (read once, here)."""
        self._enabled = _from_environment() if on is None else on

    # ---------------------------------------------------------- decisions

    def serve_baseline(self, spec: KernelSpec, device: int, companions: tuple[KernelSpec, ...] = (), *,
                       start: bool = True) -> bool:
        """Whether this launch of ``spec`` runs on its baseline kernel; starts the tuned compile if it must.

        False once the tuned kernel is servable (loaded, on disk, or built in
        the background: then it is adopted here, on the calling thread), and
        always when tiering is off.  ``companions`` compile in the same job.
        ``start=False`` answers without starting it: the engine compiles the
        baseline kernel first, alone, since the call waits for that one, and
        then asks again.
        """
        key = (spec, device)
        if key in self._ready:
            return False
        job = self._jobs.get(key)
        if job is not None:
            if not job.done():
                return True
            return not self._settle(job)
        if key in self._failed:
            return True
        if not self.enabled() or spec.tile == "baseline":
            return False
        if all(self.registry.available(s, device) for s in (spec, *companions)):
            self._ready.add(key)
            return False
        if start:
            self._start((spec, *companions), device)
        return True

    def count_baseline(self, spec: KernelSpec) -> None:
        """A launch ran on the baseline kernel: counted for ``stats()``, logged for ``-v``."""
        with self._guard:
            self._counts["baseline_launches"] += 1
        log.info("launch %s on tier baseline (tuned kernel compiling in the background)", spec.name)

    def prefetch(self, specs: Iterable[KernelSpec], device: int) -> None:
        """Compile ``specs`` for ``device`` in the background now, where they are on no cache layer.

        For kernels a later call is certain to need (a backward); independent
        ones compile side by side.  Nothing happens when tiering is off.
        """
        if not self.enabled():
            return
        for spec in specs:
            key = (spec, device)
            if key in self._ready or key in self._jobs or key in self._failed:
                continue
            if self.registry.available(spec, device):
                self._ready.add(key)
                continue
            with self._guard:
                self._counts["prefetched"] += 1
            self._start((spec,), device)

    def compiling(self, spec: KernelSpec, device: int) -> bool:
        """Whether a background compile of ``spec`` for ``device`` is under way."""
        job = self._jobs.get((spec, device))
        return job is not None and not job.done()

    def get_function(self, spec: KernelSpec, device: int) -> Any:
        """The registry's kernel, now: a call that launches it does not wait for a worker to start.

        Where a background compile of it is under way, the registry builds it
        here too, behind the disk cache's file lock: if the worker holds the
        lock (it is compiling), this waits for its entry; if the worker is
        still starting, this compiles it and the worker then finds it on disk.
        """
        job = self._jobs.get((spec, device)) if self._jobs else None
        if job is not None and job.done():
            self._settle(job)
        return self.registry.get_function(spec, device)

    # ------------------------------------------------------------ workers

    def _start(self, specs: tuple[KernelSpec, ...], device: int) -> None:
        job = _Job(specs, device)
        with self._guard:
            if (specs[0], device) in self._jobs:  # another thread started it meanwhile
                return
            for spec in specs:
                self._jobs.setdefault((spec, device), job)
            self._counts["background_compiles"] += len(specs)
        log.info("compiling %s in the background for device %d", ", ".join(s.name for s in specs), device)
        try:
            job.target = self.registry.target(device)
            requests = [self.registry.request_for(spec, job.target) for spec in specs]
            job.worker = compile_worker.start(requests, self.registry.cache_root())
        # Any failure (the device's target, the sources, starting the process) belongs to no
        # caller: it is logged at the swap, and the launches stay on the baseline kernel.
        except Exception as exc:
            job.error = exc
        finally:
            job.started.set()

    def _settle(self, job: _Job) -> bool:
        """Adopt a finished job's binaries on this thread, once; True when its kernels are now servable.

        The job leaves ``_jobs`` only after its kernels are marked ready or
        failed, so no other thread sees neither and starts the compile again.
        """
        with job.settle_lock:
            if job.settled:
                return job.error is None
            keys = [(spec, job.device) for spec in job.specs]
            if job.error is None:
                try:
                    for spec, outcome in zip(job.specs, job.worker.outcomes(), strict=True):
                        self.registry.record(spec, job.target, outcome)
                        self.registry.adopt(spec, job.device, outcome.binary)
                # a failed compile (BackgroundCompileError), or a binary the driver refuses:
                # the launch still has its baseline kernel
                except LOAD_ERRORS as exc:
                    job.error = exc
            if job.error is None:
                self._ready.update(keys)
                log.info("tier tuned: %s swapped in on device %d", job.specs[0].name, job.device)
            else:
                log.warning("background compile of %s failed; its launches stay on the baseline kernel: %s",
                            ", ".join(s.name for s in job.specs), job.error)
                self._failed.update(keys)
            with self._guard:
                self._counts["tuned_swaps" if job.error is None else "background_failures"] += 1
                for key in keys:
                    if self._jobs.get(key) is job:
                        del self._jobs[key]
            job.settled = True
            return job.error is None

    def wait(self, timeout: "float | None" = None) -> bool:
        """Block until every background compile started so far is done and swapped in; False if ``timeout`` ran out.

        A compile that failed counts as done (its launches stay on the baseline kernel).
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._guard:
            jobs = list({id(job): job for job in self._jobs.values()}.values())
        def left() -> "float | None":
            return None if deadline is None else max(0.0, deadline - time.monotonic())

        for job in jobs:
            if not job.started.wait(left()):  # another thread is still starting its worker
                return False
            if job.worker is not None and not job.worker.wait(left()):
                return False
            self._settle(job)
        return True

    def _forget_jobs(self) -> None:
        """After ``os.fork()``, in the child: the parent's workers and locks are not this process's."""
        self._guard = threading.Lock()
        self._jobs = {}

    def stats(self) -> dict[str, Any]:
        with self._guard:
            pending = len({id(job) for job in self._jobs.values() if not job.done()})
            return {**self._counts, "pending_compiles": pending, "tiered": self.enabled()}


_instances: "weakref.WeakSet[Tiers]" = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for tiers in list(_instances):
        tiers._forget_jobs()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
