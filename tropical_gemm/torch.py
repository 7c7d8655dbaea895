"""PyTorch integration: differentiable tropical products and a ``TropicalLinear`` layer.

The products are ``torch.library.custom_op`` operators in the ``tropical_gemm``
namespace, each with a fake (meta) kernel and an autograd formula, so they
work under ``torch.compile(fullgraph=True)`` without graph breaks and pass
``torch.library.opcheck``:

* ``tropical_gemm::matmul(a, b, semiring)`` -> values, forward only;
* ``tropical_gemm::matmul_with_argmax(a, b, semiring)`` -> (values, argmax),
  differentiable in ``a`` and ``b`` through the saved argmax;
* ``tropical_gemm::matmul_backward(grad_c, a, b, argmax, semiring)`` ->
  (grad_a, grad_b), itself differentiable, so double backward works.

Tensors never leave their device and are never copied: CPU tensors reach the
numpy engine as ``.numpy()`` views, CUDA tensors reach the CUDA engine as
addresses, through the engine's prepared product for their signature, where
the product is one kernel launch, and as cupy views of their memory
otherwise.  Kernels are queued on PyTorch's current stream and every buffer
(outputs, gradients, engine scratch) is taken from PyTorch's caching
allocator, so this glue adds no synchronisation and no second memory pool
grows beside PyTorch's.  cupy is imported the first time a CUDA tensor is
seen.

In plain eager code (no ``torch.compile``, ``torch.func`` transform, dispatch
or function mode, tracer or tensor subclass) the public functions skip the
dispatcher and run the same kernels through one ``autograd.Function``: at
small sizes the dispatcher would cost more host time than the kernels.
"""

from __future__ import annotations

from contextlib import contextmanager
from functools import cache
from types import ModuleType
from typing import Any, Callable, Iterator, NamedTuple

import numpy as np
import torch
from torch import Tensor, nn
from torch.autograd import forward_ad

from . import api
from .engines import cpu as cpu_engine
from .engines import cupy_module
from .dtypes import argmax_dtype
from .semirings import Semiring, get_semiring
from .shapes import NO_VECTORS, product_shape, promote_vectors

__all__ = ["TropicalLinear", "tropical_matmul", "tropical_matmul_with_argmax"]

#: The torch dtypes the engines support, spelt as numpy dtype names.
_SUPPORTED: dict[torch.dtype, str] = {
    torch.float32: "float32",
    torch.float64: "float64",
    torch.int32: "int32",
    torch.int64: "int64",
}
_FLOAT_DTYPES = (torch.float32, torch.float64)
#: Keyed by numpy dtype, not by name: ``np.dtype.name`` formats a string on every call (about 3 µs).
_TORCH_INDEX_DTYPES = {np.dtype(np.int32): torch.int32, np.dtype(np.int64): torch.int64}
_NUMPY_DTYPES: dict[torch.dtype, np.dtype] = {t: np.dtype(name) for t, name in _SUPPORTED.items()}
#: Stored in half precision, computed in float32 and rounded once (exact: docs/semantics.md).
_HALF = (torch.float16, torch.bfloat16)


# ---------------------------------------------------------------- validation


def _check_operands(a: Tensor, b: Tensor, semiring: str) -> None:
    """Reject what the engines cannot take, naming it in torch's terms.

    Runs in the real and in the fake kernels, so an eager call and
    ``torch.compile`` tracing refuse the same inputs with the same message.
    """
    get_semiring(semiring)
    for label, t in (("a", a), ("b", b)):
        if t.dtype not in _SUPPORTED:
            raise TypeError(
                f"tropical matmul does not support {label}.dtype={t.dtype}; supported dtypes are "
                f"{', '.join(str(d) for d in (*_SUPPORTED, *_HALF))} (cast first, e.g. {label}.float())"
            )
    if a.dtype != b.dtype:
        raise TypeError(
            f"operands have different dtypes ({a.dtype} and {b.dtype}); cast one explicitly, e.g. b.to(a.dtype)"
        )
    if a.device != b.device:
        raise ValueError(
            f"operands are on different devices ({a.device} and {b.device}); move one, e.g. b.to(a.device)"
        )


