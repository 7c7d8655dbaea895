"""Where numba keeps the CPU engine's compiled kernels: beside our CUDA kernels.

numba picks a function's cache folder when the function is decorated, from
``numba.config.CACHE_DIR``.  Setting that for the whole process would move the
caches of a user's own numba functions, so it is set only while our kernels
are decorated, and restored at once.  ``tropical-gemm cache`` and
``TROPICAL_GEMM_CACHE_DIR`` then govern every kernel the library compiles.

numba loads pickled code from its cache, so it reads ours only where our
cache is trusted and writable (the checks of ``jit.cache``: owner, mode,
a usable directory).  Elsewhere it gets a fresh private folder for this
process: the kernels compile again, and nothing planted is ever loaded.
"""

from __future__ import annotations

import tempfile
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Iterator

import numba

from ...jit.cache import cache_dir, default_cache

#: The sub-folder of the cache root that holds numba's index and object files.
SUBDIR = "numba-cpu"


def numba_cache_dir() -> Path:
    """The folder numba writes the CPU kernels to (it creates it on first write)."""
    if not default_cache().writable:
        return _private_dir()
    return cache_dir() / SUBDIR


@lru_cache(maxsize=1)
def _private_dir() -> Path:
    """A folder only this process uses (0700), for when our cache is not to be trusted or written."""
    return Path(tempfile.mkdtemp(prefix="tropical-gemm-numba-"))


@contextmanager
def our_cache_dir() -> Iterator[None]:
    """Point numba's cache at ours while the kernels inside the block are decorated."""
    previous = numba.config.CACHE_DIR
    numba.config.CACHE_DIR = str(numba_cache_dir())
    try:
        yield
    finally:
        numba.config.CACHE_DIR = previous
