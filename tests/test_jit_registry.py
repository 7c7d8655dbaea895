"""The registry: compile once per machine, load once per device, cheap memory hits.

Most tests run the real registry on real NVRTC compiles with a recording
loader in place of the GPU.  The ``gpu`` tests at the end load and launch for
real, from a cold and from a warm cache.
"""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from jit_helpers import REPO, RecordingLoader, cache_files, gpu_free_registry, last_json_line, run_python, small_source
from tropical_gemm.jit import KernelLoadError, Registry, make_spec, stats
from tropical_gemm.jit import cache as dc
from tropical_gemm.jit import registry as registry_module
from tropical_gemm.jit.source import kernel_source

SPEC = make_spec("forward", "max_plus", "float32")
OTHER = make_spec("forward", "min_plus", "float32")


pytestmark = pytest.mark.nvrtc


def test_first_request_compiles_exactly_one_kernel(cache_root):
    loader = RecordingLoader()
    registry = gpu_free_registry(source=kernel_source, loader=loader)
    loaded = registry.get_function(SPEC, 0)
    assert (loaded.name, loaded.device) == (SPEC.name, 0) and loaded.binary[:4] == b"\x7fELF"
    assert registry.get_function(SPEC, 0) is loaded
    stats_now = registry.stats()
    assert (stats_now["compiled"], stats_now["disk_hits"], stats_now["memory_hits"], stats_now["loads"]) == (1, 0, 1, 1)
    assert stats_now["compile_seconds"] > 0 and stats_now["kernels_in_memory"] == 1
    assert stats_now["ready_seconds"] >= stats_now["compile_seconds"] + stats_now["load_seconds"]
    assert len(cache_files(cache_root, ".cubin")) == 1


SECOND_PROCESS = """
import json
from jit_helpers import gpu_free_registry
from tropical_gemm.jit import make_spec
from tropical_gemm.jit.source import kernel_source
registry = gpu_free_registry(source=kernel_source)
registry.get_function(make_spec("forward", "max_plus", "float32"), 0)
print(json.dumps(registry.stats()))
"""


def test_a_second_process_gets_a_disk_hit_and_compiles_nothing(cache_root):
    gpu_free_registry(source=kernel_source).get_function(SPEC, 0)
    result = run_python(SECOND_PROCESS, {dc.ENV_CACHE_DIR: str(cache_root)})
    assert result.returncode == 0, result.stderr
    child = last_json_line(result.stdout)
    assert (child["compiled"], child["disk_hits"]) == (0, 1)


RACER = """
import hashlib, json, sys, time
from pathlib import Path
from jit_helpers import gpu_free_registry
from tropical_gemm.jit import compiler, make_spec
from tropical_gemm.jit.source import kernel_source
spec = make_spec("forward", "max_plus", "float32")
kernel_source(spec); compiler.supported_archs()  # load everything before the start line
rendezvous = Path(sys.argv[1])
(rendezvous / f"ready-{sys.argv[2]}").touch()
while not (rendezvous / "go").exists():
    time.sleep(0.001)
registry = gpu_free_registry(source=kernel_source)
binary = registry.get_function(spec, 0).binary
print(json.dumps({**registry.stats(), "sha256": hashlib.sha256(binary).hexdigest()}))
"""


