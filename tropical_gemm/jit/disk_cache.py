"""The per-kernel disk cache: one verified binary per (source, options, target, NVRTC).

Layout under ``cache_dir()``::

    v1/                                  cache format version
      sm_90/                             target: cubin for sm_90 (compute_90: PTX)
        <name>-<pkey16>-nvrtc13.0.cubin  the binary NVRTC produced, unchanged
        <name>-<pkey16>-nvrtc13.0.json   readable metadata (spec, options, sha256, ...)
        <name>-<pkey16>-nvrtc13.0.lock   the per-entry file lock

``pkey16`` is the start of the *portable key*: the SHA-256 of everything in
the key except the NVRTC version.  The full key (which includes the NVRTC
version) is in the metadata and is checked on every read, as are the size and
SHA-256 of the binary, so a wrong, truncated or bit-flipped file is never
loaded: it is logged, recompiled and replaced.

Why the NVRTC version is in the file name rather than hidden in the hash: a
cubin is machine code for one architecture, so one built by another NVRTC
(say 13.5 on a CI runner, for a GPU node with 13.0) is still a valid program
for the same source and options.  For cubin targets the lookup therefore
accepts an entry from another NVRTC version when none from this one exists
(``TROPICAL_GEMM_CACHE_STRICT_NVRTC=1`` turns that off).  PTX is never
shared across NVRTC versions: a driver older than the NVRTC that wrote the
PTX refuses to JIT it.

Writers take the entry's file lock (with a timeout), look again, compile,
then write temp file → fsync → ``os.replace`` for the binary and then for
the metadata.  The lock only saves duplicate compiles; correctness rests on
the atomic replace, which is why a lock that cannot be taken (timeout, no
permission) degrades to compiling without it instead of failing or hanging.
An unwritable, read-only or full directory turns writing off for the process
(after one warning): entries already there are still read.
"""

from __future__ import annotations

import errno
import hashlib
import json
import logging
import os
import secrets
import shutil
import stat
import threading
import time
import warnings
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping

from .compiler import CompiledKernel, Target

if TYPE_CHECKING:
    from filelock import FileLock

FORMAT_VERSION = 1

ENV_CACHE_DIR = "TROPICAL_GEMM_CACHE_DIR"
ENV_DISABLE = "TROPICAL_GEMM_DISABLE_DISK_CACHE"
ENV_LOCK_TIMEOUT = "TROPICAL_GEMM_CACHE_LOCK_TIMEOUT"
ENV_STRICT_NVRTC = "TROPICAL_GEMM_CACHE_STRICT_NVRTC"

#: Seconds a process waits for another one compiling the same kernel.  One
#: kernel compiles in about a second, so a minute means the holder is stuck.
DEFAULT_LOCK_TIMEOUT = 60.0

#: Temp files and half-written entries older than this are debris from a
#: crashed writer, and ``DiskCache.prune`` removes them.
STALE_SECONDS = 3600.0

log = logging.getLogger("tropical_gemm.jit")


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


def _env_flag(name: str) -> bool:
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
    return not _env_flag(ENV_DISABLE)


def lock_timeout() -> float:
    """``$TROPICAL_GEMM_CACHE_LOCK_TIMEOUT`` seconds, or the default; a bad value is an error."""
    raw = os.environ.get(ENV_LOCK_TIMEOUT)
    if raw is None or not raw.strip():
        return DEFAULT_LOCK_TIMEOUT
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{ENV_LOCK_TIMEOUT}={raw!r} is not a number of seconds") from None
    if not value >= 0:
        raise ValueError(f"{ENV_LOCK_TIMEOUT}={raw!r} must be zero or more seconds")
    return value


