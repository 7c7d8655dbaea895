"""Tiered compilation without a GPU: the real registry, NVRTC and disk cache, a fake loader and made-up devices.

Which tier serves a launch, the background compile and its swap, per-device
state, failures, the switch and the prefetch.  The GPU side (bits of the
baseline kernels against the tuned ones, first calls in fresh processes) is
in tests/test_first_call.py.
"""

from __future__ import annotations

import time

import pytest

from jit_helpers import cache_files, compile_log, gpu_free_registry, run_python, slow_workers
from tropical_gemm.jit import CompileError, make_spec
from tropical_gemm.jit.tiering import Tiers

pytestmark = [pytest.mark.nvrtc, pytest.mark.tiered]

TUNED = make_spec("forward", "max_plus", "float32", tile="square")
RESOLVE = make_spec("argmax_resolve", "max_plus", "float32")
BACKWARD = make_spec("backward", "max_plus", "float32")


def _tiers(cache_root, **kwargs) -> Tiers:
    tiers = Tiers(gpu_free_registry(**kwargs))
    tiers.set_enabled(True)
    return tiers


def test_uncached_kernel_is_served_by_baseline_then_swapped_in(cache_root):
    tiers = _tiers(cache_root)
    registry = tiers.registry
    assert tiers.serve_baseline(TUNED, 0, (RESOLVE,))
    assert registry.stats()["kernels_in_memory"] == 0  # compiling in a worker process
    assert tiers.wait(60)
    assert registry.stats()["kernels_in_memory"] == 2  # adopted by wait, on this thread
    assert not tiers.serve_baseline(TUNED, 0, (RESOLVE,))
    names = {call.name for call in registry._loader.calls}
    assert names == {TUNED.name, RESOLVE.name}
    stats = tiers.stats()
    assert (stats["background_compiles"], stats["tuned_swaps"], stats["pending_compiles"]) == (2, 1, 0)
    assert registry.stats()["compiled"] == 2
    assert tiers.get_function(TUNED, 0).name == TUNED.name  # a memory hit now
    assert registry.stats()["compiled"] == 2


def test_cached_kernel_is_served_tuned_at_once(cache_root):
    first = _tiers(cache_root)
    first.serve_baseline(TUNED, 0)
    first.wait(60)
    again = _tiers(cache_root)  # a new process: nothing in memory, the entry on disk
    assert not again.serve_baseline(TUNED, 0)
    assert again.stats()["background_compiles"] == 0


def test_tiering_off_never_serves_baseline(cache_root, monkeypatch):
    tiers = _tiers(cache_root)
    tiers.set_enabled(False)
    assert not tiers.serve_baseline(TUNED, 0)
    assert tiers.stats()["background_compiles"] == 0
    monkeypatch.setenv("TROPICAL_GEMM_TIERED", "0")
    tiers.set_enabled(None)
    assert not tiers.enabled()
    monkeypatch.setenv("TROPICAL_GEMM_TIERED", "1")
    tiers.set_enabled(None)
    assert tiers.enabled()
    monkeypatch.setenv("TROPICAL_GEMM_TIERED", "0")
    assert not Tiers(tiers.registry).enabled()


def test_baseline_specs_are_never_tiered(cache_root):
    tiers = _tiers(cache_root)
    assert not tiers.serve_baseline(make_spec("forward", "max_plus", "float32", tile="baseline"), 0)


def test_one_tuned_kernel_per_spec_and_device(cache_root):
    """Issue 21: background compiles and swaps are per (spec, device); each device loads its own kernel."""
    tiers = _tiers(cache_root)
    registry = tiers.registry
    for _ in range(3):  # repeated launches start no second compile
        for device in (0, 1):
            assert tiers.serve_baseline(TUNED, device) or tiers.wait(60)
    tiers.wait(60)
    for device in (0, 1):
        assert not tiers.serve_baseline(TUNED, device)
    loads = [(call.name, call.device) for call in registry._loader.calls]
    assert sorted(loads) == [(TUNED.name, 0), (TUNED.name, 1)]
    assert tiers.stats()["background_compiles"] == 2
    assert registry.stats()["compiled"] == 1  # the second device's job found the first one's entry
    assert {key[1] for key in registry._functions} == {0, 1}
    assert registry._functions[(TUNED, 0)] is not registry._functions[(TUNED, 1)]


