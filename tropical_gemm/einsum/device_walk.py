"""The configuration walk on the GPU: one registry kernel, one thread per output element, every step at once.

The host walk (``backtrack.walk``) copies every step's argmax to the host
and reads it there with whole-array gathers; for large contractions that
copy and those gathers cost tens of times the contraction itself.  Here the
same walk runs in one launch of the registry's ``walk`` kernel
(``cuda_src/walk.cu``): each thread walks the steps from the last to the
first for its own output element, reading each step's argmax at the flat
position its known labels give and writing the labels that step chose into
their configuration arrays, which also hold the known values on the way.

The answer is the host walk's, bit for bit.  The host walk reads every
element at every step and marks an element dead (all -1) where any of its
reads found -1, or its output is the semiring's zero; until an element's
first -1 its reads are exact, and after it nothing it reads matters, so a
thread stops at its first -1.  So a live element's positions always lie
inside the argmax it reads (the kernel still wraps them, as the host's
``take(mode="wrap")`` does, so that no read can leave the buffer).

What the kernel needs about the plan is a small int64 table (``encode``),
built from the walk's plan (``plan_walk``, which depends on the einsum
alone, so it is cached) and the argmaxes' addresses, and copied to the
device with one host-to-device copy.  No rank or step count is too large:
the kernel reads the output's shape and the steps from the table.  Cupy
argmaxes that are not C-contiguous (never the case for einsum's own steps),
torch tensors on the CPU and results of a dtype the kernel does not read
are left to the host walk (``device_walk`` answers None).
"""

from __future__ import annotations

import math
from functools import lru_cache
from typing import Any, Mapping, NamedTuple, Sequence

import numpy as np

from ..dtypes import ENGINE_DTYPES
from ..semirings import Semiring
from . import backtrack
from .parse import Parsed
from .plan import Plan

#: int64 entries before the table's per-axis part: rank, steps, labels, all_dead, check_zero, config_wide.
HEADER = 6
#: The result dtypes the kernel reads: the engines', and the boolean semiring's bool (its zero is False).
WALK_DTYPES: tuple[str, ...] = (*ENGINE_DTYPES, "bool")



class WalkStep(NamedTuple):
    """One step that chose labels: its position in the plan, where its argmax is read, what it writes.

    ``reads`` pairs each result label with its argmax stride (C order over
    the step's result): the source is the label's slot among the configured
    labels, or ``-1 - axis`` for output axis ``axis``.  ``writes`` pairs
    each chosen label's slot with its size, in the step's (row-major) order.
    """

    index: int
    size: int
    reads: tuple[tuple[int, int], ...]
    writes: tuple[tuple[int, int], ...]


class WalkPlan(NamedTuple):
    """The walk of one einsum: its steps (last first), and the configured labels with their names.

    ``chosen[j]`` says whether some step chooses label ``labels[j]`` (the
    others read 0 where they are not dead); ``all_dead`` that some step
    chooses over an empty range (nothing wins anywhere); ``check_zero`` that
    the last step chose nothing, so a zero output is read from the result.
    """

    steps: tuple[WalkStep, ...]
    labels: tuple[int, ...]
    names: tuple[Any, ...]
    chosen: tuple[bool, ...]
    all_dead: bool
    check_zero: bool


@lru_cache(maxsize=256)
def plan_walk(plan: Plan, parsed: Parsed) -> WalkPlan:
    """The steps the walk reads and writes, in the order it takes them (depends on the einsum alone).

    Examples:
        >>> import numpy as np
        >>> from tropical_gemm.einsum import einsum_plan, parse_call
        >>> ops = [np.ones((2, 3)), np.ones((3, 4)), np.ones((4, 5))]
        >>> plan = einsum_plan("ij,jk,kl->il", *ops, optimize=[(0, 1), (0, 1)])
        >>> walk = plan_walk(plan, parse_call("ij,jk,kl->il", tuple(ops))[0])
        >>> walk.names, [(s.index, s.reads, s.writes) for s in walk.steps]   # output axes i, l: -1, -2
        (('j', 'k'), [(1, ((-2, 2), (-1, 1)), ((1, 4),)), (0, ((-1, 4), (1, 1)), ((0, 3),))])

    The last step reads its (l, i) argmax and writes k; the first reads its
    (i, k) argmax, k from k's array (slot 1), and writes j.
    """
    output = parsed.output
    labels = tuple(lab for lab in range(len(parsed.names)) if lab not in set(output))
    slot = {lab: j for j, lab in enumerate(labels)}
    steps: list[WalkStep] = []
    all_dead = False
    for t in reversed(range(len(plan.steps))):
        step = plan.steps[t]
        chosen = backtrack._chosen(step)
        if not chosen:
            continue
        all_dead = all_dead or 0 in step.k_sizes
        sizes = tuple(parsed.sizes[x] for x in step.result)
        strides = np.cumprod((1,) + sizes[:0:-1])[::-1] if sizes else ()
        reads = tuple((-1 - output.index(x) if x in output else slot[x], int(s)) for x, s in zip(step.result, strides))
        writes = tuple((slot[x], size) for x, size in zip(chosen, step.k_sizes))
        steps.append(WalkStep(t, math.prod(sizes), reads, writes))
    written = {j for step in steps for j, _ in step.writes}
    root_chooses = bool(plan.steps) and bool(backtrack._chosen(plan.steps[-1]))
    return WalkPlan(tuple(steps), labels, tuple(parsed.names[lab] for lab in labels),
                    tuple(j in written for j in range(len(labels))), all_dead, not root_chooses)


