"""The bridge between torch tensors and the engines: array views, CUDA streams and the allocator.

Tensors never leave their device and are never copied: CPU tensors reach the
numpy engine as ``.numpy()`` views, CUDA tensors reach the CUDA engine as
cupy views of their memory (or, in ``kernels``, as bare addresses, which
need no cupy import at all).  Kernels
are queued on PyTorch's current stream and every buffer the engine allocates
comes from PyTorch's caching allocator, so this glue adds no synchronisation
and no second memory pool grows beside PyTorch's.  cupy is imported the
first time a call needs array views.
"""

from __future__ import annotations

from contextlib import contextmanager
from functools import cache
from types import ModuleType
from typing import Any, Callable, Iterator, NamedTuple

import torch
from torch import Tensor

from ..engines import cpu as cpu_engine
from ..engines import cupy_module
from .validation import NUMPY_DTYPES

_cupy = cupy_module  # the one cupy import (tropical_gemm.engines.cupy_module)


def numpy_view(t: Tensor) -> Any:
    """The numpy array over a CPU tensor's memory."""
    # Inside an op the inputs still carry requires_grad, which .numpy() and
    # DLPack export refuse; detach() is a view, not a copy.
    return t.detach().numpy()


def cupy_view(t: Tensor) -> Any:
    """A cupy array over a CUDA tensor's memory, built from its pointer and strides.

    Not through DLPack: its stream handshake records an event and makes a
    stream wait on every import, which buys nothing here since the kernels
    already run on the tensor's stream.  The tensor is kept alive as the
    memory's owner.  Every step here is on the per-call path, so it asks
    torch for each property once.
    """
    cp = _cupy()
    shape = tuple(t.shape)
    dtype = NUMPY_DTYPES[t.dtype]
    if t.numel() == 0:
        return cp.empty(shape, dtype=dtype)
    itemsize = dtype.itemsize
    if t.is_contiguous():
        span, strides = t.numel() * itemsize, None
    else:
        stride = t.stride()
        span = (1 + sum((size - 1) * step for size, step in zip(shape, stride))) * itemsize
        strides = tuple(step * itemsize for step in stride)
    memory = cp.cuda.UnownedMemory(t.data_ptr(), span, t, t.get_device())
    return cp.ndarray(shape, dtype=dtype, memptr=cp.cuda.MemoryPointer(memory, 0), strides=strides)


def torch_allocator(nbytes: int) -> Any:
    """A cupy allocator that takes its memory from PyTorch's caching allocator.

    The block is a uint8 tensor kept alive by the cupy pointer; it belongs to
    PyTorch's current stream, which is the stream the kernels run on.
    """
    cp = _cupy()
    device_id = cp.cuda.runtime.getDevice()
    block = torch.empty(nbytes, dtype=torch.uint8, device=torch.device("cuda", device_id))
    return cp.cuda.MemoryPointer(cp.cuda.UnownedMemory(block.data_ptr(), nbytes, block, device_id), 0)


class _RawStream(NamedTuple):
    """A CUDA stream handle that speaks the CUDA stream protocol, for cupy to wrap."""

    handle: int

    def __cuda_stream__(self) -> tuple[int, int]:
        return 0, self.handle


@cache
def _cupy_stream(device_index: int, handle: int) -> Any:
    """The cupy view of one CUDA stream, made once per stream: cupy runs the kernels on it.

    cupy 14 deprecates ``ExternalStream`` for ``Stream.from_external``.
    """
    cp = _cupy()
    if hasattr(cp.cuda.Stream, "from_external"):
        return cp.cuda.Stream.from_external(_RawStream(handle))
    return cp.cuda.ExternalStream(handle, device_index)


def raw_stream(device_index: int) -> int:
    """The handle of PyTorch's current stream on a device, where the kernels go."""
    return torch._C._cuda_getCurrentRawStream(device_index)


def current_stream(device_index: int) -> Any:
    """cupy's view of PyTorch's current stream on a device, for launches on cupy views."""
    return _cupy_stream(device_index, raw_stream(device_index))


@contextmanager
def engine(device: torch.device) -> Iterator[tuple[Callable[[Tensor], Any], ModuleType]]:
    """Run an engine for tensors on ``device``: yields how a tensor becomes its array, and the engine.

    On CUDA the kernels go to PyTorch's current stream and any scratch memory
    the engine needs comes from PyTorch's allocator.
    """
    if device.type == "cpu":
        yield numpy_view, cpu_engine
        return
    if device.type != "cuda":
        raise ValueError(f"tropical matmul runs on cpu and cuda tensors, not on {device.type}")
    cp = _cupy()
    index = device.index
    with cp.cuda.Device(index), current_stream(index), cp.cuda.using_allocator(torch_allocator):
        yield cupy_view, cuda_engine()


@cache
def cuda_engine() -> ModuleType:
    """The CUDA engine module, imported with the first CUDA tensor (it loads the JIT, not cupy)."""
    from ..engines import cuda

    return cuda