def _check_backward_inputs(grad_c: Tensor, a: Tensor, b: Tensor, argmax: Tensor, semiring: str) -> None:
    """Reject what ``matmul_backward`` cannot take, as the core API would, in torch's terms.

    The op is public (``torch.ops.tropical_gemm.matmul_backward``), and on
    CUDA its kernel reads ``grad_c`` and ``argmax`` by address: a wrong shape
    must be an error here, not a read out of bounds.
    """
    _check_operands(a, b, semiring)
    if not a.is_floating_point():
        raise TypeError(f"matmul_backward needs float operands (torch.float32 or torch.float64), got {a.dtype}")
    out_shape = product_shape(tuple(a.shape), tuple(b.shape)).out_shape
    if tuple(grad_c.shape) != out_shape or grad_c.dtype != a.dtype or grad_c.device != a.device:
        raise ValueError(
            f"grad_c must have the product's shape {out_shape}, dtype {a.dtype} and device {a.device}, "
            f"got shape {tuple(grad_c.shape)}, dtype {grad_c.dtype} and device {grad_c.device}"
        )
    index_dtypes = _TORCH_INDEX_DTYPES.values()
    if tuple(argmax.shape) != out_shape or argmax.dtype not in index_dtypes or argmax.device != a.device:
        raise ValueError(
            f"argmax must be an int32 or int64 tensor of shape {out_shape} on {a.device} (as returned by "
            f"tropical_matmul_with_argmax), got shape {tuple(argmax.shape)}, dtype {argmax.dtype} "
            f"and device {argmax.device}"
        )


def _argmax_dtype(k: int) -> torch.dtype:
    return _TORCH_INDEX_DTYPES[argmax_dtype(k)]


def _semiring_name(semiring: "str | Semiring") -> str:
    """The canonical name, so each op sees one spelling per semiring (one compile each)."""
    return get_semiring(semiring).name


# ------------------------------------------------------------ engine bridges


def _numpy_view(t: Tensor) -> Any:
    # Inside an op the inputs still carry requires_grad, which .numpy() and
    # DLPack export refuse; detach() is a view, not a copy.
    return t.detach().numpy()


def _cupy_view(t: Tensor) -> Any:
    """A cupy array over a CUDA tensor's memory, built from its pointer and strides.

    Not through DLPack: its stream handshake records an event and makes a
    stream wait on every import (about 50 µs each on an H100 host), which buys
    nothing here since the kernels already run on the tensor's stream.  The
    tensor is kept alive as the memory's owner.  Every step here is on the
    per-call path, so it asks torch for each property once.
    """
    cp = _cupy()
    shape = tuple(t.shape)
    dtype = _NUMPY_DTYPES[t.dtype]
    if t.numel() == 0:
        return cp.empty(shape, dtype=dtype)
    itemsize = dtype.itemsize
    if t.is_contiguous():
        span, strides = t.numel() * itemsize, None
    else:
        stride = t.stride()
        span = (1 + sum((size - 1) * step for size, step in zip(shape, stride))) * itemsize
        strides = tuple(step * itemsize for step in stride)
    memory = cp.cuda.UnownedMemory(t.data_ptr(), span, t, t.get_device())
    return cp.ndarray(shape, dtype=dtype, memptr=cp.cuda.MemoryPointer(memory, 0), strides=strides)


_cupy = cupy_module  # the one cupy import (tropical_gemm.engines.cupy_module)


def _torch_allocator(nbytes: int) -> Any:
    """A cupy allocator that takes its memory from PyTorch's caching allocator.

    The block is a uint8 tensor kept alive by the cupy pointer; it belongs to
    PyTorch's current stream, which is the stream the kernels run on.
    """
    cp = _cupy()
    device_id = cp.cuda.runtime.getDevice()
    block = torch.empty(nbytes, dtype=torch.uint8, device=torch.device("cuda", device_id))
    return cp.cuda.MemoryPointer(cp.cuda.UnownedMemory(block.data_ptr(), nbytes, block, device_id), 0)


class _RawStream(NamedTuple):
    """A CUDA stream handle that speaks the CUDA stream protocol, for cupy to wrap."""

    handle: int

    def __cuda_stream__(self) -> tuple[int, int]:
        return 0, self.handle


