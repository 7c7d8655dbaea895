"""The engine's side of CuPy: arrays, the device they live on, and what launches ask of that device.

CuPy is imported on first use (``tropical_gemm.engines.cupy_module``), so
importing the engine costs no CuPy import.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

from ...jit import driver
from .. import cupy_module


def as_array(x: Any) -> Any:
    """A cupy array viewing ``x`` (cupy, CUDA array interface, or CUDA DLPack), no copy.

    Without a usable GPU, CuPy's own error here is a bare CUDA status (such as
    ``cudaErrorInsufficientDriver``), so it is replaced by one that says what
    happened and what to do; the check runs only once the conversion failed.
    """
    cupy = cupy_module()
    if isinstance(x, cupy.ndarray):
        return x
    try:
        if hasattr(x, "__cuda_array_interface__"):
            return cupy.asarray(x)
        return cupy.from_dlpack(x)
    except Exception as exc:
        if cupy.is_available():
            raise
        raise RuntimeError(
            f"a GPU array ({type(x).__module__}.{type(x).__name__}) was passed, but CuPy finds no usable CUDA GPU "
            f"({exc}). Check that nvidia-smi lists a GPU and that CUDA_VISIBLE_DEVICES does not hide it, "
            "or pass numpy arrays to compute on the CPU; 'python -m tropical_gemm info' shows what is usable"
        ) from exc


def empty(shape: tuple[int, ...], dtype: np.dtype, like: Any) -> Any:
    """A new array on ``like``'s GPU, which need not be the current device."""
    with like.device:
        return cupy_module().empty(shape, dtype=dtype)


def is_c_contiguous(x: Any) -> bool:
    return bool(x.flags.c_contiguous)


def may_share_memory(x: Any, y: Any) -> bool:
    return bool(cupy_module().may_share_memory(x, y))


def device_of(*arrays: Any) -> Any:
    """The one device all arrays live on; arrays on several devices are a ``ValueError``."""
    ids = {x.device.id for x in arrays}
    if len(ids) > 1:
        raise ValueError(f"all arrays must be on one GPU, got arrays on devices {sorted(ids)}")
    return cupy_module().cuda.Device(ids.pop())


@lru_cache(maxsize=None)
def sm_count(device_id: int) -> int:
    """One attribute query, through the driver: the torch path asks it without importing CuPy."""
    return driver.multiprocessor_count(device_id)


@lru_cache(maxsize=None)
def shared_limit(device_id: int) -> int:
    """The shared memory a block may opt into on the device (bytes): what the pipelined kernel's stages need."""
    return driver.attribute(device_id, driver.ATTRIBUTE_MAX_SHARED_PER_BLOCK_OPTIN)
