"""Hostile trials of issue 35, part 1: the CPU kernel cache, directories, nested JSON, the smaller points.

Each test is one trial of one family (its ``hostile`` marker names the
family); ``benchmarks/hostile_trials.py`` runs them all and counts trials and
failures per family.  The planted pickle's payload creates a marker
directory: harmless, and visible if it ever runs.  Any new cache layer must
pass these.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle
import shutil
import stat
import warnings
from pathlib import Path

import numpy as np
import pytest

from jit_helpers import last_json_line, run_python
from test_hostile_cache import FOREIGN_UID, IS_ROOT, compiled_for, request_for, stored_entry
from tropical_gemm.cli import main
from tropical_gemm.jit import DiskCacheWarning
from tropical_gemm.jit.cache import DiskCache

needs_root = pytest.mark.skipif(not IS_ROOT, reason="making a path owned by another user needs root (chown)")
DEEP_JSON = b"[" * 5000 + b"]" * 5000


# ---- CPU kernel cache --------------------------------------------------------------------------

MATMUL = """
    import json, os
    os.umask(0o{umask})
    import numpy as np, tropical_gemm as tg
    result = tg.matmul(np.ones((2, 2)), np.ones((2, 2)))
    print(json.dumps(dict(result=result.tolist())))
"""


class _Payload:
    """Unpickled, it creates ``marker``: the stand-in for arbitrary code."""

    def __init__(self, marker: Path) -> None:
        self.marker = str(marker)

    def __reduce__(self) -> tuple:
        return os.mkdir, (self.marker,)


def _sealed(data: bytes) -> bytes:
    """``data`` behind a well-formed seal (docs/jit.md's format), as an attacker able to write there could."""
    return b"tropical-gemm sealed sha256:%s size:%d\n" % (hashlib.sha256(data).hexdigest().encode(), len(data)) + data


def _plant(directory: Path, marker: Path, *, seal: bool) -> int:
    """Replace every file under ``directory`` by the payload's pickle (sealed where ``seal``); how many."""
    planted = 0
    for path in [p for p in directory.rglob("*") if p.is_file()]:
        payload = pickle.dumps(_Payload(marker))
        path.write_bytes(_sealed(payload) if seal and ".sealed." in path.name else payload)
        planted += 1
    return planted


def _run_matmul(root: Path, umask: str = "022") -> tuple[dict, str]:
    """A CPU product in a fresh process on numba's kernels: the cache on trial is theirs (the compiled
    extension, where built, has no cache to plant anything in)."""
    env = {"TROPICAL_GEMM_CACHE_DIR": str(root), "TROPICAL_GEMM_CPU_KERNELS": "numba"}
    done = run_python(MATMUL.format(umask=umask), env, timeout=300)
    assert done.returncode == 0, done.stderr
    return last_json_line(done.stdout), done.stderr


@pytest.fixture(scope="session")
def populated_cpu_cache(tmp_path_factory) -> Path:
    """A cache whose first use was one CPU product, under umask 000."""
    root = tmp_path_factory.mktemp("cpu") / "cache"
    _run_matmul(root, umask="000")
    return root


def _copy(populated: Path, tmp_path: Path) -> tuple[Path, Path]:
    root = tmp_path / "cache"
    shutil.copytree(populated, root, symlinks=True)
    root.chmod(0o700)  # a trusted root, whatever the first use made of it: the folders below are on trial
    return root, root / "numba-cpu"


def _assert_unharmed(root: Path, marker: Path, umask: str = "022") -> str:
    report, stderr = _run_matmul(root, umask)
    assert not marker.exists(), "the planted pickle ran"
    assert report["result"] == [[2.0, 2.0], [2.0, 2.0]]
    return stderr


@pytest.mark.hostile("cpu-cache")
def test_cpu_cache_created_private_under_umask_000(populated_cpu_cache):
    paths = [populated_cpu_cache, *populated_cpu_cache.rglob("*")]
    assert any(p.is_file() for p in paths)
    for path in paths:
        expected = 0o700 if path.is_dir() else 0o600
        assert stat.S_IMODE(os.lstat(path).st_mode) == expected, path


@pytest.mark.hostile("cpu-cache")
def test_cpu_cache_planted_pickle_in_a_world_writable_foreign_folder_never_runs(populated_cpu_cache, tmp_path):
    root, folder = _copy(populated_cpu_cache, tmp_path)
    marker = tmp_path / "payload-ran"
    assert _plant(folder, marker, seal=True)
    folder.chmod(0o777)
    if IS_ROOT:
        for path in [folder, *folder.rglob("*")]:
            os.lchown(path, FOREIGN_UID, FOREIGN_UID)
    stderr = _assert_unharmed(root, marker)
    assert stderr.count("DiskCacheWarning") == 1 and f"directory {folder}:" in stderr
    assert stat.S_IMODE(os.lstat(folder).st_mode) == 0o700 and os.lstat(folder).st_uid == os.geteuid()


@pytest.mark.hostile("cpu-cache")
def test_cpu_cache_folder_symlinked_outside_never_runs_what_is_there(populated_cpu_cache, tmp_path):
    root, folder = _copy(populated_cpu_cache, tmp_path)
    outside = tmp_path / "outside"
    shutil.move(folder, outside)
    outside.chmod(0o777)
    folder.symlink_to(outside, target_is_directory=True)
    marker = tmp_path / "payload-ran"
    planted = _plant(outside, marker, seal=True)
    stderr = _assert_unharmed(root, marker)
    assert f"directory {folder}: it is a symbolic link" in stderr.replace("\n", " ")
    assert not folder.is_symlink() and sum(p.is_file() for p in outside.rglob("*")) == planted


@pytest.mark.hostile("cpu-cache")
def test_cpu_cache_unsealed_pickle_in_our_own_folder_never_runs(populated_cpu_cache, tmp_path):
    root, folder = _copy(populated_cpu_cache, tmp_path)
    marker = tmp_path / "payload-ran"
    assert _plant(folder, marker, seal=False)
    stderr = _assert_unharmed(root, marker)
    assert "carries no seal" in stderr


@pytest.mark.hostile("cpu-cache")
def test_cpu_cache_file_that_no_longer_matches_its_seal_is_refused(cache_root):
    from tropical_gemm.jit.cache.files import Trust, UntrustedFile
    from tropical_gemm.jit.cache.sealed import read_sealed, write_sealed

    cache_root.mkdir(mode=0o700)
    path, trust = cache_root / "index.sealed.nbi", Trust.current()
    write_sealed(path, pickle.dumps({"overloads": 1}), trust)
    assert pickle.loads(read_sealed(path, 1024, trust)) == {"overloads": 1}
    raw = bytearray(path.read_bytes())
    raw[-2] ^= 1
    path.write_bytes(bytes(raw))
    with pytest.raises(UntrustedFile, match="does not match the digest"):
        read_sealed(path, 1024, trust)


# ---- directories under the root, checked on reads -----------------------------------------------


def _symlinked_outside(directory: Path, tmp_path: Path) -> Path:
    outside = tmp_path / "outside"
    shutil.move(directory, outside)
    directory.symlink_to(outside, target_is_directory=True)
    return directory


def _chmod(mode: int):
    def spoil(directory: Path, tmp_path: Path) -> Path:
        directory.chmod(mode)
        return directory
    return spoil


def _format_dir_world_writable(directory: Path, tmp_path: Path) -> Path:
    directory.parent.chmod(0o777)
    return directory.parent


def _foreign(directory: Path, tmp_path: Path) -> Path:
    os.lchown(directory, FOREIGN_UID, FOREIGN_UID)
    return directory


@pytest.mark.hostile("dirs-on-read")
@pytest.mark.parametrize("spoil", [
    _symlinked_outside, _chmod(0o770), _format_dir_world_writable, pytest.param(_foreign, marks=needs_root),
], ids=["target-symlinked-outside", "target-0770", "format-dir-0777", "target-foreign-owner"])
def test_an_untrusted_directory_is_not_read_and_named_once(cache_root, tmp_path, spoil):
    request = request_for()
    payload, _ = stored_entry(DiskCache(cache_root), request)
    bad = spoil(payload.parent, tmp_path)
    cache = DiskCache(cache_root)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert cache.lookup(request) is None and cache.lookup(request) is None
        assert cache.entries() == []
    named = [w for w in caught if issubclass(w.category, DiskCacheWarning)]
    assert len(named) == 1 and str(bad) in str(named[0].message)
    assert cache.get_or_build(request, lambda: compiled_for(request)).stored  # the write moves it aside
    assert stat.S_IMODE(os.lstat(bad).st_mode) == 0o700 and os.lstat(bad).st_uid == os.geteuid()
    assert cache.lookup(request) is not None


# ---- deeply nested JSON --------------------------------------------------------------------------


@pytest.fixture
def deep_entry(cache_root) -> tuple[Path, Path]:
    """Two stored entries; the first one's metadata replaced by 5000 nested arrays."""
    stored_entry(DiskCache(cache_root), request_for("second"))
    payload, meta = stored_entry(DiskCache(cache_root), request_for())
    meta.write_bytes(DEEP_JSON)
    return payload, meta


@pytest.mark.hostile("nested-json")
def test_deep_metadata_is_a_corrupt_entry_named_and_healed(deep_entry, cache_root, caplog):
    _, meta = deep_entry
    cache = DiskCache(cache_root)
    with caplog.at_level(logging.WARNING, logger="tropical_gemm.jit"):
        assert cache.lookup(request_for()) is None
    assert any(str(meta) in r.getMessage() for r in caplog.records)
    outcome = cache.get_or_build(request_for(), lambda: compiled_for(request_for()))
    assert outcome.stored and outcome.replaced_corrupt and cache.lookup(request_for()) is not None


@pytest.mark.hostile("nested-json")
@pytest.mark.parametrize("argv", [["cache", "list"], ["cache", "info"], ["cache", "prune", "--max-bytes", "0"]],
                         ids=["list", "info", "prune"])
def test_deep_metadata_leaves_the_cache_commands_working(deep_entry, argv, capsys):
    assert main(argv) == 0
    assert "Traceback" not in capsys.readouterr().err


@pytest.mark.hostile("nested-json")
def test_deep_metadata_leaves_export_working(deep_entry, tmp_path, capsys):
    assert main(["cache", "export", str(tmp_path / "out.tar.gz")]) == 0
    assert "exported 1 entries" in capsys.readouterr().out


@pytest.mark.hostile("nested-json")
def test_deep_metadata_leaves_prune_working(deep_entry):
    from tropical_gemm.jit import prune

    assert prune(2**40).removed == 1  # the unreadable metadata, as debris


@pytest.mark.nvrtc
@pytest.mark.hostile("nested-json")
def test_deep_metadata_leaves_compile_spec_and_warmup_working(cache_root):
    from tropical_gemm.jit import compile_spec, make_spec, warmup

    spec = make_spec("backward", "max_plus", "float32")
    first = compile_spec(spec, "sm_90")
    first.path.with_suffix(".json").write_bytes(DEEP_JSON)
    again = compile_spec(spec, "sm_90")
    assert again.compiled and again.stored and again.binary == first.binary
    again.path.with_suffix(".json").write_bytes(DEEP_JSON)
    result = warmup(semirings="max_plus", dtypes="float32", ops="backward", arch="sm_90")
    assert result.compiled == 1 and result.stored == 1


# ---- the smaller points ------------------------------------------------------------------------


@pytest.mark.hostile("smaller")
def test_disk_cache_warning_points_at_the_users_call(cache_root):
    from tropical_gemm.jit import prune

    cache_root.mkdir(mode=0o700)
    cache_root.chmod(0o777)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prune(2**40)
    [warning] = [w for w in caught if issubclass(w.category, DiskCacheWarning)]
    assert warning.filename == __file__


@pytest.mark.hostile("smaller")
def test_a_corrupt_entry_is_logged_once_per_build(cache_root, caplog):
    payload, _ = stored_entry(DiskCache(cache_root), request_for())
    payload.write_bytes(b"\x7fELF tampered")
    with caplog.at_level(logging.WARNING, logger="tropical_gemm.jit"):
        outcome = DiskCache(cache_root).get_or_build(request_for(), lambda: compiled_for(request_for()))
    assert outcome.stored
    assert sum("corrupt cache entry" in r.getMessage() for r in caplog.records) == 1


@pytest.mark.hostile("smaller")
@pytest.mark.parametrize("dtype", [">f4", ">f8", ">i4", ">i8"])
def test_a_big_endian_dtype_is_refused_naming_byte_order(dtype):
    import tropical_gemm as tg

    a = np.arange(4, dtype=dtype).reshape(2, 2)
    with pytest.raises(TypeError, match="big-endian.*byte order"):
        tg.matmul(a, a)
