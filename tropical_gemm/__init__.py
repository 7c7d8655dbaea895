"""Tropical matrix products (max-plus, min-plus, max-times and kin) on GPUs and CPUs.

``import tropical_gemm`` loads numpy and nothing heavier: cupy is imported the
first time a device array is passed, torch only by ``tropical_gemm.torch``,
dask only by ``tropical_gemm.dask``, and each CUDA kernel is compiled the
first time it is needed, then cached on disk (see ``tropical_gemm.jit``).
"""

from ._version import __version__
from .api import matmul, matmul_backward
from .dtypes import SUPPORTED_DTYPES
from .einsum import einsum
from .semirings import Semiring, get_semiring, semirings

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
        import importlib  # here, not at the top: a module-level name would show in dir(tropical_gemm)

        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

