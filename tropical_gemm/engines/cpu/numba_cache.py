"""Where and how numba keeps the CPU engine's compiled kernels: beside our CUDA kernels, under the same trust.

numba's own cache unpickles whatever it finds in its folder, and creates
that folder with the umask's modes.  Our kernels get a subclass of numba's
``FunctionCache`` instead, which keeps numba's layout and key but does its
file access through ``jit.cache``:

* every read first checks each directory from the cache root down to the
  kernel's folder (owner, mode, no symlinks), and reads nothing under one
  that fails (one ``DiskCacheWarning`` names it);
* every file is stored sealed (with the SHA-256 of its contents) and handed
  to ``pickle`` only after a capped, trusted read whose seal matches; a file
  that does not match is moved aside and the kernel compiles again;
* directories and files are created 0700/0600 (or the shared group's modes)
  whatever the umask, the root included.

Sealed files carry their own names (``*.sealed.nbi``, ``*.sealed.nbc``), so
files numba wrote by itself are never opened.  Where the disk cache is off,
untrusted or unwritable, nothing is read or written: the kernels compile in
each process.  Any other way of caching CPU kernels must go through the same
two gates: ``DiskCache.readable_dir`` before reading, ``read_sealed`` for
anything that runs code when loaded.
"""

from __future__ import annotations

import io
import os
import pickle
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from numba.core.caching import CompileResultCacheImpl, FunctionCache, IndexDataCacheFile, UserProvidedCacheLocator

from ...jit import log
from ...jit.cache import DiskCache, cache_dir, default_cache
from ...jit.cache.config import MAX_BINARY_BYTES
from ...jit.cache.files import UntrustedFile, remove_aside
from ...jit.cache.sealed import read_sealed, write_sealed

#: The sub-folder of the cache root that holds numba's index and object files.
SUBDIR = "numba-cpu"


def numba_cache_dir() -> Path:
    """The folder under which numba's files for the CPU kernels live (one sub-folder per source folder)."""
    return cache_dir() / SUBDIR


def _disk_cache() -> DiskCache | None:
    cache = default_cache()
    return cache if isinstance(cache, DiskCache) else None


class _Locator(UserProvidedCacheLocator):
    """numba's folder for a function, under our cache root; created only to write, and only our way."""

    def __init__(self, py_func: Callable, py_file: str) -> None:
        self._py_file = py_file
        self._lineno = py_func.__code__.co_firstlineno
        self._cache_path = str(numba_cache_dir() / self.get_suitable_cache_subpath(py_file))

    @classmethod
    def from_function(cls, py_func: Callable, py_file: str) -> "_Locator | None":
        return cls(py_func, py_file) if os.path.exists(py_file) else None

    def ensure_cache_path(self) -> None:
        cache = _disk_cache()
        if cache is None or not cache.writable_dir(Path(self._cache_path)):
            raise PermissionError(f"the kernel cache takes no writes here: {self._cache_path}")


class _Impl(CompileResultCacheImpl):
    _locator_classes = [_Locator]


class _SealedFiles(IndexDataCacheFile):
    """numba's index and data files, sealed, read only from trusted directories."""

    def __init__(self, cache_path: str, filename_base: str, source_stamp: Any) -> None:
        super().__init__(cache_path, filename_base + ".sealed", source_stamp)

    def _read(self, path: str) -> bytes | None:
        """The verified contents of one of our files, or ``None`` (absent, or refused and moved aside)."""
        cache = _disk_cache()
        if cache is None or not cache.readable_dir(Path(path).parent):
            return None
        try:
            return read_sealed(Path(path), MAX_BINARY_BYTES, cache.trust)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except UntrustedFile as exc:
            log.warning("CPU kernel cache file %s %s; moved it aside, the kernel compiles again", path,
                        exc.problem)
            remove_aside(Path(path))
        except OSError as exc:
            log.warning("cannot read CPU kernel cache file %s (%s); the kernel compiles again", path, exc)
        return None

    def _load_index(self) -> dict:
        raw = self._read(self._index_path)
        if raw is None:
            return {}
        stream = io.BytesIO(raw)
        if pickle.load(stream) != self._version:
            return {}
        stamp, overloads = pickle.loads(stream.read())
        return overloads if stamp == self._source_stamp else {}

    def _load_data(self, name: str) -> Any:
        raw = self._read(self._data_path(name))
        if raw is None:
            raise FileNotFoundError(name)  # numba's load treats it as a miss
        return pickle.loads(raw)

    @contextmanager
    def _open_for_write(self, filepath: str) -> Iterator[io.BytesIO]:
        buffer = io.BytesIO()
        yield buffer
        cache = _disk_cache()
        if cache is None:
            return
        try:
            write_sealed(Path(filepath), buffer.getvalue(), cache.trust)
        except OSError as exc:  # a full disk costs the next process a compile, never this one its result
            log.warning("cannot store CPU kernel cache file %s (%s)", filepath, exc)


class TrustedFunctionCache(FunctionCache):
    """numba's per-function cache, with our folder, our checks and sealed files."""

    _impl_class = _Impl

    def __init__(self, py_func: Callable) -> None:
        super().__init__(py_func)
        self._cache_file = _SealedFiles(self._cache_path, self._impl.filename_base,
                                        self._impl.locator.get_source_stamp())

    def _save_overload(self, sig: Any, data: Any) -> None:
        try:
            self._impl.locator.ensure_cache_path()
        except PermissionError:
            return  # the disk cache is off, untrusted or unwritable: said once by the cache itself
        super()._save_overload(sig, data)


def cached_njit(function: Callable, **options: Any) -> Any:
    """``njit(cache=True, **options)(function)`` with :class:`TrustedFunctionCache` in place of numba's cache.

    Lazy, as numba's: each signature compiles (or loads) on its first call.
    """
    from numba import njit

    dispatcher = njit(**options)(function)
    dispatcher._cache = TrustedFunctionCache(dispatcher.py_func)
    return dispatcher


def compile_cached(dispatcher: Any, signature: Any) -> Any:
    """``dispatcher`` (a lazy ``njit`` one) compiled for ``signature``, or loaded, through our cache.

    What ``njit(signature, cache=True)`` does, with :class:`TrustedFunctionCache` in place of numba's.
    """
    dispatcher._cache = TrustedFunctionCache(dispatcher.py_func)
    dispatcher.compile(signature)
    dispatcher.disable_compile()
    return dispatcher