@cache
def _cupy_stream(device_index: int, handle: int) -> Any:
    """The cupy view of one CUDA stream, made once per stream: cupy runs the kernels on it.

    cupy 14 deprecates ``ExternalStream`` for ``Stream.from_external``.
    """
    cp = _cupy()
    if hasattr(cp.cuda.Stream, "from_external"):
        return cp.cuda.Stream.from_external(_RawStream(handle))
    return cp.cuda.ExternalStream(handle, device_index)


def _current_stream(device_index: int) -> Any:
    """cupy's view of PyTorch's current stream on a device, where the kernels go."""
    return _cupy_stream(device_index, torch._C._cuda_getCurrentRawStream(device_index))


@contextmanager
def _engine(device: torch.device) -> Iterator[tuple[Callable[[Tensor], Any], ModuleType]]:
    """Run an engine for tensors on ``device``: yields how a tensor becomes its array, and the engine.

    On CUDA the kernels go to PyTorch's current stream and any scratch memory
    the engine needs comes from PyTorch's allocator.
    """
    if device.type == "cpu":
        yield _numpy_view, cpu_engine
        return
    if device.type != "cuda":
        raise ValueError(f"tropical matmul runs on cpu and cuda tensors, not on {device.type}")
    cp = _cupy()
    index = device.index
    with cp.cuda.Device(index), _current_stream(index), cp.cuda.using_allocator(_torch_allocator):
        yield _cupy_view, _cuda_engine()


@cache
def _cuda_engine() -> ModuleType:
    """The CUDA engine module, imported with the first CUDA tensor (it loads the JIT, not cupy)."""
    from .engines import cuda

    return cuda


# ---------------------------------------------------------------- operators


def _empty_outputs(a: Tensor, b: Tensor, semiring: str, with_argmax: bool) -> tuple[Tensor, Tensor | None]:
    """Checked operands' (values, argmax) buffers; shared by the real and fake kernels."""
    _check_operands(a, b, semiring)
    shape = product_shape(tuple(a.shape), tuple(b.shape))
    out_shape = shape.out_shape  # passed unpacked: torch parses a tuple argument 0.6 µs slower
    return a.new_empty(*out_shape), a.new_empty(*out_shape, dtype=_argmax_dtype(shape.k)) if with_argmax else None


def _forward(a: Tensor, b: Tensor, semiring: str, with_argmax: bool) -> tuple[Tensor, Tensor | None]:
    """The product of checked operands, into tensors allocated by torch (so they live in its allocator)."""
    values, argmax = _empty_outputs(a, b, semiring, with_argmax)
    _run_product(a, b, values, argmax, semiring)
    return values, argmax


def _run_product(a: Tensor, b: Tensor, values: Tensor, argmax: "Tensor | None", semiring: str) -> None:
    """Write ``a ⊗ b`` into ``values`` (and ``argmax``).

    The engine is called directly, not through ``tropical_gemm.matmul``: the
    operands are checked in torch's terms, and the outputs are new, so the
    core API's checks of the arrays would only repeat those, per call.  A
    CUDA product that is one launch runs from the engine's prepared product
    for its signature, on the tensors' addresses; others take cupy views.
    """
    if a.is_cuda:
        prepared = _cuda_engine().prepare_product(a.shape, a.stride(), b.shape, b.stride(), _SUPPORTED[a.dtype],
                                                  semiring, argmax is not None, a.get_device())
        if prepared is not None:
            argmax_address = None if argmax is None else argmax.data_ptr()
            stream = _current_stream(prepared.device)
            prepared.launch(a.data_ptr(), b.data_ptr(), values.data_ptr(), argmax_address, stream)
            return
    with _engine(a.device) as (view, engine):
        engine.forward(view(a), view(b), get_semiring(semiring), view(values), None if argmax is None else view(argmax))


