"""An einsum plan as a program of launches on addresses: views, buffers and where each buffer lies (pure).

A replayed einsum (``replay``) launches every step on raw addresses.  What
each launch reads and writes is decided here, once per call signature, from
the plan and the operands' shapes and strides alone: each operand of a
product or reduction is a view (shape and strides in elements) of an input or
of a buffer the run allocates, or, where the view would need a copy, a
``Copy`` into a new buffer first, as the array path's regroup makes one.
Buffers are laid out in two blocks: the result's block (the last step's
values and argmax, which the caller keeps) and one arena for everything
else, where buffers whose steps never overlap share memory (all launches
queue on one stream, so a later step may write what an earlier one read).
No CuPy and no GPU here: tests run the program with numpy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..engines.cuda.batching import contiguous_strides
from .lower import nocopy_strides
from .parse import Parsed
from .plan import Pair, Plan, Reduce

#: Every buffer starts at a multiple of this many bytes.
ALIGN = 256

#: Bytes of one argmax entry: the replay runs int32 argmaxes only (K < 2**31).
INDEX_BYTES = 4

#: Where a view's memory is: ("operand", i) or ("buffer", id).
Source = tuple[str, int]


@dataclass(frozen=True)
class View:
    """``shape`` and ``strides`` (in elements) of the memory at ``source``, from its first element."""

    source: Source
    shape: tuple[int, ...]
    strides: tuple[int, ...]


@dataclass(frozen=True)
class Buffer:
    """Bytes written first by step ``first`` and read last by step ``last``; ``final``: in the result's block."""

    nbytes: int
    first: int
    last: int
    final: bool = False


@dataclass(frozen=True)
class Copy:
    """Gather ``src`` into buffer ``dst``, C-contiguous in ``src.shape``: the registry's ``gather`` kernel."""

    step: int
    src: View
    dst: int


@dataclass(frozen=True)
class Product:
    """``out = a ⊗ b`` for ``a`` (nb, m, k) and ``b`` (nb, k, n); its int32 argmax into ``argmax`` if not None."""

    step: int
    a: View
    b: View
    out: int
    argmax: int | None


@dataclass(frozen=True)
class Rows:
    """⊕ of each row of ``x`` (R, K) into ``out``, the first k attaining it into ``argmax`` (kernel ``reduce``)."""

    step: int
    x: View
    out: int
    argmax: int


@dataclass(frozen=True)
class Program:
    """The launches of one call signature, in order, and the buffers they use.

    ``result`` is the buffer of the last step's values (C-contiguous in its
    ``out_shape``); ``argmaxes[t]`` is the buffer of step ``t``'s kept argmax,
    None where the array path keeps none.
    """

    ops: tuple["Copy | Product | Rows", ...]
    buffers: tuple[Buffer, ...]
    result: int
    argmaxes: tuple["int | None", ...]


def operand_view(i: int, shape: tuple[int, ...], strides: tuple[int, ...], labels: tuple[int, ...],
                 drop: tuple[int, ...]) -> View:
    """Operand ``i`` as ``lower.diagonal_view`` sees it: broadcast axes dropped, a repeated label's axes one."""
    kept = [axis for axis in range(len(labels)) if axis not in drop]
    order: list[int] = []
    size: dict[int, int] = {}
    stride: dict[int, int] = {}
    for axis in kept:
        lab = labels[axis]
        if lab not in size:
            order.append(lab)
            size[lab], stride[lab] = shape[axis], 0
        stride[lab] += strides[axis]
    return View(("operand", i), tuple(size[lab] for lab in order), tuple(stride[lab] for lab in order))


def input_shapes(parsed: Parsed) -> tuple[tuple[int, ...], ...]:
    """The operands' shapes, as ``parsed`` holds them: a label's size on each axis, 1 on a dropped broadcast axis.

    Examples:
        >>> from tropical_gemm.einsum.parse import parse_subscripts
        >>> input_shapes(parse_subscripts("...ij,...jk->...ik", ((2, 1, 3, 4), (5, 4, 6))))
        ((2, 1, 3, 4), (5, 4, 6))
    """
    return tuple(tuple(1 if axis in drop else parsed.sizes[lab] for axis, lab in enumerate(labels))
                 for labels, drop in zip(parsed.inputs, parsed.drop))


