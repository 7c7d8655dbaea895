"""Inputs that belong to another layer: torch tensors and dask arrays are sent there, masked arrays refused.

``tropical_gemm.matmul`` asks here before it picks an engine, so a torch
tensor comes back as a tensor (with autograd), a dask array stays lazy, and a
masked array is an error instead of a product that ignores its mask.  Nothing
here imports torch, dask or ``numpy.ma`` (numpy imports that lazily, and it
costs more than a warm product): a tensor, a dask array or a masked array
can only exist once its module is imported, so ``sys.modules`` says whether
to look.
"""

from __future__ import annotations

import sys
from typing import Any, Callable


Product = Callable[..., Any]


def route(arrays: tuple[Any, ...], out: Any, function: str) -> "Product | None":
    """The function to run instead of the engines for these inputs, or None to run the engines.

    Raises ``TypeError`` for masked arrays, and for a torch tensor or dask
    array mixed with something its layer does not take.
    """
    outs = out if isinstance(out, tuple) else (out,)
    masked = sys.modules.get("numpy.ma")
    for label, x in (*zip(("a", "b"), arrays), *(("out", o) for o in outs if o is not None)):
        if masked is not None and isinstance(x, masked.MaskedArray):
            raise TypeError(
                f"{label} is a masked array, whose mask tropical_gemm would ignore; fill the masked entries "
                f"with a value that loses, e.g. {label}.filled(tropical_gemm.get_semiring(semiring).zero({label}.dtype)), "
                f"or pass {label}.data to use the values under the mask"
            )
    torch = sys.modules.get("torch")
    if torch is not None and any(isinstance(x, torch.Tensor) for x in (*arrays, *outs)):
        return _to_torch(arrays, out, function, torch)
    dask_array = sys.modules.get("dask.array")
    if dask_array is not None and any(isinstance(x, dask_array.Array) for x in arrays):
        return _to_dask(out, function)
    return None


def _to_torch(arrays: tuple[Any, ...], out: Any, function: str, torch: Any) -> Product:
    """``tropical_gemm.torch``'s product, for tensors only: it returns tensors and keeps autograd."""
    for label, x in zip(("a", "b"), arrays):
        if not isinstance(x, torch.Tensor):
            raise TypeError(
                f"{label} is a {type(x).__module__}.{type(x).__name__} but the other operand is a torch tensor; "
                f"convert it first, e.g. torch.as_tensor({label}, device=other.device)"
            )
    if function != "matmul":
        raise TypeError(
            "matmul_backward takes numpy or cupy arrays; for torch tensors, gradients come from autograd: "
            "c = tropical_gemm.matmul(a, b) (or tropical_gemm.torch.tropical_matmul), then c.backward(...)"
        )
    if out is not None:
        raise TypeError(
            "out= is not supported for torch tensors: the product is a new tensor that autograd tracks; "
            "copy it afterwards if needed (out.copy_(c))"
        )
    from .torch import tropical_matmul, tropical_matmul_with_argmax

    def product(a: Any, b: Any, semiring: Any, *, argmax: bool, out: Any) -> Any:
        return tropical_matmul_with_argmax(a, b, semiring) if argmax else tropical_matmul(a, b, semiring)

    return product


def _to_dask(out: Any, function: str) -> Product:
    """``tropical_gemm.dask``'s product: the result stays a lazy dask array."""
    if function != "matmul":
        raise TypeError("matmul_backward takes numpy or cupy arrays, not dask arrays; compute them first")
    if out is not None:
        raise TypeError("out= is not supported for dask arrays: the result is lazy; use out[...] = c.compute()")

    def product(a: Any, b: Any, semiring: Any, *, argmax: bool, out: Any) -> Any:
        from . import dask as tgd
        from .shapes import promote_vectors

        a, b, vectors = promote_vectors(a, b)
        result = tgd.matmul(a, b, semiring, argmax=argmax)
        return tuple(map(vectors.squeeze, result)) if argmax else vectors.squeeze(result)

    return product
