"""einsum over the counting semirings: every operand a (values, counts) pair, every step on both arrays.

The plan and the lowering are einsum's own (``lower.execute``): a step's
views, permutations and regroupings apply to a ``Counted`` pair as to one
array, its product is the engine's counting product, and a reduction is a
product with a column of the semiring's one (value 0, count 1), which sums
the counts of every tie.  The two arrays of each operand are made
C-contiguous first, so that one set of element strides (what a diagonal view
reads) describes both.  One flags array serves every step and is read once,
after the last.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import counting
from ..engines import select_engine
from ..semirings import COUNT_DTYPE, CountingSemiring
from .lower import array_ops, execute
from .parse import Parsed
from .plan import Plan


class Counted:
    """Values and counts of one shape, viewed, permuted and reshaped together as one array."""

    def __init__(self, values: Any, counts: Any) -> None:
        self.values, self.counts = values, counts

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.values.shape)

    @property
    def strides(self) -> tuple[int, ...]:
        """The values' strides: the counts' in elements too (both are C-contiguous copies or views alike)."""
        return self.values.strides

    @property
    def itemsize(self) -> int:
        return self.values.itemsize

    def __getitem__(self, index: Any) -> "Counted":
        return Counted(self.values[index], self.counts[index])

    def transpose(self, perm: tuple[int, ...]) -> "Counted":
        return Counted(self.values.transpose(perm), self.counts.transpose(perm))

    def reshape(self, shape: tuple[int, ...]) -> "Counted":
        return Counted(self.values.reshape(shape), self.counts.reshape(shape))


class CountingOps:
    """``lower.execute``'s operations on ``Counted`` pairs, from the array operations of their library."""

    def __init__(self, kind: str, flags: Any) -> None:
        self.base = array_ops(kind)
        self.engine = self.base.engine
        self.flags = flags

    def strided(self, x: Counted, shape: tuple[int, ...], strides: tuple[int, ...]) -> Counted:
        return Counted(self.base.strided(x.values, shape, strides), self.base.strided(x.counts, shape, strides))

    def regroup(self, x: Counted, shape: tuple[int, ...]) -> Counted:
        return Counted(self.base.regroup(x.values, shape), self.base.regroup(x.counts, shape))

    def product(self, a: Counted, b: Counted, semiring: CountingSemiring, want_argmax: bool) -> tuple[Counted, None]:
        nb, m, _ = a.shape
        values, counts = counting.product(self.engine, a.values, a.counts, b.values, b.counts, semiring,
                                          (nb, m, b.shape[2]), self.flags)
        return Counted(values, counts), None

    def reduce_rows(self, x: Counted, semiring: CountingSemiring) -> tuple[Counted, None]:
        """⊕ of each row of ``(R, K)``: the product with a column of ones, (0, 1) each."""
        rows, k = x.shape
        ones_values = self._uploaded(np.zeros((1, k, 1), x.values.dtype), x.values)
        ones_counts = self._uploaded(np.ones((1, k, 1), COUNT_DTYPE), x.values)
        values, counts = counting.product(self.engine, x.values.reshape(1, rows, k), x.counts.reshape(1, rows, k),
                                          ones_values, ones_counts, semiring, (1, rows, 1), self.flags)
        return Counted(values.reshape(rows), counts.reshape(rows)), None

    def _uploaded(self, host: np.ndarray, like: Any) -> Any:
        """``host`` where ``like`` lives: a copy to the GPU, where a CuPy fill would compile a kernel of its own."""
        if self.engine.NAME == "cpu":
            return host
        from ..engines import cupy_module

        with like.device:
            return cupy_module().asarray(host)


def counted_operands(subscripts: Any, operands: tuple[Any, ...]) -> tuple[Any, tuple]:
    """``(subscripts, operands)`` with each (values, counts) pair as a ``Counted`` of contiguous arrays.

    In numpy's interleaved form (``subscripts`` not a string) the operands
    are every other argument, starting with ``subscripts`` itself.
    """
    if isinstance(subscripts, str):
        counted = tuple(_counted(x, i) for i, x in enumerate(operands))
        _one_values_dtype(counted)
        return subscripts, counted
    args = [subscripts, *operands]
    pairs = len(args) // 2
    for i in range(pairs):
        args[2 * i] = _counted(args[2 * i], i)
    _one_values_dtype(args[0:2 * pairs:2])
    return args[0], tuple(args[1:])


def _one_values_dtype(counted: "tuple[Counted, ...] | list[Counted]") -> None:
    """Every operand's values of one dtype, as ``matmul``'s pairs (the steps' kernels take one)."""
    if counted:
        counting.values_dtype(*(x.values.dtype for x in counted))


def _counted(x: Any, i: int) -> Counted:
    values, counts = counting.operand_pair(x, str(i))
    engine = select_engine(values, counts)
    values = engine.as_array(values)
    counting.values_dtype(values.dtype)
    counts = counting.counts_array(engine, counts, values, str(i))
    return Counted(_contiguous(engine, values), _contiguous(engine, counts))


def _contiguous(engine: Any, x: Any) -> Any:
    if engine.is_c_contiguous(x):
        return x
    if engine.NAME == "cpu":
        return np.ascontiguousarray(x)
    from ..engines.cuda_aux import contiguous

    return contiguous(x)


def run(plan: Plan, parsed: Parsed, operands: list[Counted], semiring: CountingSemiring,
        return_configuration: bool) -> tuple[Any, Any]:
    """The counting einsum's ``(values, counts)``, after checking every step's flag bits."""
    if return_configuration:
        raise ValueError(f"return_configuration=True is not defined for {semiring.name}: it counts every optimal "
                         "configuration rather than choosing one; use the plain semiring (e.g. max_plus) to get one")
    engine = select_engine(*(x.values for x in operands))
    flags = counting.new_flags(engine, operands[0].values)
    ops = CountingOps(engine.NAME, flags)
    result, _ = execute(plan, parsed, operands, ops, semiring, False)
    if not plan.steps:  # a view of an operand: its entries at the zero count 0, as every product's do
        rows = math.prod(result.shape)
        result = ops.reduce_rows(ops.regroup(result, (rows, 1)), semiring)[0].reshape(result.shape)
    counting.raise_on_flags(engine, flags, semiring)
    return result.values, result.counts