def is_c_contiguous(shape: tuple[int, ...], strides: tuple[int, ...]) -> bool:
    """CuPy's (and numpy's) C-contiguity: size-1 axes' strides do not count; an empty array is contiguous."""
    if 0 in shape:
        return True
    step = 1
    for size, stride in zip(reversed(shape), reversed(strides)):
        if size != 1:
            if stride != step:
                return False
            step *= size
    return True


def regrouped(shape: tuple[int, ...], strides: tuple[int, ...], target: tuple[int, ...]) -> tuple[int, ...] | None:
    """The strides of ``target`` as a view of ``shape``/``strides``, as the array path's regroup finds them.

    A C-contiguous view keeps its own strides where the shape stays and gets
    contiguous ones where it changes (CuPy's reshape); any other view asks
    ``nocopy_strides``.  None: the regroup needs a copy.
    """
    if is_c_contiguous(shape, strides):
        return strides if shape == target else contiguous_strides(target)
    return nocopy_strides(shape, strides, target)


def permuted(view: View, perm: tuple[int, ...]) -> View:
    return View(view.source, tuple(view.shape[p] for p in perm), tuple(view.strides[p] for p in perm))


class _Tracer:
    """The buffers and launches found so far; ``last`` of a buffer is set when a step reads it."""

    def __init__(self, itemsize: int, steps: int) -> None:
        self.itemsize, self.steps = itemsize, steps
        self.ops: list[Copy | Product | Rows] = []
        self.buffers: list[list[Any]] = []  # [nbytes, first, last, final]

    def new(self, nbytes: int, first: int, last: int) -> int:
        self.buffers.append([nbytes, first, last, False])
        return len(self.buffers) - 1

    def values(self, step: int, shape: tuple[int, ...]) -> tuple[int, View]:
        """A step's C-contiguous result, read by a later step (which sets its ``last``)."""
        buf = self.new(math.prod(shape) * self.itemsize, step, step)
        return buf, View(("buffer", buf), shape, contiguous_strides(shape))

    def read(self, view: View, perm: tuple[int, ...], target: tuple[int, ...], step: int) -> View:
        """``view`` permuted and regrouped to ``target`` for a launch of ``step``: a view, or a copy's buffer."""
        if view.source[0] == "buffer":
            self.buffers[view.source[1]][2] = step
        p = permuted(view, perm)
        strides = regrouped(p.shape, p.strides, target)
        if strides is not None:
            return View(p.source, target, strides)
        dst = self.new(math.prod(p.shape) * self.itemsize, step, step)
        self.ops.append(Copy(step, p, dst))
        return View(("buffer", dst), target, contiguous_strides(target))

    def argmax(self, step: int, cells: int, kept: bool) -> int:
        """A step's int32 argmax: kept to the end of the run, or scratch for this step alone."""
        return self.new(cells * INDEX_BYTES, step, self.steps if kept else step)


def trace(plan: Plan, parsed: Parsed, shapes: tuple[tuple[int, ...], ...], strides: tuple[tuple[int, ...], ...],
          itemsize: int, want_argmax: bool) -> Program | None:
    """The program of ``plan`` on operands of these shapes and element strides; None where addresses cannot serve.

    None for a plan of no steps (its result is a view of an input), any size
    0, and a step whose argmax would need 64 bits (K >= 2**31): those run on
    the array path.
    """
    if not plan.steps or 0 in parsed.sizes or any(math.prod(s.k_sizes) >= 2**31 for s in plan.steps):
        return None
    t_ = _Tracer(itemsize, len(plan.steps))
    live = [operand_view(i, shape, st, labels, drop)
            for i, (shape, st, labels, drop) in enumerate(zip(shapes, strides, parsed.inputs, parsed.drop))]
    argmaxes: list[int | None] = []
    for t, step in enumerate(plan.steps):
        if isinstance(step, Pair):
            a, b = live[step.left], live[step.right]
            del live[max(step.left, step.right)], live[min(step.left, step.right)]
            out, value = _pair(t_, t, step, a, b, want_argmax)
            live.append(value)
        else:
            out, value = _rows(t_, t, step, live[step.src], want_argmax)
            if step.in_place:
                live[step.src] = value
            else:
                del live[step.src]
                live.append(value)
        argmaxes.append(out if want_argmax else None)
    return _finish(t_, live, argmaxes)