def _version_text(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def _hash_fields(*fields: str) -> str:
    """SHA-256 over length-prefixed fields, so no two field lists hash the same text."""
    digest = hashlib.sha256()
    for text in fields:
        data = text.encode("utf-8")
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()


@dataclass(frozen=True)
class BuildRequest:
    """Everything that determines one binary, and so one cache entry."""

    name: str  # the extern "C" entry point
    source: str
    target: Target
    # None for a probe: "this program from any NVRTC", which a warm start
    # uses so that it never has to load the NVRTC library at all.
    nvrtc_version: tuple[int, int] | None
    package_version: str
    spec: Mapping[str, Any] | None = field(default=None, compare=False)
    #: Options of this kernel beyond the target's (see ``source.kernel_options``).
    extra_options: tuple[str, ...] = ()

    @property
    def options(self) -> tuple[str, ...]:
        """The full NVRTC option list, as compiled and as hashed."""
        return self.target.options + self.extra_options

    @cached_property
    def portable_key(self) -> str:
        """The key without the NVRTC version: equal for the same program built by any NVRTC."""
        return _hash_fields(
            str(FORMAT_VERSION), self.package_version, self.source, "\0".join(self.options), self.target.tag,
        )

    @cached_property
    def key(self) -> str:
        """SHA-256 over format version, package version, source, options, arch and NVRTC version."""
        return _hash_fields(self.portable_key, _version_text(self.nvrtc_version))

    @property
    def stem(self) -> str:
        return entry_stem(self.name, self.portable_key, _version_text(self.nvrtc_version))


def entry_stem(name: str, portable_key: str, nvrtc_version: str) -> str:
    return f"{name}-{portable_key[:16]}-nvrtc{nvrtc_version}"


def payload_suffix(target_tag: str) -> str:
    return ".cubin" if target_tag.startswith("sm_") else ".ptx"


@dataclass(frozen=True)
class EntryMetadata:
    """The JSON written next to each binary: what it is, how it was built, how to verify it."""

    format: int
    key: str
    portable_key: str
    name: str
    target: str
    options: tuple[str, ...]
    nvrtc_version: str
    package_version: str
    sha256: str
    size: int
    compile_seconds: float
    created: str
    spec: Mapping[str, Any] | None = None
    log: str = ""

    @property
    def stem(self) -> str:
        return entry_stem(self.name, self.portable_key, self.nvrtc_version)

    @property
    def payload_name(self) -> str:
        return self.stem + payload_suffix(self.target)

    def to_json(self) -> bytes:
        data = asdict(self)
        data["options"] = list(self.options)
        return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8")

    @classmethod
    def from_json(cls, raw: bytes) -> "EntryMetadata":
        """Parse and type-check; any deviation is a ``ValueError`` (treated as corruption)."""
        try:
            data = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"metadata is not JSON: {exc}") from None
        if not isinstance(data, dict):
            raise ValueError("metadata is not a JSON object")
        expected = {
            "format": int, "key": str, "portable_key": str, "name": str, "target": str, "options": list,
            "nvrtc_version": str, "package_version": str, "sha256": str, "size": int,
            "compile_seconds": (int, float), "created": str,
        }
        for name, kind in expected.items():
            if not isinstance(data.get(name), kind) or isinstance(data.get(name), bool):
                raise ValueError(f"metadata field {name!r} is missing or has the wrong type")
        spec = data.get("spec")
        if spec is not None and not isinstance(spec, dict):
            raise ValueError("metadata field 'spec' is not an object")
        return cls(
            format=data["format"], key=data["key"], portable_key=data["portable_key"], name=data["name"],
            target=data["target"], options=tuple(str(o) for o in data["options"]),
            nvrtc_version=data["nvrtc_version"], package_version=data["package_version"], sha256=data["sha256"],
            size=data["size"], compile_seconds=float(data["compile_seconds"]), created=data["created"],
            spec=spec, log=str(data.get("log", "")),
        )

    def inconsistency(self) -> str | None:
        """Why this metadata cannot be a current-format entry, or ``None``."""
        if self.format != FORMAT_VERSION:
            return f"format {self.format}, expected {FORMAT_VERSION}"
        if self.key != _hash_fields(self.portable_key, self.nvrtc_version):
            return "metadata key is inconsistent with its NVRTC version"
        return None

    def verify(self, payload: bytes) -> str | None:
        """Why ``payload`` is not this entry's binary, or ``None`` if it is."""
        if len(payload) != self.size:
            return f"binary has {len(payload)} bytes, metadata says {self.size}"
        if hashlib.sha256(payload).hexdigest() != self.sha256:
            return "binary does not match its SHA-256"
        return None


