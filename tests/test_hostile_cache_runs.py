"""Issue 18, continued: crashes, concurrent clears, HOME, bundles, honest warm-ups, and the CLI's frictions.

Kills and unusable HOMEs need separate processes; everything runs without a
GPU (NVRTC compiles for sm_90, nothing is loaded).
"""

from __future__ import annotations

import dataclasses

import errno
import io
import json
import logging
import os
import signal
import stat
import subprocess
import sys
import tarfile
import textwrap
import threading
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from jit_helpers import REPO, cache_files, last_json_line, run_python
from tropical_gemm.jit import compiler
from test_hostile_cache import compiled_for, request_for, stored_entry
from tropical_gemm.cli import main
from tropical_gemm.jit import DiskCacheWarning, Registry, warmup
from tropical_gemm.jit import bundle as bundle_module
from tropical_gemm.jit import cache as dc
from tropical_gemm.jit.bundle import BundleError, export_bundle, import_bundle
from tropical_gemm.jit.cache import DiskCache

SELECTION = dict(semirings="max_plus", dtypes="float32", ops="backward,backward_ordered_a")
ENV = {**os.environ, "PYTHONPATH": f"{REPO / 'tests'}{os.pathsep}{REPO}"}


def no_loads(*args):
    raise AssertionError("warmup must not load kernels")


# ---- 4. no debris, and a kill is not corruption --------------------------------------------------

WRITER = """
import os, sys, time
from pathlib import Path
from test_hostile_cache import compiled_for, request_for
from tropical_gemm.jit.cache import DiskCache

real_replace = os.replace
if sys.argv[2] == "temp":
    def stall(fd):
        print("writing", flush=True)
        time.sleep(60)
    os.fsync = stall
else:
    def replace(src, dst):
        real_replace(src, dst)
        if str(dst).endswith(".cubin"):
            print("between", flush=True)
            time.sleep(60)
    os.replace = replace
request = request_for()
DiskCache(Path(sys.argv[1])).get_or_build(request, lambda: compiled_for(request))
"""


@pytest.mark.parametrize("stage", ["temp", "between"])
def test_a_writer_killed_mid_write_leaves_no_debris_and_no_false_corruption(cache_root, stage, caplog):
    writer = subprocess.Popen([sys.executable, "-c", textwrap.dedent(WRITER), str(cache_root), stage],
                              stdout=subprocess.PIPE, text=True, env=ENV, cwd=REPO)
    assert writer.stdout is not None and writer.stdout.readline().strip() in ("writing", "between")
    writer.send_signal(signal.SIGKILL)
    writer.communicate()
    directory = DiskCache(cache_root).target_dir("sm_90")
    if stage == "temp":
        assert [p.name for p in directory.iterdir() if p.name.endswith(".tmp")], "the kill should leave a temp file"
    request = request_for()
    cache = DiskCache(cache_root)
    with caplog.at_level(logging.WARNING, logger="tropical_gemm.jit"):
        assert cache.lookup(request) is None  # the first write sweeps the dead writer's temp file
        outcome = cache.get_or_build(request, lambda: compiled_for(request))
    assert not [p for p in directory.iterdir() if p.name.endswith(".tmp")]
    assert outcome.stored and not outcome.replaced_corrupt
    assert not [r for r in caplog.records if "corrupt" in r.getMessage()]


def test_a_live_writers_temp_file_is_left_alone(cache_root):
    cache = DiskCache(cache_root)
    stored_entry(cache, request_for())
    from tropical_gemm.jit.cache.files import temp_name

    mine = cache.target_dir("sm_90") / temp_name("x.cubin")  # this process: alive
    mine.write_bytes(b"partial")
    DiskCache(cache_root).lookup(request_for())
    assert mine.exists()


# ---- 6. clear while others run ---------------------------------------------------------------------


def test_clear_while_builds_run_never_switches_their_writes_off(cache_root):
    cache = DiskCache(cache_root)
    stop = threading.Event()
    clears = []

    def clear_repeatedly():
        while not stop.is_set():
            clears.append(DiskCache(cache_root).clear())
            time.sleep(0.01)

    clearer = threading.Thread(target=clear_repeatedly)
    clearer.start()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", DiskCacheWarning)
            outcomes, batch, deadline = [], 0, time.monotonic() + 120
            # builds go on until several clears have run between them, however slow the machine
            while (batch == 0 or len(clears) <= 5) and time.monotonic() < deadline:
                with ThreadPoolExecutor(4) as pool:
                    outcomes += pool.map(
                        lambda i: cache.get_or_build(request_for(f"s{i}"), lambda: compiled_for(request_for(f"s{i}"))),
                        range(batch * 200, batch * 200 + 200))
                batch += 1
    finally:
        stop.set()
        clearer.join()
    # A clear every few milliseconds can beat a write's retries now and then (that entry is
    # reported, not stored); what must never happen is writing switched off for the process.
    not_stored = [o for o in outcomes if not o.stored]
    assert len(clears) > 5 and cache.writable and len(not_stored) < len(outcomes) // 4
    assert all("kept disappearing" in (o.store_problem or "") for o in not_stored)
    later = request_for("after")
    assert cache.get_or_build(later, lambda: compiled_for(later)).stored and cache.lookup(later) is not None


