"""The custom operators, their fake kernels and their autograd formulas, double backward included.

The products are ``torch.library.custom_op`` operators in the
``tropical_gemm`` namespace, each with a fake (meta) kernel and an autograd
formula, so they work under ``torch.compile(fullgraph=True)`` without graph
breaks and pass ``torch.library.opcheck``:

* ``tropical_gemm::matmul(a, b, semiring)`` -> values, forward only;
* ``tropical_gemm::matmul_with_argmax(a, b, semiring)`` -> (values, argmax),
  differentiable in ``a`` and ``b`` through the saved argmax;
* ``tropical_gemm::matmul_backward(grad_c, a, b, argmax, semiring)`` ->
  (grad_a, grad_b), itself differentiable, so double backward works.
"""

from __future__ import annotations

import inspect
import os
from typing import Any

import torch
from torch import Tensor

from ..semirings import Semiring, get_semiring
from .kernels import backward, empty_outputs, forward
from .validation import check_backward_inputs


def _known_to_inspect(module_file: str, module_name: str) -> None:
    """Tell ``inspect`` which module this file is, before the registrations below.

    Registering an op records its source line through ``inspect.getmodule``,
    which, for a file it has not mapped yet, calls ``hasattr(m, "__file__")`` on
    every module in ``sys.modules``.  cupy keeps ``cupyx`` there as a lazy
    module, so that scan would import cupyx and scipy.sparse (most of a
    second) in any process that imported cupy first.
    """
    path = os.path.normcase(os.path.abspath(module_file))
    for key in (path, os.path.realpath(path)):
        inspect.modulesbyfile[key] = module_name


_known_to_inspect(__file__, __name__)


@torch.library.custom_op("tropical_gemm::matmul", mutates_args=())
def matmul_op(a: Tensor, b: Tensor, semiring: str) -> Tensor:
    """Values only: no argmax is written, for inference and integer products."""
    return forward(a, b, semiring, with_argmax=False)[0]


@matmul_op.register_fake
def _(a: Tensor, b: Tensor, semiring: str) -> Tensor:
    return empty_outputs(a, b, semiring, with_argmax=False)[0]


@torch.library.custom_op("tropical_gemm::matmul_with_argmax", mutates_args=())
def matmul_with_argmax_op(a: Tensor, b: Tensor, semiring: str) -> tuple[Tensor, Tensor]:
    """Values and argmax, differentiable in ``a`` and ``b`` through the argmax."""
    return forward(a, b, semiring, with_argmax=True)


@matmul_with_argmax_op.register_fake
def _(a: Tensor, b: Tensor, semiring: str) -> tuple[Tensor, Tensor]:
    return empty_outputs(a, b, semiring, with_argmax=True)


@torch.library.custom_op("tropical_gemm::matmul_backward", mutates_args=())
def matmul_backward_op(grad_c: Tensor, a: Tensor, b: Tensor, argmax: Tensor, semiring: str) -> tuple[Tensor, Tensor]:
    """The core ``matmul_backward``, as an op so that it can itself be differentiated."""
    check_backward_inputs(grad_c, a, b, argmax, semiring)
    return backward(grad_c, a, b, argmax, semiring)


@matmul_backward_op.register_fake
def _(grad_c: Tensor, a: Tensor, b: Tensor, argmax: Tensor, semiring: str) -> tuple[Tensor, Tensor]:
    check_backward_inputs(grad_c, a, b, argmax, semiring)
    return a.new_empty(a.shape), b.new_empty(b.shape)


# ------------------------------------------------------------------ autograd


def _save_product(ctx: Any, inputs: tuple, output: tuple) -> None:
    a, b, semiring = inputs
    ctx.semiring = semiring
    ctx.save_for_backward(a, b, output[1])


def _product_backward(ctx: Any, grad_values: Tensor, _grad_argmax: Tensor) -> tuple:
    a, b, argmax = ctx.saved_tensors
    grad_a, grad_b = matmul_backward_op(grad_values, a, b, argmax, ctx.semiring)
    return grad_a, grad_b, None


matmul_with_argmax_op.register_autograd(_product_backward, setup_context=_save_product)


def gather_winners(x_a: Tensor, x_b: Tensor, argmax: Tensor) -> tuple[Tensor, Tensor]:
    """``(x_a[..., i, k_ij], x_b[..., k_ij, j])`` for tensors shaped like A and B.

    Entries with ``k_ij = -1`` read index 0; callers mask them out.
    """
    batch = argmax.shape[:-2]
    k = argmax.clamp(min=0).long()
    from_a = torch.gather(x_a.expand(*batch, *x_a.shape[-2:]), -1, k)
    from_b = torch.gather(x_b.expand(*batch, *x_b.shape[-2:]), -2, k)
    return from_a, from_b