def metadata_for(request: BuildRequest, compiled: CompiledKernel) -> EntryMetadata:
    return EntryMetadata(
        format=FORMAT_VERSION, key=request.key, portable_key=request.portable_key, name=request.name,
        target=request.target.tag, options=compiled.options, nvrtc_version=_version_text(compiled.nvrtc_version),
        package_version=request.package_version, sha256=hashlib.sha256(compiled.binary).hexdigest(),
        size=len(compiled.binary), compile_seconds=round(compiled.compile_seconds, 6),
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        spec=dict(request.spec) if request.spec is not None else None, log=compiled.log,
    )


@dataclass(frozen=True)
class CachedBinary:
    """A verified entry read from disk.  ``exact`` is False for another NVRTC version's cubin."""

    binary: bytes
    metadata: EntryMetadata
    path: Path
    exact: bool


@dataclass(frozen=True)
class BuildOutcome:
    """What the cache did to produce a binary: read it (``compiled`` False) or compile and store it.

    Examples:
        >>> from tropical_gemm.jit import compile_spec, make_spec
        >>> outcome = compile_spec(make_spec("backward", "min_plus", "float32"), "sm_90")
        >>> outcome.exact, outcome.path.suffix     # built by this NVRTC, stored as a cubin
        (True, '.cubin')
    """

    binary: bytes
    compiled: bool  # False: read from disk
    compile_seconds: float
    stored: bool  # a compiled binary was written to disk
    exact: bool  # built by this NVRTC version (always True when compiled)
    path: Path | None
    replaced_corrupt: bool = False


@dataclass(frozen=True)
class EntryInfo:
    """One entry as ``cache list`` and ``DiskCache.prune`` see it."""

    metadata: EntryMetadata
    payload_path: Path
    metadata_path: Path
    size: int  # bytes on disk, binary plus metadata
    last_used: float  # the binary's mtime, refreshed on every disk hit


@dataclass(frozen=True)
class PruneResult:
    """What [`prune`][tropical_gemm.jit.prune] did: entries removed, bytes freed, bytes left.

    Examples:
        >>> from tropical_gemm.jit import prune
        >>> result = prune(2**40)              # 1 TiB: nothing needs to go
        >>> result.removed, result.freed_bytes
        (0, 0)
    """

    removed: int
    freed_bytes: int
    remaining_bytes: int


