"""NVRTC compilation of one program for one target architecture.

We call NVRTC through our own ctypes binding (``jit.nvrtc``) rather than
``cupy.cuda.compiler``, which asks the CUDA runtime for the current device
even when an arch is given (so it cannot compile ahead of time on a machine
without a GPU: CI, login nodes), or CuPy's low-level binding, which imports
CuPy (too slow for the version lookup of every warm process).  The binding
needs only the NVRTC library, which the ``nvidia-cuda-nvrtc`` wheel provides.

Options are fixed (``COMPILE_OPTIONS``) and become part of the disk-cache
key.  None of them may change numerics: results must stay bit-identical with
the CPU engine, so flush-to-zero, fast division/square root and FMA
contraction are switched off explicitly instead of relying on defaults.
"""

from __future__ import annotations

import atexit
import contextlib
import re
import sys
import threading
import time
from functools import lru_cache
from types import ModuleType
from typing import NamedTuple, TextIO, Union

from .exit_wait import DEFAULT_EXIT_WAIT, exit_wait_seconds

COMPILE_OPTIONS: tuple[str, ...] = (
    "--std=c++17",
    "--ftz=false",
    "--prec-div=true",
    "--prec-sqrt=true",
    "--fmad=false",
)
"""Every option passed to NVRTC besides ``-arch``.

Changing this tuple changes every cache key, which is what we want: old
binaries were built differently.  No flush-to-zero, IEEE division and square
root, no FMA contraction: GPU results stay bit-identical with the CPU engine.

Examples:
    >>> from tropical_gemm.jit import COMPILE_OPTIONS
    >>> "--fmad=false" in COMPILE_OPTIONS and "--ftz=false" in COMPILE_OPTIONS
    True
"""

NVRTC_INSTALL_HINT = "pip install nvidia-cuda-nvrtc cupy-cuda13x"

ArchLike = Union[str, int, tuple[int, int]]

_ARCH_PATTERN = re.compile(r"^(?:(sm|compute)_?)?(?:(\d{2,3})|(\d{1,2})\.(\d))$", re.ASCII)  # "sm_9٠" is no arch


class NvrtcUnavailableError(RuntimeError):
    """The NVRTC library cannot be loaded on this machine.

    The message names the wheels to install (``pip install nvidia-cuda-nvrtc
    cupy-cuda13x``); no CUDA toolkit is needed.

    Examples:
        >>> from tropical_gemm.jit import NvrtcUnavailableError, resolve_target
        >>> try:
        ...     target = resolve_target("sm_90")
        ... except NvrtcUnavailableError as exc:   # prints which wheels to install
        ...     print(exc)
    """


class CompileError(RuntimeError):
    """NVRTC rejected a program; ``log`` holds its diagnostics verbatim.

    ``source`` is the rendered program and ``options`` the NVRTC options, so
    that a failure can be reproduced without the library; ``dump()`` writes
    them with numbered lines (as CuPy's ``CompileException.dump()`` does).

    Examples:
        >>> import io
        >>> from tropical_gemm.jit import CompileError, Target
        >>> from tropical_gemm.jit.compiler import compile_program
        >>> try:
        ...     compile_program("this is not CUDA", "broken", Target("cubin", 90))
        ... except CompileError as exc:
        ...     print(exc.kernel, exc.target, "error" in exc.log, exc.options[0])
        ...     report = io.StringIO()
        ...     exc.dump(report)
        ...     print(report.getvalue().splitlines()[3])
        broken sm_90 True -arch=sm_90
        0001 this is not CUDA
    """

    def __init__(self, message: str, *, kernel: str, target: str, log: str, source: str = "",
                 options: tuple[str, ...] = ()) -> None:
        super().__init__(message)
        self.kernel = kernel
        self.target = target
        self.log = log
        self.source = source
        self.options = tuple(options)

    def __reduce__(self) -> tuple:
        # The keyword-only fields are not in ``args``: without this, a worker
        # process could raise it but its parent could not unpickle it.
        return _rebuild_compile_error, (str(self), self.kernel, self.target, self.log, self.source, self.options)

    def dump(self, file: TextIO | None = None) -> None:
        """Write the kernel name, options, numbered source and NVRTC's log to ``file`` (default stderr)."""
        out = sys.stderr if file is None else file
        width = len(str(self.source.count("\n") + 1))
        rule = "=" * 40
        out.write(f"{rule}\n{self.kernel} ({self.target}): {' '.join(self.options)}\n{rule}\n")
        for number, line in enumerate(self.source.splitlines(), 1):
            out.write(f"{number:0{max(width, 4)}d} {line}\n")
        out.write(f"{rule}\n{self.log}\n{rule}\n")