def product_tangent(semiring: Semiring, a: Tensor, b: Tensor, argmax: Tensor, tangent_a: "Tensor | None",
                    tangent_b: "Tensor | None") -> Tensor:
    """How the product moves when a and b move by the tangents (``None``: not at all): its forward derivative.

    Each ``C[i, j]`` moves as its winning candidate ``a ⊗ b`` does: the sum
    of the tangents for ``plus``, the product rule for ``times``, and for
    min/max the tangent of the operand that ``matmul_backward`` routes to,
    by the one tie rule (``Semiring.winner_is_a``).  Entries with no winner
    (``-1``) do not move.
    """
    tangent_a = torch.zeros_like(a) if tangent_a is None else tangent_a
    tangent_b = torch.zeros_like(b) if tangent_b is None else tangent_b
    a_w, b_w = gather_winners(a, b, argmax)
    ta_w, tb_w = gather_winners(tangent_a, tangent_b, argmax)
    if semiring.mul == "plus":
        moved = ta_w + tb_w
    elif semiring.mul == "times":
        moved = ta_w * b_w + a_w * tb_w
    else:
        moved = torch.where(semiring.winner_is_a(a_w, b_w, torch.isnan), ta_w, tb_w)
    return torch.where(argmax >= 0, moved, 0)


def _save_backward(ctx: Any, inputs: tuple, output: tuple) -> None:
    grad_c, a, b, argmax, semiring = inputs
    ctx.semiring = semiring
    ctx.save_for_backward(grad_c, a, b, argmax)


def backward_of_backward(ctx: Any, tangent_a: Tensor, tangent_b: Tensor) -> tuple:
    """Differentiate the backward pass, for Hessian-vector products and gradient penalties.

    ``grad_a, grad_b`` are linear in ``grad_c``, so its part is the forward
    derivative of the product along (tangent_a, tangent_b).  They depend on
    ``a`` and ``b`` only through the argmax and the min/max choice, which are
    locally constant, except for ``max_mul``, whose gradients carry the other
    operand: those terms are scattered back with the plain ``plus`` routing,
    which moves each value to the winning k whatever semiring chose it.
    """
    grad_c, a, b, argmax = ctx.saved_tensors
    semiring = get_semiring(ctx.semiring)
    d_grad_c = product_tangent(semiring, a, b, argmax, tangent_a, tangent_b)
    if semiring.mul != "times":
        return d_grad_c, None, None, None, None
    ta_w, tb_w = gather_winners(tangent_a, tangent_b, argmax)
    d_a = matmul_backward_op(grad_c * tb_w, a, b, argmax, "max_plus")[0]
    d_b = matmul_backward_op(grad_c * ta_w, a, b, argmax, "max_plus")[1]
    return d_grad_c, d_a, d_b, None, None


matmul_backward_op.register_autograd(backward_of_backward, setup_context=_save_backward)


# ------------------------------------------------------------------ vmap


def _vmap_first(x: Tensor, dim: "int | None", rank: int, size: "int | None" = None) -> Tensor:
    """``x`` with its vmap dimension first, then size-1 axes up to ``rank`` logical dimensions (views).

    The vmap dimension becomes the leading batch dimension of the product;
    the size-1 axes line the operand's own batch dimensions up with the
    other operand's, as broadcasting from the right expects.  An unmapped
    ``x`` is left as it is, or with ``size`` copies of it, one per sample (a
    copy, not a stride-0 view: the engines read batches by their strides).
    """
    if dim is None:
        if size is None:
            return x
        x = x.expand(size, *x.shape).contiguous()
    else:
        x = x.movedim(dim, 0)
    return x[(slice(None),) + (None,) * (rank - x.dim() + 1)]


def _logical_rank(x: Tensor, dim: "int | None") -> int:
    return x.dim() - (dim is not None)


def _vmap_operands(in_dims: tuple, a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    rank = max(_logical_rank(a, in_dims[0]), _logical_rank(b, in_dims[1]))
    return _vmap_first(a, in_dims[0], rank), _vmap_first(b, in_dims[1], rank)


@matmul_op.register_vmap
def _(info: Any, in_dims: tuple, a: Tensor, b: Tensor, semiring: str) -> tuple:
    """One batched product: the vmap dimension is one more batch dimension."""
    return matmul_op(*_vmap_operands(in_dims, a, b), semiring), 0


@matmul_with_argmax_op.register_vmap
def _(info: Any, in_dims: tuple, a: Tensor, b: Tensor, semiring: str) -> tuple:
    return matmul_with_argmax_op(*_vmap_operands(in_dims, a, b), semiring), (0, 0)


@matmul_backward_op.register_vmap
def _(info: Any, in_dims: tuple, grad_c: Tensor, a: Tensor, b: Tensor, argmax: Tensor, semiring: str) -> tuple:
    """One batched backward.  Every input gets the vmap dimension (broadcast where it has none), so each
    sample's gradients stay apart instead of being summed over it as a broadcast dimension."""
    size = info.batch_size
    rank = _logical_rank(grad_c, in_dims[0])
    shape_a = a.shape if in_dims[1] is None else a.movedim(in_dims[1], 0).shape[1:]
    shape_b = b.shape if in_dims[2] is None else b.movedim(in_dims[2], 0).shape[1:]
    grad_a, grad_b = matmul_backward_op(*(_vmap_first(x, d, rank, size) for x, d in zip((grad_c, a, b, argmax), in_dims)),
                                        semiring)
    return (grad_a.reshape(size, *shape_a), grad_b.reshape(size, *shape_b)), (0, 0)
