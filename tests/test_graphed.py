"""``tropical_gemm.graphed`` without a GPU: what it refuses before touching CuPy, and where it lives."""

from __future__ import annotations

import numpy as np
import pytest

import tropical_gemm as tg


def test_host_arrays_are_refused_with_the_fix():
    a = np.ones((4, 4), np.float32)
    with pytest.raises(TypeError, match=r"argument 1 is a host array \(numpy.ndarray\): pass cupy arrays"):
        tg.graphed(lambda x, y: tg.matmul(x, y), "max_plus", a)


def test_warmup_must_run_the_function_once():
    with pytest.raises(ValueError, match="warmup must be at least 1"):
        tg.graphed(lambda: None, warmup=0)


def test_graphed_is_public_and_imports_nothing_heavy():
    import subprocess
    import sys

    code = "import sys, tropical_gemm as tg; heavy = {'cupy', 'tropical_gemm.jit'} & set(sys.modules); " \
           "assert not heavy, heavy; assert 'graphed' in dir(tg) and tg.graphed is tg.graphs.graphed; print('ok')"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "ok"


def test_host_products_are_refused_inside_a_capture():
    """The guard a capture raises on this thread: a product on host arrays there would run once and be lost."""
    from tropical_gemm.engines import device_only

    a = np.ones((2, 2), np.float32)
    with device_only("graphed"), pytest.raises(RuntimeError, match="graphed captures GPU work only"):
        tg.matmul(a, a)
    assert tg.matmul(a, a).tolist() == [[2.0, 2.0], [2.0, 2.0]]  # and allowed again after it
