"""What the environment asks of the kernel cache, read and checked in one place.

Every setting is an environment variable so that a cluster job, a container
image and a test can each point the cache somewhere without code changes.
A bad value is a ``ValueError`` naming the variable, never a silent default.
"""

from __future__ import annotations

import math
import os
import sys
import tempfile
from pathlib import Path
from typing import Iterable, NamedTuple

from .files import Trust

ENV_CACHE_DIR = "TROPICAL_GEMM_CACHE_DIR"
ENV_DISABLE = "TROPICAL_GEMM_DISABLE_DISK_CACHE"
ENV_LOCK_TIMEOUT = "TROPICAL_GEMM_CACHE_LOCK_TIMEOUT"
ENV_STRICT_NVRTC = "TROPICAL_GEMM_CACHE_STRICT_NVRTC"
ENV_COMPATIBLE_NVRTC = "TROPICAL_GEMM_CACHE_COMPATIBLE_NVRTC"
ENV_GROUP = "TROPICAL_GEMM_CACHE_GROUP"

#: Seconds a process waits for another one compiling the same kernel.  One
#: kernel compiles in about a second, so a minute means the holder is stuck.
DEFAULT_LOCK_TIMEOUT = 60.0

#: Temp files whose writer may still be alive (another host on a shared file
#: system, say) are debris once they are this old; ``prune`` removes them.
STALE_SECONDS = 3600.0

#: The most a metadata file may hold: its JSON plus NVRTC's log.  Anything
#: larger is not ours, and reading it whole could exhaust memory.
MAX_METADATA_BYTES = 4 * 2**20

#: The most a kernel binary may hold (ours are well under a megabyte); the
#: metadata's own ``size`` is the cap while reading, this bounds the metadata.
MAX_BINARY_BYTES = 256 * 2**20


class DiskCacheWarning(RuntimeWarning):
    """The disk cache could not be used as asked; the process carries on without it.

    It is issued once per process and cache directory, with the reason and
    the setting that fixes it (``TROPICAL_GEMM_CACHE_DIR``).  A read-only
    image that is pre-populated on purpose can silence it.

    Examples:
        >>> import warnings
        >>> from tropical_gemm.jit import DiskCacheWarning
        >>> with warnings.catch_warnings():
        ...     warnings.simplefilter("ignore", DiskCacheWarning)
        ...     # products whose kernels cannot be cached stay quiet here
    """


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def user_stacklevel() -> int:
    """``warnings.warn``'s ``stacklevel`` for the caller's caller's first frame outside this package.

    The frame just beyond the outermost ``tropical_gemm`` frame, so a warning
    raised deep in the cache (through numba's compiler, say) shows the
    user's own call, not a library line.
    """
    frame, level, beyond_package = sys._getframe(1), 1, 1
    while frame is not None:
        if frame.f_code.co_filename.startswith(_PACKAGE_DIR + os.sep):
            beyond_package = level + 1
        frame, level = frame.f_back, level + 1
    return beyond_package


def comma_list(values: str | Iterable[str] | None) -> list[str] | None:
    """``"a, b" `` or ``["a,b", "c"]`` → ``["a", "b", "c"]``; ``None`` or nothing → ``None``.

    The one parser for every comma-separated setting: CLI flags that may be
    repeated, ``warmup`` arguments and environment variables.

    Examples:
        >>> from tropical_gemm.jit.cache.config import comma_list
        >>> comma_list(["sm_80, sm_90", "compute_120"]), comma_list(""), comma_list(None)
        (['sm_80', 'sm_90', 'compute_120'], None, None)
    """
    if values is None:
        return None
    pieces = [values] if isinstance(values, str) else list(values)
    found = [item.strip() for piece in pieces for item in piece.split(",") if item.strip()]
    return found or None


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in {"1", "true", "yes", "on"}


def cache_dir() -> Path:
    """Where kernels are cached: ``$TROPICAL_GEMM_CACHE_DIR``, else the platform's user cache dir.

    Examples:
        >>> import os
        >>> from tropical_gemm.jit import cache_dir
        >>> str(cache_dir()) == os.environ.get("TROPICAL_GEMM_CACHE_DIR", str(cache_dir()))
        True
        >>> cache_dir()                        # doctest: +SKIP
        PosixPath('/home/me/.cache/tropical-gemm')
    """
    configured = os.environ.get(ENV_CACHE_DIR)
    if configured:
        return Path(configured).expanduser()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("tropical-gemm"))


def disk_cache_enabled() -> bool:
    return not env_flag(ENV_DISABLE)


