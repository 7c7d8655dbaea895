"""Modules that import each other import first too, in a fresh interpreter: no cycle leaves a name half-defined.

``engines.cuda_aux`` imported first loads ``engines.cuda``, whose
``boolean`` module took ``fold_dims`` from the half-initialised
``cuda_aux`` (ImportError); ``fold_dims`` now lives in
``engines.cuda.batching``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("module", ["tropical_gemm.engines.cuda_aux", "tropical_gemm.engines.cuda.boolean",
                                    "tropical_gemm.einsum.device_walk"])
def test_a_module_imports_first(module):
    done = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
