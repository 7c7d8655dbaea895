"""The eager fast path: plain eager calls skip the dispatcher and run the kernels through one autograd node.

The custom ops are there for ``torch.compile``, fake tensors, ``torch.func``
transforms, dispatch and function modes, and the JIT tracer.  In plain eager
code the dispatcher and the op's autograd wrapper only add host time, which
at small sizes is more than the kernels take.  Telling the two apart reads
flags that torch keeps behind private functions; ``_bind_private_api`` is the
one place that touches them, and where this torch lacks one every call goes
through the ops instead.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import Tensor, nn

from . import kernels
from .ops import matmul_backward_op

#: Tensor types the eager path takes as they are; any other subclass may
#: change what an op does (``__torch_function__``), so it goes through the op.
_PLAIN_TENSORS = (Tensor, nn.Parameter)
#: Devices with an engine; others (meta tensors, say) go through the ops and their fake kernels.
_ENGINE_DEVICES = ("cpu", "cuda")


class _EagerProduct(torch.autograd.Function):
    """The product and its gradient in eager code: one autograd node, no dispatcher.

    The kernels and formulas of ``tropical_gemm::matmul_with_argmax``.  It
    returns the argmax as a second output only when asked to: each output
    costs autograd host time on every forward and backward.  On CUDA the
    forward also takes the backward's prepared launch from the engine: the
    backward runs on autograd's worker thread, where the same work costs
    more, and there it is two allocations, two memsets and one launch.
    Under ``create_graph`` the backward goes through
    ``tropical_gemm::matmul_backward``, whose own autograd formula gives
    double backward.
    """

    @staticmethod
    def forward(ctx: Any, a: Tensor, b: Tensor, semiring: str, return_argmax: bool) -> "Tensor | tuple[Tensor, Tensor]":
        values, argmax = kernels.forward(a, b, semiring, with_argmax=True)
        ctx.semiring = semiring
        ctx.prepared = kernels.prepare_backward(a, b, semiring, wait=False)
        ctx.save_for_backward(a, b, argmax)
        if not return_argmax:
            return values
        ctx.mark_non_differentiable(argmax)
        ctx.set_materialize_grads(False)  # no zero-filled gradient for the argmax, on every backward
        return values, argmax

    @staticmethod
    def backward(ctx: Any, grad_values: "Tensor | None", *_grad_argmax: None) -> tuple:
        if grad_values is None:
            return None, None, None, None
        a, b, argmax = ctx.saved_tensors
        if torch.is_grad_enabled():
            grad_a, grad_b = matmul_backward_op(grad_values, a, b, argmax, ctx.semiring)
        else:  # the operands were checked by the forward
            grad_a, grad_b = kernels.backward(grad_values, a, b, argmax, ctx.semiring, ctx.prepared)
        return grad_a, grad_b, None, None


def _never(a: Tensor, b: Tensor) -> bool:
    return False


def _bind_transform_check() -> Callable[[], bool]:
    """``transformed()``: whether a ``torch.func`` transform (grad, vmap, jacrev, jvp...) is running.

    The custom ops' autograd formulas cannot serve torch.func's ``grad``, so
    the products then take ``transforms``' Functions.  Where this torch
    lacks the private flag, every call is taken as transformed, which is
    correct (the Functions serve plain autograd too) and only slower.
    """
    try:
        peek_interpreter_stack = torch._C._functorch.peek_interpreter_stack
    except AttributeError:
        return lambda: True

    def transformed() -> bool:
        return not torch.compiler.is_compiling() and peek_interpreter_stack() is not None

    return transformed


transformed = _bind_transform_check()


def _bind_private_api() -> tuple[Callable[[Tensor, Tensor], bool], Callable[..., Any]]:
    """``(plain_eager, eager_product)``: the checks and the apply that rest on torch's private API.

    ``plain_eager(a, b)`` says whether nothing but the kernels needs to see
    the call, so the dispatcher can be skipped; each check is a flag read.
    ``is_compiling`` comes before the private reads, so ``torch.compile``
    never traces them.  Where this torch lacks one of them, ``plain_eager``
    is always False: every call takes the ops, which are public API.

    ``eager_product`` is ``_EagerProduct.apply`` without ``Function.apply``'s
    Python preamble, which unwraps functorch wrappers and binds default
    arguments: the eager path runs only without functorch transforms, and
    ``forward`` takes no defaults.  The autograd node is the same C++ one.
    A torch whose C base class is laid out differently gets the plain ``apply``.
    """
    c_apply = vars(torch._C._FunctionBase).get("apply")
    eager_product = _EagerProduct.apply if c_apply is None else c_apply.__get__(None, _EagerProduct)
    try:
        peek_interpreter_stack = torch._C._functorch.peek_interpreter_stack
        dispatch_modes = torch._C._len_torch_dispatch_stack
        function_modes = torch._C._is_torch_function_mode_enabled
        tracing_state = torch._C._get_tracing_state
    except AttributeError:
        return _never, eager_product

    def plain_eager(a: Tensor, b: Tensor) -> bool:
        return (type(a) in _PLAIN_TENSORS and type(b) in _PLAIN_TENSORS
                and a.device.type in _ENGINE_DEVICES
                and not torch.compiler.is_compiling()
                and peek_interpreter_stack() is None
                and dispatch_modes() == 0
                and not function_modes()
                and tracing_state() is None)

    return plain_eager, eager_product


plain_eager, eager_product = _bind_private_api()
