"""The CUDA driver API through ctypes: load a verified cubin, query a device, launch a kernel.

Why not CuPy's ``Module``/``Function``: launching needs only the driver
library, which every process with a CUDA context has already loaded, while
``import cupy`` costs more than a whole warm torch forward and backward is
allowed to take.  With launches here, a torch call that hits the kernel
cache never imports CuPy; CuPy stays the array layer of the CuPy engine.

A launch packs its arguments the way CuPy's ``Function`` does (Python ints
as 64-bit integers, numpy scalars as their own type, arrays as their device
address), so every caller passes what it passed before.  A bound launch
(:meth:`Function.bind`) packs the trailing scalar arguments once: a repeated
call then packs only its addresses.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import threading
from functools import lru_cache
from typing import Any, Iterator, Sequence

#: cuDeviceGetAttribute ids (cuda.h, CUdevice_attribute).
ATTRIBUTE_MULTIPROCESSOR_COUNT = 16
ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75
ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76
ATTRIBUTE_MAX_SHARED_PER_BLOCK_OPTIN = 97
#: cuFuncSetAttribute id (CUfunction_attribute): the dynamic shared memory a kernel's launches may take.
FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED = 8
#: What every kernel may take without raising its limit.
DEFAULT_DYNAMIC_SHARED = 48 * 1024

_LIBRARY_NAMES = {"win32": ("nvcuda.dll",), "darwin": ()}.get(sys.platform, ("libcuda.so.1", "libcuda.so"))


class DriverError(RuntimeError):
    """A CUDA driver call failed; the message names the call and the driver's error.

    A ``RuntimeError``, like CuPy's ``CUDADriverError``, so that callers that
    catch a refused binary keep catching it.
    """


class CudaAfterForkError(RuntimeError):
    """CUDA was initialised in a parent process, and this process is a child made by ``fork()``.

    CUDA itself does not support that (a forked child inherits a context it
    cannot use), so the child gets this error instead of a hang or a
    crash.  Start workers with multiprocessing's "spawn" or "forkserver"
    method, or fork before the first GPU call.
    """


#: The process that initialised the driver; a forked child has another pid and must not use it.
_initialised_in: int | None = None


def check_not_forked() -> None:
    """Raise :class:`CudaAfterForkError` in a child forked after this library initialised CUDA; else nothing."""
    if _initialised_in is not None and _initialised_in != os.getpid():
        raise CudaAfterForkError(
            f"CUDA was initialised in process {_initialised_in}, and this process ({os.getpid()}) is its child "
            "made by fork(), which CUDA does not support. Use multiprocessing's 'spawn' or 'forkserver' start "
            "method (multiprocessing.get_context('spawn')), or fork before the first GPU call")


def library() -> Any:
    """The driver library, initialised once per process; a forked child of an initialised one gets an error."""
    check_not_forked()
    return _initialised_library()


@lru_cache(maxsize=1)
def _initialised_library() -> Any:
    global _initialised_in
    errors = []
    for name in _LIBRARY_NAMES:
        try:
            lib = ctypes.CDLL(name)
            break
        except OSError as exc:
            errors.append(str(exc))
    else:
        raise DriverError("the CUDA driver library (libcuda) is not loadable: " + "; ".join(errors)
                          + ". Install the NVIDIA driver, or compute on the CPU with numpy arrays")
    check(lib, lib.cuInit(0), "cuInit")
    _initialised_in = os.getpid()
    return lib


def check(lib: Any, status: int, call: str) -> None:
    """Raise :class:`DriverError` for a failed call, with the driver's own name for the error."""
    if status == 0:
        return
    name = ctypes.c_char_p()
    lib.cuGetErrorName(status, ctypes.byref(name))
    raise DriverError(f"{call} failed: {(name.value or b'CUDA_ERROR').decode()} ({status})")


def _call(function: str, *args: Any) -> None:
    lib = library()
    check(lib, getattr(lib, function)(*args), function)


# ------------------------------------------------------------------ devices


def _device(ordinal: int) -> ctypes.c_int:
    handle = ctypes.c_int()
    _call("cuDeviceGet", ctypes.byref(handle), ordinal)
    return handle


@lru_cache(maxsize=None)
def attribute(device: int, attribute_id: int) -> int:
    """One device attribute (they never change while a process runs)."""
    value = ctypes.c_int()
    _call("cuDeviceGetAttribute", ctypes.byref(value), attribute_id, _device(device))
    return value.value


def compute_capability(device: int) -> int:
    """``major * 10 + minor``: 90 for an H100."""
    return (10 * attribute(device, ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)
            + attribute(device, ATTRIBUTE_COMPUTE_CAPABILITY_MINOR))


def multiprocessor_count(device: int) -> int:
    return attribute(device, ATTRIBUTE_MULTIPROCESSOR_COUNT)


_primary_lock = threading.Lock()
_primary: dict[int, int] = {}