def test_eight_processes_on_an_empty_cache_compile_once(cache_root, tmp_path):
    rendezvous = tmp_path / "rendezvous"
    rendezvous.mkdir()
    env = {**os.environ, dc.ENV_CACHE_DIR: str(cache_root), "PYTHONPATH": f"{REPO / 'tests'}{os.pathsep}{REPO}"}
    racers = [subprocess.Popen([sys.executable, "-c", RACER, str(rendezvous), str(i)], env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(8)]
    try:
        deadline = time.monotonic() + 120
        while len(list(rendezvous.glob("ready-*"))) < 8:
            assert time.monotonic() < deadline, "racers did not get ready"
            assert all(r.poll() is None for r in racers), [r.communicate() for r in racers if r.poll() is not None]
            time.sleep(0.01)
        (rendezvous / "go").touch()
        outputs = [r.communicate(timeout=120) for r in racers]
    finally:
        for r in racers:
            r.kill()
    assert [r.returncode for r in racers] == [0] * 8, [err for _, err in outputs]
    assert all(err.strip() == "" for _, err in outputs), [err for _, err in outputs]
    results = [last_json_line(out) for out, _ in outputs]
    assert sum(r["compiled"] for r in results) == 1
    assert sum(r["disk_hits"] for r in results) == 7
    assert len({r["sha256"] for r in results}) == 1
    [binary] = cache_files(cache_root, ".cubin")
    assert hashlib.sha256(binary.read_bytes()).hexdigest() == results[0]["sha256"]


def test_threads_racing_on_one_spec_compile_and_load_once(cache_root):
    loader = RecordingLoader()
    registry = gpu_free_registry(loader=loader)
    start = threading.Barrier(16)
    results: list[object] = []
    errors: list[BaseException] = []

    def request():
        try:
            start.wait()
            results.append(registry.get_function(SPEC, 0))
        except BaseException as exc:  # surfaced by the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=request) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(results) == 16 and all(r is results[0] for r in results)
    assert len(loader.calls) == 1
    assert registry.stats()["compiled"] == 1 and registry.stats()["memory_hits"] == 15


def test_threads_on_different_specs_do_not_wait_for_each_other(cache_root):
    registry = gpu_free_registry()
    specs = [make_spec("forward", sr, "float32") for sr in ("max_plus", "min_plus", "max_mul", "max_min")]
    threads = [threading.Thread(target=registry.get_function, args=(s, 0)) for s in specs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert registry.stats()["compiled"] == 4 and registry.stats()["kernels_in_memory"] == 4


def test_each_device_loads_its_own_copy_from_one_compile(cache_root):
    loader = RecordingLoader()
    registry = gpu_free_registry(loader=loader)
    on_0, on_1 = registry.get_function(SPEC, 0), registry.get_function(SPEC, 1)
    assert (on_0.device, on_1.device) == (0, 1) and on_0.binary == on_1.binary
    assert registry.stats()["compiled"] == 1 and registry.stats()["disk_hits"] == 1


def test_the_default_device_is_cupys_current_one(cache_root, monkeypatch):
    monkeypatch.setattr(registry_module, "current_device", lambda: 3)
    assert gpu_free_registry().get_function(SPEC).device == 3


def test_memory_hits_assemble_no_source_and_touch_no_cache(cache_root):
    calls = {"source": 0, "cache": 0}

    def counting_source(spec):
        calls["source"] += 1
        return small_source(spec)

    def counting_cache():
        calls["cache"] += 1
        return dc.default_cache()

    registry = Registry(loader=RecordingLoader(), cache=counting_cache, source=counting_source,
                        target_for_device=lambda device: registry_module.resolve_target("sm_90"))
    registry.get_function(SPEC, 0)
    after_first = dict(calls)
    for _ in range(1000):
        registry.get_function(SPEC, 0)
    assert calls == after_first == {"source": 1, "cache": 1}


def test_a_memory_hit_costs_a_few_microseconds(cache_root):
    registry = gpu_free_registry()
    registry.get_function(SPEC, 0)
    get = registry.get_function
    best = float("inf")
    for _ in range(5):
        started = time.perf_counter()
        for _ in range(20_000):
            get(SPEC, 0)
        best = min(best, (time.perf_counter() - started) / 20_000)
    assert best < 5e-6, f"{best * 1e6:.2f} µs per memory hit"


def test_compiles_and_disk_hits_are_logged(cache_root, caplog):
    with caplog.at_level(logging.INFO, logger="tropical_gemm.jit"):
        gpu_free_registry().get_function(SPEC, 0)
        gpu_free_registry().get_function(SPEC, 0)
    messages = [r.getMessage() for r in caplog.records if r.name == "tropical_gemm.jit"]
    assert any(m.startswith(f"compiled {SPEC.name} for sm_90") for m in messages)
    assert any(m.startswith(f"disk hit {SPEC.name} for sm_90") for m in messages)


def test_a_binary_the_driver_refuses_is_a_clear_error(cache_root):
    def refusing_loader(binary, name, device):
        raise RuntimeError("CUDA_ERROR_INVALID_IMAGE")

    registry = gpu_free_registry(loader=refusing_loader)
    with pytest.raises(KernelLoadError, match=f"{SPEC.name}.*sm_90.*CUDA_ERROR_INVALID_IMAGE"):
        registry.get_function(SPEC, 0)
    assert registry.stats()["kernels_in_memory"] == 0


def test_a_disabled_disk_cache_compiles_in_every_process(cache_root, monkeypatch):
    monkeypatch.setenv(dc.ENV_DISABLE, "1")
    first, second = gpu_free_registry(), gpu_free_registry()
    first.get_function(SPEC, 0)
    second.get_function(SPEC, 0)
    assert first.stats()["compiled"] == second.stats()["compiled"] == 1
    assert first.stats()["disk_cache_enabled"] is False and not cache_root.exists()


def test_module_stats_have_the_documented_counters(cache_root):
    numbers = stats()
    for name in ("compiled", "disk_hits", "memory_hits", "compile_seconds", "load_seconds"):
        assert isinstance(numbers[name], (int, float)) and numbers[name] >= 0
    assert numbers["cache_dir"] == str(cache_root)


# ---- on a GPU ------------------------------------------------------------------------------------


@pytest.mark.gpu
def test_a_loaded_kernel_launches_correctly_from_cold_and_warm_cache(cache_root):
    import cupy

    a = cupy.asarray(np.random.default_rng(0).standard_normal(1000, dtype=np.float32))
    b = cupy.asarray(np.random.default_rng(1).standard_normal(1000, dtype=np.float32))
    expected = np.maximum(cupy.asnumpy(a), cupy.asnumpy(b))
    source = lambda spec: small_source(spec)  # noqa: E731
    for temperature in ("cold", "warm"):
        registry = Registry(source=source)
        out = cupy.empty_like(a)
        kernel = registry.get_function(SPEC)
        kernel(((a.size + 255) // 256,), (256,), (a, b, out, np.int64(a.size)))
        np.testing.assert_array_equal(cupy.asnumpy(out), expected, err_msg=temperature)
        counters = registry.stats()
        assert (counters["compiled"], counters["disk_hits"]) == ((1, 0) if temperature == "cold" else (0, 1))


FIRST_PRODUCT = """
import json
import numpy as np, cupy, tropical_gemm as tg
rng = np.random.default_rng(0)
a = rng.standard_normal((256, 256), dtype=np.float32)
b = rng.standard_normal((256, 256), dtype=np.float32)
gpu = cupy.asnumpy(tg.matmul(cupy.asarray(a), cupy.asarray(b), semiring="max_plus"))
cpu = tg.matmul(a, b, semiring="max_plus")
print(json.dumps({**tg.jit.stats(), "equal": bool(np.array_equal(gpu, cpu))}))
"""


@pytest.mark.gpu
def test_the_library_product_is_right_in_fresh_processes_cold_and_warm(cache_root):
    cold = run_python(FIRST_PRODUCT, {dc.ENV_CACHE_DIR: str(cache_root)})
    assert cold.returncode == 0, cold.stderr
    warm = run_python(FIRST_PRODUCT, {dc.ENV_CACHE_DIR: str(cache_root)})
    assert warm.returncode == 0, warm.stderr
    cold_stats, warm_stats = last_json_line(cold.stdout), last_json_line(warm.stdout)
    assert cold_stats["equal"] and warm_stats["equal"]
    assert cold_stats["compiled"] == 1 and cold_stats["disk_hits"] == 0
    assert warm_stats["compiled"] == 0 and warm_stats["disk_hits"] == 1