def _prepare_backward(a: Tensor, b: Tensor, semiring: str, *, wait: bool = True) -> Any:
    """The engine's ``PreparedBackward`` for CUDA operands, or None where the backward takes cupy views.

    None also in deterministic mode, whose ordered kernels take cupy views,
    and, unless ``wait``, while its kernel still compiles in the background
    (the forward does not wait for it: the backward prepares itself).
    The backward's int32 argmax must be C-contiguous: callers check one they
    did not make.
    """
    if not (a.is_cuda and a.is_floating_point()) or torch.are_deterministic_algorithms_enabled():
        return None
    engine = _cuda_engine()
    if not wait and engine.backward_compiling(_SUPPORTED[a.dtype], semiring, a.get_device()):
        return None
    return engine.prepare_backward(a.shape, a.stride(), b.shape, b.stride(), _SUPPORTED[a.dtype], semiring,
                                           a.get_device())


def _backward(grad_c: Tensor, a: Tensor, b: Tensor, argmax: Tensor, semiring: str, prepared: Any = None
              ) -> tuple[Tensor, Tensor]:
    """The core ``matmul_backward`` of checked operands into gradients allocated by torch.

    Deterministic when torch is asked to be: the flag is read when the kernel
    runs, as torch's own kernels read it.  On CUDA the default mode is one
    launch on the tensors' addresses, ``prepared`` by the forward where it
    could be (the argmax is then the forward's own).
    """
    grad_a = torch.empty_like(a, memory_format=torch.contiguous_format)  # half the host time of torch.empty(shape, ...)
    grad_b = torch.empty_like(b, memory_format=torch.contiguous_format)
    deterministic = torch.are_deterministic_algorithms_enabled()
    if not deterministic and a.is_cuda:
        if prepared is None and argmax.dtype == torch.int32 and argmax.is_contiguous():
            prepared = _prepare_backward(a, b, semiring)
        if prepared is not None:
            grad_c = grad_c.contiguous()  # the kernel reads it row-major; the name keeps a copy alive
            prepared.launch(grad_c.data_ptr(), a.data_ptr(), b.data_ptr(), argmax.data_ptr(), grad_a.data_ptr(),
                            grad_b.data_ptr(), _current_stream(prepared.device))
            return grad_a, grad_b
    with _engine(a.device) as (view, _):
        api.matmul_backward(view(grad_c), view(a), view(b), view(argmax), semiring,
                            deterministic=deterministic, out=(view(grad_a), view(grad_b)))
    return grad_a, grad_b


@torch.library.custom_op("tropical_gemm::matmul", mutates_args=())
def _matmul_op(a: Tensor, b: Tensor, semiring: str) -> Tensor:
    """Values only: no argmax is written, for inference and integer products."""
    return _forward(a, b, semiring, with_argmax=False)[0]


@_matmul_op.register_fake
def _(a: Tensor, b: Tensor, semiring: str) -> Tensor:
    return _empty_outputs(a, b, semiring, with_argmax=False)[0]


@torch.library.custom_op("tropical_gemm::matmul_with_argmax", mutates_args=())
def _matmul_with_argmax_op(a: Tensor, b: Tensor, semiring: str) -> tuple[Tensor, Tensor]:
    return _forward(a, b, semiring, with_argmax=True)


@_matmul_with_argmax_op.register_fake
def _(a: Tensor, b: Tensor, semiring: str) -> tuple[Tensor, Tensor]:
    return _empty_outputs(a, b, semiring, with_argmax=True)


@torch.library.custom_op("tropical_gemm::matmul_backward", mutates_args=())
def _matmul_backward_op(grad_c: Tensor, a: Tensor, b: Tensor, argmax: Tensor, semiring: str) -> tuple[Tensor, Tensor]:
    """The core ``matmul_backward``, as an op so that it can itself be differentiated."""
    _check_backward_inputs(grad_c, a, b, argmax, semiring)
    return _backward(grad_c, a, b, argmax, semiring)


@_matmul_backward_op.register_fake
def _(grad_c: Tensor, a: Tensor, b: Tensor, argmax: Tensor, semiring: str) -> tuple[Tensor, Tensor]:
    _check_backward_inputs(grad_c, a, b, argmax, semiring)
    return a.new_empty(a.shape), b.new_empty(b.shape)


# ------------------------------------------------------------------ autograd


def _save_product(ctx: Any, inputs: tuple, output: tuple) -> None:
    a, b, semiring = inputs
    ctx.semiring = semiring
    ctx.save_for_backward(a, b, output[1])


