"""Hostile trials of issue 35, part 2: bundles, special files, pickled errors, the CLI's options.

As in part 1, each test is one trial of the family its ``hostile`` marker
names.  Bundles are refused in a fresh interpreter, where the growth of its
peak memory can be measured.
"""

from __future__ import annotations

import importlib
import inspect
import io
import os
import pickle
import pkgutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

import hostile_bundles
import tropical_gemm
from jit_helpers import REPO, last_json_line, run_python
from tropical_gemm.cli import main

# ---- bundles: bounded before they are read ------------------------------------------------------

IMPORT = """
    import json, resource, sys, time
    from pathlib import Path
    from tropical_gemm.jit.bundle import BundleError, import_bundle
    from tropical_gemm.jit.cache import DiskCache

    cache = DiskCache(Path({root!r}))
    assert cache.writable
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    try:
        import_bundle(cache, Path({bundle!r}))
        error = None
    except BundleError as exc:
        error = str(exc)
    seconds = time.perf_counter() - started
    grew = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    print(json.dumps({{"seconds": seconds, "grew_mib": grew, "error": error}}))
"""

BUILDERS = {
    "pax-header-300MiB": lambda path: hostile_bundles.extended_header_bomb(path, tarfile.XHDTYPE),
    "gnu-long-name-300MiB": lambda path: hostile_bundles.extended_header_bomb(path, tarfile.GNUTYPE_LONGNAME),
    "eight-members-of-256MiB": hostile_bundles.big_members,
    "200000-tiny-members": hostile_bundles.many_members,
    "manifest-5000-deep": hostile_bundles.deep_manifest,
}
REFUSALS = {
    "pax-header-300MiB": "a pax header of 314572800 bytes",
    "gnu-long-name-300MiB": "a GNU long name of 314572800 bytes",
    "eight-members-of-256MiB": "lists 268435456 bytes, outside",
    "200000-tiny-members": "is not listed in the manifest",
    "manifest-5000-deep": "tropical-gemm-bundle.json is nested too deeply",
}


@pytest.fixture(scope="session")
def hostile_bundle_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("bundles")


@pytest.mark.hostile("bundle-bounds")
@pytest.mark.parametrize("kind", list(BUILDERS))
def test_a_hostile_bundle_is_refused_within_1s_and_100MB(kind, hostile_bundle_dir, tmp_path):
    bundle = hostile_bundle_dir / f"{kind}.tar.gz"
    if not bundle.exists():
        BUILDERS[kind](bundle)
    try:
        done = run_python(IMPORT.format(root=str(tmp_path / "node"), bundle=str(bundle)), {}, timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("still importing after 60 s")
    assert done.returncode == 0, done.stderr[-2000:]
    report = last_json_line(done.stdout)
    assert report["error"] is not None and str(bundle) in report["error"] and REFUSALS[kind] in report["error"]
    assert report["seconds"] < 1 and report["grew_mib"] < 100, report
    assert not (tmp_path / "node" / "v2").exists() or not any((tmp_path / "node" / "v2").rglob("*.cubin"))


# ---- special files in place of a bundle ---------------------------------------------------------


def _cli(*argv: str, timeout: float = 30) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "tropical_gemm", *argv], capture_output=True, text=True,
                          timeout=timeout, env=env)


@pytest.mark.hostile("special-files")
@pytest.mark.parametrize("kind", ["dev-zero", "fifo", "directory"])
def test_cache_import_of_a_special_file_is_refused_at_once(kind, cache_root, tmp_path):
    path = {"dev-zero": Path("/dev/zero"), "fifo": tmp_path / "fifo", "directory": tmp_path}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    started = time.monotonic()
    try:
        done = _cli("cache", "import", str(path))
    except subprocess.TimeoutExpired:
        pytest.fail("cache import hangs")
    assert done.returncode == 1 and f"{path}: is not a regular file" in done.stderr, done.stderr
    assert time.monotonic() - started < 30


# ---- every public exception survives pickling ---------------------------------------------------


def _samples() -> dict[str, BaseException]:
    """One instance of each public exception, with every field it carries set."""
    from tropical_gemm.cli import CliError
    from tropical_gemm.graphs import GraphCaptureError
    from tropical_gemm.jit.bundle import BundleError
    from tropical_gemm.jit.cache.config import DiskCacheWarning
    from tropical_gemm.jit.cache.files import LocksUnsupported, LockTimeout, UntrustedFile
    from tropical_gemm.jit.compile_worker import BackgroundCompileError
    from tropical_gemm.jit.compiler import CompileError, NvrtcUnavailableError, UnsupportedArchError
    from tropical_gemm.jit.driver import CudaAfterForkError, DriverError
    from tropical_gemm.jit.nvrtc import NvrtcError, NvrtcNotFound
    from tropical_gemm.jit.registry import KernelLoadError
    from tropical_gemm.jit.warmup import NoGpuForArchError

    samples = [
        CliError("no GPU"), BundleError("bundle.tar.gz: bad"), DiskCacheWarning("not using the cache"),
        LockTimeout("/cache/v2/sm_90/k.lock"), LocksUnsupported("No locks available"), UntrustedFile(Path("/cache/v2/k.json"), "is a symbolic link"),
        CompileError("NVRTC failed", kernel="tg_k", target="sm_90", log="error: x", source="int x;",
                     options=("-arch=sm_90",)),
        NvrtcUnavailableError("pip install nvidia-cuda-nvrtc"), UnsupportedArchError("cannot read 'sm_9x'"),
        DriverError("cuModuleLoadData: CUDA_ERROR_INVALID_IMAGE"), NvrtcError("nvrtcCompileProgram", 6, "a log"),
        NvrtcNotFound("no libnvrtc.so"), KernelLoadError("refused tg_k"),
        NoGpuForArchError(RuntimeError("cupy.is_available() is False")),
        BackgroundCompileError("tg_k: CompileError: NVRTC failed"), CudaAfterForkError("forked after CUDA"),
        GraphCaptureError("graphed: <lambda> failed under capture: the current stream is capturing"),
    ]
    return {f"{type(e).__module__}.{type(e).__qualname__}": e for e in samples}