class DiskCache:
    """The cache under one root directory.  ``root=None`` means disk caching is off.

    Obtain instances through ``default_cache()`` so that each root warns at
    most once per process.
    """

    def __init__(self, root: Path | None, *, lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
                 strict_nvrtc: bool = False) -> None:
        self.root = root
        self.lock_timeout = lock_timeout
        self.strict_nvrtc = strict_nvrtc
        self._writable = root is not None
        self._warned: set[str] = set()
        self._warn_guard = threading.Lock()

    @property
    def enabled(self) -> bool:
        return self.root is not None

    @property
    def writable(self) -> bool:
        """False once a write failed in this process; reads go on."""
        return self._writable

    @property
    def format_dir(self) -> Path:
        assert self.root is not None
        return self.root / f"v{FORMAT_VERSION}"

    def target_dir(self, target_tag: str) -> Path:
        return self.format_dir / target_tag

    # ---- reading -------------------------------------------------------------------------------

    def lookup(self, request: BuildRequest) -> CachedBinary | None:
        """A verified entry for ``request``, or ``None``.  Never raises on a bad entry."""
        if self.root is None:
            return None
        directory = self.target_dir(request.target.tag)
        if request.nvrtc_version is None:  # a probe: the newest cubin of this program, if allowed
            return None if self.strict_nvrtc else self._lookup_other_nvrtc(directory, request)
        exact = self._read_verified(directory / f"{request.stem}.json", request, expect_exact=True)
        if exact is not None or self.strict_nvrtc or request.target.kind != "cubin":
            return exact
        return self._lookup_other_nvrtc(directory, request)

    def _lookup_other_nvrtc(self, directory: Path, request: BuildRequest) -> CachedBinary | None:
        """A cubin of the same program built by another NVRTC; the same major version first."""
        prefix = f"{request.name}-{request.portable_key[:16]}-nvrtc"
        try:
            names = [n for n in os.listdir(directory) if n.startswith(prefix) and n.endswith(".json")]
        except OSError:
            return None
        ours = request.nvrtc_version

        def preference(name: str) -> tuple[bool, tuple[int, ...]]:
            version = name[len(prefix):-len(".json")]
            parts = tuple(int(p) for p in version.split(".") if p.isdigit())
            return (ours is not None and parts[:1] == ours[:1], parts)

        for candidate in sorted(names, key=preference, reverse=True):
            found = self._read_verified(directory / candidate, request, expect_exact=False)
            if found is not None:
                return found
        return None

    def _read_verified(self, meta_path: Path, request: BuildRequest, *, expect_exact: bool) -> CachedBinary | None:
        try:
            raw = meta_path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("cannot read cache metadata %s (%s); treating it as a miss", meta_path, exc)
            return None
        try:
            metadata = EntryMetadata.from_json(raw)
        except ValueError as exc:
            self._report_corrupt(meta_path, str(exc))
            return None
        problem = self._metadata_mismatch(metadata, request, meta_path, expect_exact)
        if problem is not None:
            self._report_corrupt(meta_path, problem)
            return None
        payload_path = meta_path.with_name(metadata.payload_name)
        try:
            payload = payload_path.read_bytes()
        except FileNotFoundError:
            self._report_corrupt(meta_path, "its binary is missing")
            return None
        except OSError as exc:
            log.warning("cannot read cached binary %s (%s); treating it as a miss", payload_path, exc)
            return None
        problem = metadata.verify(payload)
        if problem is not None:
            self._report_corrupt(payload_path, problem)
            return None
        _touch(payload_path)
        exact = request.nvrtc_version is not None and metadata.key == request.key
        return CachedBinary(payload, metadata, payload_path, exact=exact)

    @staticmethod
    def _metadata_mismatch(metadata: EntryMetadata, request: BuildRequest, meta_path: Path,
                           expect_exact: bool) -> str | None:
        problem = metadata.inconsistency()
        if problem is not None:
            return problem
        if metadata.stem + ".json" != meta_path.name:
            return "metadata does not belong to this file name"
        if metadata.portable_key != request.portable_key or metadata.name != request.name:
            return "metadata describes another program"
        if metadata.target != request.target.tag or metadata.options != request.options:
            return "metadata describes another target or options"
        if expect_exact and metadata.key != request.key:
            return "metadata key does not match the expected key"
        return None

    def _report_corrupt(self, path: Path, problem: str) -> None:
        log.warning("corrupt cache entry %s: %s; not loading it", path, problem)

    # ---- building ------------------------------------------------------------------------------

    def get_or_build(self, request: BuildRequest, compile_fn: Callable[[], CompiledKernel], *,
                     accept_other_nvrtc: bool = True) -> BuildOutcome:
        """The binary for ``request``: from disk if a verified entry exists, else compiled (and stored).

        Concurrent callers in other processes wait on the entry's file lock
        and then find the entry the first one wrote, so a kernel is compiled
        once per machine.  Errors from ``compile_fn`` propagate unchanged.
        """
        if self.root is None:
            compiled = compile_fn()
            return BuildOutcome(compiled.binary, True, compiled.compile_seconds, False, True, None)
        found = self._lookup_for_build(request, accept_other_nvrtc)
        if found is not None:
            return _outcome_from(found)
        corrupt_before = self._entry_files_exist(request)
        lock = self._acquire_lock(request)
        try:
            if lock is not None:
                found = self._lookup_for_build(request, accept_other_nvrtc)
                if found is not None:
                    return _outcome_from(found)
            compiled = compile_fn()
            path = self._store_compiled(request, compiled)
        finally:
            if lock is not None:
                lock.release()
        if corrupt_before and path is not None:
            log.warning("replaced corrupt cache entry %s", path)
        return BuildOutcome(compiled.binary, True, compiled.compile_seconds, path is not None, True, path,
                            replaced_corrupt=corrupt_before and path is not None)

    def _lookup_for_build(self, request: BuildRequest, accept_other_nvrtc: bool) -> CachedBinary | None:
        found = self.lookup(request)
        if found is not None and not found.exact and not accept_other_nvrtc:
            return None
        return found

    def _entry_files_exist(self, request: BuildRequest) -> bool:
        """After a failed lookup: were there files for this exact key (so the entry was bad)?"""
        directory = self.target_dir(request.target.tag)
        return (directory / f"{request.stem}.json").exists() or (
            directory / (request.stem + payload_suffix(request.target.tag))).exists()

    def _acquire_lock(self, request: BuildRequest) -> "FileLock | None":
        """The entry's file lock, or ``None`` (after a warning) when it cannot be had.

        filelock is imported here, by the first compile: importing it costs
        about 60 ms on a GPU host, which a process that only reads cached
        kernels would otherwise pay on its first product.
        """
        from filelock import FileLock, Timeout

        if not self._writable:
            return None
        directory = self.target_dir(request.target.tag)
        lock_path = directory / f"{request.stem}.lock"
        try:
            self._make_dirs(directory)
            lock = FileLock(str(lock_path), timeout=self.lock_timeout, **self._lock_mode())
            lock.acquire()
        except Timeout:
            log.warning(
                "cache lock %s still held after %.1f s (a stuck process?); compiling %s without waiting",
                lock_path, self.lock_timeout, request.name,
            )
            return None
        except OSError as exc:
            self._disable_writes(f"cannot create files in the kernel cache {self.root} ({exc})")
            return None
        return lock

    def _lock_mode(self) -> dict[str, int]:
        """Group-writable lock files in a group-writable (shared) cache, else the umask decides."""
        return {"mode": 0o664} if self._group_shared() else {}

    def _group_shared(self) -> bool:
        try:
            return bool(os.stat(self.root).st_mode & stat.S_IWGRP)  # type: ignore[arg-type]
        except OSError:
            return False

    def _store_compiled(self, request: BuildRequest, compiled: CompiledKernel) -> Path | None:
        return self.write_entry(metadata_for(request, compiled), compiled.binary)

    def write_entry(self, metadata: EntryMetadata, payload: bytes) -> Path | None:
        """Atomically write one entry (binary first, then metadata); ``None`` if writing is off or failed."""
        if not self._writable:
            return None
        directory = self.target_dir(metadata.target)
        payload_path = directory / metadata.payload_name
        try:
            self._make_dirs(directory)
            _atomic_write(payload_path, payload, self._group_shared())
            _atomic_write(directory / f"{metadata.stem}.json", metadata.to_json(), self._group_shared())
        except OSError as exc:
            reason = "the disk is full" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else str(exc)
            self._disable_writes(f"cannot write to the kernel cache {self.root} ({reason})")
            return None
        return payload_path

    def _make_dirs(self, directory: Path) -> None:
        if directory.is_dir():
            return
        directory.mkdir(parents=True, exist_ok=True)
        if self._group_shared():
            for path in (self.format_dir, directory):
                with_group = path.stat().st_mode | stat.S_IRGRP | stat.S_IWGRP | stat.S_IXGRP
                try:
                    os.chmod(path, stat.S_IMODE(with_group))
                except PermissionError:  # created by another user: theirs to set
                    pass

    def _disable_writes(self, message: str) -> None:
        """Stop writing for this process, and say once which setting moves the cache somewhere usable."""
        self._writable = False
        self.warn_once("unwritable", f"{message}; kernels compiled from now on stay in memory for this process. "
                                     f"Set {ENV_CACHE_DIR} to a writable directory with free space to cache them")

    def warn_once(self, topic: str, message: str) -> None:
        with self._warn_guard:
            if topic in self._warned:
                return
            self._warned.add(topic)
        log.warning(message)
        warnings.warn(message, DiskCacheWarning, stacklevel=4)

    # ---- maintenance ---------------------------------------------------------------------------

    def entries(self) -> list[EntryInfo]:
        """Every readable entry of the current format, in no particular order."""
        if self.root is None or not self.format_dir.is_dir():
            return []
        found: list[EntryInfo] = []
        for meta_path in self._metadata_files():
            try:
                metadata = EntryMetadata.from_json(meta_path.read_bytes())
                if metadata.stem + ".json" != meta_path.name:
                    continue
                payload_path = meta_path.with_name(metadata.payload_name)
                payload_stat = payload_path.stat()
                size = payload_stat.st_size + meta_path.stat().st_size
            except (OSError, ValueError):
                continue
            found.append(EntryInfo(metadata, payload_path, meta_path, size, payload_stat.st_mtime))
        return found

    def _metadata_files(self) -> Iterator[Path]:
        for target in sorted(self.format_dir.iterdir()):
            if target.is_dir():
                yield from sorted(p for p in target.glob("*.json") if not p.name.startswith("."))

    def prune(self, max_bytes: int) -> PruneResult:
        """Delete least recently used entries until the cache holds at most ``max_bytes``.

        Also removes debris: temp files and binaries without metadata older
        than an hour, and metadata that cannot be parsed.  Entries of other
        format versions are left to ``cache clear`` (another installed version
        of the library may still use them).
        """
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be zero or more, got {max_bytes}")
        removed, freed = self._remove_debris()
        entries = sorted(self.entries(), key=lambda e: e.last_used)
        total = sum(e.size for e in entries)
        for entry in entries:
            if total <= max_bytes:
                break
            for path in (entry.metadata_path, entry.payload_path, entry.metadata_path.with_suffix(".lock")):
                _unlink_quietly(path)
            total -= entry.size
            freed += entry.size
            removed += 1
            log.info("pruned cache entry %s", entry.payload_path)
        return PruneResult(removed, freed, total)

    def _remove_debris(self) -> tuple[int, int]:
        if self.root is None or not self.format_dir.is_dir():
            return 0, 0
        now = time.time()
        removed = freed = 0
        for target in self.format_dir.iterdir():
            if not target.is_dir():
                continue
            described: set[str] = set()
            for meta_path in target.glob("*.json"):
                try:
                    described.add(EntryMetadata.from_json(meta_path.read_bytes()).payload_name)
                except ValueError:
                    freed += _size_or_zero(meta_path)
                    _unlink_quietly(meta_path)
                    removed += 1
                except OSError:
                    continue
            for path in target.iterdir():
                is_temp = path.name.startswith(".") and path.name.endswith(".tmp")
                is_orphan = path.suffix in (".cubin", ".ptx") and path.name not in described
                if (is_temp or is_orphan) and now - _mtime_or_now(path) > STALE_SECONDS:
                    freed += _size_or_zero(path)
                    _unlink_quietly(path)
                    removed += 1
        return removed, freed

    def clear(self) -> int:
        """Remove every entry of every format version; returns the number of files removed.

        Only our own layout (``v<N>/`` directories) is touched, so pointing
        ``TROPICAL_GEMM_CACHE_DIR`` at a directory with other files is safe.
        """
        if self.root is None or not self.root.is_dir():
            return 0
        count = 0
        for version_dir in self.root.iterdir():
            if version_dir.name[:1] == "v" and version_dir.name[1:].isdigit() and version_dir.is_dir():
                count += sum(len(files) for _, _, files in os.walk(version_dir))
                shutil.rmtree(version_dir)
        return count