def test_registry_state_is_per_device(cache_root):
    """Issue 21: loaded kernels, targets and build locks are keyed by device; made-up device ids."""
    asked: list[int] = []
    registry = gpu_free_registry()
    target = registry._target_for_device
    registry._target_for_device = lambda device: asked.append(device) or target(device)
    functions = {device: registry.get_function(BACKWARD, device) for device in (0, 1, 3)}
    assert [f.device for f in functions.values()] == [0, 1, 3]
    assert registry.get_function(BACKWARD, 1) is functions[1]
    stats = registry.stats()
    assert (stats["kernels_in_memory"], stats["compiled"], stats["memory_hits"]) == (3, 1, 1)
    assert sorted(set(asked)) == sorted(asked)  # one target resolution per device at most
    assert registry.available(BACKWARD, 3) and registry.available(BACKWARD, 7)  # 7: on disk, same arch


def test_failed_background_compile_is_logged_not_raised(cache_root, caplog):

    tiers = _tiers(cache_root, source=lambda spec: "extern \"C\" __global__ void x() { syntax error }")
    with caplog.at_level("WARNING", logger="tropical_gemm.jit"):
        assert tiers.serve_baseline(TUNED, 0)
        tiers.wait(60)
        assert tiers.serve_baseline(TUNED, 0)  # stays on the baseline; nothing raised
        assert tiers.serve_baseline(TUNED, 0)
    assert tiers.stats()["background_failures"] == 1
    assert "background compile of tg_forward_max_plus_f32_rr_square failed" in caplog.text
    assert cache_files(cache_root, ".cubin") == [] and cache_files(cache_root, ".json") == []
    with pytest.raises(CompileError):  # a caller that asks for the kernel itself gets the error
        tiers.registry.get_function(TUNED, 0)


def test_prefetch_compiles_in_background_and_get_function_serves_at_once(cache_root):
    tiers = _tiers(cache_root)
    tiers.prefetch([BACKWARD, TUNED], 0)
    assert tiers.stats()["prefetched"] == 2
    assert tiers.get_function(BACKWARD, 0).name == BACKWARD.name
    tiers.wait(60)
    assert tiers.registry.stats()["compiled"] == 2
    tiers.prefetch([BACKWARD], 0)  # ready now: nothing more
    assert tiers.stats()["prefetched"] == 2


def test_a_launch_of_a_kernel_a_worker_is_compiling_does_not_wait_for_the_worker(cache_root, monkeypatch):
    """The caller compiles it itself behind the cache's lock; the slow worker then finds the entry on disk."""
    slow_workers(monkeypatch, 5)
    tiers = _tiers(cache_root)
    tiers.prefetch([BACKWARD], 0)
    started = time.monotonic()
    assert tiers.get_function(BACKWARD, 0).name == BACKWARD.name
    assert time.monotonic() - started < 4
    assert tiers.wait(60)
    assert tiers.registry.stats()["compiled"] == 1 and tiers.stats()["tuned_swaps"] == 1


def test_independent_compiles_run_side_by_side(cache_root, monkeypatch, tmp_path):
    """Two background builds overlap in time (a worker process each, not a queue)."""
    log = tmp_path / "compiles.log"
    slow_workers(monkeypatch, 0.5, log)
    tiers = _tiers(cache_root)
    tiers.prefetch([BACKWARD, RESOLVE], 0)
    assert tiers.wait(60)
    (_, pid1, s1, e1), (_, pid2, s2, e2) = compile_log(log)
    assert pid1 != pid2 and max(s1, s2) < min(e1, e2)


def test_exit_waits_for_a_pending_compile_within_its_bound(cache_root, monkeypatch):
    """A process exits with its own status while its compile is slow; TROPICAL_GEMM_EXIT_WAIT bounds the wait."""
    slow_workers(monkeypatch, 60)
    code = """
        from jit_helpers import gpu_free_registry
        from tropical_gemm.jit import make_spec
        from tropical_gemm.jit.tiering import Tiers
        tiers = Tiers(gpu_free_registry()); tiers.set_enabled(True)
        assert tiers.serve_baseline(make_spec("forward", "max_plus", "float32"), 0)
        print("started")
    """
    env = {"TROPICAL_GEMM_CACHE_DIR": str(cache_root), "TROPICAL_GEMM_EXIT_WAIT": "1"}
    started = time.perf_counter()
    result = run_python(code, env, timeout=50)
    assert (result.returncode, result.stdout, result.stderr) == (0, "started\n", "")
    assert 1 <= time.perf_counter() - started < 30


