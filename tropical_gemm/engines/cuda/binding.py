"""Binding: a ``Plan`` becomes a launchable kernel on one device.

``bind`` loads the plan's kernel and turns its scalars into the form CuPy
passes as they are; a launch then adds only the addresses.  A forward binds
to its tuned kernels, or, while those compile in the background, to a
``TieredForward`` that runs the baseline kernel until they are servable.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Callable, NamedTuple, Protocol

import numpy as np

from ...jit import get_function, tiers
from .. import cupy_module
from .plan import ForwardPlan, Plan


class Launchable(Protocol):
    """What a bound launch offers: queue it on a stream, given its leading (address) arguments."""

    def launch(self, addresses: tuple, stream: Any) -> None: ...


def kernel_ints(values: Any) -> tuple:
    """64-bit kernel arguments (the kernels' ``i64`` and pointers) that cupy passes as they are.

    cupy turns each numpy scalar or int into its C form on every launch
    (about 0.4 µs each on an H100 host; a backward launch takes 28
    arguments), but passes its own ``CIntptr`` through, so bound kernels hold those.
    """
    return tuple(map(_cintptr(), values))


@lru_cache(maxsize=None)
def _cintptr() -> type:
    return cupy_module().cuda.function.CIntptr


@lru_cache(maxsize=4096)
def kernel_args(scalars: tuple[int, ...], int32_scalars: tuple[int, ...] = ()) -> tuple:
    """A plan's scalar arguments in kernel-ready form, converted once per call signature.

    Keyed by the tuples, not the plan: a tuple of ints hashes without a
    Python-level ``__hash__``, and a bind happens on every launch.
    """
    return kernel_ints(scalars) + tuple(np.int32(v) for v in int32_scalars)


class BoundKernel(NamedTuple):
    """A loaded kernel with its grid, block and trailing scalar arguments: a launch adds only the addresses."""

    function: Any
    grid: tuple[int]
    block: tuple[int]
    scalars: tuple

    def launch(self, addresses: tuple, stream: Any) -> None:
        """Queue it on ``stream`` (None: cupy's current one); ``addresses`` are arrays, or kernel-ready ints."""
        self.function(self.grid, self.block, (*addresses, *self.scalars), stream=stream)


def bind(plan: Plan, device: int, loader: "Callable[[Any, int], Any] | None" = None) -> BoundKernel:
    """``plan`` ready to launch on ``device``.

    Its kernel comes from ``loader``; by default from the tiered registry,
    which waits for a background compile of it if one is under way.
    """
    load = tiers().get_function if loader is None else loader
    return BoundKernel(load(plan.spec, device), (plan.grid,), (plan.block,),
                       kernel_args(plan.scalars, plan.int32_scalars))


def bind_forward(plan: ForwardPlan, device: int) -> tuple[Launchable, ...]:
    """A forward's launches on ``device``, in order; while the tuned kernel compiles, one ``TieredForward``."""
    if tiers().serve_baseline(plan.spec, device, plan.companions, start=False):
        # the baseline first, alone: the call waits for this compile only (the registry's: no tier of its own)
        baseline = bind(plan.baseline, device, get_function)
        if tiers().serve_baseline(plan.spec, device, plan.companions):
            return (TieredForward(plan, device, baseline),)
    return bind_tuned(plan, device)


def bind_tuned(plan: ForwardPlan, device: int) -> tuple[BoundKernel, ...]:
    """The tuned product, then the argmax resolve if the tile needs one."""
    product = bind(plan.product, device)
    if plan.resolve is None:
        return (product,)
    return product, bind(plan.resolve, device)


class TieredForward:
    """A forward launch whose tuned kernel compiles in the background: the baseline until it is servable.

    Prepared products keep their launches, so the swap to the tuned kernels
    happens here, at the first launch after the background compile is done.
    """

    __slots__ = ("plan", "device", "baseline", "tuned")

    def __init__(self, plan: ForwardPlan, device: int, baseline: BoundKernel) -> None:
        self.plan, self.device, self.baseline = plan, device, baseline
        self.tuned: tuple[BoundKernel, ...] | None = None

    def launch(self, addresses: tuple, stream: Any) -> None:
        tuned = self.tuned
        if tuned is None:
            if tiers().serve_baseline(self.plan.spec, self.device, self.plan.companions):
                tiers().count_baseline(self.plan.spec)
                self.baseline.launch(addresses, stream)
                return
            tuned = self.tuned = bind_tuned(self.plan, self.device)
        for kernel in tuned:
            kernel.launch(addresses, stream)
