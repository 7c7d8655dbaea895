"""Engines compute products on one kind of array; the public API picks one per call.

The choice is made from the arrays' type alone, without importing cupy, so
``import tropical_gemm`` and every CPU call stay free of GPU libraries.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from importlib import import_module
from types import ModuleType
from typing import Iterator

from .protocol import Engine

#: DLPack's device type for CUDA memory (kDLCUDA).
_DLPACK_CUDA = 2


def array_kind(x: object) -> str:
    """``"cuda"`` for device arrays (cupy, CUDA array interface, CUDA DLPack), else ``"cpu"``."""
    if type(x).__module__.split(".")[0] == "cupy" or hasattr(x, "__cuda_array_interface__"):
        return "cuda"
    dlpack_device = getattr(x, "__dlpack_device__", None)
    if dlpack_device is not None and dlpack_device()[0] == _DLPACK_CUDA:
        return "cuda"
    return "cpu"


def select_engine(*arrays: object) -> Engine:
    """The engine module for these arrays (an ``Engine``); mixing host and device arrays is a ``TypeError``."""
    kinds = {array_kind(x) for x in arrays}
    if len(kinds) > 1:
        described = ", ".join(f"{type(x).__module__}.{type(x).__name__}" for x in arrays)
        raise TypeError(
            f"cannot mix host (numpy) and device (cupy/CUDA) arrays in one call; got {described}. "
            "Move all operands to one side first (cupy.asarray or cupy.asnumpy)."
        )
    kind = kinds.pop()
    if kind == "cpu" and getattr(_capture, "reason", None):
        raise RuntimeError(f"{_capture.reason} captures GPU work only, but this product's operands are host "
                           "(numpy) arrays, whose product would run once, now, and never on a replay: pass "
                           "cupy arrays")
    if kind == "cuda":  # a child forked after CUDA started gets driver.CudaAfterForkError, before CuPy's own errors
        from ..jit import driver

        driver.check_not_forked()
    return import_module(f"{__name__}.{kind}")  # type: ignore[return-value]  # a module that is an Engine


#: Set while a CUDA graph captures on this thread (``device_only``): a host product there would be lost.
_capture = threading.local()


@contextmanager
def device_only(reason: str) -> Iterator[None]:
    """Refuse host (CPU engine) products on this thread for the block; ``reason`` names who asks."""
    outer = getattr(_capture, "reason", None)
    _capture.reason = reason
    try:
        yield
    finally:
        _capture.reason = outer


def cupy_module() -> ModuleType:
    """cupy, imported on first use (CPU-only installs never need it), or an error saying how to install it.

    The one place the library imports cupy for its engines and the torch bridge.  Not cached: once
    cupy is imported, ``import cupy`` is a dictionary lookup.
    """
    try:
        import cupy
    except ImportError as exc:  # depends on the install
        raise RuntimeError(
            "device arrays were passed but CuPy is not installed: pip install 'tropical-gemm-jit[cuda]'"
        ) from exc
    return cupy