def _outcome_from(found: CachedBinary) -> BuildOutcome:
    return BuildOutcome(found.binary, False, 0.0, False, found.exact, found.path)


def _atomic_write(path: Path, data: bytes, group_shared: bool) -> None:
    """Temp file in the same directory, fsync, ``os.replace``: readers see all or nothing.

    ``os.open`` with 0o666 lets the umask pick the mode (``mkstemp`` would
    force 0600 and lock other users of a shared cache out); a group-shared
    cache also gets group read/write.
    """
    temp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        try:
            if group_shared:
                os.fchmod(fd, stat.S_IMODE(os.fstat(fd).st_mode) | stat.S_IRGRP | stat.S_IWGRP)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(temp, path)
    except BaseException:
        _unlink_quietly(temp)
        raise


def _touch(path: Path) -> None:
    """Record a use for LRU pruning; a read-only cache simply keeps its old times."""
    try:
        os.utime(path)
    except OSError:
        pass


def _unlink_quietly(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass


def _size_or_zero(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _mtime_or_now(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return time.time()


_caches: dict[tuple[Path | None, float, bool], DiskCache] = {}
_caches_guard = threading.Lock()


def default_cache() -> DiskCache:
    """The cache the environment asks for, one instance per configuration (so warnings come once)."""
    root = cache_dir() if disk_cache_enabled() else None
    config = (root, lock_timeout(), _env_flag(ENV_STRICT_NVRTC))
    with _caches_guard:
        cache = _caches.get(config)
        if cache is None:
            cache = _caches[config] = DiskCache(root, lock_timeout=config[1], strict_nvrtc=config[2])
        return cache
