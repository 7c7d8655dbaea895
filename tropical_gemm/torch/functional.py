"""The public products on tensors: checks, then the eager path or the custom ops.

In plain eager code (no ``torch.compile``, ``torch.func`` transform,
dispatch or function mode, tracer or tensor subclass) the products skip the
dispatcher and run the kernels through one ``autograd.Function``
(``eager``); under a ``torch.func`` transform or with forward-mode tangents
they go through ``transforms``; otherwise they call the custom ops (``ops``).  1-D operands and
half precision are composed of torch ops around the product, so autograd and
compile see through them.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ..semirings import Semiring
from ..shapes import NO_VECTORS, promote_vectors
from . import eager, kernels
from .ops import matmul_op, matmul_with_argmax_op
from .transforms import transformed_product
from .validation import HALVES, check_same_dtype, check_semiring, check_tensors, has_tangents, semiring_name


def tropical_matmul(a: Tensor, b: Tensor, semiring: "str | Semiring" = "max_plus") -> Tensor:
    """Tropical product ``C[..., i, j] = ⊕_k a[..., i, k] ⊗ b[..., k, j]`` of two tensors.

    Shapes broadcast as in ``torch.matmul`` (1-D operands included), dtypes
    are float32, float64, int32, int64, float16 or bfloat16 (both the same;
    the halves are computed in float32 and rounded once, which is exact), and
    both tensors sit on one device (cpu or cuda).  Differentiable in ``a`` and ``b`` for float
    dtypes; the gradient of each ``C[i, j]`` goes through its winning ``k``
    as in [`matmul_backward`][tropical_gemm.matmul_backward].  When no gradient
    is needed (integers, ``torch.no_grad``, inputs without ``requires_grad``)
    the argmax is not computed at all.

    Examples:
        >>> import torch
        >>> from tropical_gemm.torch import tropical_matmul
        >>> tropical_matmul(torch.tensor([[0., 1.]]), torch.tensor([[2.], [0.]]))
        tensor([[2.]])
        >>> a = torch.tensor([[0., 3.]], requires_grad=True)
        >>> tropical_matmul(a, torch.tensor([[1.], [1.]]), "max_plus").sum().backward()
        >>> a.grad                             # only k = 1 won
        tensor([[0., 1.]])
    """
    return _product(a, b, semiring, with_argmax=False)


def tropical_matmul_with_argmax(a: Tensor, b: Tensor, semiring: "str | Semiring" = "max_plus") -> tuple[Tensor, Tensor]:
    """``(values, argmax)``: the product and, per entry, the smallest winning ``k``.

    ``argmax`` is int32 (int64 once K >= 2**31), ``-1`` where the value is the
    semiring's zero, and never requires grad; ``values`` is differentiable as
    in [`tropical_matmul`][tropical_gemm.torch.tropical_matmul].  Use
    ``argmax.long()`` to index with it.

    Examples:
        >>> import torch
        >>> from tropical_gemm.torch import tropical_matmul_with_argmax
        >>> values, argmax = tropical_matmul_with_argmax(torch.tensor([[0., 3.]]), torch.tensor([[1.], [1.]]))
        >>> values, argmax
        (tensor([[4.]]), tensor([[1]], dtype=torch.int32))
    """
    return _product(a, b, semiring, with_argmax=True)


def _product(a: Tensor, b: Tensor, semiring: "str | Semiring", with_argmax: bool) -> Any:
    """Both public products: values, or ``(values, argmax)`` when ``with_argmax``.

    The argmax is computed only where it is returned or autograd needs it.
    """
    check_semiring(semiring)
    check_tensors(a, b)
    if a.dtype in HALVES or b.dtype in HALVES or a.dim() < 2 or b.dim() < 2:
        return _composite(a, b, semiring, with_argmax)
    name = semiring_name(semiring)
    if eager.transformed() or has_tangents(a, b):
        result = transformed_product(a, b, name)
        return result if with_argmax else result[0]
    needs_grad = _needs_grad(a, b)
    if needs_grad:
        kernels.prefetch_backward(a, name)
    if eager.plain_eager(a, b):
        if needs_grad:
            return eager.eager_product(a, b, name, with_argmax)
        result = kernels.forward(a, b, name, with_argmax)
    elif needs_grad or with_argmax:
        result = matmul_with_argmax_op(a, b, name)
    else:
        return matmul_op(a, b, name)
    return result if with_argmax else result[0]


def _needs_grad(a: Tensor, b: Tensor) -> bool:
    """Whether autograd will ask for gradients, so the argmax must be kept."""
    return torch.is_grad_enabled() and (a.requires_grad or b.requires_grad)


def _composite(a: Tensor, b: Tensor, semiring: "str | Semiring", with_argmax: bool) -> Any:
    """1-D operands and half precision, as torch ops around the product, so autograd and compile see through.

    1-D operands are promoted and the result squeezed, as ``torch.matmul``
    does.  float16 and bfloat16 widen to float32 and the values round once
    back: the gradient then flows through both casts, summed in float32.
    """
    check_same_dtype(a, b)
    a, b, vectors = promote_vectors(a, b)
    storage = a.dtype
    if storage in HALVES:
        a, b = a.float(), b.float()
    if with_argmax:
        values, argmax = tropical_matmul_with_argmax(a, b, semiring)
    else:
        values, argmax = tropical_matmul(a, b, semiring), None
    values = values.to(storage)
    if vectors != NO_VECTORS:
        values, argmax = vectors.squeeze(values), None if argmax is None else vectors.squeeze(argmax)
    return (values, argmax) if with_argmax else values
