"""How a product's batch dimensions reach the kernels: strides, folding, and splitting.

The kernels index at most ``KERNEL_BATCH_DIMS`` batch dimensions with any
strides, so no operand is ever copied: dimensions that every array walks with
one stride are merged, and only a batch that still has more independent
dimensions is split.  Pure functions on shapes and strides (``split_batches``
slices arrays, which is a view in every array library), so they run without
a GPU.
"""

from __future__ import annotations

import math
from typing import Any, Iterator, NamedTuple

#: Batch dimensions a kernel indexes itself; more are folded or looped over.
KERNEL_BATCH_DIMS = 3


def element_strides(x: Any) -> tuple[int, ...]:
    """``x``'s strides in elements (the kernels index elements, arrays report bytes)."""
    return tuple(s // x.itemsize for s in x.strides)


def fold_dims(shape: tuple[int, ...], strides: tuple[int, ...]) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The same elements in the same row-major order with fewer dims: size-1 dims dropped, runs merged.

    Examples:
        >>> from tropical_gemm.engines.cuda.batching import fold_dims
        >>> fold_dims((2, 1, 3, 4), (12, 12, 4, 1))
        ((24,), (1,))
        >>> fold_dims((3, 4), (1, 3))        # a transposed view stays two dims
        ((3, 4), (1, 3))
    """
    sizes: list[int] = []
    steps: list[int] = []
    for size, stride in zip(shape, strides):
        if size == 1:
            continue
        if sizes and steps[-1] == stride * size:
            sizes[-1] *= size
            steps[-1] = stride
            continue
        sizes.append(size)
        steps.append(stride)
    return tuple(sizes), tuple(steps)


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    """The strides, in elements, of a C-contiguous array of ``shape``."""
    strides, step = [], 1
    for size in reversed(shape):
        strides.append(step)
        step *= size
    return tuple(reversed(strides))


def batch_strides(operand_shape: tuple[int, ...], operand_strides: tuple[int, ...],
                  batch: tuple[int, ...]) -> tuple[int, ...]:
    """Strides of an operand's batch dims over the broadcast batch; 0 where it broadcasts."""
    own = len(operand_shape) - 2
    out = []
    for d in range(len(batch)):
        od = d - (len(batch) - own)
        out.append(0 if od < 0 or operand_shape[od] == 1 else operand_strides[od])
    return tuple(out)


def fold_batch(batch: tuple[int, ...], strides: list[tuple[int, ...]]) -> tuple[tuple[int, ...], list[tuple[int, ...]]]:
    """Merge batch dims that every array walks with one stride; drop size-1 dims.

    The result indexes the same elements in the same (row-major) order, which
    both the kernels' batch loop and the deterministic gradient order rely on.
    """
    dims: list[int] = []
    folded: list[list[int]] = [[] for _ in strides]
    for d, size in enumerate(batch):
        if size == 1:
            continue
        if dims and all(f[-1] == s[d] * size for f, s in zip(folded, strides)):
            dims[-1] *= size
            for f, s in zip(folded, strides):
                f[-1] = s[d]
            continue
        dims.append(size)
        for f, s in zip(folded, strides):
            f.append(s[d])
    return tuple(dims), [tuple(f) for f in folded]


def _padded(values: tuple[int, ...], fill: int) -> tuple[int, ...]:
    return (fill,) * (KERNEL_BATCH_DIMS - len(values)) + tuple(values)


class Problem(NamedTuple):
    """A batched problem in the form the kernels take: sizes, and the folded batch with each array's strides."""

    m: int
    n: int
    k: int
    batch_dims: tuple[int, ...]
    batch_strides: tuple[tuple[int, ...], ...]

    @property
    def batches(self) -> int:
        return math.prod(self.batch_dims)

    def batch_args(self) -> tuple[int, ...]:
        """``d1, d2`` then each array's three padded batch strides."""
        dims = _padded(self.batch_dims, 1)
        args = [dims[1], dims[2]]
        for s in self.batch_strides:
            args += list(_padded(s, 0))
        return tuple(args)


def split_batches(batch: tuple[int, ...], arrays: list[Any]) -> Iterator[tuple[list[Any], tuple[int, ...]]]:
    """Yield (sub-arrays, batch) pieces whose batch folds into the kernels' dims.

    Almost every call yields once.  Only a batch with more independent dims
    than a kernel indexes is split on its leading dim, in ascending order, so
    the deterministic gradient order is kept.
    """
    if len(batch) <= KERNEL_BATCH_DIMS:
        yield arrays, batch
        return
    strides = [batch_strides(x.shape, element_strides(x), batch) for x in arrays]
    dims, _ = fold_batch(batch, strides)
    if len(dims) <= KERNEL_BATCH_DIMS:
        yield arrays, batch
        return
    for i in range(batch[0]):
        yield from split_batches(batch[1:], [_leading_slice(x, i, len(batch)) for x in arrays])


def _leading_slice(x: Any, i: int, batch_ndim: int) -> Any:
    """``x`` at index ``i`` of the broadcast batch's leading dim (as broadcasting reads it)."""
    if x.ndim - 2 < batch_ndim:
        return x
    return x[0] if x.shape[0] == 1 else x[i]