def _product_backward(ctx: Any, grad_values: Tensor, _grad_argmax: Tensor) -> tuple:
    a, b, argmax = ctx.saved_tensors
    grad_a, grad_b = _matmul_backward_op(grad_values, a, b, argmax, ctx.semiring)
    return grad_a, grad_b, None


_matmul_with_argmax_op.register_autograd(_product_backward, setup_context=_save_product)


def _gather_winners(x_a: Tensor, x_b: Tensor, argmax: Tensor) -> tuple[Tensor, Tensor]:
    """``(x_a[..., i, k_ij], x_b[..., k_ij, j])`` for tensors shaped like A and B.

    Entries with ``k_ij = -1`` read index 0; callers mask them out.
    """
    batch = argmax.shape[:-2]
    k = argmax.clamp(min=0).long()
    from_a = torch.gather(x_a.expand(*batch, *x_a.shape[-2:]), -1, k)
    from_b = torch.gather(x_b.expand(*batch, *x_b.shape[-2:]), -2, k)
    return from_a, from_b


def _winner_tangent(semiring: Semiring, a_w: Tensor, b_w: Tensor, ta_w: Tensor, tb_w: Tensor) -> Tensor:
    """How the winning candidate ``a ⊗ b`` moves when a and b move by ta, tb.

    min/max pick the operand that ``matmul_backward`` routes to, by the one
    tie rule (``Semiring.winner_is_a``), matching the first-order gradient.
    """
    if semiring.mul == "plus":
        return ta_w + tb_w
    if semiring.mul == "times":
        return ta_w * b_w + a_w * tb_w
    return torch.where(semiring.winner_is_a(a_w, b_w, torch.isnan), ta_w, tb_w)


def _save_backward(ctx: Any, inputs: tuple, output: tuple) -> None:
    grad_c, a, b, argmax, semiring = inputs
    ctx.semiring = semiring
    ctx.save_for_backward(grad_c, a, b, argmax)


def _backward_backward(ctx: Any, tangent_a: Tensor, tangent_b: Tensor) -> tuple:
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
    a_w, b_w = _gather_winners(a, b, argmax)
    ta_w, tb_w = _gather_winners(tangent_a, tangent_b, argmax)
    won = argmax >= 0
    d_grad_c = torch.where(won, _winner_tangent(semiring, a_w, b_w, ta_w, tb_w), 0)
    if semiring.mul != "times":
        return d_grad_c, None, None, None, None
    d_a = _matmul_backward_op(grad_c * tb_w, a, b, argmax, "max_plus")[0]
    d_b = _matmul_backward_op(grad_c * ta_w, a, b, argmax, "max_plus")[1]
    return d_grad_c, d_a, d_b, None, None


_matmul_backward_op.register_autograd(_backward_backward, setup_context=_save_backward)


# ---------------------------------------------------------------- eager path

#: Tensor types the eager path takes as they are; any other subclass may
#: change what an op does (``__torch_function__``), so it goes through the op.
_PLAIN_TENSORS = (Tensor, nn.Parameter)


#: Devices with an engine; others (meta tensors, say) go through the ops and their fake kernels.
_ENGINE_DEVICES = ("cpu", "cuda")


def _plain_eager(a: Tensor, b: Tensor) -> bool:
    """Whether nothing but the kernels needs to see this call, so the dispatcher can be skipped.

    The custom ops are there for ``torch.compile``, fake tensors, ``torch.func``
    transforms, dispatch and function modes, and the JIT tracer.  In plain
    eager code the dispatcher and the op's autograd wrapper only add host
    time: tens of µs a call, against a few µs of kernel at small sizes.  With
    any of those present the call goes through the ops.  Each check is a
    flag read (about 0.1 µs).
    """
    return (type(a) in _PLAIN_TENSORS and type(b) in _PLAIN_TENSORS
            and a.device.type in _ENGINE_DEVICES
            and not torch.compiler.is_compiling()
            and torch._C._functorch.peek_interpreter_stack() is None
            and torch._C._len_torch_dispatch_stack() == 0
            and not torch._C._is_torch_function_mode_enabled()
            and torch._C._get_tracing_state() is None)


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
        values, argmax = _forward(a, b, semiring, with_argmax=True)
        ctx.semiring = semiring
        ctx.prepared = _prepare_backward(a, b, semiring, wait=False)
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
            grad_a, grad_b = _matmul_backward_op(grad_values, a, b, argmax, ctx.semiring)
        else:  # the operands were checked by the forward
            grad_a, grad_b = _backward(grad_values, a, b, argmax, ctx.semiring, ctx.prepared)
        return grad_a, grad_b, None, None


