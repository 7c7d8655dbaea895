"""torch.func and forward-mode AD: the products as ``autograd.Function``s in the style torch.func needs.

The custom operators' own autograd formulas (``ops``) serve ``backward``,
``torch.compile`` and the dispatcher, but torch.func's ``grad``, ``jacrev``
and ``jacfwd`` take only an ``autograd.Function`` with ``setup_context`` (and
a ``jvp`` for forward mode).  Under a torch.func transform, or with
forward-mode tangents, the public functions call the Functions here instead;
they run the same operators, and ``generate_vmap_rule`` lets ``vmap`` map
them through the operators' registered vmap rules.

Forward mode: the tangent of ``C[i, j]`` is that of its winning candidate
(``ops.product_tangent``), which every semiring has.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from ..semirings import get_semiring
from .ops import backward_of_backward, gather_winners, matmul_backward_op, matmul_with_argmax_op, product_tangent


class Product(torch.autograd.Function):
    """``(values, argmax)`` of ``tropical_gemm::matmul_with_argmax``, differentiable in both modes."""

    generate_vmap_rule = True

    @staticmethod
    def forward(a: Tensor, b: Tensor, semiring: str) -> tuple[Tensor, Tensor]:
        return matmul_with_argmax_op(a, b, semiring)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
        a, b, semiring = inputs
        ctx.semiring = semiring
        ctx.mark_non_differentiable(output[1])
        ctx.save_for_backward(a, b, output[1])
        ctx.save_for_forward(a, b, output[1])

    @staticmethod
    def backward(ctx: Any, grad_values: Tensor, _grad_argmax: Any) -> tuple:
        a, b, argmax = ctx.saved_tensors
        grad_a, grad_b = Backward.apply(grad_values, a, b, argmax, ctx.semiring)
        return grad_a, grad_b, None

    @staticmethod
    def jvp(ctx: Any, tangent_a: "Tensor | None", tangent_b: "Tensor | None", _semiring: None) -> tuple:
        a, b, argmax = ctx.saved_tensors
        return product_tangent(get_semiring(ctx.semiring), a, b, argmax, tangent_a, tangent_b), None


class Backward(torch.autograd.Function):
    """``tropical_gemm::matmul_backward``, itself differentiable in both modes (Hessians, ``torch.func.hessian``)."""

    generate_vmap_rule = True

    @staticmethod
    def forward(grad_c: Tensor, a: Tensor, b: Tensor, argmax: Tensor, semiring: str) -> tuple[Tensor, Tensor]:
        return matmul_backward_op(grad_c, a, b, argmax, semiring)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple, output: tuple) -> None:
        grad_c, a, b, argmax, semiring = inputs
        ctx.semiring = semiring
        ctx.save_for_backward(grad_c, a, b, argmax)
        ctx.save_for_forward(grad_c, a, b, argmax)

    @staticmethod
    def backward(ctx: Any, tangent_a: Tensor, tangent_b: Tensor) -> tuple:
        return backward_of_backward(ctx, tangent_a, tangent_b)

    @staticmethod
    def jvp(ctx: Any, tangent_grad_c: "Tensor | None", tangent_a: "Tensor | None", tangent_b: "Tensor | None",
            _tangent_argmax: None, _semiring: None) -> tuple:
        """The backward moved along the tangents (forward over reverse: ``torch.func.hessian``).

        It is linear in ``grad_c``; in ``a`` and ``b`` it moves only for
        ``max_mul``, whose gradients carry the other operand: those terms are
        routed to the winning k as ``backward_of_backward`` routes them.
        """
        grad_c, a, b, argmax = ctx.saved_tensors
        moved_a, moved_b = (matmul_backward_op(tangent_grad_c, a, b, argmax, ctx.semiring)
                            if tangent_grad_c is not None else (torch.zeros_like(a), torch.zeros_like(b)))
        if get_semiring(ctx.semiring).mul == "times":
            ta_w, tb_w = gather_winners(torch.zeros_like(a) if tangent_a is None else tangent_a,
                                        torch.zeros_like(b) if tangent_b is None else tangent_b, argmax)
            moved_a = moved_a + matmul_backward_op(grad_c * tb_w, a, b, argmax, "max_plus")[0]
            moved_b = moved_b + matmul_backward_op(grad_c * ta_w, a, b, argmax, "max_plus")[1]
        return moved_a, moved_b


def transformed_product(a: Tensor, b: Tensor, semiring: str) -> tuple[Tensor, Tensor]:
    """The product under a torch.func transform or with forward-mode tangents."""
    return Product.apply(a, b, semiring)
