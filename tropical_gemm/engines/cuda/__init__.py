"""The CUDA engine: picks a kernel for each call from shapes and strides, and launches it through CuPy.

Every decision that depends on the arrays (tile family, orientation, layout,
how the batch dimensions fold) is made from shapes and strides; the kernels
themselves take any strides, so no operand is ever copied.  Launches go to
CuPy's current stream and nothing here synchronises the device.

The steps, one module each:

* ``batching``: batch strides, folding, and splitting a batch the kernels cannot index;
* ``plan``: pure planning, a ``Plan`` per launch (kernel, grid, block, plain-int scalars);
* ``binding``: ``bind(plan, device)``, the launchable kernel (loaded, scalars kernel-ready),
  and the tiered forward that runs the baseline while the tuned kernel compiles;
* ``prepared``: the bound launches of a call signature, kept for callers that pass addresses;
* ``gpu``: arrays and devices, the one place the engine touches CuPy's objects;
* ``engine``: ``forward`` and ``backward`` on cupy arrays, K slices included;
* ``counting``: the counting semirings' product, ``count_forward``.
"""

from __future__ import annotations

from .batching import KERNEL_BATCH_DIMS, Problem, batch_strides, fold_batch
from .binding import Launchable, TieredForward, bind, bind_forward
from .counting import count_forward
from .engine import backward, backward_compiling, backward_launches, forward, prefetch_backward
from .gpu import as_array, empty, is_c_contiguous, may_share_memory
from .plan import (MIN_SPLIT_K, SKINNY_MAX_ROWS, ForwardPlan, Plan, choose_tile, k_splits, one_launch_each,
                   plan_backward, plan_forward)
from .prepared import PreparedBackward, PreparedProduct, prepare_backward, prepare_product

NAME = "cuda"

__all__ = [
    "KERNEL_BATCH_DIMS", "MIN_SPLIT_K", "NAME", "SKINNY_MAX_ROWS", "ForwardPlan", "Launchable", "Plan",
    "PreparedBackward", "PreparedProduct", "Problem", "TieredForward", "as_array", "backward", "backward_compiling",
    "backward_launches", "batch_strides", "bind", "bind_forward", "choose_tile", "count_forward", "empty", "fold_batch", "forward",
    "is_c_contiguous", "k_splits", "may_share_memory", "one_launch_each", "plan_backward",
    "plan_forward", "prefetch_backward", "prepare_backward", "prepare_product",
]
