"""Prepared products: the bound launches of one call signature, kept so that a repeated call passes only addresses.

For callers whose memory lives in another library's tensors and who call the
same signature again and again (the torch bridge in a training loop):
wrapping each buffer in a cupy array, or deriving the plan and looking the
kernels up, costs more host time than launching a small product.  A prepared
product is built from the same ``Plan`` as the array path, by the same
``bind``; cached per signature, as the signatures a training loop repeats
are few.
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import NamedTuple

import numpy as np

from ...jit import driver, tiers
from ...shapes import product_shape
from . import gpu
from .batching import KERNEL_BATCH_DIMS
from .binding import Launchable, bind, bind_forward, launch_forward
from .plan import ForwardPlan, one_launch_each, plan_backward, plan_forward
from .split import SplitKPlan, plan_split_k


class PreparedProduct(NamedTuple):
    """The forward launches of one product signature, bound to its device: a call passes only addresses."""

    plan: ForwardPlan
    kernels: tuple[Launchable, ...]
    device: int

    @property
    def scratch_bytes(self) -> int:
        """Bytes of scratch memory a launch needs: B's copy for the argmax resolve, if the plan makes one."""
        return self.plan.scratch_bytes

    def launch(self, a: int, b: int, c: int, idx: int | None, stream: int, scratch: int = 0) -> None:
        """Queue ``c = a ⊗ b`` (and the argmax into ``idx``, if the signature has one) on ``stream``.

        Addresses of memory on ``device``; ``c`` and ``idx`` new and C-contiguous;
        ``stream`` a raw handle; ``scratch``: ``scratch_bytes`` of device memory,
        stream-ordered, if any.  Each launch makes its kernel's context current
        where another is.
        """
        launch_forward(self.kernels, self.plan.addresses(a, b, c, idx), stream, scratch)


@lru_cache(maxsize=1024)
def prepare_product(a_shape: tuple[int, ...], a_strides: tuple[int, ...], b_shape: tuple[int, ...],
                    b_strides: tuple[int, ...], dtype: str, semiring: str, argmax: bool,
                    device: int) -> "PreparedProduct | PreparedSplitK | None":
    """The prepared forward of a product signature (strides in elements), or None where addresses cannot serve.

    A product cut into K slices is a ``PreparedSplitK``, whose launch takes
    ``scratch_bytes`` of scratch memory.  Empty outputs, K = 0, batches that
    need splitting and argmax with K >= 2**31 give None: call ``forward`` on
    cupy arrays.  The caller checks the operands (``product_shape`` and dtypes).
    """
    shape = product_shape(a_shape, b_shape)
    if not one_launch_each(shape, argmax):
        return None
    plan = plan_forward(a_shape, a_strides, b_shape, b_strides, shape.batch, dtype, semiring, argmax,
                        gpu.sm_count(device), True, gpu.shared_limit(device))
    if plan.splits == 1:
        return PreparedProduct(plan, bind_forward(plan, device), device)
    if len(shape.batch) >= KERNEL_BATCH_DIMS:  # the slice dim must fit beside the batch in one launch
        return None
    split = plan_split_k(a_shape, a_strides, b_shape, b_strides, shape.batch, dtype, semiring, argmax,
                         gpu.sm_count(device), plan.splits, np.dtype(dtype).itemsize, gpu.shared_limit(device))
    around = [plan for plan in (split.b_copy, split.combine) if plan is not None]
    tiers().prefetch([plan.spec for plan in around], device)  # compiles beside the slices' kernel, not after it
    rest = None if split.rest is None else PreparedProduct(split.rest, bind_forward(split.rest, device), device)
    return PreparedSplitK(split, PreparedProduct(split.slices, bind_forward(split.slices, device), device), rest,
                          bind(split.combine, device), None if split.b_copy is None else bind(split.b_copy, device),
                          device)


class PreparedSplitK(NamedTuple):
    """A K-sliced forward on addresses: the slices into caller-provided scratch memory, then their ⊕ into C."""

    plan: SplitKPlan
    slices: PreparedProduct
    rest: PreparedProduct | None
    combine: Launchable
    b_copy: Launchable | None
    device: int

    @property
    def scratch_bytes(self) -> int:
        """Device memory a launch needs: the slices' partial results, then their argmaxes."""
        return self.plan.scratch_bytes

    def launch(self, a: int, b: int, c: int, idx: int | None, stream: int, scratch: int = 0) -> None:
        """As ``PreparedProduct.launch``; ``scratch`` is ``scratch_bytes`` of device memory, stream-ordered."""
        plan = self.plan
        parts = scratch
        index_parts = None if idx is None else scratch + plan.index_offset
        self.slices.launch(a, b, parts, index_parts, stream)
        if self.rest is not None:
            a_off, b_off = plan.rest_offsets
            self.rest.launch(a + a_off, b + b_off, parts + plan.splits * plan.part_bytes,
                             None if idx is None else index_parts + plan.splits * plan.index_part_bytes, stream)
        b_resolved = b
        if self.b_copy is not None:  # B transposed for the combine's resolve
            b_resolved = scratch + plan.b_copy_offset
            self.b_copy.launch((b, b_resolved), stream)
        self.combine.launch((parts, 0 if idx is None else index_parts, c, 0 if idx is None else idx, a, b_resolved),
                            stream)


class PreparedBackward(NamedTuple):
    """The default (atomic) backward of one product signature, bound to its device: a call passes only addresses.

    The torch bridge prepares it in the forward, because the backward runs on
    autograd's CUDA worker thread, where each Python step costs more than on
    the calling thread: there it is two memsets and one launch.
    """

    kernel: Launchable
    grad_bytes: tuple[int, int]
    device: int

    def launch(self, grad_c: int, a: int, b: int, argmax: int, grad_a: int, grad_b: int, stream: int) -> None:
        """Zero ``grad_a`` and ``grad_b`` and scatter ``grad_c`` into them, on ``stream``.

        Addresses of memory on ``device``: the product's operands and its int32
        argmax, ``grad_c`` C-contiguous and shaped like the product, the
        gradients new and C-contiguous; ``stream`` a raw handle.
        """
        with driver.on_context(driver.primary_context(self.device)):
            driver.memset_async(grad_a, self.grad_bytes[0], stream)
            driver.memset_async(grad_b, self.grad_bytes[1], stream)
            self.kernel.launch((grad_c, a, b, argmax, grad_a, grad_b), stream)


@lru_cache(maxsize=1024)
def prepare_backward(a_shape: tuple[int, ...], a_strides: tuple[int, ...], b_shape: tuple[int, ...],
                     b_strides: tuple[int, ...], dtype: str, semiring: str, device: int) -> PreparedBackward | None:
    """The prepared default-mode backward of a product signature, or None where it needs cupy arrays.

    None where there is nothing to scatter (no outputs, K = 0: the gradients
    are zeros), where the batch needs splitting, and for K >= 2**31 (an
    int64 argmax).  Cached like ``prepare_product``; float dtypes only.
    """
    shape = product_shape(a_shape, b_shape)
    if not one_launch_each(shape, argmax=True):
        return None
    plan = plan_backward("backward", a_shape, a_strides, b_shape, b_strides, shape.batch, dtype, semiring)
    itemsize = np.dtype(dtype).itemsize
    return PreparedBackward(bind(plan, device), (itemsize * math.prod(a_shape), itemsize * math.prod(b_shape)),
                            device)
