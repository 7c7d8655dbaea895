"""Checks of torch inputs, in torch's terms, on the core rules of ``dtypes``, ``semirings`` and ``shapes``.

The rules themselves (which dtypes the engines take, which are computed
through float32, which are differentiable, the argmax dtype, the semiring
names, the broadcast shapes) are the core library's; this module only maps
torch dtypes onto them and words the errors for tensors (``b.to(a.dtype)``,
devices).  The checks run in the real and in the fake kernels, so an eager
call and ``torch.compile`` tracing refuse the same inputs with the same
message.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import Tensor
from torch.autograd import forward_ad

from ..dtypes import ENGINE_DTYPES, FLOAT_DTYPES, HALF_DTYPES, SUPPORTED_DTYPES, argmax_dtype, differentiable
from ..dtypes import different_dtypes
from ..semirings import Semiring, get_semiring
from ..shapes import product_shape

#: The torch dtypes the engines compute in, with their numpy names.
ENGINE_NAMES: dict[torch.dtype, str] = {getattr(torch, name): name for name in ENGINE_DTYPES}
#: The same dtypes as numpy dtypes (the core rules take those).
NUMPY_DTYPES: dict[torch.dtype, np.dtype] = {t: np.dtype(name) for t, name in ENGINE_NAMES.items()}
FLOATS: tuple[torch.dtype, ...] = tuple(getattr(torch, name) for name in FLOAT_DTYPES)
#: Stored in half precision, computed in float32 and rounded once (exact: docs/semantics.md).
HALVES: tuple[torch.dtype, ...] = tuple(getattr(torch, name) for name in HALF_DTYPES)
#: Keyed by numpy dtype, not by name: ``np.dtype.name`` formats a string on every call.
INDEX_DTYPES: dict[np.dtype, torch.dtype] = {np.dtype(np.int32): torch.int32, np.dtype(np.int64): torch.int64}


def check_tensors(a: object, b: object) -> None:
    """Both operands are tensors."""
    if not (isinstance(a, Tensor) and isinstance(b, Tensor)):
        raise TypeError(
            f"expected torch tensors, got {type(a).__name__} and {type(b).__name__}; "
            "for numpy or cupy arrays call tropical_gemm.matmul"
        )


def has_tangents(a: Tensor, b: Tensor) -> bool:
    """Whether an operand carries a forward-mode tangent (``torch.autograd.forward_ad`` dual tensors).

    The custom ops have reverse-mode formulas only, and torch would pass a
    tangent through them as if the result were constant, so such calls take
    the ``autograd.Function`` that has a ``jvp``.  ``_current_level`` is -1
    outside every dual level, which keeps the common case to one comparison.
    """
    return forward_ad._current_level >= 0 and any(forward_ad.unpack_dual(t).tangent is not None for t in (a, b))


def check_same_dtype(a: Tensor, b: Tensor) -> None:
    """Different dtypes are an error, never a silent cast (the core rule, with torch's cast)."""
    if a.dtype != b.dtype:
        raise different_dtypes(a.dtype, b.dtype, cast="b.to(a.dtype)")


def check_semiring(semiring: "str | Semiring") -> Semiring:
    """The semiring, if tensors take it: ``and_or`` has no gradient and runs on numpy or cupy arrays only."""
    sr = get_semiring(semiring)
    if sr.boolean:
        raise TypeError("the and_or semiring takes numpy or cupy arrays, not torch tensors (it has no gradient): "
                        "tropical_gemm.matmul(a.numpy(), b.numpy(), 'and_or'), or cupy.from_dlpack(a) on the GPU")
    return sr


def check_operands(a: Tensor, b: Tensor, semiring: str) -> None:
    """Reject what the engines cannot take, naming it in torch's terms.

    The custom ops (``torch.ops.tropical_gemm``) take the engines' dtypes;
    ``tropical_matmul`` widens the halves to float32 around them.
    """
    check_semiring(semiring)
    for label, t in (("a", a), ("b", b)):
        if t.dtype in HALVES:
            raise TypeError(
                f"the torch.ops.tropical_gemm operators compute in {', '.join(f'torch.{n}' for n in ENGINE_DTYPES)}, "
                f"got {label}.dtype={t.dtype}; call tropical_gemm.torch.tropical_matmul, which computes "
                f"float16 and bfloat16 in float32 and rounds once, or cast first ({label}.float())"
            )
        if t.dtype not in ENGINE_NAMES:
            raise TypeError(
                f"tropical matmul does not support {label}.dtype={t.dtype}; supported dtypes are "
                f"{', '.join(f'torch.{name}' for name in SUPPORTED_DTYPES)} (cast first, e.g. {label}.float())"
            )
    check_same_dtype(a, b)
    if a.device != b.device:
        raise ValueError(
            f"operands are on different devices ({a.device} and {b.device}); move one, e.g. b.to(a.device)"
        )


def check_backward_inputs(grad_c: Tensor, a: Tensor, b: Tensor, argmax: Tensor, semiring: str) -> None:
    """Reject what ``matmul_backward`` cannot take, as the core API would, in torch's terms.

    The op is public (``torch.ops.tropical_gemm.matmul_backward``), and on
    CUDA its kernel reads ``grad_c`` and ``argmax`` by address: a wrong shape
    must be an error here, not a read out of bounds.  Halves never reach the
    op (they are widened around it), so its float dtypes are the engines'.
    """
    check_operands(a, b, semiring)
    if not differentiable(NUMPY_DTYPES[a.dtype]):
        floats = " or ".join(str(t) for t in FLOATS)
        raise TypeError(f"matmul_backward needs float operands ({floats}), got {a.dtype}")
    out_shape = product_shape(tuple(a.shape), tuple(b.shape)).out_shape
    if tuple(grad_c.shape) != out_shape or grad_c.dtype != a.dtype or grad_c.device != a.device:
        raise ValueError(
            f"grad_c must have the product's shape {out_shape}, dtype {a.dtype} and device {a.device}, "
            f"got shape {tuple(grad_c.shape)}, dtype {grad_c.dtype} and device {grad_c.device}"
        )
    if tuple(argmax.shape) != out_shape or argmax.dtype not in INDEX_DTYPES.values() or argmax.device != a.device:
        raise ValueError(
            f"argmax must be an int32 or int64 tensor of shape {out_shape} on {a.device} (as returned by "
            f"tropical_matmul_with_argmax), got shape {tuple(argmax.shape)}, dtype {argmax.dtype} "
            f"and device {argmax.device}"
        )


def argmax_torch_dtype(k: int) -> torch.dtype:
    """The core rule (int32 unless K needs 64 bits), as a torch dtype."""
    return INDEX_DTYPES[argmax_dtype(k)]


def semiring_name(semiring: "str | Semiring") -> str:
    """The canonical name, so each op sees one spelling per semiring (one compile each)."""
    return get_semiring(semiring).name
