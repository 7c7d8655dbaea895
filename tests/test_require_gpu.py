"""``--require-gpu``: GPU tests skip with a reason by default, and fail with it under the option."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import gpu_unavailable_reason

GPU_TEST = "tests/test_errors.py::test_numpy_and_cupy_do_not_mix"


def run_pytest(*options: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", GPU_TEST, "-q", "-p", "no:cacheprovider", *options],
                          capture_output=True, text=True, timeout=300, cwd=Path(__file__).parent.parent)


def test_gpu_tests_skip_or_run_by_default():
    done = run_pytest("-rs")
    assert done.returncode == 0, done.stdout
    reason = gpu_unavailable_reason()
    assert ("1 skipped" in done.stdout and f"no CUDA GPU: {reason}" in done.stdout) if reason else "1 passed" in done.stdout


def test_require_gpu_fails_instead_of_skipping():
    done = run_pytest("--require-gpu")
    reason = gpu_unavailable_reason()
    if reason is None:
        assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout
    else:
        assert done.returncode == 1 and "1 error" in done.stdout, done.stdout  # failed in setup
        assert f"--require-gpu given, but no CUDA GPU: {reason}" in done.stdout
