"""NVRTC through ctypes: the version, the supported archs, and one program compiled to cubin or PTX.

Why our own binding: CuPy's (``cupy_backends.cuda.libs.nvrtc``) imports
CuPy and its library finder, which costs more than a warm torch call may
take, and the registry needs NVRTC's version on every process's first
lookup (it is part of each cache key).  Loading the library directly costs a
``dlopen``.  The library is found where the ``nvidia-cuda-nvrtc`` wheel puts
it, then through ``cuda.pathfinder`` (CuPy's own finder) where installed,
then by the system's loader.  Everything that compiles or keys a binary
goes through this one library, so a cache entry's NVRTC version is always
the version that built it.
"""

from __future__ import annotations

import ctypes
import glob
import importlib.util
import os
import sys
from functools import lru_cache
from pathlib import Path
from typing import Any, Sequence

#: Library names the system loader may know, newest first.
_SYSTEM_NAMES = {"win32": ()}.get(sys.platform, ("libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"))


class NvrtcError(RuntimeError):
    """An NVRTC call failed: ``reason`` names the call and NVRTC's error, ``status`` is its result code, and
    ``log`` the program's log (a failed compile's; the message ends with it)."""

    def __init__(self, reason: str, status: int = -1, log: str = "") -> None:
        super().__init__(f"{reason}\n{log}" if log else reason)
        self.reason, self.status, self.log = reason, status, log


class NvrtcNotFound(OSError):
    """No NVRTC library could be loaded; the message lists where it was looked for."""


def _wheel_libraries() -> list[Path]:
    """``libnvrtc.so*`` of the ``nvidia-cuda-nvrtc`` wheel (``nvidia/cu13/lib``, ``nvidia/cuda_nvrtc/lib``).

    ``glob.glob`` rather than ``Path.glob``: a warm start runs this, and
    the ``nvidia`` namespace of a torch install holds a dozen packages.
    """
    spec = importlib.util.find_spec("nvidia")
    roots = list(spec.submodule_search_locations or ()) if spec is not None else []
    return [Path(path) for root in roots
            for path in sorted(glob.glob(os.path.join(glob.escape(root), "*", "lib", "libnvrtc.so.*")), reverse=True)]


def _pathfinder_library() -> list[str]:
    try:
        from cuda import pathfinder
    except ImportError:
        return []
    try:
        return [pathfinder.load_nvidia_dynamic_lib("nvrtc").abs_path]
    except RuntimeError:  # its DynamicLibNotFoundError: the system's loader is tried next
        return []


@lru_cache(maxsize=1)
def library() -> Any:
    """The NVRTC library, loaded once per process."""
    tried: list[str] = []
    for candidates in (_wheel_libraries, _pathfinder_library, lambda: list(_SYSTEM_NAMES)):
        for candidate in candidates():
            try:
                return ctypes.CDLL(str(candidate))
            except OSError as exc:
                tried.append(str(exc))
    raise NvrtcNotFound("no NVRTC library found (looked in the nvidia-cuda-nvrtc wheel, through cuda.pathfinder "
                        f"and on the system's library path){': ' + '; '.join(tried) if tried else ''}")


def file_identity(path: str) -> str | None:
    """Path, size and modification time of a library file: equal identities are the same build of NVRTC.

    A warm process compares the identity of the library it would load with
    the one its cache recorded beside the version, and so learns NVRTC's
    version without a ``dlopen`` (which costs more than the rest of a warm
    kernel lookup).  ``None`` where the file cannot be stat'ed (a bare
    soname that the system's loader resolves).
    """
    try:
        st = os.stat(path)
    except OSError:
        return None
    return f"{path}|{st.st_size}|{st.st_mtime_ns}"


@lru_cache(maxsize=1)
def expected_identity() -> str | None:
    """The identity of the library ``library()`` tries first (the wheel's), read without loading it."""
    wheel = _wheel_libraries()
    return file_identity(str(wheel[0])) if wheel else None


def loaded_identity() -> str | None:
    """The identity of the library this process loaded."""
    return file_identity(library()._name)


def _error_name(status: int) -> str:
    lib = library()
    lib.nvrtcGetErrorString.restype = ctypes.c_char_p
    return (lib.nvrtcGetErrorString(status) or b"NVRTC_ERROR").decode()


def _check(status: int, call: str) -> None:
    if status != 0:
        raise NvrtcError(f"{call}: {_error_name(status)}", status)


def _call(function: str, *args: Any) -> None:
    _check(getattr(library(), function)(*args), function)


def version() -> tuple[int, int]:
    major, minor = ctypes.c_int(), ctypes.c_int()
    _call("nvrtcVersion", ctypes.byref(major), ctypes.byref(minor))
    return major.value, minor.value


def supported_archs() -> tuple[int, ...]:
    count = ctypes.c_int()
    _call("nvrtcGetNumSupportedArchs", ctypes.byref(count))
    archs = (ctypes.c_int * count.value)()
    _call("nvrtcGetSupportedArchs", archs)
    return tuple(archs)


def _strings(values: Sequence[str]) -> Any:
    return (ctypes.c_char_p * len(values))(*(v.encode() for v in values))


def _read(program: ctypes.c_void_p, what: str) -> bytes:
    """One of the program's outputs (``ProgramLog``, ``CUBIN``, ``PTX``), as NVRTC wrote it."""
    size = ctypes.c_size_t()
    _call(f"nvrtcGet{what}Size", program, ctypes.byref(size))
    buffer = ctypes.create_string_buffer(size.value)
    _call(f"nvrtcGet{what}", program, buffer)
    return buffer.raw


def compile_program(source: str, name: str, options: Sequence[str], output: str,
                    headers: Sequence[tuple[str, str]] = ()) -> tuple[bytes, str]:
    """``(binary, log)`` of ``source`` compiled with ``options``; ``output`` is "CUBIN" or "PTX".

    ``headers`` are (include name, text) pairs, passed in memory.  A failed
    compile raises :class:`NvrtcError` with NVRTC's log.
    """
    program = ctypes.c_void_p()
    _call("nvrtcCreateProgram", ctypes.byref(program), source.encode(), name.encode(), len(headers),
          _strings([text for _, text in headers]), _strings([include for include, _ in headers]))
    try:
        status = library().nvrtcCompileProgram(program, len(options), _strings(list(options)))
        log = _read(program, "ProgramLog").rstrip(b"\x00").decode(errors="replace").strip()
        if status != 0:
            raise NvrtcError(f"nvrtcCompileProgram: {_error_name(status)}", status, log)
        return _read(program, output), log
    finally:
        _call("nvrtcDestroyProgram", ctypes.byref(program))