@pytest.mark.nvrtc
def test_clear_during_a_warmup_leaves_it_storing(cache_root):
    stop = threading.Event()

    def clear_repeatedly():
        while not stop.is_set():
            DiskCache(cache_root).clear()
            time.sleep(0.05)

    clearer = threading.Thread(target=clear_repeatedly)
    clearer.start()
    try:
        result = warmup(**SELECTION, arch="sm_80,sm_90", registry=Registry(loader=no_loads))
    finally:
        stop.set()
        clearer.join()
    assert result.not_stored == () and result.compiled + result.already_cached == 4
    again = warmup(**SELECTION, arch="sm_90", registry=Registry(loader=no_loads))
    assert again.not_stored == () and len(cache_files(cache_root, ".cubin")) >= 2


@pytest.mark.nvrtc
def test_cache_clear_from_the_cli_while_warmup_processes_run(cache_root, capsys):
    env = {**ENV, dc.ENV_CACHE_DIR: str(cache_root)}
    command = [sys.executable, "-m", "tropical_gemm", "warmup", "--arch", "sm_80,sm_90", "--semiring", "max_plus",
               "--dtype", "float32,int32", "--op", "backward,backward_ordered_a,backward_ordered_b", "--workers", "1"]
    warmups = [subprocess.Popen(command, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
               for _ in range(3)]
    clears = 0
    while any(w.poll() is None for w in warmups):
        assert main(["cache", "clear"]) == 0
        clears += 1
        time.sleep(0.05)
    capsys.readouterr()
    results = [w.communicate() for w in warmups]
    assert clears > 1 and [w.returncode for w in warmups] == [0, 0, 0], results
    assert all("0 not stored" in out for out, _ in results)


# ---- 7. unwritable HOME ------------------------------------------------------------------------------

UNDER_BAD_HOME = """
import json, os, warnings
warnings.simplefilter("always")
with warnings.catch_warnings(record=True) as caught:
    import tropical_gemm.jit as jit
    import cupy  # CuPy creates its own cache directory on import
    outcome = jit.compile_spec(jit.make_spec("backward", "max_plus", "float32"), "sm_90")
print(json.dumps({"compiled": outcome.compiled, "stored": outcome.stored,
                  "warnings": [str(w.message) for w in caught], "cupy_cache": os.environ.get("CUPY_CACHE_DIR")}))
"""


@pytest.mark.nvrtc
def test_an_unwritable_home_compiles_and_names_the_real_cause(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("HOME cannot be a directory under a file, even for root")
    env = {k: v for k, v in ENV.items() if k not in (dc.ENV_CACHE_DIR, "XDG_CACHE_HOME", "CUPY_CACHE_DIR")}
    env["HOME"] = str(blocker / "home")
    run = subprocess.run([sys.executable, "-c", textwrap.dedent(UNDER_BAD_HOME)], env=env, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["compiled"] and not report["stored"]
    assert report["cupy_cache"] and not report["cupy_cache"].startswith(str(blocker))
    [message] = [m for m in report["warnings"] if "kernel cache" in m]
    assert f"HOME ({blocker / 'home'}) is not a writable directory" in message and dc.ENV_CACHE_DIR in message


@pytest.mark.parametrize("planted", ["link", "open dir", "other user's dir", None])
def test_cupys_fallback_cache_is_never_a_directory_another_user_planted(tmp_path, monkeypatch, planted):
    """The fallback's name is predictable: a link, a directory anyone can write, or another user's is refused."""
    from tropical_gemm.jit.cache import config

    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(config.tempfile, "tempdir", str(temp))
    monkeypatch.delenv("CUPY_CACHE_DIR", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "a-file" / "home"))
    (tmp_path / "a-file").write_text("HOME cannot be a directory under a file")
    predictable = temp / f"tropical-gemm-cupy-{os.getuid()}"
    elsewhere = tmp_path / "attacker"
    elsewhere.mkdir(mode=0o777)
    if planted == "link":
        predictable.symlink_to(elsewhere)
    elif planted == "open dir":
        predictable.mkdir()
        os.chmod(predictable, 0o777)
    elif planted == "other user's dir":
        predictable.mkdir(mode=0o700)
        if os.getuid() != 0:
            pytest.skip("giving a directory to another user needs root")
        os.chown(predictable, os.getuid() + 4321, -1)
    chosen = Path(config.keep_cupy_cache_off_unusable_home())
    assert os.environ["CUPY_CACHE_DIR"] == str(chosen)
    info = os.lstat(chosen)
    assert stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and stat.S_IMODE(info.st_mode) == 0o700
    assert (chosen == predictable) == (planted is None)
    assert chosen.parent == temp and not any(elsewhere.iterdir())


# ---- 2. bundle members are streamed with a cap ---------------------------------------------------


def test_a_bundle_member_claiming_gigabytes_is_refused_unread(cache_root, tmp_path):
    base = "v2/sm_90/tg_k-0123456789abcdef-nvrtc13.5"
    manifest = json.dumps({"bundle_format": 1, "cache_format": 2, "entries": [
        {"metadata": base + ".json", "payload": base + ".cubin", "sha256": "0" * 64, "size": 100}]}).encode()
    huge = tarfile.TarInfo(base + ".cubin")
    huge.size = 3 * 2**30
    path = tmp_path / "bomb.tar.gz"
    with tarfile.open(path, "w:gz") as archive:
        listing = tarfile.TarInfo(bundle_module.MANIFEST_NAME)
        listing.size = len(manifest)
        archive.addfile(listing, io.BytesIO(manifest))
        archive.fileobj.write(huge.tobuf())  # the header only: reading the data would need 3 GiB
        archive.fileobj.write(b"\0" * 1024)
    started = time.monotonic()
    with pytest.raises(BundleError, match="holds 3221225472 bytes; the manifest lists 100"):
        import_bundle(DiskCache(cache_root), path)
    assert time.monotonic() - started < 5


def test_an_oversized_bundle_member_is_refused_and_nothing_is_imported(cache_root, tmp_path, monkeypatch):
    source = DiskCache(tmp_path / "source")
    stored_entry(source, request_for())
    path = tmp_path / "kernels.tar.gz"
    assert export_bundle(source, path) == 1
    monkeypatch.setattr(bundle_module, "MAX_MEMBER_BYTES", 8)
    with pytest.raises(BundleError, match=r"lists \d+ bytes, outside 1\.\.8"):
        import_bundle(DiskCache(cache_root), path)
    assert cache_files(cache_root, ".cubin") == []


# ---- 5. honest warm-up ----------------------------------------------------------------------------


@pytest.mark.nvrtc
def test_warmup_reports_what_it_could_not_store_and_the_cli_exits_1(tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv(dc.ENV_CACHE_DIR, str(blocker / "cache"))
    with pytest.warns(DiskCacheWarning):
        result = warmup(**SELECTION, arch="sm_90", registry=Registry(loader=no_loads))
    assert result.compiled == 2 and result.stored == 0 and len(result.not_stored) == 2
    assert all("cannot create files in the kernel cache" in n.reason for n in result.not_stored)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DiskCacheWarning)
        code = main(["warmup", "--arch", "sm_90", "--semiring", "max_plus", "--dtype", "float32",
                     "--op", "backward,backward_ordered_a", "--json"])
    out, err = capsys.readouterr()
    summary = json.loads(out)
    assert code == 1 and summary["stored"] == 0 and len(summary["not_stored"]) == 2
    assert "2 of 2 kernel builds were compiled but not stored" in err and "cannot create files" in err


def test_a_full_disk_is_reported_by_warmup_not_claimed_as_stored(cache_root, monkeypatch):
    def disk_full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    cache = DiskCache(cache_root)
    request = request_for()
    with pytest.warns(DiskCacheWarning, match="disk is full"):
        outcome = cache.get_or_build(request, lambda: compiled_for(request))
    assert outcome.compiled and not outcome.stored and "disk is full" in outcome.store_problem


def test_a_disabled_cache_makes_warmup_say_nothing_was_stored(cache_root, monkeypatch, capsys):
    monkeypatch.setenv(dc.ENV_DISABLE, "1")
    monkeypatch.setattr("tropical_gemm.jit.registry.compile_program",
                        lambda source, name, target, extra: compiled_for(request_for(), b"\x7fELF " + name.encode()))
    code = main(["warmup", "--arch", "sm_90", "--semiring", "max_plus", "--dtype", "float32", "--op", "backward"])
    _, err = capsys.readouterr()
    assert code == 1 and "disabled (TROPICAL_GEMM_DISABLE_DISK_CACHE)" in err


# ---- the CLI's frictions (issue 19) -----------------------------------------------------------------


def test_cache_list_into_a_closed_pipe_exits_quietly(cache_root):
    cache = DiskCache(cache_root)
    for i in range(50):
        stored_entry(cache, request_for(f"s{i}"))
    env = {**ENV, dc.ENV_CACHE_DIR: str(cache_root)}
    lister = subprocess.Popen([sys.executable, "-m", "tropical_gemm", "cache", "list"], env=env, cwd=REPO,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert lister.stdout is not None
    lister.stdout.close()  # like `| head -0`: the reader is gone before anything is written
    _, err = lister.communicate(timeout=120)
    assert lister.returncode == 0 and err == b""


def test_cache_clear_counts_entries_like_the_other_actions(cache_root, capsys):
    cache = DiskCache(cache_root)
    for source in ("a", "b", "c"):
        stored_entry(cache, request_for(source))
    assert main(["cache", "clear"]) == 0
    assert capsys.readouterr().out.startswith(f"removed 3 entries from {cache_root}")


def test_the_no_gpu_warmup_hint_shows_the_cli_flag(cache_root, monkeypatch, capsys):
    def no_gpu():
        raise RuntimeError("cudaErrorNoDevice")

    import importlib

    monkeypatch.setattr(importlib.import_module("tropical_gemm.jit.warmup"), "current_device", no_gpu)
    assert main(["warmup", "--semiring", "max_plus"]) == 1
    err = capsys.readouterr().err
    assert "--arch sm_90" in err and "arch='sm_90'" not in err


@pytest.mark.nvrtc
def test_an_unusable_cupy_cache_dir_does_not_stop_compiling(tmp_path):
    """NVRTC is loaded by our own binding, so CuPy's cache directory (which ``import cupy`` creates) is not needed."""
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    env = {**ENV, "CUPY_CACHE_DIR": str(blocker / "cupy"), dc.ENV_CACHE_DIR: str(tmp_path / "cache")}
    code = ("import sys, tropical_gemm.jit as jit\n"
            "print(jit.resolve_target('sm_90'), 'cupy' in sys.modules)\n")
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert run.stdout.split() == ["Target(kind='cubin',", "cc=90)", "False"], run.stdout + run.stderr


WARM_PROBE = """
import json
from jit_helpers import RecordingLoader, small_source
from tropical_gemm.jit import Registry, Target, compiler, make_spec
# The GPU's arch is known without NVRTC (as on a real GPU, from the device).
registry = Registry(loader=RecordingLoader(), source=small_source, target_for_device=lambda d: Target("cubin", 90))
registry.get_function(make_spec("forward", "max_plus", "float32"), 0)
print(json.dumps({**registry.stats(), "nvrtc_loaded": compiler.nvrtc_version.cache_info().currsize > 0}))
"""


@pytest.mark.nvrtc
def test_a_warm_start_takes_only_the_running_nvrtcs_entries(cache_root):
    env = {dc.ENV_CACHE_DIR: str(cache_root)}
    cold = run_python(WARM_PROBE, env)
    assert cold.returncode == 0, cold.stderr
    stamp = cache_root / f"v{dc.FORMAT_VERSION}" / "nvrtc-running"
    version, identity = stamp.read_text().splitlines()
    assert version == "%d.%d" % compiler.nvrtc_version() and identity == compiler.nvrtc_identity(loaded=True)
    warm = last_json_line(run_python(WARM_PROBE, env).stdout)
    # the record names the library this process would load: its version is known without loading NVRTC
    assert warm["disk_hits"] == 1 and warm["compiled"] == 0 and not warm["nvrtc_loaded"]
    for planted in ("99.9\n", f"99.9\n{identity}x\n"):  # no identity, or another library's: NVRTC is asked
        stamp.write_text(planted)
        warm = last_json_line(run_python(WARM_PROBE, env).stdout)
        assert warm["disk_hits"] == 1 and warm["compiled"] == 0 and warm["nvrtc_loaded"]
        assert stamp.read_text().splitlines() == [version, identity]  # and the record is mended


def test_only_a_process_without_nvrtc_trusts_the_recorded_version(cache_root, monkeypatch):
    probe = dataclasses.replace(request_for(), nvrtc_version=None)
    assert DiskCache(cache_root)._running(probe) == "%d.%d" % compiler.nvrtc_version()
    (cache_root / f"v{dc.FORMAT_VERSION}").mkdir(parents=True, exist_ok=True)
    (cache_root / f"v{dc.FORMAT_VERSION}" / "nvrtc-running").write_text("12.8\n")

    def unavailable():
        raise compiler.NvrtcUnavailableError("no NVRTC on this node")

    monkeypatch.setattr(compiler, "nvrtc_version", unavailable)
    assert DiskCache(cache_root)._running(probe) == "12.8"