def _rebuild_compile_error(message: str, kernel: str, target: str, log: str, source: str,
                           options: tuple[str, ...]) -> CompileError:
    return CompileError(message, kernel=kernel, target=target, log=log, source=source, options=options)


class UnsupportedArchError(ValueError):
    """An arch string that is malformed or older than anything NVRTC can build.

    Examples:
        >>> from tropical_gemm.jit import resolve_target
        >>> resolve_target("sm_90a")
        Traceback (most recent call last):
        ...
        tropical_gemm.jit.compiler.UnsupportedArchError: cannot read 'sm_90a' as a GPU architecture; write it like 'sm_90', 'compute_90', '90', '9.0' or (9, 0)
    """


class Target(NamedTuple):
    """What NVRTC produces: SASS for one GPU (``cubin``) or PTX for the driver to JIT.

    ``cc`` is the compute capability as an integer (90 for sm_90).  A cubin
    runs only on its own architecture family; PTX runs on that compute
    capability and every later one, at the price of a driver JIT at load.

    Examples:
        >>> from tropical_gemm.jit import Target
        >>> Target("cubin", 90).tag, Target("ptx", 120).tag
        ('sm_90', 'compute_120')
        >>> Target("cubin", 90).options[:2]
        ('-arch=sm_90', '--std=c++17')
    """

    kind: str  # "cubin" or "ptx"
    cc: int

    @property
    def tag(self) -> str:
        """``sm_90`` for a cubin, ``compute_90`` for PTX: NVRTC's own spelling."""
        return f"{'sm' if self.kind == 'cubin' else 'compute'}_{self.cc}"

    @property
    def options(self) -> tuple[str, ...]:
        """The full NVRTC option list for this target, in the order it is hashed."""
        return (f"-arch={self.tag}", *COMPILE_OPTIONS)


class CompiledKernel(NamedTuple):
    """The output of one NVRTC run, with what the cache records about it.

    Examples:
        >>> from tropical_gemm.jit import Target
        >>> from tropical_gemm.jit.compiler import compile_program
        >>> kernel = compile_program('extern "C" __global__ void k() {}', "k", Target("cubin", 90))
        >>> kernel.target.tag, kernel.binary[1:4], kernel.options[0]
        ('sm_90', b'ELF', '-arch=sm_90')
    """

    binary: bytes
    target: Target
    options: tuple[str, ...]
    nvrtc_version: tuple[int, int]
    compile_seconds: float
    log: str


def nvrtc_module() -> ModuleType:
    """The NVRTC binding (``jit.nvrtc``); tests replace it to play a missing library."""
    from . import nvrtc

    return nvrtc


@lru_cache(maxsize=None)
def nvrtc_version() -> tuple[int, int]:
    """NVRTC's (major, minor); part of every cache key because codegen changes with it."""
    try:
        return nvrtc_module().version()
    except OSError as exc:  # the library is absent or does not load
        raise NvrtcUnavailableError(f"the NVRTC library could not be loaded ({exc}). "
                                    f"Install it with: {NVRTC_INSTALL_HINT}") from exc


def nvrtc_identity(*, loaded: bool) -> str | None:
    """Which NVRTC library file this process uses (``loaded``) or would load first, or ``None``.

    Never loads the library when ``loaded`` is False: see ``nvrtc.file_identity``.
    """
    binding = nvrtc_module()
    try:
        return binding.loaded_identity() if loaded else binding.expected_identity()
    except OSError:  # no library: nothing to compare
        return None


@lru_cache(maxsize=None)
def supported_archs() -> tuple[int, ...]:
    """The compute capabilities this NVRTC can emit code for, ascending."""
    nvrtc_version()  # a clear error first if the library is missing
    return tuple(sorted(nvrtc_module().supported_archs()))


def parse_arch(arch: ArchLike) -> tuple[str, int]:
    """``("sm", 90)`` or ``("compute", 90)`` from "sm_90", "compute_90", "90", "9.0", 90 or (9, 0).

    A bare number means real hardware (``sm``).  Arch-specific suffixes such as
    ``sm_90a`` are refused: no kernel here uses features that need them.
    """
    if isinstance(arch, tuple) and len(arch) == 2 and all(type(x) is int and x >= 0 for x in arch):
        return "sm", arch[0] * 10 + arch[1]
    if type(arch) is int and 10 <= arch <= 999:
        return "sm", arch
    match = _ARCH_PATTERN.match(arch.strip().lower()) if isinstance(arch, str) else None
    if match is None:
        raise UnsupportedArchError(
            f"cannot read {arch!r} as a GPU architecture; write it like 'sm_90', 'compute_90', '90', '9.0' or (9, 0)"
        )
    family, whole, major, minor = match.groups()
    cc = int(whole) if whole else int(major) * 10 + int(minor)
    return family or "sm", cc


