"""The engines run on torch tensors: forward and backward into buffers that torch allocates.

Shared by the custom ops (``ops``) and the eager path (``eager``).  The
engines are called directly, not through ``tropical_gemm.matmul``: the
operands are checked in torch's terms (``validation``) and the outputs are
new, so the core API's checks of the arrays would only repeat those, per
call.  On CUDA a product or backward that is one launch runs from the
engine's prepared launch for its signature, on the tensors' addresses;
others take array views through ``bridge``.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import torch
from torch import Tensor

from .. import api
from ..semirings import get_semiring
from ..shapes import product_shape
from . import bridge
from .validation import ENGINE_NAMES, FLOATS, argmax_torch_dtype, check_operands


def empty_outputs(a: Tensor, b: Tensor, semiring: str, with_argmax: bool) -> tuple[Tensor, Tensor | None]:
    """Checked operands' (values, argmax) buffers; shared by the real and fake kernels."""
    check_operands(a, b, semiring)
    shape = product_shape(tuple(a.shape), tuple(b.shape))
    out_shape = shape.out_shape  # passed unpacked: torch parses a tuple argument more slowly
    if not with_argmax:
        return a.new_empty(*out_shape), None
    return a.new_empty(*out_shape), a.new_empty(*out_shape, dtype=argmax_torch_dtype(shape.k))


def forward(a: Tensor, b: Tensor, semiring: str, with_argmax: bool) -> tuple[Tensor, Tensor | None]:
    """The product of checked operands, into tensors allocated by torch (so they live in its allocator)."""
    values, argmax = empty_outputs(a, b, semiring, with_argmax)
    run_product(a, b, values, argmax, semiring)
    return values, argmax


def run_product(a: Tensor, b: Tensor, values: Tensor, argmax: "Tensor | None", semiring: str) -> None:
    """Write ``a ⊗ b`` into ``values`` (and ``argmax``): one prepared launch where it can be, else array views."""
    if a.is_cuda:
        prepared = bridge.cuda_engine().prepare_product(a.shape, a.stride(), b.shape, b.stride(),
                                                        ENGINE_NAMES[a.dtype], semiring, argmax is not None,
                                                        a.get_device())
        if prepared is not None:
            argmax_address = None if argmax is None else argmax.data_ptr()
            # K slices' partials: torch's memory, freed in stream order after the launches that use it
            scratch = torch.empty(prepared.scratch_bytes, dtype=torch.uint8, device=a.device) \
                if prepared.scratch_bytes else None
            prepared.launch(a.data_ptr(), b.data_ptr(), values.data_ptr(), argmax_address,
                            bridge.raw_stream(prepared.device), 0 if scratch is None else scratch.data_ptr())
            return
    with bridge.engine(a.device) as (view, engine):
        engine.forward(view(a), view(b), get_semiring(semiring), view(values), None if argmax is None else view(argmax))


def prepare_backward(a: Tensor, b: Tensor, semiring: str, *, wait: bool = True) -> Any:
    """The engine's ``PreparedBackward`` for CUDA operands, or None where the backward takes array views.

    None also in deterministic mode, whose ordered kernels take array views,
    and, unless ``wait``, while its kernel still compiles in the background
    (the forward does not wait for it: the backward prepares itself).
    The backward's int32 argmax must be C-contiguous: callers check one they
    did not make.
    """
    if not (a.is_cuda and a.is_floating_point()) or torch.are_deterministic_algorithms_enabled():
        return None
    engine = bridge.cuda_engine()
    if not wait and engine.backward_compiling(ENGINE_NAMES[a.dtype], semiring, a.get_device()):
        return None
    return engine.prepare_backward(a.shape, a.stride(), b.shape, b.stride(), ENGINE_NAMES[a.dtype], semiring,
                                   a.get_device())


def backward(grad_c: Tensor, a: Tensor, b: Tensor, argmax: Tensor, semiring: str, prepared: Any = None
             ) -> tuple[Tensor, Tensor]:
    """The core ``matmul_backward`` of checked operands into gradients allocated by torch.

    Deterministic when torch is asked to be: the flag is read when the kernel
    runs, as torch's own kernels read it.  On CUDA the default mode is one
    launch on the tensors' addresses, ``prepared`` by the forward where it
    could be (the argmax is then the forward's own).
    """
    # empty_like takes less host time than torch.empty(shape, ...)
    grad_a = torch.empty_like(a, memory_format=torch.contiguous_format)
    grad_b = torch.empty_like(b, memory_format=torch.contiguous_format)
    deterministic = torch.are_deterministic_algorithms_enabled()
    if not deterministic and a.is_cuda:
        if prepared is None and argmax.dtype == torch.int32 and argmax.is_contiguous():
            prepared = prepare_backward(a, b, semiring)
        if prepared is not None:
            grad_c = grad_c.contiguous()  # the kernel reads it row-major; the name keeps a copy alive
            prepared.launch(grad_c.data_ptr(), a.data_ptr(), b.data_ptr(), argmax.data_ptr(), grad_a.data_ptr(),
                            grad_b.data_ptr(), bridge.raw_stream(prepared.device))
            return grad_a, grad_b
    with bridge.engine(a.device) as (view, _):
        api.matmul_backward(view(grad_c), view(a), view(b), view(argmax), semiring,
                            deterministic=deterministic, out=(view(grad_a), view(grad_b)))
    return grad_a, grad_b


def prefetch_backward(a: Tensor, semiring: str) -> None:
    """A forward that autograd will differentiate on CUDA: its backward kernels start compiling now.

    They compile in the background beside the forward's own kernels, instead
    of after them.  Once per (dtype, semiring, device, mode) in a process.
    """
    if a.is_cuda and a.dtype in FLOATS and not torch.compiler.is_compiling():
        # other dtypes fail the operand checks, with their message; a traced
        # graph prefetches nothing (its first eager run compiles as usual)
        _prefetch_once(ENGINE_NAMES[a.dtype], semiring, a.get_device(), torch.are_deterministic_algorithms_enabled())


@cache
def _prefetch_once(dtype: str, semiring: str, device: int, deterministic: bool) -> None:
    bridge.cuda_engine().prefetch_backward(dtype, semiring, device, deterministic)
