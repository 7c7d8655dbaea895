"""Lowering for torch tensors: the same steps, through ``tropical_gemm.torch``'s differentiable products.

Each pairwise step is ``tropical_matmul_with_argmax`` (a custom op with an
autograd formula, so gradients are those of the composed products,
winner-take-all, and ``torch.compile`` traces it without a graph break).  A
reduction of ``(R, K)`` is the product with a ``(K, 1)`` column of the
semiring's one, which is exact (``x ⊗ one = x``, NaN and the zero included)
and so inherits the product's gradient, argmax and tie rule.  Views
(permutes, reshapes, diagonals) are torch's own, which autograd follows.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..semirings import Semiring


def _strided(x: Any, shape: tuple[int, ...], strides: tuple[int, ...]) -> Any:
    return x.as_strided(shape, strides, x.storage_offset())


class TorchOps:
    """What lowering needs, for torch tensors on any device torch and the engines share."""

    strided = staticmethod(_strided)

    @staticmethod
    def regroup(view: Any, shape: tuple[int, ...]) -> Any:
        return view.reshape(shape)  # a view where it can be, else torch's own copy

    @staticmethod
    def product(a: Any, b: Any, semiring: Semiring, want_argmax: bool) -> tuple[Any, Any]:
        from ..torch import tropical_matmul, tropical_matmul_with_argmax

        if want_argmax:
            return tropical_matmul_with_argmax(a, b, semiring)
        return tropical_matmul(a, b, semiring), None

    @staticmethod
    def reduce_rows(x: Any, semiring: Semiring) -> tuple[Any, Any]:
        import torch

        from ..torch import tropical_matmul_with_argmax

        one = semiring.one(np.dtype(str(x.dtype).removeprefix("torch.")))
        column = torch.full((x.shape[1], 1), one.item(), dtype=x.dtype, device=x.device)
        values, idx = tropical_matmul_with_argmax(x, column, semiring)
        return values.reshape(x.shape[0]), idx.reshape(x.shape[0])


def to_host(idx: Any) -> np.ndarray:
    return idx.detach().cpu().numpy()


def from_host(x: np.ndarray, like: Any) -> Any:
    import torch

    return torch.from_numpy(x).to(like.device)
