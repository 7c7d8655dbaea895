"""Backtracking: the winning value of every contracted index, for each output element.

Each step kept its argmax: for every element of its result, the smallest
flat index over its contracted (or reduced) labels that attains the value.
Walking the steps from the last to the first, the labels of a step's result
are already known (they are output labels, or labels some later step
contracted), so its argmax, read at those positions, gives its contracted
labels.  Ties go to the smallest flat index at every step, so the answer is
fully determined by the plan and equal on every engine.

Reading a step whose result labels are all output labels is a view of its
argmax (axes permuted, missing output labels broadcast), not a gather; only
steps under a data-dependent label need one ``take`` per step.  When one
step alone chose anything (a product, a reduction), the configuration *is*
that step's argmax in output order: ``direct`` finds that case, which needs
no walk and, on the GPU, no copy to the host.  Any other walk of a GPU
result with an output runs on the GPU (``device_walk``, one kernel launch),
with this module's ``walk`` as its reference.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Hashable

import numpy as np

from ..dtypes import argmax_dtype
from .parse import Parsed
from .plan import Plan


def _chosen(step: Any) -> tuple[int, ...]:
    """The labels a step chose a value for: a product's contracted ones, a reduction's reduced ones."""
    return step.contracted if hasattr(step, "contracted") else step.reduced


def config_dtype(plan: Plan) -> np.dtype:
    """int32 values, unless some step contracts over 2**31 or more flat positions (the argmax's own rule)."""
    return argmax_dtype(max((math.prod(s.k_sizes) for s in plan.steps if _chosen(s)), default=0))


def direct(plan: Plan) -> "int | None":
    """The step whose argmax is the whole configuration, or None where a walk is needed.

    That is the last step, when no earlier step chose anything and it chose
    one label over a non-empty range: its result is the output (permuted by
    ``plan.final``), and its argmax is -1 exactly where the output is the zero.
    """
    choosing = [t for t, step in enumerate(plan.steps) if _chosen(step)]
    if choosing != [len(plan.steps) - 1]:
        return None
    last = plan.steps[-1]
    return None if len(_chosen(last)) != 1 or 0 in last.k_sizes else choosing[0]


def _read(idx: np.ndarray, result: tuple[int, ...], known: dict[int, np.ndarray], output: tuple[int, ...]
          ) -> np.ndarray:
    """``idx`` (axes labelled ``result``) at every output element: a view when ``result`` holds output labels only."""
    if not result:
        return idx.reshape((1,) * len(output))
    if all(x in output for x in result):
        order = sorted(range(len(result)), key=lambda axis: output.index(result[axis]))
        return idx.transpose(order).reshape(tuple(idx.shape[result.index(x)] if x in result else 1 for x in output))
    strides = np.cumprod((1,) + idx.shape[:0:-1])[::-1]
    kind = np.int32 if idx.size < 2**31 else np.int64  # int32 arithmetic is the cheaper where it is exact
    # one buffer of the positions' broadcast shape, each label's term added in place
    flat = np.zeros(np.broadcast_shapes(*(known[x].shape for x in result)), dtype=kind)
    for x, s in zip(result, strides):
        np.add(flat, known[x] * kind(s), out=flat, casting="unsafe")
    # where an earlier read found no winner (-1, marked dead in the end) flat may fall outside: wrap, never raise
    return np.ascontiguousarray(idx).ravel().take(flat, mode="wrap")


def walk(plan: Plan, parsed: Parsed, argmaxes: list["np.ndarray | None"], is_zero: Callable[[], np.ndarray]
         ) -> dict[Hashable, np.ndarray]:
    """The configuration: ``{name: values}`` for every label not in the output, each shaped like the output.

    Where an output element is the semiring's zero every configuration
    attains it and none wins, as in the products' argmax, so every label
    reads -1 there.  ``is_zero`` is called only where the last step's argmax
    does not already say so.
    """
    output = parsed.output
    shape = tuple(parsed.sizes[x] for x in output)
    if not shape:
        return walk_scalar(plan, parsed, argmaxes, is_zero)
    known: dict[int, np.ndarray] = {
        lab: np.arange(parsed.sizes[lab]).reshape(tuple(-1 if x == lab else 1 for x in output)) for lab in output}
    maybe_dead: list[np.ndarray] = []
    root_chooses = bool(plan.steps) and bool(_chosen(plan.steps[-1]))
    all_dead = False
    for step, idx in zip(reversed(plan.steps), reversed(argmaxes)):
        labels = _chosen(step)
        if not labels:
            continue
        if 0 in step.k_sizes:
            # an empty contraction: every element is the zero and nothing won; an earlier step's argmax may
            # be empty (a result over this empty range), so no further step is read
            all_dead = True
            break
        flat = _read(np.asarray(idx), step.result, known, output)
        maybe_dead.append(flat)
        if len(labels) == 1:
            known[labels[0]] = flat
            continue
        for lab, value in zip(labels, np.unravel_index(np.maximum(flat, 0), step.k_sizes)):
            known[lab] = value
    dead = _dead(maybe_dead, shape, all_dead, None if root_chooses else is_zero)
    return _assemble(parsed, known, shape, dead, config_dtype(plan))


def walk_scalar(plan: Plan, parsed: Parsed, argmaxes: list[Any], is_zero: Callable[[], Any]
                ) -> dict[Hashable, np.ndarray]:
    """``walk`` for a scalar output (a network's optimum): one element read per step, in Python integers.

    Networks have many small steps, where whole-array numpy operations on
    single elements would cost more than the reads themselves.  The argmaxes
    may stay on their device (cupy, torch): an integer index is a view and
    ``int`` copies one element, so no kernel runs and no whole argmax moves.
    """
    known: dict[int, int] = {}
    dead = bool(plan.steps) and not _chosen(plan.steps[-1]) and bool(is_zero())
    for step, idx in zip(reversed(plan.steps), reversed(argmaxes)):
        labels = _chosen(step)
        if dead:  # every label reads -1, and an earlier step's argmax may be empty
            break
        if not labels:
            continue
        flat = -1 if 0 in step.k_sizes else int(idx[tuple(known.get(x, 0) for x in step.result)])
        dead = dead or flat < 0
        flat = max(flat, 0)
        for lab, size in zip(reversed(labels), reversed(step.k_sizes)):
            flat, known[lab] = divmod(flat, size) if size else (0, 0)
    dtype = config_dtype(plan)
    out_labels = set(parsed.output)
    return {name: np.array(-1 if dead else known.get(lab, 0), dtype=dtype)
            for lab, name in enumerate(parsed.names) if lab not in out_labels}


def _dead(maybe_dead: list[np.ndarray], shape: tuple[int, ...], all_dead: bool,
          is_zero: "Callable[[], np.ndarray] | None") -> "np.ndarray | None":
    """Where nothing won (None where that is nowhere): a -1 in any step's argmax read, or a zero output."""
    if all_dead:
        return np.ones(shape, dtype=bool)
    dead = np.zeros(shape, dtype=bool) if is_zero is None else np.array(is_zero(), dtype=bool).reshape(shape)
    for flat in maybe_dead:
        dead |= flat < 0
    return dead if dead.any() else None


def _assemble(parsed: Parsed, known: dict[int, np.ndarray], shape: tuple[int, ...], dead: "np.ndarray | None",
              dtype: np.dtype) -> dict[Hashable, np.ndarray]:
    out_labels = set(parsed.output)
    config = {}
    for lab, name in enumerate(parsed.names):
        if lab in out_labels:
            continue
        value = np.zeros(shape, dtype=dtype)
        if lab in known:
            value[...] = known[lab]
        if dead is not None:
            value[dead] = -1
        config[name] = value
    return config


def host_argmaxes(argmaxes: list[Any], to_host: Any) -> list["np.ndarray | None"]:
    """Each step's argmax as a numpy array (one copy per step, after all steps were queued)."""
    return [None if idx is None else to_host(idx) for idx in argmaxes]
