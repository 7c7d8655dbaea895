"""The CPU engine's backward pass: each gradient routed through its winning k, in numpy.

A scatter of M·N contributions (one per output element) costs far less than
the forward's M·N·K candidates, so it stays in plain numpy, where its order
of additions (batch by batch, then row-major) is easy to read and to match.
"""

from __future__ import annotations

import numpy as np

from ...semirings import Semiring
from ...shapes import operand_batch_index


@np.errstate(over="ignore", invalid="ignore")
def _backward_2d(
    grad_c: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    argmax: np.ndarray,
    semiring: Semiring,
    grad_a: np.ndarray,
    grad_b: np.ndarray,
) -> None:
    """Scatter one product's gradient into grad_a and grad_b, in row-major (i, j) order."""
    rows, cols = np.nonzero(argmax >= 0)
    ks = argmax[rows, cols].astype(np.intp)
    g = grad_c[rows, cols]
    a_val = a[rows, ks]
    b_val = b[ks, cols]
    if semiring.mul == "plus":
        np.add.at(grad_a, (rows, ks), g)
        np.add.at(grad_b, (ks, cols), g)
    elif semiring.mul == "times":
        np.add.at(grad_a, (rows, ks), g * b_val)
        np.add.at(grad_b, (ks, cols), g * a_val)
    else:
        to_a = semiring.winner_is_a(a_val, b_val, np.isnan)
        np.add.at(grad_a, (rows[to_a], ks[to_a]), g[to_a])
        to_b = ~to_a
        np.add.at(grad_b, (ks[to_b], cols[to_b]), g[to_b])


def _check_argmax_range(argmax: np.ndarray, k: int) -> None:
    """Indices outside [-1, K) would make this engine index out of bounds.

    Checked here, in the host engine: reading a device array's range would
    stall the stream, so the CUDA kernels instead skip indices outside [0, K).
    """
    if argmax.size == 0:
        return
    low, high = int(argmax.min()), int(argmax.max())
    if low < -1 or high >= k:
        raise ValueError(
            f"argmax holds indices in [{low}, {high}], but they must lie in [-1, {k - 1}] for K={k}"
        )


def backward(
    grad_c: np.ndarray,
    a: np.ndarray,
    b: np.ndarray,
    argmax: np.ndarray,
    semiring: Semiring,
    deterministic: bool,
    grad_a: np.ndarray,
    grad_b: np.ndarray,
) -> None:
    """Write the gradients of a (batched) product, reduced over broadcast batch dims, into ``grad_a``/``grad_b``.

    The CPU engine is always deterministic, whatever ``deterministic`` says.
    Contributions are added in float of the operands' dtype, batch by batch in
    order, then row-major within a batch: the order the CUDA engine's
    deterministic mode reproduces.
    """
    _check_argmax_range(argmax, a.shape[-1])
    grad_a.fill(0)
    grad_b.fill(0)
    for index in np.ndindex(*grad_c.shape[:-2]):
        ia = operand_batch_index(index, a.shape[:-2])
        ib = operand_batch_index(index, b.shape[:-2])
        _backward_2d(grad_c[index], a[ia], b[ib], argmax[index], semiring, grad_a[ia], grad_b[ib])
