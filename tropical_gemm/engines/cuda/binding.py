"""Binding: a ``Plan`` becomes a launchable kernel on one device.

``bind`` loads the plan's kernel and packs its scalars once
(``jit.driver.Function.bind``); a launch then packs only the addresses.  A forward binds
to its tuned kernels, or, while those compile in the background, to a
``TieredForward`` that runs the baseline kernel until they are servable.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Callable, Protocol

import numpy as np

from ...jit import get_function, tiers
from .launch import Plan
from .plan import ForwardPlan


class Launchable(Protocol):
    """What a bound launch offers (``jit.driver.BoundLaunch``): queue it, given its leading (address) arguments.

    ``stream`` is a raw stream handle; None is CuPy's current stream.
    """

    def launch(self, addresses: tuple, stream: "int | None" = None) -> None: ...


def bind(plan: Plan, device: int, loader: "Callable[[Any, int], Any] | None" = None) -> Launchable:
    """``plan`` ready to launch on ``device``: its kernel with grid, block and scalars packed.

    Its kernel comes from ``loader``; by default from the tiered registry,
    which waits for a background compile of it if one is under way.
    """
    load = tiers().get_function if loader is None else loader
    return _bound(load(plan.spec, device), plan.grid, plan.block, plan.scalars, plan.int32_scalars,
                  plan.shared_bytes)


@lru_cache(maxsize=4096)
def _bound(function: Any, grid: int, block: int, scalars: tuple[int, ...], int32_scalars: tuple[int, ...],
           shared_bytes: int) -> Launchable:
    """One packing of a plan's scalars per loaded kernel and call signature.

    Keyed by the plan's fields, not the plan: tuples of ints hash without a
    Python-level ``__hash__``, and the array path binds on every launch.
    """
    return function.bind((grid,), (block,), scalars + tuple(np.int32(v) for v in int32_scalars), shared_bytes)


def bind_forward(plan: ForwardPlan, device: int) -> tuple[Launchable, ...]:
    """A forward's launches on ``device``, in order; while the tuned kernel compiles, one ``TieredForward``."""
    if tiers().serve_baseline(plan.spec, device, plan.companions, start=False):
        # the baseline first, alone: the call waits for this compile only (the registry's: no tier of its own)
        baseline = bind(plan.baseline, device, get_function)
        if tiers().serve_baseline(plan.spec, device, plan.companions):
            return (TieredForward(plan, device, baseline),)
    return bind_tuned(plan, device)


def bind_tuned(plan: ForwardPlan, device: int) -> tuple[Launchable, ...]:
    """The tuned product, then the argmax resolve if the tile needs one (reading B's copy if the plan has one)."""
    product = bind(plan.product, device)
    if plan.work is not None:
        product = StreamedProduct(product, bind(plan.fixup, device))
    if plan.resolve is None:
        return (product,)
    resolve = bind(plan.resolve, device)
    if plan.b_copy is None:
        return product, resolve
    return product, CopiedResolve(bind(plan.b_copy, device), resolve, plan.b_copy_offset)


def launch_forward(kernels: tuple[Launchable, ...], addresses: tuple, stream: "int | None", scratch: int) -> None:
    """Queue a forward's launches (``bind_forward``'s) on ``addresses``; ``scratch``: the plan's scratch memory."""
    for kernel in kernels:
        if isinstance(kernel, (CopiedResolve, StreamedProduct, TieredForward)):
            kernel.launch(addresses, stream, scratch)
        else:
            kernel.launch(addresses, stream)


class StreamedProduct:
    """A stream-K product: the kernel, which takes the scratch memory as its workspace (``plan.StreamWork``),
    then the fixup, which merges the partial tiles it left there into C."""

    __slots__ = ("product", "fixup")

    def __init__(self, product: Launchable, fixup: Launchable) -> None:
        self.product, self.fixup = product, fixup

    def launch(self, addresses: tuple, stream: "int | None" = None, scratch: int = 0) -> None:
        self.product.launch((*addresses, scratch), stream)
        self.fixup.launch((scratch, *addresses[2:]), stream)


class CopiedResolve:
    """An argmax resolve that reads B transposed: B copied into the scratch memory (``offset`` bytes in), then
    the resolve on the copy."""

    __slots__ = ("copy", "resolve", "offset")

    def __init__(self, copy: Launchable, resolve: Launchable, offset: int) -> None:
        self.copy, self.resolve, self.offset = copy, resolve, offset

    def launch(self, addresses: tuple, stream: "int | None" = None, scratch: int = 0) -> None:
        a, b, c, idx = addresses
        self.copy.launch((b, scratch + self.offset), stream)
        self.resolve.launch((a, scratch + self.offset, c, idx), stream)


class TieredForward:
    """A forward launch whose tuned kernel compiles in the background: the baseline until it is servable.

    Prepared products keep their launches, so the swap to the tuned kernels
    happens here, at the first launch after the background compile is done.
    """

    __slots__ = ("plan", "device", "baseline", "tuned")

    def __init__(self, plan: ForwardPlan, device: int, baseline: Launchable) -> None:
        self.plan, self.device, self.baseline = plan, device, baseline
        self.tuned: tuple[Launchable, ...] | None = None

    def launch(self, addresses: tuple, stream: "int | None" = None, scratch: int = 0) -> None:
        tuned = self.tuned
        if tuned is None:
            if tiers().serve_baseline(self.plan.spec, self.device, self.plan.companions):
                tiers().count_baseline(self.plan.spec)
                self.baseline.launch(addresses, stream)
                return
            tuned = self.tuned = bind_tuned(self.plan, self.device)
        launch_forward(tuned, addresses, stream, scratch)
