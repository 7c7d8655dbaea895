"""The launch path once kernels are servable, and the disk reads of a warm first call (no GPU needed).

After the background compile's swap a launch must cost what it costs in a
warm process: no ``available()`` check, no disk cache access, no lock of the
tiering or the registry.  A warm first call reads and verifies its entry
once, although the tiering check and the load both want it.
"""

from __future__ import annotations

import threading

import pytest

from jit_helpers import gpu_free_registry
from tropical_gemm.engines import cuda
from tropical_gemm.engines.cuda import binding as cuda_binding
from tropical_gemm.jit import make_spec
from tropical_gemm.jit.cache import DiskCache
from tropical_gemm.jit.tiering import Tiers

pytestmark = [pytest.mark.nvrtc, pytest.mark.tiered]

LAUNCHES = 50


class CountingLock:
    """A lock that counts its acquisitions (``with`` and ``acquire``)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.acquired = 0

    def acquire(self, *args, **kwargs) -> bool:
        self.acquired += 1
        return self._lock.acquire(*args, **kwargs)

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> "CountingLock":
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()


class Touches:
    """Counts every disk cache access, ``available()`` check, build lock and guard taken from now on."""

    def __init__(self, tiers: Tiers, monkeypatch: pytest.MonkeyPatch) -> None:
        self.calls: list[str] = []
        registry = tiers.registry
        for name in ("lookup", "get_or_build", "write_entry", "evict"):
            monkeypatch.setattr(DiskCache, name, self._record(name, getattr(DiskCache, name)))
        monkeypatch.setattr(registry, "available", self._record("available", registry.available))
        monkeypatch.setattr(registry, "_build_lock", self._record("build_lock", registry._build_lock))
        self.locks = {"tiers": CountingLock(), "registry": CountingLock()}
        monkeypatch.setattr(tiers, "_guard", self.locks["tiers"])
        monkeypatch.setattr(registry, "_guard", self.locks["registry"])

    def _record(self, name: str, real):
        def recorded(*args, **kwargs):
            self.calls.append(name)
            return real(*args, **kwargs)
        return recorded

    def total(self) -> dict[str, int]:
        return {"calls": len(self.calls), **{k: lock.acquired for k, lock in self.locks.items()}}


def _swapped(cache_root, spec, companions=()) -> Tiers:
    """Tiers whose tuned ``spec`` compiled in the background and was swapped in."""
    tiers = Tiers(gpu_free_registry())
    tiers.set_enabled(True)
    assert tiers.serve_baseline(spec, 0, companions)  # nothing on disk: the baseline serves, tuned compiles
    assert tiers.wait(120)
    assert not tiers.serve_baseline(spec, 0, companions)  # the swap
    return tiers


def test_launches_after_the_swap_touch_no_disk_no_check_and_no_lock(cache_root, monkeypatch):
    tuned = make_spec("forward", "max_plus", "float32", tile="square")
    resolve = make_spec("argmax_resolve", "max_plus", "float32")
    tiers = _swapped(cache_root, tuned, (resolve,))
    loads = len(tiers.registry._loader.calls)
    touches = Touches(tiers, monkeypatch)
    for _ in range(LAUNCHES):  # what binding.bind_forward does per launch
        assert not tiers.serve_baseline(tuned, 0, (resolve,))
        assert tiers.get_function(tuned, 0).name == tuned.name
        assert tiers.get_function(resolve, 0).name == resolve.name
    assert touches.total() == {"calls": 0, "tiers": 0, "registry": 0}, touches.calls
    assert len(tiers.registry._loader.calls) == loads  # nothing loaded again
    assert tiers.registry.stats()["memory_hits"] >= 2 * LAUNCHES  # still counted, without the lock


def test_engine_plan_after_the_swap_touches_nothing(cache_root, monkeypatch):
    """The engine's own per-launch path (``binding.bind_forward``) on tiers after a swap: the product, B's copy
    and the resolve that reads it."""
    plan = cuda.plan_forward((64, 64), (64, 1), (64, 64), (64, 1), (), "float32", "max_plus", True, 132, False)
    tiers = _swapped(cache_root, plan.spec, plan.companions)
    monkeypatch.setattr(cuda_binding, "tiers", lambda: tiers)
    monkeypatch.setattr(cuda_binding, "get_function", lambda *a: pytest.fail("the baseline kernel was looked up"))
    touches = Touches(tiers, monkeypatch)
    for _ in range(LAUNCHES):
        kernels = cuda.bind_forward(plan, 0)
        launched = [part for k in kernels
                    for part in ((k.copy, k.resolve) if isinstance(k, cuda_binding.CopiedResolve) else (k,))]
        assert [k.function.name for k in launched] == [s.name for s in (plan.spec, *plan.companions)]
    assert touches.total() == {"calls": 0, "tiers": 0, "registry": 0}, touches.calls


def test_warm_first_call_reads_its_entry_once(cache_root, monkeypatch):
    spec = make_spec("forward", "max_plus", "float32", tile="square")
    _swapped(cache_root, spec)  # fills the disk cache
    tiers = Tiers(gpu_free_registry())  # a new process: nothing in memory
    tiers.set_enabled(True)
    touches = Touches(tiers, monkeypatch)
    assert not tiers.serve_baseline(spec, 0, start=False)  # on disk: tuned at once
    loaded = tiers.get_function(spec, 0)
    assert touches.calls.count("lookup") == 1, touches.calls
    on_disk = DiskCache(cache_root).entries()
    assert [e.metadata.name for e in on_disk] == [spec.name]
    assert loaded.binary == on_disk[0].payload_path.read_bytes()  # the verified bytes are the loaded bytes
    assert tiers.registry.stats()["disk_hits"] == 1