#: ``_EagerProduct.apply`` without ``Function.apply``'s Python preamble, which
#: unwraps functorch wrappers and binds default arguments (about 3 µs a call):
#: the eager path runs only without functorch transforms, and ``forward``
#: takes no defaults.  The autograd node is the same C++ one.  A torch whose
#: C base class is laid out differently gets the plain ``apply``.
_C_APPLY = vars(torch._C._FunctionBase).get("apply")
_eager_product = _EagerProduct.apply if _C_APPLY is None else _C_APPLY.__get__(None, _EagerProduct)


# ----------------------------------------------------------- public functions


def _check_tensors(a: object, b: object) -> None:
    """Tensors, and no forward-mode tangents on them.

    custom ops have reverse-mode formulas only, and torch drops forward-mode
    tangents through them silently (the result would look constant), so
    forward mode is refused here.  ``_current_level`` is -1 outside every
    dual level, which keeps the common case to one comparison.
    """
    if not (isinstance(a, Tensor) and isinstance(b, Tensor)):
        raise TypeError(
            f"expected torch tensors, got {type(a).__name__} and {type(b).__name__}; "
            "for numpy or cupy arrays call tropical_gemm.matmul"
        )
    if forward_ad._current_level >= 0 and any(forward_ad.unpack_dual(t).tangent is not None for t in (a, b)):
        raise NotImplementedError(
            "tropical_gemm.torch differentiates in reverse mode only (backward, torch.func.grad/vjp); "
            "forward-mode AD (torch.func.jvp, jacfwd, forward_ad dual tensors) is not supported"
        )


def _needs_grad(a: Tensor, b: Tensor) -> bool:
    """Whether autograd will ask for gradients, so the argmax must be kept."""
    return torch.is_grad_enabled() and (a.requires_grad or b.requires_grad)


def _prefetch_backward(a: Tensor, semiring: str) -> None:
    """A forward that autograd will differentiate on CUDA: its backward kernels start compiling now.

    They compile in the background beside the forward's own kernels, instead
    of after them.  Once per (dtype, semiring, device, mode) in a process.
    """
    if a.is_cuda and a.dtype in _FLOAT_DTYPES and not torch.compiler.is_compiling():
        # other dtypes fail the operand checks, with their message; a traced
        # graph prefetches nothing (its first eager run compiles as usual)
        _prefetch_once(_SUPPORTED[a.dtype], semiring, a.get_device(), torch.are_deterministic_algorithms_enabled())


@cache
def _prefetch_once(dtype: str, semiring: str, device: int, deterministic: bool) -> None:
    _cuda_engine().prefetch_backward(dtype, semiring, device, deterministic)


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
    _check_tensors(a, b)
    if a.dtype in _HALF or b.dtype in _HALF or a.dim() < 2 or b.dim() < 2:
        return _composite(a, b, semiring, with_argmax=False)
    name = _semiring_name(semiring)
    needs_grad = _needs_grad(a, b)
    if needs_grad:
        _prefetch_backward(a, name)
    if _plain_eager(a, b):
        return _eager_product(a, b, name, False) if needs_grad else _forward(a, b, name, with_argmax=False)[0]
    return _matmul_with_argmax_op(a, b, name)[0] if needs_grad else _matmul_op(a, b, name)


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
    _check_tensors(a, b)
    if a.dtype in _HALF or b.dtype in _HALF or a.dim() < 2 or b.dim() < 2:
        return _composite(a, b, semiring, with_argmax=True)
    name = _semiring_name(semiring)
    needs_grad = _needs_grad(a, b)
    if needs_grad:
        _prefetch_backward(a, name)
    if _plain_eager(a, b):
        if needs_grad:
            return _eager_product(a, b, name, True)
        return _forward(a, b, name, with_argmax=True)
    return _matmul_with_argmax_op(a, b, name)