def encode(walk: WalkPlan, shape: tuple[int, ...], result_strides: tuple[int, ...],
           argmaxes: "Mapping[int, tuple[int, bool]] | Sequence[tuple[int, bool]]", config: list[int],
           config_wide: bool) -> np.ndarray:
    """The kernel's table (``cuda_src/walk.cu`` describes it): int64, to be copied to the device.

    ``argmaxes[t]`` is step t's ``(address, is_int64)``; ``config[j]`` the
    address of label ``walk.labels[j]``'s output-shaped array.

    Examples:
        >>> import numpy as np
        >>> from tropical_gemm.einsum import einsum_plan, parse_call
        >>> ops = [np.ones((2, 3)), np.ones((3, 4))]
        >>> walk = plan_walk(einsum_plan("ij,jk->ik", *ops), parse_call("ij,jk->ik", tuple(ops))[0])
        >>> encode(walk, (2, 4), (4, 1), [(1000, False)], [2000], False).tolist()
        [2, 1, 1, 0, 0, 0, 2, 4, 4, 1, 4, 1, 2000, 1, 1000, 0, 8, 2, 1, -1, 4, -2, 1, 0, 3]
    """
    out_strides = np.cumprod((1,) + shape[:0:-1])[::-1] if shape else ()  # a scalar output has no axes
    table = [len(shape), len(walk.steps), len(walk.labels), int(walk.all_dead), int(walk.check_zero),
             int(config_wide), *shape, *map(int, out_strides), *result_strides, *config, *map(int, walk.chosen)]
    for step in walk.steps:
        address, wide = argmaxes[step.index]
        table += [address, int(wide), step.size, len(step.reads), len(step.writes)]
        table += [v for pair in step.reads + step.writes for v in pair]
    return np.array(table, dtype=np.int64)


def device_walk(plan: Plan, parsed: Parsed, argmaxes: list[Any], result: Any, semiring: Semiring
                ) -> "dict[Any, Any] | None":
    """The configuration, walked on the result's GPU (a scalar output is one element); None where the host must walk.

    ``result`` and ``argmaxes`` are cupy arrays or CUDA torch tensors; the
    configuration comes back in the same library, one C-contiguous array per
    contracted index.  None for CPU tensors, results of a dtype the kernel
    does not read, and argmaxes that are not C-contiguous.
    """
    walk = plan_walk(plan, parsed)
    if type(result).__module__.split(".")[0] == "torch":
        return _walk_torch(walk, plan, argmaxes, result, semiring)
    return _walk_cupy(walk, plan, argmaxes, result, semiring)


def _walk_cupy(walk: WalkPlan, plan: Plan, argmaxes: list[Any], result: Any, semiring: Semiring
               ) -> "dict[Any, Any] | None":
    import cupy

    if result.dtype.name not in WALK_DTYPES:
        return None
    used = [argmaxes[s.index] for s in walk.steps]
    if not all(idx.flags.c_contiguous and idx.dtype in (np.int32, np.int64) for idx in used):
        return None
    dtype = backtrack.config_dtype(plan)
    with result.device:
        config = [cupy.empty(result.shape, dtype=dtype) for _ in walk.labels]
        addresses = {s.index: (argmaxes[s.index].data.ptr, argmaxes[s.index].dtype == np.int64) for s in walk.steps}
        table = encode(walk, result.shape, tuple(s // result.itemsize for s in result.strides), addresses,
                       [c.data.ptr for c in config], dtype == np.int64)
        device_table = cupy.asarray(table)  # held until the launch is queued; CuPy's pool frees in stream order
        launch(device_table.data.ptr, result.data.ptr, result.dtype, result.size, semiring, result.device.id, None)
    return dict(zip(walk.names, config))


def _walk_torch(walk: WalkPlan, plan: Plan, argmaxes: list[Any], result: Any, semiring: Semiring
                ) -> "dict[Any, Any] | None":
    """The same for torch tensors: torch's allocator and torch's current stream."""
    import torch

    from ..torch.bridge import raw_stream
    from ..torch.validation import NUMPY_DTYPES

    if not result.is_cuda or result.dtype not in NUMPY_DTYPES:
        return None
    used = {s.index: argmaxes[s.index].detach().contiguous() for s in walk.steps}
    if any(idx.dtype not in (torch.int32, torch.int64) for idx in used.values()):
        return None
    dtype = torch.int64 if backtrack.config_dtype(plan) == np.int64 else torch.int32
    config = [torch.empty(result.shape, dtype=dtype, device=result.device) for _ in walk.labels]
    addresses = {t: (idx.data_ptr(), idx.dtype == torch.int64) for t, idx in used.items()}
    table = encode(walk, tuple(result.shape), tuple(result.stride()), addresses, [c.data_ptr() for c in config],
                   dtype == torch.int64)
    device_table = torch.from_numpy(table).to(result.device)  # torch's allocator frees it in stream order
    device = result.get_device()
    launch(device_table.data_ptr(), result.detach().data_ptr(), NUMPY_DTYPES[result.dtype], result.numel(),
           semiring, device, raw_stream(device))
    return dict(zip(walk.names, config))


def launch(table: int, result: int, dtype: np.dtype, total: int, semiring: Semiring, device: int,
           stream: "int | None") -> None:
    """One launch of the walk kernel over ``total`` output elements, on ``stream`` (None: CuPy's current one)."""
    from ..dtypes import dtype_name
    from ..engines import cuda_aux
    from ..jit import make_spec

    if total:
        cuda_aux.launch(make_spec("walk", "max_plus", dtype_name(dtype)), device, total,
                        (table, result, semiring.zero(dtype), np.int64(total)), stream)
