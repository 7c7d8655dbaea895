"""The command line: warmup, cache info/list/clear/prune/export/import, demo wiring, --help."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import types

import pytest

from jit_helpers import REPO, cache_files
from tropical_gemm.cli import COMMANDS, main
from tropical_gemm.options import parse_size
from tropical_gemm.jit import cache as dc

WARMUP = ["warmup", "--arch", "sm_80,sm_90", "--semiring", "max_plus", "--dtype", "float32", "--op", "backward,backward_ordered_b"]


def run_cli(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.nvrtc
def test_warmup_that_selects_no_kernel_is_an_error(cache_root, capsys):
    """It printed "0 kernel builds" and exited 0: a warm-up that filled nothing passed for one that did."""
    assert main(["warmup", "--arch", "sm_90", "--semiring", "and_or", "--dtype", "float32", "--op", "forward"]) == 1
    assert ("no catalogue kernel matches --semiring and_or --dtype float32 --op forward (and_or's kernels have "
            "dtype bool") in capsys.readouterr().err


def test_warmup_then_info_and_list(cache_root, capsys):
    code, out, _ = run_cli(capsys, *WARMUP, "--json")
    assert code == 0
    summary = json.loads(out)
    assert summary["kernels"] == 2 and summary["builds"] == 4 and summary["cache_dir"] == str(cache_root)
    assert summary["compiled"] + summary["already_cached"] == 4

    code, out, _ = run_cli(capsys, "cache", "info", "--json")
    info = json.loads(out)
    assert code == 0 and info["entries"] == 4 and set(info["targets"]) == {"sm_80", "sm_90"}
    assert info["bytes"] == sum(p.stat().st_size for p in cache_files(cache_root, ".cubin")) + \
        sum(p.stat().st_size for p in cache_files(cache_root, ".json"))

    code, out, _ = run_cli(capsys, "cache", "list", "--json")
    listing = json.loads(out)
    assert code == 0 and len(listing) == 4
    assert {e["name"] for e in listing} == {"tg_backward_max_plus_f32", "tg_backward_ordered_b_max_plus_f32"}

    code, out, _ = run_cli(capsys, "cache", "info")
    assert code == 0 and "entries:     4" in out and "sm_80" in out


@pytest.mark.nvrtc
def test_export_clear_import_prune(cache_root, tmp_path, capsys):
    assert run_cli(capsys, *WARMUP)[0] == 0
    bundle = tmp_path / "bundle.tar.gz"
    code, out, _ = run_cli(capsys, "cache", "export", str(bundle), "--arch", "sm_90")
    assert code == 0 and "exported 2 entries" in out

    code, out, _ = run_cli(capsys, "cache", "clear")
    assert code == 0 and cache_files(cache_root, ".cubin") == []

    code, out, _ = run_cli(capsys, "cache", "import", str(bundle))
    assert code == 0 and "imported 2 verified entries" in out
    assert [p.parent.name for p in cache_files(cache_root, ".cubin")] == ["sm_90", "sm_90"]

    code, out, _ = run_cli(capsys, "cache", "prune", "--max-bytes", "0", "--json")
    assert code == 0 and json.loads(out)["removed"] == 2 and cache_files(cache_root, ".cubin") == []


def test_errors_are_one_line_and_exit_1(cache_root, tmp_path, capsys):
    with pytest.raises(SystemExit) as usage_error:  # argparse's: it names the option
        main(["warmup", "--arch", "hopper"])
    assert usage_error.value.code == 2 and "argument --arch: cannot read 'hopper'" in capsys.readouterr().err
    code, _, err = run_cli(capsys, "warmup", "--arch", "sm_90", "--semiring", "plus_plus")
    assert code == 1 and "plus_plus" in err and "Traceback" not in err
    code, _, err = run_cli(capsys, "cache", "import", str(tmp_path / "missing.tar.gz"))
    assert code == 1 and "missing.tar.gz: cannot open it (No such file or directory)" in err


def test_disabled_cache_is_reported(cache_root, monkeypatch, capsys):
    monkeypatch.setenv(dc.ENV_DISABLE, "1")
    code, out, _ = run_cli(capsys, "cache", "info", "--json")
    assert code == 0 and json.loads(out)["enabled"] is False and json.loads(out)["cache_dir"] is None
    code, _, err = run_cli(capsys, "cache", "clear")
    assert code == 1 and "disabled" in err


def test_demo_is_wired_to_tropical_gemm_demo(monkeypatch, capsys):
    seen = {}

    def add_demo_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--size", type=int, default=4)

    def run_demo(args: argparse.Namespace) -> int:
        seen["size"] = args.size
        return 7

    fake = types.ModuleType("tropical_gemm.demo")
    fake.add_demo_arguments, fake.run_demo = add_demo_arguments, run_demo
    monkeypatch.setitem(sys.modules, "tropical_gemm.demo", fake)
    # "from . import demo" reads the package's attribute first: a test that ran the real demo left it there
    monkeypatch.delattr(sys.modules["tropical_gemm"], "demo", raising=False)
    assert main(["demo", "--size", "9"]) == 7 and seen == {"size": 9}


def test_other_commands_do_not_import_the_demo(cache_root, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "tropical_gemm.demo", None)  # importing it would fail
    assert run_cli(capsys, "cache", "info")[0] == 0


@pytest.mark.parametrize("argv", [[], ["warmup"], ["cache"], ["cache", "info"], ["cache", "list"],
                                  ["cache", "clear"], ["cache", "prune"], ["cache", "export"], ["cache", "import"],
                                  ["demo"]])
def test_every_command_has_help(argv, capsys, monkeypatch):
    fake = types.ModuleType("tropical_gemm.demo")
    fake.add_demo_arguments = lambda parser: None
    fake.run_demo = lambda args: 0
    monkeypatch.setitem(sys.modules, "tropical_gemm.demo", fake)
    with pytest.raises(SystemExit) as exit_:
        main([*argv, "--help"])
    assert exit_.value.code == 0
    assert "usage: tropical-gemm" in capsys.readouterr().out


def test_python_dash_m_runs_the_cli(cache_root):
    result = subprocess.run([sys.executable, "-m", "tropical_gemm", "cache", "info", "--json"], cwd=REPO,
                            capture_output=True, text=True, env=dict(os.environ))
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["cache_dir"] == str(cache_root)


def test_commands_are_listed_once():
    names = [c.name for c in COMMANDS]
    assert len(names) == len(set(names)) and {"warmup", "cache", "demo"} <= set(names)


@pytest.mark.parametrize("text, expected", [("0", 0), ("1536", 1536), ("2K", 2048), ("1.5M", 1572864),
                                            ("3G", 3 * 1024**3), ("20MiB", 20 * 1024**2), ("7kb", 7168)])
def test_sizes_parse(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["", "M", "ten", "-1", "5X"])
def test_bad_sizes_are_rejected(text):
    with pytest.raises(argparse.ArgumentTypeError):
        parse_size(text)