def _composite(a: Tensor, b: Tensor, semiring: "str | Semiring", with_argmax: bool) -> Any:
    """1-D operands and half precision, as torch ops around the product, so autograd and compile see through.

    1-D operands are promoted and the result squeezed, as ``torch.matmul``
    does.  float16 and bfloat16 widen to float32 and the values round once
    back: the gradient then flows through both casts, summed in float32.
    """
    if a.dtype != b.dtype:
        raise TypeError(
            f"operands have different dtypes ({a.dtype} and {b.dtype}); cast one explicitly, e.g. b.to(a.dtype)"
        )
    a, b, vectors = promote_vectors(a, b)
    storage = a.dtype
    if storage in _HALF:
        a, b = a.float(), b.float()
    if with_argmax:
        values, argmax = tropical_matmul_with_argmax(a, b, semiring)
    else:
        values, argmax = tropical_matmul(a, b, semiring), None
    values = values.to(storage)
    if vectors != NO_VECTORS:
        values, argmax = vectors.squeeze(values), None if argmax is None else vectors.squeeze(argmax)
    return (values, argmax) if with_argmax else values


# -------------------------------------------------------------------- layer


class TropicalLinear(nn.Module):
    """``y_j = b_j ⊕ ⊕_i (x_i ⊗ W_ji)``: a linear layer over a tropical semiring.

    The bias enters through ⊕ (``fmax``/``fmin``, ignoring NaN as the engines
    do), as the weight of a constant input equal to the semiring's one.  An
    ordinary ``+ b`` would add nothing for max_plus and min_plus: it commutes
    with the max and folds into the weights.

    Initialisation: weights and bias are drawn from U(-1, 1), and for
    ``max_mul`` as exp(U(-1, 1)), the image of that draw under the logarithm
    that maps max_mul on positive numbers onto max_plus.  The width does not
    depend on ``in_features`` because ⊕ selects one term instead of summing
    ``in_features`` of them, so there is no fan-in variance to cancel.  Each
    output sends its gradient to one winning input, so what init must provide
    is diversity: weights spread about as widely as unit-scale inputs, so the
    winner depends on both the input and the weight row and different outputs
    pick, and train, different weights.  At either extreme one side decides
    alone: the inputs (every output picks the same few inputs), or the weights
    (each output keeps its winner whatever the input, and trains one weight).
    Scale inputs to about unit spread, as for ``nn.Linear``.

    Examples:
        >>> import torch
        >>> from tropical_gemm.torch import TropicalLinear
        >>> layer = TropicalLinear(4, 2, "max_plus")
        >>> y = layer(torch.randn(8, 3, 4))    # any leading shape
        >>> y.shape
        torch.Size([8, 3, 2])
        >>> y.sum().backward()
        >>> layer.weight.grad.shape, layer.bias.grad.shape
        (torch.Size([2, 4]), torch.Size([2]))
    """

    def __init__(
        self,
        in_features: int,
        out_features: int,
        semiring: "str | Semiring" = "max_plus",
        bias: bool = True,
        device: "torch.device | str | None" = None,
        dtype: "torch.dtype | None" = None,
    ) -> None:
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.in_features = in_features
        self.out_features = out_features
        self.semiring = _semiring_name(semiring)
        self.weight = nn.Parameter(torch.empty((out_features, in_features), **factory))
        if bias:
            self.bias = nn.Parameter(torch.empty(out_features, **factory))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Redraw weights and bias as the class docstring explains."""
        multiplicative = get_semiring(self.semiring).mul == "times"
        with torch.no_grad():
            for param in (self.weight, self.bias):
                if param is not None:
                    param.uniform_(-1.0, 1.0)
                    if multiplicative:
                        param.exp_()

    def forward(self, x: Tensor) -> Tensor:
        """Inputs ``(*, in_features)`` map to ``(*, out_features)`` in one 2-D product."""
        y = tropical_matmul(x.reshape(-1, self.in_features), self.weight.T, self.semiring)
        if self.bias is not None:
            add = torch.fmax if get_semiring(self.semiring).add == "max" else torch.fmin
            y = add(y, self.bias)
        return y.reshape(*x.shape[:-1], self.out_features)

    def extra_repr(self) -> str:
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, "
            f"semiring={self.semiring!r}, bias={self.bias is not None}"
        )
