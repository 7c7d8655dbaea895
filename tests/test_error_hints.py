"""The errors a new user meets first say what is wrong and what to do about it."""

from __future__ import annotations

import sys
import warnings

import numpy as np
import pytest

import tropical_gemm as tg
from conftest import gpu_unavailable_reason
from tropical_gemm.jit import DiskCacheWarning
from tropical_gemm.jit.compiler import CompiledKernel, Target
from tropical_gemm.jit.cache import ENV_CACHE_DIR, BuildRequest, DiskCache


class GpuArray:
    """What a GPU array from any library looks like to the dispatcher: a CUDA array interface."""

    __cuda_array_interface__ = {"shape": (2, 2), "typestr": "<f4", "data": (1 << 20, False), "version": 3}


@pytest.mark.skipif(gpu_unavailable_reason() is None, reason="needs a machine without a usable GPU")
def test_gpu_arrays_without_a_gpu_say_so_and_what_to_check():
    with pytest.raises(RuntimeError) as raised:
        tg.matmul(GpuArray(), GpuArray(), "max_plus")
    message = str(raised.value)
    assert message.startswith("a GPU array (test_error_hints.GpuArray) was passed, but CuPy finds no usable CUDA GPU (")
    for hint in ("nvidia-smi", "CUDA_VISIBLE_DEVICES", "pass numpy arrays", "python -m tropical_gemm info"):
        assert hint in message


def test_gpu_arrays_without_cupy_name_the_extra_to_install(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", None)
    with pytest.raises(RuntimeError, match=r"CuPy is not installed: pip install 'tropical-gemm-jit\[cuda\]'"):
        tg.matmul(GpuArray(), GpuArray(), "max_plus")


def test_mixing_numpy_and_gpu_arrays_says_how_to_move_them():
    with pytest.raises(TypeError, match=r"cannot mix host \(numpy\) and device.*cupy.asarray or cupy.asnumpy"):
        tg.matmul(np.ones((2, 2), "f4"), GpuArray(), "max_plus")


def test_an_unwritable_cache_names_the_variable_that_moves_it(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("a file where the cache directory should be")
    target = Target("cubin", 90)
    request = BuildRequest(name="tg_hint", source="x", target=target, nvrtc_version=(13, 5), package_version="0")
    compiled = CompiledKernel(b"\x7fELF", target, target.options, (13, 5), 0.1, "")
    cache = DiskCache(blocker / "cache")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        outcome = cache.get_or_build(request, lambda: compiled)
    assert outcome.compiled and not outcome.stored and outcome.binary == b"\x7fELF"
    (warning,) = [w for w in caught if w.category is DiskCacheWarning]
    message = str(warning.message)
    assert message.startswith(f"cannot create files in the kernel cache {blocker / 'cache'} (")
    assert message.endswith(f"stay in memory for this process. Set {ENV_CACHE_DIR} to a writable directory "
                            "with free space to cache them")
