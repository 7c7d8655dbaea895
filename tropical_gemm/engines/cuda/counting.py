"""The CUDA engine's counting tropical product: planning (pure) and the launch of ``count_forward``.

The kernel (``cuda_src/count_forward.cu``) takes each of its four operand
arrays (two values, two counts) with strides of its own, so nothing is
copied; its batch folds as the forward's does (``batching``), with every
operand's strides.  Nothing here synchronises: the flag bits are read by the
caller (``tropical_gemm.counting``).
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any, NamedTuple

import numpy as np

from ...dtypes import dtype_name
from ...jit import get_function, make_spec
from ...jit.spec import KernelSpec
from ...semirings import CountingSemiring
from . import gpu
from .batching import Problem, batch_strides, element_strides, fold_batch, split_batches

#: The kernel's square tile: a block of TILE × TILE threads, one output each.
TILE = 16
#: The most blocks a grid takes along y and z (x takes 2**31 - 1); the kernel loops over the rest.
GRID_YZ_LIMIT = 65535


class CountLaunch(NamedTuple):
    """One launch: the kernel, its three-dimensional grid and the scalars after the seven addresses."""

    spec: KernelSpec
    grid: tuple[int, int, int]
    scalars: tuple[int, ...]


@lru_cache(maxsize=1024)
def plan_count(shapes: tuple[tuple[int, ...], ...], strides: tuple[tuple[int, ...], ...], batch: tuple[int, ...],
               dtype: str, semiring: str) -> CountLaunch:
    """The launch for ``(va, ca) ⊗ (vb, cb)``: shapes and element strides in that order; ``batch`` folds to 3 dims."""
    (va_shape, _, vb_shape, _), (va_st, ca_st, vb_st, cb_st) = shapes, strides
    m, k = va_shape[-2:]
    n = vb_shape[-1]
    dims, folded = fold_batch(batch, [batch_strides(shape, st, batch) for shape, st in zip(shapes, strides)])
    batches = math.prod(dims)
    grid = (max(1, min(-(-n // TILE), 2**31 - 1)), max(1, min(-(-m // TILE), GRID_YZ_LIMIT)),
            max(1, min(batches, GRID_YZ_LIMIT)))
    scalars = (m, n, k, *va_st[-2:], *ca_st[-2:], *vb_st[-2:], *cb_st[-2:], batches,
               *Problem(m, n, k, dims, tuple(folded)).batch_args())
    return CountLaunch(make_spec("count_forward", semiring, dtype), grid, scalars)


def count_forward(a_values: Any, a_counts: Any, b_values: Any, b_counts: Any, semiring: CountingSemiring,
                  out_values: Any, out_counts: Any, flags: Any) -> None:
    """Launch the counting product of the pairs into ``out_values``/``out_counts``; flag bits into ``flags[0]``."""
    arrays = [a_values, a_counts, b_values, b_counts, out_values, out_counts]
    device = gpu.device_of(*arrays, flags)
    with device:
        if out_values.size == 0:
            return
        for (va, ca, vb, cb, vc, cc), sub_batch in split_batches(out_values.shape[:-2], arrays):
            operands = (va, ca, vb, cb)
            launch = plan_count(tuple(x.shape for x in operands), tuple(element_strides(x) for x in operands),
                                sub_batch, dtype_name(vc.dtype), semiring.name)
            get_function(launch.spec, device.id)(launch.grid, (TILE, TILE, 1),
                                                 (va, ca, vb, cb, vc, cc, flags, *map(np.int64, launch.scalars)))