def primary_context(device: int) -> int:
    """The device's primary context, the one the CUDA runtime (torch, CuPy) uses; retained for the process."""
    context = _primary.get(device)
    if context is None:
        with _primary_lock:
            if device not in _primary:
                ctx = ctypes.c_void_p()
                _call("cuDevicePrimaryCtxRetain", ctypes.byref(ctx), _device(device))
                _primary[device] = ctx.value or 0
            context = _primary[device]
    return context


def current_context() -> int:
    ctx = ctypes.c_void_p()
    _call("cuCtxGetCurrent", ctypes.byref(ctx))
    return ctx.value or 0


def current_device() -> int:
    """The device of this thread's current context; 0 where none is current (the runtime's default too)."""
    if not current_context():
        return 0
    device = ctypes.c_int()
    _call("cuCtxGetDevice", ctypes.byref(device))
    return device.value


@contextlib.contextmanager
def on_context(context: int) -> Iterator[None]:
    """Make ``context`` current for the block, leaving the thread's own current context as it was."""
    if current_context() == context:
        yield
        return
    _call("cuCtxPushCurrent_v2", ctypes.c_void_p(context))
    try:
        yield
    finally:
        _call("cuCtxPopCurrent_v2", ctypes.byref(ctypes.c_void_p()))


def memset_async(address: int, nbytes: int, stream: int) -> None:
    """Zero ``nbytes`` at ``address`` on ``stream``."""
    _call("cuMemsetD8Async", ctypes.c_uint64(address), ctypes.c_ubyte(0), ctypes.c_size_t(nbytes),
          ctypes.c_void_p(stream))


# ------------------------------------------------------------------ kernels


_PYTHON_CTYPES: dict[type, type] = {int: ctypes.c_int64, bool: ctypes.c_bool, float: ctypes.c_double}


@lru_cache(maxsize=1)
def _numpy_ctypes() -> dict[type, type]:
    import numpy as np

    return {np.int32: ctypes.c_int32, np.int64: ctypes.c_int64, np.uint32: ctypes.c_uint32,
            np.uint64: ctypes.c_uint64, np.float32: ctypes.c_float, np.float64: ctypes.c_double,
            np.bool_: ctypes.c_bool}


def kernel_argument(value: Any) -> Any:
    """A kernel argument as a ctypes value, the way CuPy's ``Function`` passes it.

    Python ints are 64-bit (the kernels' ``i64`` and pointers), numpy scalars
    keep their type, an array (anything with ``.data.ptr``, such as a cupy
    array) passes its device address, and ``None`` a null pointer.
    """
    kind = _PYTHON_CTYPES.get(type(value))
    if kind is not None:
        return kind(value)
    if value is None:
        return ctypes.c_uint64(0)
    pointer = getattr(getattr(value, "data", None), "ptr", None)
    if pointer is not None:
        return ctypes.c_uint64(pointer)
    kind = _numpy_ctypes().get(type(value))
    if kind is None:
        raise TypeError(f"unsupported kernel argument of type {type(value).__name__}: pass an int, a numpy "
                        "scalar or a device array")
    return kind(value.item())


def default_stream() -> int:
    """CuPy's current stream where CuPy is in use (callers that pass no stream are CuPy code), else 0."""
    cupy = sys.modules.get("cupy")
    return 0 if cupy is None else cupy.cuda.get_current_stream().ptr


class Function:
    """A kernel loaded into one device's primary context.

    ``shared_limit``: the dynamic shared memory the kernel may be launched
    with.  The driver allows 48 KiB without asking; a launch that needs more
    (the pipelined square kernel's stages) raises the kernel's limit first,
    once (``reserve_shared``).
    """

    __slots__ = ("name", "handle", "context", "module", "shared_limit")

    def __init__(self, name: str, handle: int, context: int, module: int) -> None:
        self.name, self.handle, self.context, self.module = name, handle, context, module
        self.shared_limit = DEFAULT_DYNAMIC_SHARED

    def __call__(self, grid: Sequence[int], block: Sequence[int], args: Sequence[Any], *,
                 shared_mem: int = 0, stream: int | None = None) -> None:
        """Launch on ``stream`` (a raw handle; None: CuPy's current stream), CuPy's ``Function`` call form."""
        self.bind(grid, block, (), shared_mem).launch(args, stream)

    def bind(self, grid: Sequence[int], block: Sequence[int], scalars: Sequence[Any],
             shared_bytes: int = 0) -> "BoundLaunch":
        """This kernel with its grid, block, dynamic shared memory and trailing arguments fixed: a launch adds
        only the leading ones."""
        if shared_bytes > self.shared_limit:
            self.reserve_shared(shared_bytes)
        return BoundLaunch(self, _dim3(grid), _dim3(block), tuple(map(kernel_argument, scalars)), shared_bytes)

    def reserve_shared(self, nbytes: int) -> None:
        """Let launches of this kernel take ``nbytes`` of dynamic shared memory (a ``DriverError`` past the
        device's opt-in limit, naming it)."""
        with on_context(self.context):
            device = current_device()
            most = attribute(device, ATTRIBUTE_MAX_SHARED_PER_BLOCK_OPTIN)
            if nbytes > most:
                raise DriverError(f"{self.name} needs {nbytes} bytes of shared memory per block; device {device} "
                                  f"allows {most}: run it on a GPU with more (sm_80 or later) or use the CPU "
                                  f"engine")
            _call("cuFuncSetAttribute", ctypes.c_void_p(self.handle), FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED,
                  ctypes.c_int(nbytes))
        self.shared_limit = nbytes


