"""The torch front end of ``tropical_gemm.matmul`` and ``tropical_gemm.einsum`` (see ``tropical_gemm.frontends``).

Tensors come back as tensors on their device, differentiable, whatever
dtype ``tropical_matmul`` takes (float16 and bfloat16 included).
"""

from __future__ import annotations

from typing import Any

from torch import Tensor

from ..semirings import Semiring
from .functional import tropical_matmul, tropical_matmul_with_argmax


def matmul(a: Tensor, b: Tensor, semiring: "str | Semiring", *, argmax: bool) -> Any:
    return tropical_matmul_with_argmax(a, b, semiring) if argmax else tropical_matmul(a, b, semiring)


def einsum(subscripts: Any, *operands: Any, semiring: "str | Semiring", optimize: Any,
           return_configuration: bool) -> Any:
    from ..einsum import contract

    return contract(subscripts, *operands, semiring=semiring, optimize=optimize,
                    return_configuration=return_configuration)