def lock_timeout() -> float:
    """``$TROPICAL_GEMM_CACHE_LOCK_TIMEOUT`` seconds, or the default; a bad or infinite value is an error."""
    raw = os.environ.get(ENV_LOCK_TIMEOUT)
    if raw is None or not raw.strip():
        return DEFAULT_LOCK_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{ENV_LOCK_TIMEOUT}={raw!r} is not a number of seconds") from None
    # An unbounded wait would let one stuck process hang every other one.
    if not (math.isfinite(value) and value >= 0):
        raise ValueError(f"{ENV_LOCK_TIMEOUT}={raw!r} must be a finite number of seconds, zero or more "
                         f"(default {DEFAULT_LOCK_TIMEOUT:g})")
    return value


def compatible_nvrtc() -> tuple[str, ...]:
    """NVRTC versions besides the running one whose cubins may be used, e.g. ``13.0,13.1``.

    Never implied: a cubin is used only if built by the running NVRTC or by
    a version listed here (and never a PTX from another version).
    """
    raw = os.environ.get(ENV_COMPATIBLE_NVRTC)
    versions = comma_list(raw) or []
    for text in versions:
        parts = text.split(".")
        if len(parts) != 2 or not all(p.isdigit() for p in parts):
            raise ValueError(f"{ENV_COMPATIBLE_NVRTC}={raw!r}: {text!r} is not an NVRTC version like 13.0")
    return tuple(dict.fromkeys(versions))


def shared_group() -> int | None:
    """The group id of ``$TROPICAL_GEMM_CACHE_GROUP`` (a name or a number), or ``None`` for a private cache."""
    raw = os.environ.get(ENV_GROUP, "").strip()
    if not raw:
        return None
    if raw.isdigit():
        return int(raw)
    import grp

    try:
        return grp.getgrnam(raw).gr_gid
    except KeyError:
        raise ValueError(f"{ENV_GROUP}={raw!r} names no group on this machine") from None


class CacheConfig(NamedTuple):
    """One cache configuration; ``root`` is ``None`` when disk caching is off."""

    root: Path | None
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT
    strict_nvrtc: bool = False
    compatible_nvrtc: tuple[str, ...] = ()
    group: int | None = None

    @classmethod
    def from_env(cls) -> "CacheConfig":
        return cls(root=cache_dir() if disk_cache_enabled() else None, lock_timeout=lock_timeout(),
                   strict_nvrtc=env_flag(ENV_STRICT_NVRTC), compatible_nvrtc=compatible_nvrtc(),
                   group=shared_group())


def keep_cupy_cache_off_unusable_home() -> str | None:
    """Point ``CUPY_CACHE_DIR`` away from a HOME where CuPy could not create ``~/.cupy``.

    ``import cupy`` creates its kernel cache directory at once and fails if
    it cannot, which used to surface as "NVRTC could not be loaded".  We
    compile nothing through CuPy, so where that directory lives does not
    matter; a private temp directory is used instead.  Returns the directory
    chosen, or ``None`` when nothing needed changing.
    """
    if os.environ.get("CUPY_CACHE_DIR"):
        return None
    home = Path(os.path.expanduser("~"))
    default = home / ".cupy"
    if default.is_dir() or (home.is_dir() and os.access(home, os.W_OK | os.X_OK)):
        return None
    fallback = _private_temp_dir(f"tropical-gemm-cupy-{os.getuid()}")
    os.environ["CUPY_CACHE_DIR"] = str(fallback)
    return str(fallback)


def _private_temp_dir(name: str) -> Path:
    """``name`` in the temp directory, made by this user for this user alone; else a fresh one beside it.

    The name is predictable, so another user may have made it first (a
    directory they can write, or a link to one) to plant files that CuPy
    would load: such a path is never used.
    """
    path = Path(tempfile.gettempdir()) / name
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return Path(tempfile.mkdtemp(prefix=f"{name}-"))
    try:
        problem = Trust.current().problem(os.lstat(path), directory=True)
    except OSError as exc:
        problem = str(exc)
    if problem is None and os.access(path, os.W_OK | os.X_OK):
        return path
    return Path(tempfile.mkdtemp(prefix=f"{name}-"))


def home_problem(root: Path) -> str | None:
    """When ``root`` is under an unusable HOME, a sentence that says so (the real cause of the failure)."""
    home = Path(os.path.expanduser("~"))
    try:
        root.relative_to(home)
    except ValueError:
        return None
    if home.is_dir() and os.access(home, os.W_OK | os.X_OK):
        return None
    return f"HOME ({home}) is not a writable directory, and the default cache lives under it"
