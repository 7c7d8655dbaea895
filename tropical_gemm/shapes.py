"""Shape rules of a batched product, as pure functions on tuples.

They follow ``numpy.matmul``: ``(..., M, K) @ (..., K, N)`` with the leading
(batch) dimensions broadcast, and 1-D operands promoted to matrices, then
squeezed from the result.  Both engines and the torch layer call these, so a
shape error reads the same whichever array type was passed.
"""

from __future__ import annotations

from typing import Any, NamedTuple


class ProductShape(NamedTuple):
    """The sizes of one (possibly batched) product ``C = A ⊗ B``.

    A ``NamedTuple`` rather than a frozen dataclass: every product call
    makes one, and a tuple is made in half the time.
    """

    batch: tuple[int, ...]
    m: int
    k: int
    n: int

    @property
    def out_shape(self) -> tuple[int, ...]:
        return (*self.batch, self.m, self.n)


def product_shape(a_shape: tuple[int, ...], b_shape: tuple[int, ...]) -> ProductShape:
    """Check two operand shapes and return the product's sizes.

    Raises ``ValueError`` naming the shapes when either operand has fewer than
    two dimensions, the inner sizes differ, or the batch dimensions do not
    broadcast.
    """
    if len(a_shape) < 2 or len(b_shape) < 2:
        raise ValueError(
            f"tropical matmul needs operands with at least 2 dimensions here, got shapes {a_shape} and {b_shape} "
            "(tropical_gemm.matmul and tropical_gemm.torch take 1-D operands as numpy.matmul does)"
        )
    m, k = a_shape[-2:]
    k_b, n = b_shape[-2:]
    if k != k_b:
        raise ValueError(
            f"inner dimensions differ: a has shape {a_shape} (K={k}) but b has shape {b_shape} (K={k_b})"
        )
    if len(a_shape) == len(b_shape) == 2:  # no batch: the common case, without the broadcasting loop
        return ProductShape((), m, k, n)
    return ProductShape(broadcast_batch(a_shape[:-2], b_shape[:-2], a_shape, b_shape), m, k, n)


def broadcast_batch(
    a_batch: tuple[int, ...], b_batch: tuple[int, ...], a_shape: tuple[int, ...], b_shape: tuple[int, ...]
) -> tuple[int, ...]:
    """Broadcast two batch shapes with numpy's rule (right-aligned, 1 stretches)."""
    ndim = max(len(a_batch), len(b_batch))
    a_full = (1,) * (ndim - len(a_batch)) + tuple(a_batch)
    b_full = (1,) * (ndim - len(b_batch)) + tuple(b_batch)
    out = []
    for da, db in zip(a_full, b_full):
        if da != db and 1 not in (da, db):
            raise ValueError(
                f"batch dimensions do not broadcast: a has shape {a_shape}, b has shape {b_shape}"
            )
        out.append(db if da == 1 else da)
    return tuple(out)


def operand_batch_index(index: tuple[int, ...], operand_batch: tuple[int, ...]) -> tuple[int, ...]:
    """Map an index into the broadcast batch onto an operand's own batch dims."""
    offset = len(index) - len(operand_batch)
    return tuple(0 if size == 1 else index[offset + d] for d, size in enumerate(operand_batch))


class Vectors(NamedTuple):
    """Which operands were 1-D, and so which axes ``numpy.matmul`` drops from the result."""

    a: bool
    b: bool

    def out_shape(self, promoted: tuple[int, ...]) -> tuple[int, ...]:
        """The result's shape, from the shape of the product of the promoted operands."""
        if self.b:
            promoted = promoted[:-1]
        if self.a:
            promoted = (*promoted[:-2], promoted[-1]) if not self.b else promoted[:-1]
        return promoted

    def squeeze(self, c: Any) -> Any:
        """The result, a view of ``c`` (the product of the promoted operands) without the added axes."""
        if self.b:
            c = c[..., 0]
        if self.a:
            c = c[..., 0] if self.b else c[..., 0, :]
        return c


NO_VECTORS = Vectors(False, False)


def promote_vectors(a: Any, b: Any) -> tuple[Any, Any, Vectors]:
    """``numpy.matmul``'s rule for 1-D operands: ``a`` of shape (K,) acts as (1, K), ``b`` as (K, 1).

    Works on any array type that indexes with ``None`` (numpy, cupy, dask,
    torch), and returns views.  0-D operands are a ``ValueError``.
    """
    if a.ndim == 0 or b.ndim == 0:
        raise ValueError(
            f"tropical matmul needs operands with at least 1 dimension, got shapes {tuple(a.shape)} and "
            f"{tuple(b.shape)} (as numpy.matmul, it has no scalar form)"
        )
    vectors = Vectors(a.ndim == 1, b.ndim == 1)
    if vectors == NO_VECTORS:
        return a, b, NO_VECTORS
    return (a[None, :] if vectors.a else a), (b[:, None] if vectors.b else b), vectors
