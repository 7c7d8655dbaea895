"""Replayed einsum on cupy arrays: each call signature's launches bound once, then launched on addresses.

On small tensors an einsum's time is the host's: the array path costs, per
pairwise step, the views, the output allocations and the engine's plan and
bind lookups of a whole ``matmul`` call.  Here a call signature (the einsum,
its optimize, every operand's shape and strides, dtype, semiring, whether
the configuration is wanted, the device) is compiled once into a
``Replay``: the ``program`` of the plan (views and buffer offsets), each
product bound by the engine's ``prepare_product`` (the same plans and
kernels as the array path, K slices included, and the same tiering: a
product whose tuned kernel still compiles launches a ``TieredForward``,
which swaps it in once built), and the reductions and copies bound to the
registry's ``reduce`` and ``gather`` kernels.  A call then allocates two
blocks (the arena and the result's) and queues every launch on CuPy's
current stream; CuPy compiles nothing.

Signatures that addresses cannot serve (no steps, a size 0, float16 and
bfloat16, the boolean semiring, whose products pack their operands into
words first, an argmax of 64 bits, a copy of more dims than a gather
indexes, runs of a GiB or more, which take the array path's memory checks)
are cached as None and run on the array path (``lower.execute``).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Hashable, NamedTuple

import numpy as np

from ..dtypes import dtype_name, is_half
from ..engines import cupy_module
from ..semirings import Semiring, get_semiring
from . import program as prog
from .lower import permuted, reduce_launch
from .parse import Parsed
from .plan import Plan, make_plan

#: Runs whose blocks reach this many bytes take the array path, which checks each allocation against the GPU's memory.
MAX_BYTES = 2**30

#: A launch's addresses: (base, byte offset) each, bases being the operands, the arena, the result's block, then 0.
Refs = tuple[tuple[int, int], ...]


class Replay(NamedTuple):
    """The launches of one call signature, their addresses as (base, offset), and what the run returns.

    ``argmaxes[t]``: ``(block, offset, shape)`` of step ``t``'s kept argmax
    (block 0 the arena, 1 the result's), or None.
    """

    plan: Plan
    launches: tuple[tuple[Any, Refs], ...]
    arena_bytes: int
    final_bytes: int
    result_offset: int
    result_shape: tuple[int, ...]
    dtype: np.dtype
    argmaxes: tuple["tuple[int, int, tuple[int, ...]] | None", ...]
    device: int


def run(parsed: Parsed, optimize: Hashable, operands: list[Any], semiring: Semiring, want_argmax: bool
        ) -> "tuple[Plan, Any, list[Any]] | None":
    """``(plan, result, argmaxes)`` of the replayed einsum, as ``lower.execute`` gives them; None: not replayable.

    ``operands`` are cupy arrays of one dtype (checked by the caller).
    """
    first = operands[0]
    device = first.data.device_id
    replay = prepared(parsed, optimize, tuple([x.strides for x in operands]), first.dtype, semiring.name,
                      want_argmax, device)
    if replay is None:
        return None
    bases = []
    for x in operands:
        memory = x.data
        if memory.device_id != device:  # the array path names the devices
            return None
        bases.append(memory.ptr)
    return replay.plan, *_launch(replay, bases)


def _launch(replay: Replay, bases: list[int]) -> tuple[Any, list[Any]]:
    """Allocate the two blocks and queue every launch; the result (in output order) and the argmax views."""
    cupy = cupy_module()
    with cupy.cuda.Device(replay.device):
        final = cupy.empty(replay.final_bytes, dtype=np.uint8)
        arena = cupy.empty(replay.arena_bytes, dtype=np.uint8) if replay.arena_bytes else final
        bases += (arena.data.ptr, final.data.ptr, 0)
        stream = cupy.cuda.get_current_stream().ptr
        for kernel, refs in replay.launches:
            kernel.launch([bases[base] + offset for base, offset in refs], stream)
    result = cupy.ndarray(replay.result_shape, replay.dtype, final.data + replay.result_offset)
    blocks = (arena, final)
    argmaxes = [None if at is None else cupy.ndarray(at[2], np.int32, blocks[at[0]].data + at[1])
                for at in replay.argmaxes]
    return permuted(result, replay.plan.final), argmaxes


@lru_cache(maxsize=256)
def prepared(parsed: Parsed, optimize: Hashable, byte_strides: tuple[tuple[int, ...], ...], dtype: np.dtype,
             semiring: str, want_argmax: bool, device: int) -> Replay | None:
    """The ``Replay`` of one call signature (strides in bytes, as cupy reports them), or None; cached."""
    if is_half(dtype) or get_semiring(semiring).boolean:  # the engine packs and_or's operands per call
        return None
    plan = make_plan(parsed, optimize)
    itemsize = dtype.itemsize
    strides = tuple(tuple(s // itemsize for s in st) for st in byte_strides)
    program = prog.trace(plan, parsed, prog.input_shapes(parsed), strides, itemsize, want_argmax)
    if program is None:
        return None
    bound = [_bind(op, dtype_name(dtype), semiring, device) for op in program.ops]
    if any(b is None for b in bound):
        return None
    buffers = list(program.buffers)
    scratch: dict[int, int] = {}
    for i, (op, (_, scratch_bytes)) in enumerate(zip(program.ops, bound)):
        if scratch_bytes:
            scratch[i] = len(buffers)
            buffers.append(prog.Buffer(scratch_bytes, op.step, op.step))
    places = prog.layout(buffers, len(plan.steps))
    if places.arena_bytes + places.final_bytes >= MAX_BYTES:
        return None
    n = len(parsed.inputs)
    launches = tuple(launch for i, (op, (kernels, _)) in enumerate(zip(program.ops, bound))
                     for launch in _launches(op, kernels, places, n, scratch.get(i)))
    argmaxes = tuple(None if buf is None else (*places.places[buf], plan.steps[t].out_shape)
                     for t, buf in enumerate(program.argmaxes))
    return Replay(plan, launches, places.arena_bytes, places.final_bytes, places.places[program.result][1],
                  plan.steps[-1].out_shape, dtype, argmaxes, device)


def _bind(op: Any, dtype: str, semiring: str, device: int) -> "tuple[Any, int] | None":
    """``(bound, scratch bytes)`` of one op of the program, or None where it cannot launch on addresses.

    A product is the engine's prepared product of its views' signature (a
    ``PreparedProduct``, or a ``PreparedSplitK`` that needs scratch memory);
    a reduction and a copy are one bound registry kernel each.
    """
    from ..engines.cuda import bind, prepare_product
    from ..engines.cuda_aux import gather_launch
    from ..jit import make_spec

    if isinstance(op, prog.Product):
        a, b = op.a, op.b
        product = prepare_product(a.shape, a.strides, b.shape, b.strides, dtype, semiring, op.argmax is not None,
                                  device)
        return None if product is None else (product, product.scratch_bytes)
    if isinstance(op, prog.Rows):
        return bind(reduce_launch(semiring, dtype, *op.x.shape, op.x.strides), device), 0
    launch = gather_launch(make_spec("gather", "max_plus", dtype), op.src.shape, op.src.strides)
    return None if launch is None else (bind(launch, device), 0)


class _Sliced:
    """A prepared product that needs scratch memory (K slices, or B's copy for its argmax resolve) as one launch
    on ``(a, b, c, argmax or 0, scratch)``."""

    __slots__ = ("product", "argmax")

    def __init__(self, product: Any, argmax: bool) -> None:
        self.product, self.argmax = product, argmax

    def launch(self, addresses: list[int], stream: int) -> None:
        a, b, c, idx, scratch = addresses
        self.product.launch(a, b, c, idx if self.argmax else None, stream, scratch)


def _launches(op: Any, bound: Any, places: prog.Layout, n: int, scratch: "int | None") -> list[tuple[Any, Refs]]:
    """The (launchable, refs) pairs of one op; a prepared product's kernels each get their operands' order."""
    def ref(x: "prog.View | int | None") -> tuple[int, int]:
        if x is None:
            return n + 2, 0
        if isinstance(x, prog.View):
            kind, index = x.source
            if kind == "operand":
                return index, 0
            x = index
        block, offset = places.places[x]
        return n + block, offset

    if isinstance(op, prog.Copy):
        return [(bound, (ref(op.src), ref(op.dst)))]
    if isinstance(op, prog.Rows):
        return [(bound, (ref(op.x), ref(op.out), ref(op.argmax)))]
    if scratch is not None:
        return [(_Sliced(bound, op.argmax is not None),
                 (ref(op.a), ref(op.b), ref(op.out), ref(op.argmax), ref(scratch)))]
    refs = tuple(bound.plan.addresses(ref(op.a), ref(op.b), ref(op.out), ref(op.argmax)))
    return [(kernel, refs) for kernel in bound.kernels]
