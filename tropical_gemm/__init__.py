"""Tropical matrix products (max-plus, min-plus, max-times and kin) on GPUs and CPUs.

``import tropical_gemm`` loads numpy and what a first ``matmul`` needs, nothing
heavier: ``einsum`` (its parser, planner and the CPU engine it lowers to) is
imported the first time it is used, cupy the first time a device array is
passed, torch only by ``tropical_gemm.torch``, dask only by
``tropical_gemm.dask``, and each CUDA kernel is compiled the first time it is
needed, then cached on disk (see ``tropical_gemm.jit``).
"""

import sys
from types import ModuleType

from ._version import __version__
from .api import matmul, matmul_backward
from .dtypes import SUPPORTED_DTYPES
from .graphs import graphed
from .semirings import Semiring, counting_semirings, get_counting_semiring, get_semiring, semirings

__all__ = [
    "SUPPORTED_DTYPES",
    "Semiring",
    "__version__",
    "counting_semirings",
    "einsum",
    "get_counting_semiring",
    "get_semiring",
    "graphed",
    "jit",
    "matmul",
    "matmul_backward",
    "semirings",
]

_LAZY_SUBMODULES = ("dask", "jit", "torch")


class _Package(ModuleType):
    """``tropical_gemm`` itself: its ``einsum`` attribute stays the function, never the subpackage.

    ``tropical_gemm.einsum`` is both a subpackage and the function it exports.
    Importing the subpackage (``import tropical_gemm.einsum.lower`` before any
    ``tg.einsum`` call) makes the import system bind the package as this
    module's ``einsum``, after the package has run; this puts the function
    there instead, as the eager ``from .einsum import einsum`` used to.
    """

    def __setattr__(self, name: str, value: object) -> None:
        if name == "einsum" and isinstance(value, ModuleType):
            value = value.einsum
        super().__setattr__(name, value)

    def __reduce__(self) -> tuple:
        """Pickle by reference, as pickle's protocol and cloudpickle treat modules: the unpickler imports it.

        Without this, pickle (and cloudpickle, which reduces modules by their
        exact type) refuses a module subclass, and so every closure that
        names ``tg.matmul`` sent to a Dask, loky or spawn worker.
        """
        import importlib

        return importlib.import_module, (self.__name__,)


sys.modules[__name__].__class__ = _Package


def __getattr__(name: str):
    """Import ``einsum``, ``tropical_gemm.dask``, ``.jit`` and ``.torch`` only when first used."""
    import importlib  # here, not at the top: a module-level name would show in dir(tropical_gemm)

    if name == "einsum":
        return importlib.import_module(f"{__name__}.einsum").einsum
    if name in _LAZY_SUBMODULES:
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), "einsum"} - {"sys", "ModuleType"})
