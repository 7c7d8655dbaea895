"""The CPU kernels compiled ahead of time (the ``_native`` extension): built, chosen, safe to call and to fork.

Their results are checked bit for bit in test_cpu_engine.py, once per
instruction set this CPU supports.
"""

from __future__ import annotations

import importlib
import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap

import numpy as np
import pytest

import tropical_gemm as tg
from tropical_gemm.engines import cpu


def _has_cxx() -> bool:
    compiler = (sysconfig.get_config_var("CXX") or "c++").split()[0]
    return shutil.which(compiler) is not None


@pytest.fixture
def native():
    if not _has_cxx():
        pytest.skip("no C++ compiler here: the extension is not built, and numba serves (tested in test_cpu_engine.py)")
    from tropical_gemm.engines.cpu import _native

    return _native


def test_the_extension_is_built_where_a_compiler_is(native) -> None:
    """An install with a C++ compiler (the README's) builds it: a missing build would hide behind numba."""
    assert native.isa() in native.supported_isas()
    assert cpu.kernels_description() == f"{native.isa()} kernels of the compiled extension"


def test_every_product_but_int64_argmax_is_built(native) -> None:
    for value in ("float32", "float64", "int32", "int64"):
        for add, mul in (("max", "plus"), ("min", "plus"), ("max", "times"), ("max", "min"), ("min", "max"),
                         ("min", "times")):
            for sat in (False, True):
                for argmax in (False, True):
                    assert native.variant(value, add, mul, sat, argmax, "int32") is not None
        assert native.variant(value, "max", "plus", False, True, "int64") is None
    assert native.variant("float16", "max", "plus", False, False, "int32") is None


def test_int64_argmax_goes_to_numba(native) -> None:
    tile, scalars = cpu._tile(tg.get_semiring("max_plus"), False, np.dtype("float32"), True, np.dtype("int64"))
    assert type(tile).__module__.startswith("numba") and len(scalars) == 3


def test_bad_arguments_are_errors_not_crashes(native) -> None:
    code = native.variant("float32", "max", "plus", False, True, "int32")
    a, b = np.ones((4, 3), np.float32), np.ones((3, 5), np.float32)
    out, idx = np.empty((4, 5), np.float32), np.empty((4, 5), np.int32)
    scalars = np.array([-np.inf, -np.inf, np.inf], np.float32).tobytes()
    native.tile(code, a, b, out, idx, 0, 4, 0, 5, scalars)
    assert (out == 2).all() and (idx == 0).all()
    bad = [
        (code, a, b, out, idx, 0, 5, 0, 5, scalars),                   # rows past C
        (code, a, b, out, idx, 2, 1, 0, 5, scalars),                   # empty range backwards
        (code, a, b.T.copy(), out, idx, 0, 4, 0, 5, scalars),          # B's shape does not fit
        (code, a.astype(np.float64), b, out, idx, 0, 4, 0, 5, scalars),  # wrong item size
        (code, a, b, out[:, ::2], idx, 0, 4, 0, 3, scalars),          # C not contiguous
        (code, a, b, out, idx.astype(np.int64), 0, 4, 0, 5, scalars),  # argmax of the wrong type
        (code, a, b, out, idx, 0, 4, 0, 5, scalars[:8]),               # scalars cut short
        (999, a, b, out, idx, 0, 4, 0, 5, scalars),                    # no such variant
    ]
    for args in bad:
        with pytest.raises(ValueError):
            native.tile(*args)
    with pytest.raises(ValueError, match="read-only"):  # numpy refuses a writable buffer of a read-only C
        native.tile(code, a, b, np.broadcast_to(out, out.shape), idx, 0, 4, 0, 5, scalars)
    with pytest.raises(ValueError, match="no kernels built for"):
        native.use_isa("sse1")
    k32, g, ga, gb = idx, out, np.zeros((4, 3), np.float32), np.zeros((3, 5), np.float32)
    routes = np.full((4, 5), 3, np.uint8)
    backward_bad = [
        (native.scatter, (2, k32, g, g, routes, ga, gb)),                     # an integer code
        (native.scatter, (0, k32, g, g, routes, gb, ga)),                     # gradients swapped
        (native.gather, (0, k32, a, b, out, out[:, ::2])),                    # b_won not contiguous
        (native.gather, (4, k32, a, b, out, out)),                            # int64 argmax code, int32 argmax
        (native.backward_products, (0, True, 2, 0, 4, k32, g, a, b, ga)),     # no such side
        (native.backward_products, (0, True, 0, 0, 5, k32, g, a, b, ga)),     # rows past grad_a
        (native.backward_products, (1, False, 1, 0, 5, k32, g, a, b, gb)),    # float64 code, float32 arrays
    ]
    for function, args in backward_bad:
        with pytest.raises(ValueError):
            function(*args)


def test_the_kernel_setting_is_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(cpu.ENV_KERNELS, "fortran")
    cpu._native_kernels.cache_clear()
    try:
        with pytest.raises(ValueError, match="TROPICAL_GEMM_CPU_KERNELS='fortran'.*'native'.*'numba'"):
            tg.matmul(np.ones((2, 2)), np.ones((2, 2)))
    finally:
        monkeypatch.undo()
        cpu._native_kernels.cache_clear()


