"""``tropical-gemm info`` and ``bench``: they work with and without a GPU, report why not, and parse as JSON."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys

import numba
import numpy as np
import pytest

import tropical_gemm as tg
from tropical_gemm.engines import cpu as cpu_engine
from conftest import gpu_unavailable_reason
from jit_helpers import REPO
from tropical_gemm.cli import COMMANDS, main
from tropical_gemm.jit import compiler
from tropical_gemm.jit import cache as dc
from tropical_gemm.progress import ProgressBar

CACHE_ACTIONS = ["info", "list", "clear", "prune", "export", "import"]


def cli(*argv: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m tropical_gemm ARGV`` in a fresh process, with the test's environment."""
    return subprocess.run([sys.executable, "-m", "tropical_gemm", *argv], cwd=REPO, capture_output=True,
                          text=True, env=dict(os.environ), timeout=timeout)


def cli_json(*argv: str) -> dict:
    done = cli(*argv, "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


# ---- info --------------------------------------------------------------------------------------


def test_info_json_reports_versions_engines_and_the_cache(cache_root):
    report = cli_json("info")
    assert report["tropical_gemm"] == tg.__version__
    assert report["packages"]["numpy"]["version"] == np.__version__
    assert report["nvrtc"] == {"version": "{}.{}".format(*compiler.nvrtc_version()),
                               "archs": [f"sm_{a}" for a in compiler.supported_archs()], "problem": None}
    cache = report["cache"]
    assert cache["cache_dir"] == str(cache_root) and cache["configured_by"] == dc.ENV_CACHE_DIR
    assert cache["entries"] == 0 and cache["writable"] and not cache["exists"]
    assert not cache_root.exists()  # info looks, it does not create
    engines = report["engines"]
    assert engines["cpu"]["usable"] and engines["cpu"]["detail"] == (
        f"{cpu_engine.kernels_description()} on {cpu_engine.num_threads()} threads")
    description = cpu_engine.kernels_description()
    assert description.endswith("kernels of the compiled extension") or description.startswith(f"numba {numba.__version__} ")
    reason = gpu_unavailable_reason()
    assert engines["cuda"]["usable"] is (reason is None)
    if reason is None:
        assert report["cuda"]["gpus"] and all(g["arch"].startswith("sm_") for g in report["cuda"]["gpus"])
    else:
        assert not report["cuda"]["gpus"] and engines["cuda"]["detail"] == report["cuda"]["problem"]


def test_info_text_lists_every_section(cache_root):
    done = cli("info")
    assert done.returncode == 0, done.stderr
    for expected in (f"tropical_gemm {tg.__version__}", f"numpy    {np.__version__}", "NVRTC      ",
                     f"cache      {cache_root} ({dc.ENV_CACHE_DIR})", "0 entries, 0 B, writable", "engines",
                     "  cpu   usable"):
        assert expected in done.stdout, done.stdout


@pytest.mark.nvrtc
def test_info_counts_cached_kernels_per_arch(cache_root):
    warmed = cli("warmup", "--arch", "sm_80", "--semiring", "max_plus", "--dtype", "float32", "--op", "backward,backward_ordered_b")
    assert warmed.returncode == 0, warmed.stderr
    cache = cli_json("info")["cache"]
    assert cache["entries"] == 2 and set(cache["targets"]) == {"sm_80"} and cache["targets"]["sm_80"]["entries"] == 2
    assert cache["bytes"] == cache["targets"]["sm_80"]["bytes"] > 0 and cache["exists"]


def test_info_names_the_variable_for_an_unwritable_cache(tmp_path, monkeypatch, capsys):
    blocker = tmp_path / "a-file"
    blocker.write_text("a file where a directory should be")
    monkeypatch.setenv(dc.ENV_CACHE_DIR, str(blocker / "cache"))
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "NOT writable" in out and "set TROPICAL_GEMM_CACHE_DIR to a writable directory" in out


def test_info_reports_a_bad_cache_variable_instead_of_failing(cache_root, monkeypatch, capsys):
    monkeypatch.setenv(dc.ENV_LOCK_TIMEOUT, "soon")
    assert main(["info", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert "TROPICAL_GEMM_CACHE_LOCK_TIMEOUT='soon' is not a number" in report["cache"]["problem"]


def test_info_without_nvrtc_says_which_wheels_to_install(cache_root, no_nvrtc_library, capsys):
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert "NVRTC      unavailable:" in out and "pip install nvidia-cuda-nvrtc cupy-cuda13x" in out


def test_info_without_cupy_says_how_to_install_it(cache_root, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "cupy", None)  # importing it now fails like a missing package
    assert main(["info", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["engines"]["cuda"] == {"usable": False, "detail":
                                         "cupy is not installed: pip install 'tropical-gemm-jit[cuda]'"}


@pytest.mark.parametrize("major, minor, kernels", [
    (9, 0, "cubin sm_90"),
    (99, 0, "PTX compute_{newest} (the driver compiles it at load)"),  # newer than any NVRTC
])
def test_info_lists_each_gpu_with_its_arch_and_kernel_binary(cache_root, monkeypatch, capsys, major, minor, kernels):
    """A pretend GPU: the runtime calls info makes are answered as CUDA would on that machine."""
    cupy = pytest.importorskip("cupy")
    properties = {"name": b"NVIDIA H100 80GB HBM3", "major": major, "minor": minor, "totalGlobalMem": 85 * 10**9}
    monkeypatch.setattr(cupy.cuda.runtime, "driverGetVersion", lambda: 13000)
    monkeypatch.setattr(cupy.cuda.runtime, "getDeviceCount", lambda: 1)
    monkeypatch.setattr(cupy.cuda.runtime, "getDeviceProperties", lambda device: properties)
    assert main(["info", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    expected = kernels.format(newest=max(compiler.supported_archs()))
    assert report["cuda"]["driver"] == "13.0" and report["cuda"]["problem"] is None
    assert report["cuda"]["gpus"] == [{"id": 0, "name": "NVIDIA H100 80GB HBM3", "arch": f"sm_{major}{minor}",
                                       "memory_bytes": 85 * 10**9, "kernels": expected}]
    assert report["engines"]["cuda"] == {"usable": True, "detail": f"1 GPU(s), NVRTC {report['nvrtc']['version']}"}
    assert main(["info"]) == 0
    assert f"  0  NVIDIA H100 80GB HBM3  sm_{major}{minor}  79.2 GiB  kernels: {expected}" in capsys.readouterr().out


# ---- bench -------------------------------------------------------------------------------------


def test_bench_on_the_cpu_measures_throughput_and_a_fresh_process(cache_root):
    report = cli_json("bench", "--device", "cpu", "--sizes", "32", "96")
    assert report["engine"] == "cpu" and report["unit"] == "G ops/s" and report["unit_scale"] == 1e9
    assert report["semiring"] == "max_plus" and report["dtype"] == "float32"
    assert report["versions"]["numpy"] == np.__version__ and report["tropical_gemm"] == tg.__version__
    assert [row["size"] for row in report["throughput"]] == [32, 96]
    for row in report["throughput"]:
        assert row["seconds"] > 0 and row["ops_per_second"] == pytest.approx(2 * row["size"] ** 3 / row["seconds"])
    assert [run["cache"] for run in report["startup"]] == ["cold", "warm"]  # on a cache of its own
    for run in report["startup"]:
        assert run["kernels_compiled"] == 0 and run["context_seconds"] == 0
        assert 0 < run["import_seconds"] < run["total_seconds"] < run["process_seconds"]
        assert run["total_seconds"] == pytest.approx(run["import_seconds"] + run["first_result_seconds"])
    assert not cache_root.exists()  # the user's cache is never the cold one


def test_bench_prints_a_table(cache_root):
    done = cli("bench", "--device", "cpu", "--sizes", "48")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"tropical_gemm {tg.__version__} bench: float32 max_plus on cpu")
    assert "G ops/s" in lines[2] and lines[3].split()[0] == "48"
    assert any(line.startswith("start-up of a fresh process") for line in lines)


def test_bench_auto_uses_the_gpu_exactly_when_one_is_usable(cache_root):
    report = cli_json("bench", "--sizes", "64")
    assert report["engine"] == ("cpu" if gpu_unavailable_reason() else "cuda")


def test_bench_on_cuda_without_a_gpu_is_an_error_naming_why(cache_root):
    reason = gpu_unavailable_reason()
    done = cli("bench", "--device", "cuda", "--sizes", "64")
    if reason is None:
        assert done.returncode == 0, done.stderr
    else:
        assert done.returncode == 1 and done.stderr.startswith("tropical-gemm: error: --device cuda, but ")
        assert done.stdout == ""


@pytest.mark.parametrize("sizes", [["0"], ["-3"], ["ten"]])
def test_bench_refuses_bad_sizes(sizes):
    done = cli("bench", "--sizes", *sizes)
    assert done.returncode == 2 and "--sizes" in done.stderr


def test_bench_plot_without_matplotlib_names_the_package_before_measuring(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    measured = []
    monkeypatch.setattr("tropical_gemm.bench.measure_throughput", lambda *args: measured.append(args))
    assert main(["bench", "--device", "cpu", "--plot", "out.png"]) == 1
    assert "tropical-gemm: error: --plot needs matplotlib, which is not installed: pip install matplotlib" in \
        capsys.readouterr().err
    assert measured == []


def test_bench_plot_into_a_missing_directory_is_refused_before_measuring(monkeypatch, capsys, tmp_path):
    """With matplotlib installed, the plot's OSError came after the whole measurement."""
    measured = []
    monkeypatch.setattr("tropical_gemm.bench.measure_throughput", lambda *args: measured.append(args))
    missing = tmp_path / "no-such-dir" / "bench.png"
    assert main(["bench", "--device", "cpu", "--plot", str(missing)]) == 1
    assert f"--plot {missing}: the directory {missing.parent} does not exist" in capsys.readouterr().err
    assert measured == []


def test_bench_plot_writes_a_png(tmp_path, cache_root):
    pytest.importorskip("matplotlib")
    path = tmp_path / "bench.png"
    done = cli("bench", "--device", "cpu", "--sizes", "32", "64", "--plot", str(path))
    assert done.returncode == 0, done.stderr
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"plot written to {path}" in done.stdout


@pytest.mark.gpu
def test_bench_on_cuda_compiles_on_a_cold_cache_and_reads_a_warm_one(cache_root):
    report = cli_json("bench", "--device", "cuda", "--sizes", "256", "1024")
    assert report["engine"] == "cuda" and report["unit"] == "T ops/s" and report["versions"]["nvrtc"]
    assert [row["size"] for row in report["throughput"]] == [256, 1024]
    cold, warm = report["startup"]
    assert cold["cache"] == "cold" and cold["kernels_compiled"] >= 1 and cold["context_seconds"] > 0
    assert warm["cache"] == "warm" and warm["kernels_compiled"] == 0 and warm["kernels_from_disk"] >= 1


# ---- help and progress -------------------------------------------------------------------------


@pytest.mark.parametrize("argv", [[c.name] for c in COMMANDS] + [["cache", a] for a in CACHE_ACTIONS])
def test_every_subcommand_has_help(argv):
    done = cli(*argv, "--help")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: tropical-gemm {' '.join(argv)}")


def test_info_and_bench_are_commands():
    assert {"info", "bench"} <= {c.name for c in COMMANDS}


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_the_progress_bar_shows_rate_and_time_left_on_a_terminal():
    terminal = Terminal()
    bar = ProgressBar(terminal, unit="kernel", description="warmup")
    for done in range(1, 5):
        bar.update(done, 4, f"kernel {done}")
    bar.finish()
    last = terminal.getvalue().rsplit("\r", 1)[-1]
    assert last.startswith("warmup: 100%") and "4/4 [" in last and "kernel/s" in last and last.endswith("kernel 4]\n")


def test_without_a_terminal_progress_is_a_line_every_few_seconds():
    pipe, now = io.StringIO(), [0.0]
    bar = ProgressBar(pipe, unit="kernel", description="warmup", interval=5.0, clock=lambda: now[0])
    for done in range(1, 21):  # one step a second
        now[0] = float(done)
        bar.update(done, 20, f"kernel {done}")
    bar.finish()
    lines = pipe.getvalue().splitlines()
    assert [line.split()[-1] for line in lines] == ["1", "6", "11", "16", "20"]
    assert lines[1].startswith("warmup:  30% 6/20 [00:06<00:14,  1.00kernel/s]")
    assert "\r" not in pipe.getvalue()
