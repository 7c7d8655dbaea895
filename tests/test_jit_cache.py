"""The disk cache: keys, layout, verification, recovery, degraded directories, locks, pruning.

Every test gets its own empty cache directory through TROPICAL_GEMM_CACHE_DIR;
the user's real cache is never touched.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import pytest

from jit_helpers import RecordingLoader, cache_files, gpu_free_registry, small_source
from tropical_gemm.jit import DiskCacheWarning, compiler, make_spec, resolve_target
from tropical_gemm.jit import cache as dc
from tropical_gemm.jit import source as source_module
from tropical_gemm.jit.compiler import CompiledKernel, Target
from tropical_gemm.jit.cache import BuildRequest, DiskCache, EntryMetadata
from tropical_gemm.jit.registry import build_request

SPEC = make_spec("forward", "max_plus", "float32")
OTHER = make_spec("forward", "min_plus", "float32")


def request_for(source: str = "x", *, target: Target = Target("cubin", 90), nvrtc=(13, 5),
                package="0.1.0", name: str = "tg_k") -> BuildRequest:
    return BuildRequest(name=name, source=source, target=target, nvrtc_version=nvrtc, package_version=package)


def fake_compiled(request: BuildRequest, payload: bytes = b"\x7fELF fake cubin") -> CompiledKernel:
    return CompiledKernel(payload, request.target, request.target.options, request.nvrtc_version, 0.01, "")


# ---- key -----------------------------------------------------------------------------------------


def test_key_covers_source_options_arch_nvrtc_and_package(monkeypatch):
    base = request_for()
    assert len(base.key) == 64 and base.key == request_for().key
    assert request_for("x ").key != base.key
    assert request_for(target=Target("cubin", 80)).key != base.key
    assert request_for(target=Target("ptx", 90)).key != base.key
    assert request_for(nvrtc=(13, 0)).key != base.key
    assert request_for(package="0.2.0").key != base.key
    monkeypatch.setattr(compiler, "COMPILE_OPTIONS", compiler.COMPILE_OPTIONS + ("-lineinfo",))
    assert request_for().key != base.key


@pytest.mark.nvrtc
def test_a_preamble_edit_changes_the_key_of_every_kernel(monkeypatch):
    # The preamble's contents are hashed (not its path), so an edit invalidates cached binaries.
    target = resolve_target("sm_90")
    before = build_request(SPEC, target, source_module.kernel_source(SPEC)).key
    original = source_module.preamble()
    monkeypatch.setattr(source_module, "preamble", lambda: original + "\n// edited\n")
    after = build_request(SPEC, target, source_module.kernel_source(SPEC)).key
    assert before != after


def test_portable_key_ignores_only_the_nvrtc_version():
    assert request_for(nvrtc=(13, 0)).portable_key == request_for(nvrtc=(13, 5)).portable_key
    assert request_for("y").portable_key != request_for("x").portable_key


# ---- layout and files ----------------------------------------------------------------------------


@pytest.mark.nvrtc
def test_layout_has_format_and_arch_one_binary_and_readable_metadata(cache_root):
    gpu_free_registry().get_function(SPEC, 0)
    binaries, metas = cache_files(cache_root, ".cubin"), cache_files(cache_root, ".json")
    assert len(binaries) == len(metas) == 1
    assert binaries[0].parent == cache_root / f"v{dc.FORMAT_VERSION}" / "sm_90"
    assert binaries[0].name.startswith(SPEC.name + "-") and binaries[0].name.endswith(".cubin")
    meta = json.loads(metas[0].read_text())
    assert meta["spec"] == SPEC.as_dict() and meta["target"] == "sm_90"
    assert meta["options"] == list(resolve_target("sm_90").options)
    assert meta["nvrtc_version"] == "%d.%d" % compiler.nvrtc_version()
    assert meta["size"] == binaries[0].stat().st_size and meta["compile_seconds"] > 0 and meta["created"]
    assert not list(cache_root.rglob("*.tmp"))


@pytest.mark.nvrtc
@pytest.mark.parametrize("umask", [0o022, 0o000, 0o077])
def test_files_are_0600_and_directories_0700_whatever_the_umask(cache_root, umask):
    # Issue 18: under umask 000 the cache used to create world-writable files,
    # which anyone could replace with their own cubin.
    old = os.umask(umask)
    try:
        gpu_free_registry().get_function(SPEC, 0)
    finally:
        os.umask(old)
    for path in cache_files(cache_root, ".cubin") + cache_files(cache_root, ".json") + cache_files(cache_root, ".lock"):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
    for directory in (cache_root, cache_root / f"v{dc.FORMAT_VERSION}", cache_root / f"v{dc.FORMAT_VERSION}" / "sm_90"):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700, directory


def test_a_shared_cache_group_gets_group_files_and_locks(cache_root, monkeypatch):
    group = os.getgid()
    monkeypatch.setenv(dc.ENV_GROUP, str(group))
    cache_root.mkdir()
    os.chown(cache_root, -1, group)
    os.chmod(cache_root, 0o2770)
    old = os.umask(0o077)
    try:
        cache = dc.default_cache()
        request = request_for()
        cache.get_or_build(request, lambda: fake_compiled(request))
    finally:
        os.umask(old)
    target_dir = cache_root / f"v{dc.FORMAT_VERSION}" / "sm_90"
    for path in list(target_dir.iterdir()):
        assert stat.S_IMODE(path.stat().st_mode) == 0o660 and path.stat().st_gid == group, path
    assert stat.S_IMODE(target_dir.stat().st_mode) == 0o2770


# ---- verification and recovery -------------------------------------------------------------------


def _corrupt_truncate(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _corrupt_flip_one_bit(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 3] ^= 0x04
    path.write_bytes(bytes(data))


def _corrupt_metadata(path: Path) -> None:
    meta = path.with_suffix(".json")
    meta.write_text(meta.read_text()[:40])


@pytest.mark.nvrtc
@pytest.mark.parametrize("damage", [_corrupt_truncate, _corrupt_flip_one_bit, _corrupt_metadata],
                         ids=["truncated", "bit-flipped", "bad-metadata"])
def test_a_damaged_entry_is_detected_recompiled_replaced_and_logged(cache_root, damage, caplog):
    first = gpu_free_registry()
    good = first.get_function(SPEC, 0).binary
    [path] = cache_files(cache_root, ".cubin")
    damage(path)

    loader = RecordingLoader()
    again = gpu_free_registry(loader=loader)
    with caplog.at_level(logging.WARNING, logger="tropical_gemm.jit"):
        loaded = again.get_function(SPEC, 0)
    assert loaded.binary == good  # the damaged bytes were never loaded
    assert [c.binary for c in loader.calls] == [good]
    assert again.stats()["compiled"] == 1 and again.stats()["corrupt_replaced"] == 1
    assert path.read_bytes() == good
    assert any("corrupt cache entry" in r.getMessage() for r in caplog.records)
    third = gpu_free_registry()
    third.get_function(SPEC, 0)
    assert third.stats()["disk_hits"] == 1 and third.stats()["compiled"] == 0


def test_metadata_of_another_program_is_not_trusted(cache_root):
    cache = DiskCache(cache_root)
    mine, theirs = request_for("mine"), request_for("theirs")
    cache.get_or_build(theirs, lambda: fake_compiled(theirs, b"their binary"))
    # Move their (self-consistent) entry under my name: checksums pass, the key must not.
    their_meta = cache_root / f"v{dc.FORMAT_VERSION}" / "sm_90" / f"{theirs.stem}.json"
    (their_meta.parent / f"{mine.stem}.json").write_bytes(their_meta.read_bytes())
    (their_meta.parent / f"{mine.stem}.cubin").write_bytes(b"their binary")
    assert cache.lookup(mine) is None


# ---- degraded directories ------------------------------------------------------------------------


@pytest.mark.nvrtc
def test_an_unusable_cache_path_falls_back_to_memory_and_warns_once(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv(dc.ENV_CACHE_DIR, str(blocker / "cache"))  # mkdir fails even for root
    registry = gpu_free_registry()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        registry.get_function(SPEC, 0)
        registry.get_function(OTHER, 0)
    assert registry.stats()["compiled"] == 2
    assert registry.stats()["disk_cache_writable"] is False
    cache_warnings = [str(w.message) for w in caught if w.category is DiskCacheWarning]
    assert len(cache_warnings) == 1 and "stay in memory" in cache_warnings[0]


def test_a_full_disk_falls_back_to_memory_leaves_no_temp_files_and_warns_once(cache_root, monkeypatch):
    def disk_full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(dc.os, "fsync", disk_full)
    cache = DiskCache(cache_root)
    outcomes = []
    with pytest.warns(DiskCacheWarning, match="disk is full") as caught:
        for source in ("a", "b"):
            request = request_for(source)
            outcomes.append(cache.get_or_build(request, lambda: fake_compiled(request)))
    assert len(caught) == 1
    assert all(o.compiled and not o.stored and o.binary == b"\x7fELF fake cubin" for o in outcomes)
    assert not [p for p in cache_root.rglob("*") if p.is_file() and not p.name.endswith(".lock")]


@pytest.mark.nvrtc
def test_a_read_only_cache_serves_its_entries_and_compiles_the_rest_in_memory(cache_root, monkeypatch):
    gpu_free_registry().get_function(SPEC, 0)  # populate while writable
    before = {p: p.read_bytes() for p in cache_root.rglob("*") if p.is_file()}

    real_open, real_utime, real_mkdir = os.open, os.utime, os.mkdir

    def read_only(path, *args, **kwargs):
        raise OSError(errno.EROFS, "Read-only file system", str(path))

    def open_read_only(path, flags, *args, **kwargs):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", open_read_only)
    monkeypatch.setattr(os, "utime", read_only)
    monkeypatch.setattr(os, "mkdir", read_only)
    registry = gpu_free_registry()
    with pytest.warns(DiskCacheWarning, match="Read-only file system"):
        registry.get_function(SPEC, 0)  # a hit: no warning needed, but
        registry.get_function(OTHER, 0)  # this one must compile and cannot be stored
    stats = registry.stats()
    assert stats["disk_hits"] == 1 and stats["compiled"] == 1
    monkeypatch.setattr(os, "open", real_open)
    monkeypatch.setattr(os, "utime", real_utime)
    monkeypatch.setattr(os, "mkdir", real_mkdir)
    assert {p: p.read_bytes() for p in cache_root.rglob("*") if p.is_file()} == before


def test_disabling_the_disk_cache_writes_nothing(cache_root, monkeypatch):
    monkeypatch.setenv(dc.ENV_DISABLE, "1")
    cache = dc.default_cache()
    assert not cache.enabled
    request = request_for()
    outcome = cache.get_or_build(request, lambda: fake_compiled(request))
    assert outcome.compiled and not outcome.stored
    assert not cache_root.exists()


def test_a_bad_lock_timeout_setting_is_a_clear_error(cache_root, monkeypatch):
    monkeypatch.setenv(dc.ENV_LOCK_TIMEOUT, "soon")
    with pytest.raises(ValueError, match="TROPICAL_GEMM_CACHE_LOCK_TIMEOUT"):
        dc.default_cache()


# ---- locks ---------------------------------------------------------------------------------------

HOLD_LOCK = """
import sys, time
from filelock import FileLock
lock = FileLock(sys.argv[1])
lock.acquire()
print("held", flush=True)
time.sleep(float(sys.argv[2]))
"""


def _hold_lock(lock_path: Path, seconds: float) -> subprocess.Popen:
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(HOLD_LOCK), str(lock_path), str(seconds)],
                              stdout=subprocess.PIPE, text=True)
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


def test_a_lock_held_by_a_stuck_process_does_not_hang_callers(cache_root, caplog):
    request = request_for()
    cache = DiskCache(cache_root, lock_timeout=0.5)
    holder = _hold_lock(cache.target_dir("sm_90") / f"{request.stem}.lock", 60)
    try:
        started = time.monotonic()
        with caplog.at_level(logging.WARNING, logger="tropical_gemm.jit"):
            outcome = cache.get_or_build(request, lambda: fake_compiled(request))
        elapsed = time.monotonic() - started
    finally:
        holder.kill()
        holder.communicate()
    assert outcome.compiled and outcome.binary == b"\x7fELF fake cubin"
    assert 0.4 < elapsed < 10
    assert any("still held" in r.getMessage() for r in caplog.records)
    assert cache.lookup(request) is not None  # the atomic write needs no lock, so the result is kept


def test_a_lock_left_by_a_killed_process_is_free(cache_root):
    request = request_for()
    cache = DiskCache(cache_root, lock_timeout=5)
    holder = _hold_lock(cache.target_dir("sm_90") / f"{request.stem}.lock", 60)
    holder.send_signal(signal.SIGKILL)
    holder.communicate()
    started = time.monotonic()
    outcome = cache.get_or_build(request, lambda: fake_compiled(request))
    assert outcome.stored and time.monotonic() - started < 2



@pytest.mark.parametrize("no_locks", [errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS])
def test_a_file_system_without_locks_still_caches(cache_root, monkeypatch, no_locks):
    """NFS without a lock daemon (ENOLCK), or a mount without flock: the lock only saves duplicate compiles."""
    import fcntl

    def flock(fd, operation):
        raise OSError(no_locks, os.strerror(no_locks))

    monkeypatch.setattr(fcntl, "flock", flock)
    request = request_for()
    cache = DiskCache(cache_root)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DiskCacheWarning)
        outcome = cache.get_or_build(request, lambda: fake_compiled(request))
    assert outcome.stored and cache.writable and cache.lookup(request) is not None

def test_the_lock_timeout_comes_from_the_environment(cache_root, monkeypatch):
    monkeypatch.setenv(dc.ENV_LOCK_TIMEOUT, "0.25")
    assert dc.default_cache().lock_timeout == 0.25


# ---- NVRTC versions ------------------------------------------------------------------------------


def test_a_listed_compatible_nvrtc_cubin_is_used_but_ptx_is_not(cache_root):
    cache = DiskCache(cache_root, compatible_nvrtc=("13.5",))
    for target in (Target("cubin", 90), Target("ptx", 90)):
        ci = request_for(target=target, nvrtc=(13, 5))
        cache.get_or_build(ci, lambda: fake_compiled(ci, b"from CI"))
        gpu_node = request_for(target=target, nvrtc=(13, 0))
        found = cache.lookup(gpu_node)
        if target.kind == "cubin":
            assert found is not None and found.binary == b"from CI" and not found.exact
        else:
            assert found is None
    strict = DiskCache(cache_root, strict_nvrtc=True, compatible_nvrtc=("13.5",))
    assert strict.lookup(request_for(nvrtc=(13, 0))) is None
    assert DiskCache(cache_root).lookup(request_for(nvrtc=(13, 0))) is None  # unlisted: never used


def test_compatible_versions_are_tried_in_the_order_listed(cache_root):
    cache = DiskCache(cache_root, compatible_nvrtc=("13.5", "12.8"))
    for version, payload in (((12, 8), b"twelve"), ((13, 5), b"thirteen")):
        req = request_for(nvrtc=version)
        cache.get_or_build(req, lambda: fake_compiled(req, payload), accept_other_nvrtc=False)
    assert cache.lookup(request_for(nvrtc=(13, 0))).binary == b"thirteen"


def test_a_foreign_cubin_the_driver_refuses_is_rebuilt_with_this_nvrtc(cache_root, monkeypatch):
    nvrtc = compiler.nvrtc_version()
    foreign_version = (nvrtc[0], nvrtc[1] + 1)
    monkeypatch.setenv(dc.ENV_COMPATIBLE_NVRTC, "%d.%d" % foreign_version)
    spec_source = small_source(SPEC)
    req = build_request(SPEC, resolve_target("sm_90"), spec_source)
    foreign = BuildRequest(req.name, req.source, req.target, foreign_version, req.package_version)
    DiskCache(cache_root).get_or_build(foreign, lambda: fake_compiled(foreign, b"\x7fELF " + SPEC.name.encode()))

    def picky_loader(binary, name, device):
        if binary.startswith(b"\x7fELF " + SPEC.name.encode()):
            raise RuntimeError("CUDA_ERROR_UNSUPPORTED_PTX_VERSION")
        return binary

    registry = gpu_free_registry(loader=picky_loader)
    binary = registry.get_function(SPEC, 0)
    assert binary[:4] == b"\x7fELF" and registry.stats()["compiled"] == 1
    assert registry.stats()["foreign_nvrtc_hits"] == 1
    assert DiskCache(cache_root).lookup(req).exact


# ---- maintenance ---------------------------------------------------------------------------------


def _entry(cache: DiskCache, source: str, size: int, last_used: float) -> BuildRequest:
    request = request_for(source)
    outcome = cache.get_or_build(request, lambda: fake_compiled(request, b"\x7fELF" + bytes(size - 4)))
    os.utime(outcome.path, (last_used, last_used))
    return request


def test_prune_removes_least_recently_used_first_and_hits_count_as_use(cache_root):
    cache = DiskCache(cache_root)
    now = time.time()
    old, middle, recent = (_entry(cache, s, 10_000, now - age) for s, age in (("a", 300), ("b", 200), ("c", 100)))
    assert cache.lookup(old) is not None  # a hit refreshes its last use: "a" is now the most recent
    entry_size = {e.metadata.name + e.metadata.portable_key: e.size for e in cache.entries()}
    keep_two = sum(sorted(entry_size.values())[:2])
    result = cache.prune(keep_two)
    assert result.removed == 1 and result.remaining_bytes <= keep_two
    assert cache.lookup(middle) is None
    assert cache.lookup(old) is not None and cache.lookup(recent) is not None
    assert cache.prune(0).remaining_bytes == 0 and cache.entries() == []


def test_prune_removes_debris_but_not_fresh_writes(cache_root):
    cache = DiskCache(cache_root)
    _entry(cache, "a", 1000, time.time())
    directory = cache.target_dir("sm_90")
    stale_temp = directory / ".x.cubin.123.abcd.tmp"
    fresh_temp = directory / ".y.cubin.124.abcd.tmp"
    for path in (stale_temp, fresh_temp):
        path.write_bytes(b"partial")
    os.utime(stale_temp, (time.time() - 2 * dc.STALE_SECONDS,) * 2)
    (directory / "junk-0123456789abcdef-nvrtc13.5.json").write_text("{not json")
    cache.prune(10**9)
    assert not stale_temp.exists() and fresh_temp.exists()
    assert not (directory / "junk-0123456789abcdef-nvrtc13.5.json").exists()
    assert len(cache.entries()) == 1


def test_clear_removes_only_cache_entries(cache_root):
    cache = DiskCache(cache_root)
    _entry(cache, "a", 1000, time.time())
    (cache_root / "v0" / "sm_80").mkdir(parents=True)
    (cache_root / "v0" / "sm_80" / "old.cubin").write_bytes(b"old")
    (cache_root / "notes.txt").write_text("mine")
    assert cache.clear() == 2  # entries, as the other actions count: "a", and the old binary
    assert sorted(p.name for p in cache_root.iterdir()) == ["notes.txt"]



def test_clear_after_another_clear_took_a_tree_it_had_listed(cache_root, monkeypatch):
    """Two ``cache clear`` at once: a tree listed by one and renamed away by the other is the other's."""
    from tropical_gemm.jit.cache import maintenance

    cache = DiskCache(cache_root)
    _entry(cache, "a", 1000, time.time())
    listed = maintenance._names

    def listed_then_taken(directory):
        names = listed(directory)
        if directory == cache_root:  # the other clear renames the tree right after this one listed it
            os.rename(cache_root / "v2", cache_root / ".taken-by-another-clear")
        return names

    monkeypatch.setattr(maintenance, "_names", listed_then_taken)
    assert cache.clear() == 0

def test_metadata_round_trips_and_rejects_wrong_types():
    request = request_for()
    meta = dc.metadata_for(request, fake_compiled(request))
    assert EntryMetadata.from_json(meta.to_json()) == meta
    broken = json.loads(meta.to_json())
    broken["size"] = "12"
    with pytest.raises(ValueError, match="size"):
        EntryMetadata.from_json(json.dumps(broken).encode())