def _run(script: str, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], capture_output=True, text=True,
                          timeout=120, env={**os.environ, **env})


def test_a_cold_process_never_imports_numba(native, cache_root) -> None:
    """Every semiring, dtype and argmax with an empty cache: served at once, nothing compiled."""
    done = _run("""
        import sys, numpy as np, tropical_gemm as tg
        for semiring in ("max_plus", "min_plus", "max_mul", "max_min", "min_max"):
            for dtype in ("float32", "float64", "int32", "int64"):
                a = np.arange(12).reshape(3, 4).astype(dtype)
                for argmax in (False, True):
                    tg.matmul(a, a.T, semiring, argmax=argmax)
        print("numba" in sys.modules)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False"]
    assert not cache_root.exists() or not any(cache_root.rglob("*"))


def test_fork_after_a_threaded_product_gives_a_working_child() -> None:
    """The child inherits the thread pool's object but not its threads: it must start its own."""
    done = _run("""
        import os, numpy as np, tropical_gemm as tg
        from tropical_gemm.engines import cpu
        cpu.set_num_threads(2)
        a = np.random.default_rng(0).standard_normal((300, 300)).astype("float32")
        want = tg.matmul(a, a, "max_plus", argmax=True)
        pid = os.fork()
        if pid == 0:
            got = tg.matmul(a, a, "max_plus", argmax=True)
            os._exit(0 if all((g == w).all() for g, w in zip(got, want)) else 3)
        _, status = os.waitpid(pid, 0)
        print(os.waitstatus_to_exitcode(status))
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["0"]


def test_cache_tools_count_and_remove_numba_kernels(cache_root, capsys) -> None:
    """numba's CPU kernels in the cache show in ``cache info`` and ``cache list``, and ``cache clear`` removes them."""
    import json

    from tropical_gemm.cli import main
    from tropical_gemm.engines.cpu import numba_cache, numba_files

    assert numba_files.SUBDIR == numba_cache.SUBDIR
    done = _run("""
        import numpy as np, tropical_gemm as tg
        tg.matmul(np.ones((3, 4)), np.ones((4, 2)), "max_min", argmax=True)
    """, TROPICAL_GEMM_CPU_KERNELS="numba", TROPICAL_GEMM_CACHE_DIR=str(cache_root))
    assert done.returncode == 0, done.stderr
    assert main(["cache", "info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["targets"][numba_files.TARGET]["entries"] == 1 == info["entries"]
    assert main(["cache", "list", "--json"]) == 0
    (listed,) = json.loads(capsys.readouterr().out)
    assert listed["target"] == numba_files.TARGET and listed["path"].endswith(".nbc")
    assert main(["cache", "clear"]) == 0
    assert "removed 1 entries" in capsys.readouterr().out
    assert not (cache_root / numba_files.SUBDIR).exists()
    assert main(["cache", "info", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["entries"] == 0


def test_cache_prune_removes_the_least_recently_used_of_gpu_entries_and_cpu_kernels(cache_root, capsys) -> None:
    """One budget for both kinds; a CPU kernel goes with all its variants, its index first."""
    import json

    from tropical_gemm import jit
    from tropical_gemm.cli import main
    from tropical_gemm.engines.cpu import numba_files

    done = _run("""
        import numpy as np, tropical_gemm as tg
        tg.matmul(np.ones((3, 4)), np.ones((4, 2)), "max_min", argmax=True)
        tg.matmul(np.ones((3, 4), np.float32), np.ones((4, 2), np.float32), "max_min", argmax=True)
        tg.matmul_backward(np.ones((3, 2)), np.ones((3, 4)), np.ones((4, 2)), np.zeros((3, 2), np.int32), "max_min")
    """, TROPICAL_GEMM_CPU_KERNELS="numba", TROPICAL_GEMM_CACHE_DIR=str(cache_root))
    assert done.returncode == 0, done.stderr
    cpu = sorted(numba_files.kernels(cache_root), key=lambda k: -k.variants)
    assert [k.variants for k in cpu] == [2, 1]  # the tile function (two dtypes) and the backward's scatter
    gpu = jit.compile_spec(jit.make_spec("backward", "max_plus", "float32"), "sm_90")
    # Oldest first: the tile function, then the GPU entry, then the scatter.
    for age, paths in ((300, [f.path for f in cpu[0].files]), (200, [gpu.path, gpu.path.with_suffix(".json")]),
                       (100, [f.path for f in cpu[1].files])):
        for path in paths:
            os.utime(path, (os.path.getatime(path), os.path.getmtime(path) - age))
    keep = cpu[1].size + gpu.path.stat().st_size + gpu.path.with_suffix(".json").stat().st_size
    assert main(["cache", "prune", "--max-bytes", str(keep), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"removed": 2, "freed_bytes": cpu[0].size, "remaining_bytes": keep}
    assert not any(f.path.exists() for f in cpu[0].files) and all(f.path.exists() for f in cpu[1].files)
    assert gpu.path.exists()
    assert main(["cache", "prune", "--max-bytes", "0", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["remaining_bytes"] == 0
    assert numba_files.kernels(cache_root) == [] and not gpu.path.exists()


def test_cache_clear_removes_a_link_in_numbas_place_without_following_it(tmp_path) -> None:
    from tropical_gemm.engines.cpu import numba_files

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "keep.nbc").write_bytes(b"x")
    root = tmp_path / "cache"
    root.mkdir()
    (root / numba_files.SUBDIR).symlink_to(elsewhere)
    assert numba_files.summary(root) == {"entries": 0, "bytes": 0}
    assert numba_files.clear(root) == 0
    assert not os.path.lexists(root / numba_files.SUBDIR) and (elsewhere / "keep.nbc").exists()


@pytest.mark.parametrize("kinds", ["native", "numba"])
def test_warmup_prepares_cpu_kernels(cache_root, capsys, monkeypatch, kinds) -> None:
    """``warmup --device cpu``: nothing to do with the extension; numba's kernels compiled into the cache without it."""
    import json

    from tropical_gemm.cli import main

    if kinds == "native" and not _has_cxx():
        pytest.skip("no C++ compiler here: the extension is not built")
    # The module the CLI imports now: a test that re-imports the package leaves another one in sys.modules.
    cpu = importlib.import_module("tropical_gemm.engines.cpu")
    monkeypatch.setenv(cpu.ENV_KERNELS, kinds)
    cpu._native_kernels.cache_clear()
    cpu._native_variant.cache_clear()
    if kinds == "numba":  # kernels an earlier test loaded are in memory: this cache would get no file
        cpu._kernels().tile_function.cache_clear()
    try:
        assert main(["warmup", "--device", "cpu", "--semiring", "max_min", "--dtype", "float64", "--json"]) == 0
    finally:
        monkeypatch.undo()
        cpu._native_kernels.cache_clear()
        cpu._native_variant.cache_clear()
    summary = json.loads(capsys.readouterr().out)
    assert summary["products"] == 2
    if kinds == "numba":
        assert summary["numba_kernels"] == 2 and summary["kernels"].startswith("numba ")
        assert len(list((cache_root / "numba-cpu").rglob("*.nbc"))) == 2
    else:
        assert summary["numba_kernels"] == 0 and summary["kernels"].endswith("kernels of the compiled extension")
        assert not cache_root.exists()
    assert main(["warmup", "--device", "cpu", "--dtype", "float16"]) == 1
    assert "float16 and bfloat16 use float32's" in capsys.readouterr().err


def test_warmup_prepares_every_semiring_with_its_own_dtypes(cache_root, capsys) -> None:
    """``warmup --device cpu`` with no --semiring includes and_or, whose kernels take bool and uint8 (not a traceback)."""
    import json

    from tropical_gemm.cli import main

    assert main(["warmup", "--device", "cpu", "--dtype", "int32,bool", "--json"]) == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["products"] == 2 * len(tg.semirings())  # int32 for the ordered ones, bool for and_or
    assert main(["warmup", "--device", "cpu", "--semiring", "and_or", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["products"] == 4  # bool and uint8, with and without argmax
    assert main(["warmup", "--device", "cpu", "--semiring", "and_or", "--dtype", "float32"]) == 1
    assert "and_or takes the dtypes bool, uint8" in capsys.readouterr().err


def test_panels_match_numbas(native) -> None:
    """test_cpu_engine.py's ragged shapes sit around numba's panel edges: the extension must share them."""
    from tropical_gemm.engines.cpu import kernels

    assert (native.KB, native.NB, native.KB_ARGMAX, native.NB_ARGMAX) == (
        kernels.KB, kernels.NB, kernels.KB_ARGMAX, kernels.NB_ARGMAX)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("index", ["int32", "int64"])
@pytest.mark.parametrize("semiring", ["max_plus", "min_plus", "max_mul", "max_min"])
def test_the_native_backward_routes_every_gradient_bit_for_bit(native, dtype, index, semiring) -> None:
    """Both sides of the extension's plus/times backward and its gather and scatter, against the scalar reference:
    bands on two threads, strided and transposed operands, no winner (-1), ±inf and NaN."""
    from reference import assert_same_bits, reference_backward

    rng = np.random.default_rng(17)
    m, k, n = 181, 23, 183  # enough entries for two threads' bands
    a = rng.standard_normal((m, 2 * k)).astype(dtype)[:, ::2]  # strided columns
    b = rng.standard_normal((n, k)).astype(dtype).T              # a transposed view
    a[0, :3], b[:2, 1], a[2, 4] = np.inf, -np.inf, np.nan
    grad_c = rng.standard_normal((m, n)).astype(dtype)
    argmax = rng.integers(-1, k, (m, n)).astype(index)
    argmax[:, 5] = 3  # many terms into one cell of each gradient: their order shows in the float bits
    cpu.set_num_threads(2)
    try:
        got = tg.matmul_backward(grad_c, a, b, argmax, semiring)
    finally:
        cpu.set_num_threads(None)
    for g, w in zip(got, reference_backward(grad_c, a, b, argmax, semiring), strict=True):
        assert_same_bits(g, w)