def _pair(t_: _Tracer, t: int, step: Pair, a: View, b: View, want_argmax: bool) -> tuple[int | None, View]:
    a3 = t_.read(a, step.a_perm, step.a_shape, t)
    b3 = t_.read(b, step.b_perm, step.b_shape, t)
    out, value = t_.values(t, step.out_shape)
    idx = t_.argmax(t, math.prod(step.out_shape), True) if want_argmax and step.contracted else None
    t_.ops.append(Product(t, a3, b3, out, idx))
    return idx, value


def _rows(t_: _Tracer, t: int, step: Reduce, x: View, want_argmax: bool) -> tuple[int | None, View]:
    x2 = t_.read(x, step.perm, step.shape2, t)
    out, value = t_.values(t, step.out_shape)
    idx = t_.argmax(t, step.shape2[0], want_argmax)
    t_.ops.append(Rows(t, x2, out, idx))
    return idx, value


def _finish(t_: _Tracer, live: list[View], argmaxes: list[int | None]) -> Program | None:
    """The last step's values and argmax go to the result's block; anything else live means: not replayable."""
    result = live[0].source
    last = t_.ops[-1]
    if len(live) != 1 or result[0] != "buffer" or result[1] != last.out:
        return None
    t_.buffers[result[1]][3] = True
    if argmaxes[-1] is not None:
        t_.buffers[argmaxes[-1]][3] = True
    buffers = tuple(Buffer(nbytes, first, last_step, final) for nbytes, first, last_step, final in t_.buffers)
    return Program(tuple(t_.ops), buffers, result[1], tuple(argmaxes))


# ------------------------------------------------------------------ layout


def aligned(nbytes: int) -> int:
    return -(-nbytes // ALIGN) * ALIGN


@dataclass(frozen=True)
class Layout:
    """Each buffer's place: ``(block, offset)``, block 0 the arena and 1 the result's; each block's size."""

    places: tuple[tuple[int, int], ...]
    arena_bytes: int
    final_bytes: int


def layout(buffers: tuple[Buffer, ...] | list[Buffer], steps: int) -> Layout:
    """Offsets for ``buffers``: the result's block in order; in the arena, buffers kept to the end of the run
    (argmaxes, ``last >= steps``) one after another, then the others first-fit among the buffers that are
    live at once (buffers come in the order of their first step, as ``trace`` makes them)."""
    places: list[tuple[int, int]] = [(0, 0)] * len(buffers)
    final_top = kept_top = 0
    for i, buf in enumerate(buffers):
        if buf.final:
            places[i], final_top = (1, final_top), final_top + aligned(buf.nbytes)
        elif buf.last >= steps:
            places[i], kept_top = (0, kept_top), kept_top + aligned(buf.nbytes)
    active: list[tuple[int, int, int]] = []  # (offset, end, last step) of placed short-lived buffers
    top = kept_top
    for i, buf in sorted(enumerate(buffers), key=lambda item: item[1].first):
        if buf.final or buf.last >= steps:
            continue
        active = [a for a in active if a[2] >= buf.first]
        offset = kept_top
        for start, end, _ in sorted(active):
            if start - offset >= aligned(buf.nbytes):
                break
            offset = max(offset, end)
        active.append((offset, offset + aligned(buf.nbytes), buf.last))
        places[i] = (0, offset)
        top = max(top, offset + aligned(buf.nbytes))
    return Layout(tuple(places), top, final_top)