def test_wait_with_timeout_reports_unfinished(cache_root, monkeypatch):
    slow_workers(monkeypatch, 2)
    tiers = _tiers(cache_root)
    tiers.serve_baseline(TUNED, 0)
    assert tiers.wait(0.05) is False
    assert tiers.wait(60) is True
    assert not tiers.serve_baseline(TUNED, 0)


def test_asking_without_start_starts_nothing(cache_root):
    tiers = _tiers(cache_root)
    assert tiers.serve_baseline(TUNED, 0, start=False)
    assert tiers.stats()["background_compiles"] == 0 and not tiers.compiling(TUNED, 0)
    assert tiers.serve_baseline(TUNED, 0)
    assert tiers.stats()["background_compiles"] == 1
    tiers.wait(60)


def test_a_binary_the_driver_refuses_at_the_swap_keeps_the_baseline(cache_root):
    def refusing(binary, name, device):
        raise RuntimeError("CUDA_ERROR_INVALID_IMAGE")

    tiers = _tiers(cache_root, loader=refusing)
    assert tiers.serve_baseline(TUNED, 0)
    tiers.wait(60)
    assert tiers.serve_baseline(TUNED, 0)  # the swap failed: logged, counted, not raised
    assert tiers.stats()["background_failures"] == 1 and tiers.stats()["tuned_swaps"] == 0


def test_a_worker_builds_through_the_cache_without_importing_numpy_or_the_api(cache_root, tmp_path):
    """Its start-up is time a call may wait for: it imports the compiler and the cache, nothing above them."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    from tropical_gemm.jit import compile_worker

    registry = gpu_free_registry()
    request = registry.request_for(BACKWARD, registry.target(0))
    job = tmp_path / "job"
    job.mkdir()
    (job / compile_worker.JOB_FILE).write_text(json.dumps(
        {"parent": os.getpid(), "cache_root": str(cache_root), "requests": [compile_worker.request_to_json(request)]}))
    jit_folder = Path(compile_worker.__file__).parent
    program = compile_worker._WORKER_MAIN + "print(sorted({'numpy', 'tropical_gemm.api'} & set(sys.modules)))\n"
    done = subprocess.run([sys.executable, "-c", program, str(job), str(jit_folder.parent), str(jit_folder)],
                          capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stdout, done.stderr) == (0, "[]\n", "")
    assert len(cache_files(cache_root, ".cubin")) == 1
    assert json.loads((job / compile_worker.RESULTS_FILE).read_text())["outcomes"][0]["compiled"] is True


def test_a_worker_that_cannot_be_started_leaves_no_job_folder(cache_root, monkeypatch, tmp_path, caplog):
    import subprocess
    import tempfile

    def no_process(*args, **kwargs):
        raise OSError(24, "Too many open files")

    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    monkeypatch.setattr(subprocess, "Popen", no_process)
    tiers = _tiers(cache_root)
    assert tiers.serve_baseline(TUNED, 0)
    assert tiers.serve_baseline(TUNED, 0)  # the failure is logged at the swap, not raised
    assert tiers.stats()["background_failures"] == 1 and "Too many open files" in caplog.text
    assert list(temp.iterdir()) == []


def test_wait_while_another_thread_is_still_starting_a_worker(cache_root, monkeypatch):
    """A job is listed before its worker exists: ``wait`` from another thread waits for the start, no AttributeError."""
    import threading

    from tropical_gemm.jit import compile_worker

    starting, go_on = threading.Event(), threading.Event()
    start = compile_worker.start

    def slow_start(*args):
        starting.set()
        go_on.wait(30)
        return start(*args)

    monkeypatch.setattr(compile_worker, "start", slow_start)
    tiers = _tiers(cache_root)
    first_call = threading.Thread(target=tiers.serve_baseline, args=(TUNED, 0))
    first_call.start()
    assert starting.wait(30)
    try:
        assert tiers.wait(0.2) is False  # the worker is not even started: unfinished
    finally:
        go_on.set()
        first_call.join(30)
    assert tiers.wait(60) is True and not tiers.serve_baseline(TUNED, 0)
