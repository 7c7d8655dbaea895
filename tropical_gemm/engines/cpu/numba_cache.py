"""Where numba keeps the CPU engine's compiled kernels: beside our CUDA kernels.

numba picks a function's cache folder when the function is decorated, from
``numba.config.CACHE_DIR``.  Setting that for the whole process would move the
caches of a user's own numba functions, so it is set only while our kernels
are decorated, and restored at once.  ``tropical-gemm cache`` and
``TROPICAL_GEMM_CACHE_DIR`` then govern every kernel the library compiles.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numba

from ...jit.disk_cache import cache_dir

#: The sub-folder of the cache root that holds numba's index and object files.
SUBDIR = "numba-cpu"


def numba_cache_dir() -> Path:
    """The folder numba writes the CPU kernels to (it creates it on first write)."""
    return cache_dir() / SUBDIR


@contextmanager
def our_cache_dir() -> Iterator[None]:
    """Point numba's cache at ours while the kernels inside the block are decorated."""
    previous = numba.config.CACHE_DIR
    numba.config.CACHE_DIR = str(numba_cache_dir())
    try:
        yield
    finally:
        numba.config.CACHE_DIR = previous
