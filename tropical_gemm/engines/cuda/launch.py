"""One kernel launch as plain ints: the ``Plan`` that planning produces and ``binding.bind`` launches.

Pure, like ``plan``: a launch's kernel spec, grid, block and scalar arguments, and the arithmetic of grids
and scratch buffers that every planner shares.
"""

from __future__ import annotations

from typing import NamedTuple

from ...jit.source import ELEMENTWISE_THREADS
from ...jit.spec import KernelSpec

#: The largest grid a launch asks for; the kernels loop over what lies beyond it.
GRID_LIMIT = 2**31 - 1


class Plan(NamedTuple):
    """One kernel launch: the kernel, its (one-dimensional) grid and block, and the scalars after the addresses.

    ``scalars`` are the kernel's 64-bit integer arguments; ``int32_scalars``
    follow them where a kernel declares 32-bit ones (the argmax resolve's
    slice depth).  ``shared_bytes``: the dynamic shared memory it takes.
    """

    spec: KernelSpec
    grid: int
    block: int
    scalars: tuple[int, ...]
    int32_scalars: tuple[int, ...] = ()
    shared_bytes: int = 0


def elementwise_grid(work: int) -> int:
    """Blocks for one thread per item of ``work`` (capped: the kernels loop over the rest)."""
    return max(1, min(-(-work // ELEMENTWISE_THREADS), GRID_LIMIT))


def aligned(nbytes: int) -> int:
    """``nbytes`` rounded up to the alignment scratch buffers start at within one allocation."""
    return -(-nbytes // _ALIGN) * _ALIGN


#: The alignment of each buffer within a launch's scratch memory.
_ALIGN = 256