def resolve_target(arch: ArchLike) -> Target:
    """The binary to build for ``arch`` with this NVRTC.

    A supported ``sm_XY`` gets a cubin.  A newer GPU than NVRTC knows (or an
    unlisted one between two it knows) gets PTX for the highest supported
    arch below it, which the driver JIT-compiles at load: slower to load, but
    correct.  ``compute_XY`` asks for PTX explicitly.

    Examples:
        >>> from tropical_gemm.jit import resolve_target
        >>> resolve_target("sm_90")
        Target(kind='cubin', cc=90)
        >>> resolve_target("9.0") == resolve_target((9, 0)) == resolve_target(90)
        True
        >>> resolve_target("compute_90")
        Target(kind='ptx', cc=90)
        >>> resolve_target("sm_990").kind        # newer than this NVRTC knows: PTX for its newest arch
        'ptx'
    """
    family, cc = parse_arch(arch)
    supported = supported_archs()
    if family == "sm" and cc in supported:
        return Target("cubin", cc)
    below = [a for a in supported if a <= cc]
    if not below:
        raise UnsupportedArchError(
            f"{family}_{cc} is older than every architecture NVRTC {'.'.join(map(str, nvrtc_version()))} "
            f"supports (sm_{supported[0]} to sm_{supported[-1]})"
        )
    return Target("ptx", max(below))


def compile_program(source: str, entry_name: str, target: Target, extra_options: tuple[str, ...] = ()) -> CompiledKernel:
    """Compile ``source`` for ``target`` and check that ``entry_name`` is in the result.

    ``extra_options`` follow the target's (``source.kernel_options`` of the
    spec); they are part of the cache key like the rest.

    Raises ``CompileError`` with NVRTC's log and the kernel name when
    NVRTC fails or when the program does not define the ``extern "C"`` entry
    point the registry will look up (a mistake a GPU would only report later).
    """
    nvrtc = nvrtc_module()
    version = nvrtc_version()
    options = target.options + tuple(extra_options)
    started = time.perf_counter()
    try:
        with _in_nvrtc():
            binary, log = nvrtc.compile_program(source, f"{entry_name}.cu", options,
                                                "CUBIN" if target.kind == "cubin" else "PTX")
    except nvrtc.NvrtcError as exc:
        raise CompileError(
            f"NVRTC {version[0]}.{version[1]} failed to compile kernel {entry_name} for {target.tag} "
            f"({exc.reason}); options: {' '.join(options)}\n{exc.log}",
            kernel=entry_name, target=target.tag, log=exc.log, source=source, options=options,
        ) from None
    seconds = time.perf_counter() - started
    if entry_name.encode() not in binary:
        raise CompileError(
            f"kernel {entry_name} compiled for {target.tag}, but the program defines no entry point "
            f"named {entry_name!r}: the fragment must declare it extern \"C\" __global__",
            kernel=entry_name, target=target.tag, log=log, source=source, options=options,
        )
    return CompiledKernel(bytes(binary), target, options, version, seconds, log)


# Compiles in this process's own threads (a user's, calling compile_spec) must not be inside NVRTC when
# the interpreter exits: its exit handlers unload the library under them.  At exit, new compiles in other
# threads wait forever (they are daemons) and running ones are waited for, at most TROPICAL_GEMM_EXIT_WAIT s.
# The thread that runs the exit handlers compiles on: a later handler may need a kernel, and the library
# is unloaded only after that handler returns.
_nvrtc_busy = threading.Condition()
_nvrtc_running = 0
_exit_thread: "threading.Thread | None" = None


@contextlib.contextmanager
def _in_nvrtc():
    global _nvrtc_running
    with _nvrtc_busy:
        while _exit_thread is not None and _exit_thread is not threading.current_thread():
            _nvrtc_busy.wait()
        _nvrtc_running += 1
    try:
        yield
    finally:
        with _nvrtc_busy:
            _nvrtc_running -= 1
            _nvrtc_busy.notify_all()


def _wait_for_compiles_at_exit() -> None:
    # A compile in this process's thread cannot be left to finish on its own as a worker's can, so
    # TROPICAL_GEMM_EXIT_WAIT=0 (or a bad value, reported by the workers' own exit hook) still
    # waits, with the default bound.
    global _exit_thread
    try:
        budget = exit_wait_seconds() or DEFAULT_EXIT_WAIT
    except ValueError:
        budget = DEFAULT_EXIT_WAIT
    with _nvrtc_busy:
        _exit_thread = threading.current_thread()
        try:
            _nvrtc_busy.wait_for(lambda: _nvrtc_running == 0, timeout=budget)
        except KeyboardInterrupt:
            pass


atexit.register(_wait_for_compiles_at_exit)
