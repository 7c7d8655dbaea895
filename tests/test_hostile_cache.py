"""The cache against a hostile local user and a crashing machine (issue 18): one test per failure found.

No GPU: kernels are compiled for sm_90 by the real NVRTC, and the loader
checks what a driver would (an ELF header, the kernel's name) and returns
a record instead of a CUDA function.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import stat
import threading
from pathlib import Path

import pytest

from jit_helpers import Loaded, cache_files, gpu_free_registry
from tropical_gemm.jit import DiskCacheWarning, KernelLoadError, make_spec
from tropical_gemm.jit import cache as dc
from tropical_gemm.jit import compiler
from tropical_gemm.jit.cache import BuildRequest, DiskCache
from tropical_gemm.jit.compiler import CompiledKernel, Target

SPEC = make_spec("forward", "max_plus", "float32")
OTHER = make_spec("forward", "min_plus", "float32")
SM90 = Target("cubin", 90)
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0
FOREIGN_UID = 54321


def request_for(source: str = "x", nvrtc=(13, 5)) -> BuildRequest:
    return BuildRequest(name="tg_k", source=source, target=SM90, nvrtc_version=nvrtc, package_version="0.1.0")


def compiled_for(request: BuildRequest, payload: bytes = b"\x7fELF tg_k cubin") -> CompiledKernel:
    return CompiledKernel(payload, request.target, request.target.options, request.nvrtc_version, 0.01, "")


def stored_entry(cache: DiskCache, request: BuildRequest) -> tuple[Path, Path]:
    outcome = cache.get_or_build(request, lambda: compiled_for(request))
    assert outcome.stored
    return outcome.path, outcome.path.with_suffix(".json")


def stored_victim(cache: DiskCache, which: str) -> tuple[BuildRequest, Path]:
    """A stored entry, and its metadata or binary file (``which``), removed for the test to replace."""
    request = request_for()
    payload, meta = stored_entry(cache, request)
    victim = meta if which == ".json" else payload
    victim.unlink()
    return request, victim


def elf_loader(binary: bytes, name: str, device: int) -> Loaded:
    """What the driver checks: machine code (an ELF image) that defines the kernel asked for."""
    if binary[:4] != b"\x7fELF" or name.encode() not in binary:
        raise RuntimeError(f"CUDA_ERROR_NOT_FOUND: named symbol {name} not found")
    return Loaded(binary, name, device)


def finishes(fn, seconds: float = 10.0):
    """``fn()``'s result, failing the test (not hanging it) if it takes longer than ``seconds``."""
    box: dict = {}

    def run():
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the test thread
            box["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"still running after {seconds} s: it hangs"
    if "error" in box:
        raise box["error"]
    return box.get("value")


# ---- 2. no read can hang or blow up --------------------------------------------------------------


@pytest.mark.parametrize("which", [".json", ".cubin"])
def test_a_fifo_in_place_of_an_entry_file_is_a_miss_then_healed(cache_root, which):
    cache = DiskCache(cache_root)
    request, victim = stored_victim(cache, which)
    os.mkfifo(victim)
    assert finishes(lambda: cache.lookup(request)) is None
    outcome = finishes(lambda: cache.get_or_build(request, lambda: compiled_for(request)))
    assert outcome.stored and stat.S_ISREG(os.lstat(victim).st_mode)
    assert cache.lookup(request) is not None


@pytest.mark.parametrize("which", [".json", ".cubin"])
def test_an_entry_symlinked_to_dev_zero_is_refused_without_reading_it(cache_root, which):
    cache = DiskCache(cache_root)
    request, victim = stored_victim(cache, which)
    victim.symlink_to("/dev/zero")
    assert finishes(lambda: cache.lookup(request)) is None  # no MemoryError, no hang
    assert not os.path.islink(victim)  # moved aside: healed for every later process
    assert cache.get_or_build(request, lambda: compiled_for(request)).stored
    assert cache.lookup(request) is not None


def test_an_oversized_entry_file_is_read_only_up_to_its_cap(cache_root, monkeypatch):
    cache = DiskCache(cache_root)
    request = request_for()
    payload, meta = stored_entry(cache, request)
    with open(payload, "ab") as grow:
        grow.write(b"\0" * (8 * 2**20))
    returned: list[int] = []
    real_read = os.read

    def counting_read(fd, n):
        data = real_read(fd, n)
        returned.append(len(data))
        return data

    monkeypatch.setattr(os, "read", counting_read)
    assert cache.lookup(request) is None
    assert sum(returned) < 10_000  # the metadata only: the 8 MiB binary is refused unread
    monkeypatch.setattr(os, "read", real_read)
    with open(meta, "ab") as grow:
        grow.write(b" " * (dc.config.MAX_METADATA_BYTES + 1))
    assert cache.lookup(request) is None


# ---- 3. everything heals once ----------------------------------------------------------------------


@pytest.mark.parametrize("which", [".json", ".cubin"])
def test_a_directory_in_place_of_an_entry_is_moved_aside_and_caching_stays_on(cache_root, which):
    cache = DiskCache(cache_root)
    request = request_for()
    directory = cache.target_dir("sm_90")
    directory.mkdir(parents=True)
    (directory / (request.stem + which)).mkdir()
    (directory / (request.stem + which) / "inside").write_text("x")
    outcome = cache.get_or_build(request, lambda: compiled_for(request))
    assert outcome.stored and cache.writable
    assert cache.lookup(request) is not None
    other = request_for("another")
    assert cache.get_or_build(other, lambda: compiled_for(other)).stored  # not switched off for the process


def test_a_symlinked_lock_is_replaced_and_its_target_untouched(cache_root, tmp_path):
    cache = DiskCache(cache_root)
    request = request_for()
    bystander = tmp_path / "bystander.txt"
    bystander.write_text("not yours to lock")
    lock = cache.target_dir("sm_90") / f"{request.stem}.lock"
    lock.parent.mkdir(parents=True)
    lock.symlink_to(bystander)
    assert cache.get_or_build(request, lambda: compiled_for(request)).stored and cache.writable
    assert not lock.is_symlink() and stat.S_ISREG(os.lstat(lock).st_mode)
    assert bystander.read_text() == "not yours to lock"
    dangling = cache.target_dir("sm_90") / f"{request_for('b').stem}.lock"
    dangling.symlink_to("/nonexistent/dir/lock")
    assert cache.get_or_build(request_for("b"), lambda: compiled_for(request_for("b"))).stored and cache.writable


@pytest.mark.nvrtc
def test_another_kernels_cubin_with_a_rewritten_checksum_is_evicted_and_rebuilt_once(cache_root, caplog):
    from tropical_gemm.jit.source import kernel_source

    first = gpu_free_registry(source=kernel_source, loader=elf_loader)
    first.get_function(SPEC, 0)
    first.get_function(OTHER, 0)
    [mine] = [p for p in cache_files(cache_root, ".cubin") if p.name.startswith(SPEC.name + "-")]
    [theirs] = [p for p in cache_files(cache_root, ".cubin") if p.name.startswith(OTHER.name + "-")]
    good = mine.read_bytes()
    forged = theirs.read_bytes()
    mine.write_bytes(forged)
    meta = json.loads(mine.with_suffix(".json").read_text())
    meta["sha256"], meta["size"] = hashlib.sha256(forged).hexdigest(), len(forged)
    mine.with_suffix(".json").write_text(json.dumps(meta))
    registry = gpu_free_registry(source=kernel_source, loader=elf_loader)
    with caplog.at_level(logging.WARNING, logger="tropical_gemm.jit"):
        loaded = registry.get_function(SPEC, 0)
    assert loaded.binary == good and registry.stats()["compiled"] == 1
    assert any("evicting it" in r.getMessage() for r in caplog.records)
    assert mine.read_bytes() == good  # healed on disk: the next process hits it
    again = gpu_free_registry(source=kernel_source, loader=elf_loader)
    again.get_function(SPEC, 0)
    assert again.stats()["compiled"] == 0


@pytest.mark.nvrtc
def test_a_freshly_compiled_binary_the_driver_refuses_is_a_kernel_load_error_not_a_loop(cache_root):
    def refusing(binary, name, device):
        raise RuntimeError("CUDA_ERROR_INVALID_IMAGE")

    registry = gpu_free_registry(loader=refusing)
    with pytest.raises(KernelLoadError, match="CUDA_ERROR_INVALID_IMAGE"):
        registry.get_function(SPEC, 0)
    assert registry.stats()["compiled"] == 1


# ---- 1. trust: owner, mode, NVRTC version -----------------------------------------------------------


@pytest.mark.skipif(not IS_ROOT, reason="making a directory owned by another user needs root (chown)")
def test_a_cache_root_owned_by_another_user_is_not_used(cache_root):
    planted = DiskCache(cache_root)
    request = request_for()
    stored_entry(planted, request)
    for path in [cache_root, *cache_root.rglob("*")]:
        os.lchown(path, FOREIGN_UID, FOREIGN_UID)
    cache = DiskCache(cache_root)
    with pytest.warns(DiskCacheWarning, match=f"owned by uid {FOREIGN_UID}.*TROPICAL_GEMM_CACHE_DIR") as caught:
        assert cache.lookup(request) is None  # their cubin is never loaded
        outcome = cache.get_or_build(request, lambda: compiled_for(request, b"\x7fELF mine tg_k"))
    assert len(caught) == 1 and outcome.binary == b"\x7fELF mine tg_k" and not outcome.stored
    assert outcome.store_problem and "owned by uid" in outcome.store_problem


@pytest.mark.skipif(not IS_ROOT, reason="making a file owned by another user needs root (chown)")
def test_an_entry_file_owned_by_another_user_is_moved_aside_and_rebuilt(cache_root):
    cache = DiskCache(cache_root)
    request = request_for()
    payload, meta = stored_entry(cache, request)
    os.lchown(payload, FOREIGN_UID, FOREIGN_UID)
    assert DiskCache(cache_root).lookup(request) is None
    assert not payload.exists()
    again = DiskCache(cache_root)
    assert again.get_or_build(request, lambda: compiled_for(request)).stored
    assert payload.stat().st_uid == os.geteuid()


def test_a_group_or_world_writable_root_is_not_used_without_a_shared_group(cache_root):
    stored_entry(DiskCache(cache_root), request_for())
    for mode in (0o777, 0o770):
        os.chmod(cache_root, mode)
        with pytest.warns(DiskCacheWarning, match="writable by"):
            assert DiskCache(cache_root).lookup(request_for()) is None


def test_a_planted_newer_nvrtc_entry_is_never_preferred(cache_root, monkeypatch):
    cache = DiskCache(cache_root)
    request = request_for(nvrtc=(13, 5))
    stored_entry(cache, request)
    # A self-consistent entry for the same program from "NVRTC 99.9", written as an attacker would.
    evil = BuildRequest(request.name, request.source, request.target, (99, 9), request.package_version)
    meta = dc.metadata_for(evil, compiled_for(evil, b"\x7fELF evil tg_k"))
    directory = cache.target_dir("sm_90")
    (directory / meta.payload_name).write_bytes(b"\x7fELF evil tg_k")
    (directory / f"{meta.stem}.json").write_bytes(meta.to_json())
    os.chmod(directory / meta.payload_name, 0o600)
    os.chmod(directory / f"{meta.stem}.json", 0o600)
    assert cache.lookup(request).binary == b"\x7fELF tg_k cubin"
    assert cache.lookup(request_for(nvrtc=(13, 0))) is None  # not "any version will do" either
    probe = BuildRequest(request.name, request.source, request.target, None, request.package_version)
    for running in ((13, 5), None):  # the warm-start probe: the running NVRTC, or none (the cache's record)
        def version(running=running):
            if running is None:
                raise compiler.NvrtcUnavailableError("no NVRTC on this node")
            return running

        monkeypatch.setattr(compiler, "nvrtc_version", version)
        assert DiskCache(cache_root).lookup(probe).binary == b"\x7fELF tg_k cubin"


def test_files_are_private_under_umask_000(cache_root):
    old = os.umask(0)
    try:
        payload, meta = stored_entry(DiskCache(cache_root), request_for())
    finally:
        os.umask(old)
    for path in (payload, meta, payload.with_suffix(".lock")):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    for directory in (cache_root, payload.parent, payload.parent.parent):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory


def test_an_infinite_lock_timeout_is_refused(cache_root, monkeypatch):
    for value in ("inf", "nan", "-1"):
        monkeypatch.setenv(dc.ENV_LOCK_TIMEOUT, value)
        with pytest.raises(ValueError, match="finite"):
            dc.default_cache()
