"""The CUDA engine's entry points on cupy arrays: ``forward``, ``backward``, and the K-sliced forward.

Each call finds its ``Plan`` (cached per signature), binds it to the arrays'
device and launches it on CuPy's current stream; nothing here synchronises
the device.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ...dtypes import dtype_name
from ...jit import make_spec, tiers
from ...jit.spec import ORDERED_BACKWARD_OPS
from ...semirings import Semiring
from .. import cuda_aux, cupy_module
from . import boolean, gpu
from .batching import element_strides, split_batches
from .binding import bind, bind_forward, launch_forward
from .plan import nothing_to_reduce, plan_backward, plan_forward
from .prepared import prepare_product
from .split import k_slices


def forward(a: Any, b: Any, semiring: Semiring, out: Any, argmax_out: Any) -> None:
    """Launch the forward kernel(s) writing ``out`` (and ``argmax_out``)."""
    k = a.shape[-1]
    with gpu.device_of(a, b, out, *(() if argmax_out is None else (argmax_out,))):
        if out.size == 0:
            return
        if semiring.boolean:  # packed words, its own kernels (K = 0 included)
            boolean.forward(a, b, out, argmax_out)
            return
        if k == 0:
            cuda_aux.fill_zero(out, argmax_out, semiring.name)
            return
        if argmax_out is not None and k >= 2**31:
            raise ValueError(f"argmax on the GPU supports K < 2**31, got K={k}")
        _forward_batched(a, b, out, argmax_out, semiring, out.shape[:-2], may_split=True)


def _forward_batched(a: Any, b: Any, c: Any, idx: Any, semiring: Semiring, batch: tuple[int, ...],
                     *, may_split: bool) -> None:
    arrays = [a, b, c] + ([] if idx is None else [idx])
    for (sa, sb, sc, *si), sub_batch in split_batches(batch, arrays):
        _forward_launch(sa, sb, sc, si[0] if si else None, semiring, sub_batch, may_split=may_split)


def _forward_launch(a: Any, b: Any, c: Any, idx: Any, semiring: Semiring, batch: tuple[int, ...],
                    *, may_split: bool) -> None:
    device, a_strides, b_strides, dtype = c.device.id, element_strides(a), element_strides(b), dtype_name(c.dtype)
    plan = plan_forward(a.shape, a_strides, b.shape, b_strides, batch, dtype, semiring.name, idx is not None,
                        gpu.sm_count(device), may_split, gpu.shared_limit(device))
    if plan.splits > 1:
        prepared = prepare_product(a.shape, a_strides, b.shape, b_strides, dtype, semiring.name, idx is not None,
                                   device)
        if prepared is None:  # more batch dims than a launch indexes beside the slice dim
            _split_k(a, b, c, idx, semiring, batch, plan.splits)
            return
        # the prepared K slices: cached per signature, launched on addresses, partials in cupy scratch memory
        scratch = cupy_module().empty(prepared.scratch_bytes, dtype=np.uint8)
        prepared.launch(a.data.ptr, b.data.ptr, c.data.ptr, None if idx is None else idx.data.ptr,
                        cupy_module().cuda.get_current_stream().ptr, scratch.data.ptr)
        return
    scratch = cupy_module().empty(plan.scratch_bytes, dtype=np.uint8) if plan.scratch_bytes else None
    launch_forward(bind_forward(plan, device), plan.addresses(a, b, c, idx), None,
                   0 if scratch is None else scratch.data.ptr)


def _split_k(a: Any, b: Any, c: Any, idx: Any, semiring: Semiring, batch: tuple[int, ...], splits: int) -> None:
    """K slices on views, for batches too deep for the prepared path: the slices, any rest, then their ⊕."""
    cupy = cupy_module()
    from cupy.lib.stride_tricks import as_strided

    # the ⊕ of the slices compiles beside the slices' kernel, not after it
    tiers().prefetch([cuda_aux.combine_spec(semiring.name, dtype_name(c.dtype))], c.device.id)
    chunk, rest, count = k_slices(a.shape[-1], splits)
    parts = cupy.empty((count, *c.shape), dtype=c.dtype)
    idx_parts = None if idx is None else cupy.empty((count, *c.shape), dtype=np.int32)
    # Give both operands the full batch rank first, so that the slice dim leads both.
    a_full = a[(None,) * (len(batch) + 2 - a.ndim)]
    b_full = b[(None,) * (len(batch) + 2 - b.ndim)]
    a_slices = as_strided(a_full, (splits, *a_full.shape[:-1], chunk), (chunk * a.strides[-1], *a_full.strides))
    b_slices = as_strided(b_full, (splits, *b_full.shape[:-2], chunk, b.shape[-1]),
                          (chunk * b.strides[-2], *b_full.strides))
    _forward_batched(a_slices, b_slices, parts[:splits], None if idx is None else idx_parts[:splits],
                     semiring, (splits, *batch), may_split=False)
    if rest:
        _forward_batched(a[..., splits * chunk:], b[..., splits * chunk:, :], parts[splits],
                         None if idx is None else idx_parts[splits], semiring, batch, may_split=False)
    cuda_aux.combine_slices(parts, idx_parts, c, idx, semiring.name, chunk)


def backward(grad_c: Any, a: Any, b: Any, argmax: Any, semiring: Semiring, deterministic: bool,
             grad_a: Any, grad_b: Any) -> None:
    """Write the gradients of a product, reduced over broadcast dims, into ``grad_a``/``grad_b``.

    See ``api.matmul_backward``; the kernels scatter into zeroed, contiguous gradients.
    """
    with gpu.device_of(grad_c, a, b, argmax, grad_a, grad_b):
        grad_c = cuda_aux.contiguous(grad_c)
        argmax = cuda_aux.contiguous(argmax, index=True)
        for grad in (grad_a, grad_b):  # one memset each: fill(0) would launch an elementwise kernel
            grad.data.memset_async(0, grad.nbytes)
        if nothing_to_reduce(grad_c.shape, a.shape[-1]):
            return
        batch = grad_c.shape[:-2]
        for (sg, si, sa, sb, sga, sgb), sub_batch in split_batches(batch, [grad_c, argmax, a, b, grad_a, grad_b]):
            for op, grads in backward_launches(deterministic, sga, sgb):
                plan = plan_backward(op, sa.shape, element_strides(sa), sb.shape, element_strides(sb), sub_batch,
                                     dtype_name(sa.dtype), semiring.name)
                bind(plan, sa.device.id).launch((sg, sa, sb, si, *grads), None)


def backward_launches(deterministic: bool, grad_a: Any, grad_b: Any) -> tuple[tuple[str, tuple], ...]:
    """(op, the gradients it writes) of each launch of a backward.

    By default one atomic launch writes both, reading each output's gradient
    and argmax once; the deterministic mode needs one ordered launch per
    operand, since each owns rows of grad_a or columns of grad_b.
    """
    if deterministic:
        return ("backward_ordered_a", (grad_a,)), ("backward_ordered_b", (grad_b,))
    return (("backward", (grad_a, grad_b)),)


def prefetch_backward(dtype: str, semiring: str, device: int, deterministic: bool) -> None:
    """Start compiling the backward kernels of a product now, in the background, where they are not cached.

    For callers that know a backward will follow (a torch forward that
    requires grad): its compile then overlaps the forward's.
    """
    ops = ORDERED_BACKWARD_OPS if deterministic else ("backward",)
    tiers().prefetch([make_spec(op, semiring, dtype) for op in ops], device)


def backward_compiling(dtype: str, semiring: str, device: int) -> bool:
    """Whether the default backward kernel of a product is still compiling in the background."""
    return tiers().compiling(make_spec("backward", semiring, dtype), device)