def _dim3(dims: Sequence[int]) -> tuple[int, int, int]:
    x, y, z = (*dims, 1, 1)[:3]
    return int(x), int(y), int(z)


#: What cuLaunchKernel answers when the thread's current context is not the function's (or there is none).
_WRONG_CONTEXT = (201, 400)  # CUDA_ERROR_INVALID_CONTEXT, CUDA_ERROR_INVALID_HANDLE


class BoundLaunch:
    """A kernel, its grid and block, and its trailing arguments packed once.

    A launch packs only its leading arguments and makes one driver call: it
    does not ask which context is current first.  The usual thread has the
    function's context current (CuPy's and torch's device); on any other the
    driver refuses the launch, which then runs again with the function's
    context pushed, so a refused launch never ran.

    Leading arguments that are 64 bits wide (ints, arrays' addresses, None)
    go into slots allocated at the first launch, whose parameter array is
    built once: a repeated launch writes its values and calls the driver,
    which copies them before it returns.  A lock keeps two threads from
    writing the slots of one launch at once (ctypes lets go of the GIL
    during the call).  Other leading arguments are packed per launch.
    """

    __slots__ = ("function", "grid", "block", "scalars", "_scalar_pointers", "_head", "_cu_launch", "_lock",
                 "_slots", "_params")

    def __init__(self, function: Function, grid: tuple[int, int, int], block: tuple[int, int, int],
                 scalars: tuple, shared_bytes: int = 0) -> None:
        self.function, self.grid, self.block, self.scalars = function, grid, block, scalars
        self._scalar_pointers = tuple(ctypes.addressof(v) for v in scalars)
        self._head = (ctypes.c_void_p(function.handle), *grid, *block, shared_bytes)
        self._cu_launch = library().cuLaunchKernel
        self._lock = threading.Lock()
        self._slots: Any = None
        self._params: Any = None

    def launch(self, leading: Sequence[Any], stream: int | None = None) -> None:
        """Queue the kernel with ``leading`` arguments (arrays, addresses) before the bound ones."""
        handle = ctypes.c_void_p(default_stream() if stream is None else stream)
        words = _words(leading)
        if words is None:  # an argument narrower than 64 bits: packed for this launch alone
            values = [kernel_argument(v) for v in leading]
            pointers = (*map(ctypes.addressof, values), *self._scalar_pointers)  # alive until the call returns
            self._call(handle, (ctypes.c_void_p * len(pointers))(*pointers))
            return
        with self._lock:
            slots = self._slots
            if slots is None or len(slots) != len(words):
                slots = self._slots = (ctypes.c_uint64 * len(words))()
                first = ctypes.addressof(slots)
                pointers = (*(first + 8 * i for i in range(len(words))), *self._scalar_pointers)
                self._params = (ctypes.c_void_p * len(pointers))(*pointers)
            slots[:] = words
            self._call(handle, self._params)

    def _call(self, stream: Any, params: Any) -> None:
        status = self._cu_launch(*self._head, stream, params, None)
        if status in _WRONG_CONTEXT:
            with on_context(self.function.context):
                status = self._cu_launch(*self._head, stream, params, None)
        if status:
            check(library(), status, "cuLaunchKernel")


def _words(leading: Sequence[Any]) -> list[int] | None:
    """The leading arguments as 64-bit words (ints, arrays' addresses, None as null), or None where one is
    narrower or of another type."""
    words = []
    for value in leading:
        if type(value) is int:
            words.append(value)
        elif value is None:
            words.append(0)
        else:
            pointer = getattr(getattr(value, "data", None), "ptr", None)
            if pointer is None:
                return None
            words.append(pointer)
    return words


def load_function(binary: bytes, entry_name: str, device: int) -> Function:
    """Load a cubin (or PTX) into ``device``'s primary context and find ``entry_name`` in it.

    The module stays loaded for the process: the registry keeps one function
    per kernel and device, and unloading at exit could outlive the context.
    """
    context = primary_context(device)
    module, handle = ctypes.c_void_p(), ctypes.c_void_p()
    with on_context(context):
        _call("cuModuleLoadData", ctypes.byref(module), ctypes.c_char_p(binary))
        _call("cuModuleGetFunction", ctypes.byref(handle), module, entry_name.encode())
    return Function(entry_name, handle.value or 0, context, module.value or 0)
