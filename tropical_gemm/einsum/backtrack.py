"""Backtracking: the winning value of every contracted index, for each output element.

Each step kept its argmax: for every element of its result, the smallest
flat index over its contracted (or reduced) labels that attains the value.
Walking the steps from the last to the first, the labels of a step's result
are already known (they are output labels, or labels some later step
contracted), so its argmax, read at those positions, gives its contracted
labels.  Ties go to the smallest flat index at every step, so the answer is
fully determined by the plan and equal on every engine.

The walk reads ``out.size`` entries per step, on the host: the argmaxes are
copied there once (device-side gathers would need kernels outside the registry).
"""

from __future__ import annotations

from typing import Any, Hashable

import numpy as np

from .parse import Parsed
from .plan import Plan


def _output_grid(parsed: Parsed) -> dict[int, np.ndarray]:
    """For each output label, its coordinate at every output element."""
    shape = tuple(parsed.sizes[x] for x in parsed.output)
    grid = np.indices(shape, dtype=np.int64, sparse=True) if shape else []
    return {lab: np.broadcast_to(g, shape) for lab, g in zip(parsed.output, grid)}


def walk(plan: Plan, parsed: Parsed, argmaxes: list["np.ndarray | None"], is_zero: np.ndarray
         ) -> dict[Hashable, np.ndarray]:
    """The configuration: ``{name: values}`` for every label not in the output, each shaped like the output.

    Where an output element is the semiring's zero (``is_zero``) every
    configuration attains it and none wins, as in the products' argmax, so
    every label reads -1 there.
    """
    shape = tuple(parsed.sizes[x] for x in parsed.output)
    known: dict[int, np.ndarray] = _output_grid(parsed)
    dead = np.array(is_zero, dtype=bool).reshape(shape)
    for step, idx in zip(reversed(plan.steps), reversed(argmaxes)):
        labels = step.contracted if hasattr(step, "contracted") else step.reduced
        if not labels:
            continue
        if 0 in step.k_sizes:  # an empty contraction: every element is the zero, nothing won
            dead[...] = True
            known.update({lab: np.zeros(shape, dtype=np.int64) for lab in labels})
            continue
        at = tuple(known[x] for x in step.result)
        flat = np.asarray(idx)[at] if at else np.asarray(idx).reshape(())
        flat = np.broadcast_to(flat, shape).astype(np.int64)
        dead |= flat < 0
        for lab, value in zip(labels, np.unravel_index(np.maximum(flat, 0), step.k_sizes)):
            known[lab] = value
    out_labels = set(parsed.output)
    config = {}
    for lab, name in enumerate(parsed.names):
        if lab in out_labels:
            continue
        value = known.get(lab)
        value = np.zeros(shape, dtype=np.int64) if value is None else np.array(np.broadcast_to(value, shape))
        value[dead] = -1
        config[name] = value
    return config


def host_argmaxes(argmaxes: list[Any], to_host: Any) -> list["np.ndarray | None"]:
    """Each step's argmax as a numpy array (one copy per step, after all steps were queued)."""
    return [None if idx is None else to_host(idx) for idx in argmaxes]