def _public_exceptions() -> set[str]:
    """Every exception class defined in a public module of the package."""
    found = set()
    for module_info in pkgutil.walk_packages(tropical_gemm.__path__, "tropical_gemm."):
        if any(part.startswith("_") for part in module_info.name.split(".")[1:]):
            continue
        module = importlib.import_module(module_info.name)
        for name, value in vars(module).items():
            if (inspect.isclass(value) and issubclass(value, BaseException) and not name.startswith("_")
                    and value.__module__ == module.__name__):
                found.add(f"{value.__module__}.{value.__qualname__}")
    return found


@pytest.mark.hostile("pickling")
def test_every_public_exception_has_a_pickling_trial():
    assert _public_exceptions() == set(_samples())


@pytest.mark.hostile("pickling")
@pytest.mark.parametrize("name", sorted(_samples()))
def test_a_public_exception_survives_a_pickle_round_trip(name):
    original = _samples()[name]
    for protocol in (2, pickle.HIGHEST_PROTOCOL):
        buffer = io.BytesIO()
        pickler = pickle.Pickler(buffer, protocol)
        # As in a process without dask: distributed registers tblib's reducer for every exception in
        # copyreg's global table, which would hide a class's own failure to pickle.
        pickler.dispatch_table = {}
        pickler.dump(original)
        copy = pickle.loads(buffer.getvalue())
        assert type(copy) is type(original) and str(copy) == str(original)
        assert {k: repr(v) for k, v in vars(copy).items()} == {k: repr(v) for k, v in vars(original).items()}


# ---- the CLI's options ---------------------------------------------------------------------------

ZEROS = "1" + "0" * 5000
CLI_CASES = {
    "max-bytes-inf": (["cache", "prune", "--max-bytes", "inf"], "argument --max-bytes"),
    "max-bytes-1e999": (["cache", "prune", "--max-bytes", "1e999"], "argument --max-bytes"),
    "max-bytes-5000-zeros": (["cache", "prune", "--max-bytes", ZEROS], "argument --max-bytes"),
    "max-bytes-nan": (["cache", "prune", "--max-bytes", "nan"], "argument --max-bytes: a size"),
    "max-bytes-negative": (["cache", "prune", "--max-bytes", "-1"], "argument --max-bytes"),
    "demo-degree-negative": (["demo", "--nodes", "4", "--degree", "-1"], "argument --degree"),
    "demo-degree-nan": (["demo", "--nodes", "4", "--degree", "nan"], "argument --degree"),
    "demo-seed-negative": (["demo", "--nodes", "4", "--seed", "-1"], "argument --seed"),
    "demo-nodes-zero": (["demo", "--nodes", "0"], "argument --nodes"),
    "demo-check-sources-negative": (["demo", "--nodes", "4", "--check-sources", "-1"], "argument --check-sources"),
    "bench-sizes-overflow": (["bench", "--device", "cpu", "--sizes", "99999999999"], "argument --sizes"),
    "bench-sizes-400-digits": (["bench", "--device", "cpu", "--sizes", "9" * 400], "argument --sizes"),
    "demo-seed-400-digits-negative": (["demo", "--nodes", "4", "--seed", "-" + "9" * 400], "argument --seed"),
    "warmup-workers-zero": (["warmup", "--arch", "sm_90", "--op", "backward", "--semiring", "max_plus",
                             "--dtype", "float32", "--workers", "0"], "argument --workers"),
    "arch-arabic-indic-zero": (["warmup", "--arch", "sm_9\u0660", "--op", "backward", "--semiring", "max_plus",
                                "--dtype", "float32"], "argument --arch"),
    "export-arch-arabic-indic-zero": (["cache", "export", "out.tar.gz", "--arch", "sm_9\u0660"], "argument --arch"),
    "bogus-option": (["--bogus"], "unrecognized arguments: --bogus"),
}


@pytest.mark.hostile("cli")
@pytest.mark.parametrize("case", list(CLI_CASES))
def test_a_bad_option_value_is_a_usage_error_naming_the_option(case, cache_root, capsys):
    argv, expected = CLI_CASES[case]
    with pytest.raises(SystemExit) as usage_error:
        main(argv)
    err = capsys.readouterr().err
    assert usage_error.value.code == 2 and expected in err and "Traceback" not in err, err
