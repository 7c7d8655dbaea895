"""Tropical matrix products (max-plus, min-plus, max-times and kin) on GPUs and CPUs.

``import tropical_gemm`` loads numpy and nothing heavier: cupy is imported the
first time a device array is passed, torch only by ``tropical_gemm.torch``,
dask only by ``tropical_gemm.dask``, and each CUDA kernel is compiled the
first time it is needed, then cached on disk (see ``tropical_gemm.jit``).
"""

from __future__ import annotations

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version

from .api import matmul, matmul_backward
from .dtypes import SUPPORTED_DTYPES
from .einsum import einsum
from .semirings import Semiring, get_semiring, semirings

try:
    __version__ = version("tropical-gemm-jit")
    """The installed version of the ``tropical-gemm-jit`` distribution.

    It is part of every kernel's cache key, so an upgrade never loads a kernel
    built from older sources.

    Examples:
        >>> import tropical_gemm as tg
        >>> from importlib.metadata import version
        >>> tg.__version__ == version("tropical-gemm-jit")
        True
    """
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0+unknown"

__all__ = [
    "SUPPORTED_DTYPES",
    "Semiring",
    "__version__",
    "einsum",
    "get_semiring",
    "jit",
    "matmul",
    "matmul_backward",
    "semirings",
]

_LAZY_SUBMODULES = ("dask", "jit", "torch")


def __getattr__(name: str):
    """Import ``tropical_gemm.dask``, ``.jit`` and ``.torch`` only when first used."""
    if name in _LAZY_SUBMODULES:
        return import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
