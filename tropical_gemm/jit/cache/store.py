"""The cache under one root directory: lookup, per-entry lock, atomic writes, healing.

Layout under the root (see docs/jit.md)::

    v2/                                  key schema / format version
      nvrtc-running                      the NVRTC version this cache last saw, and its library file
      sm_90/                             target: cubin for sm_90 (compute_90: PTX)
        <name>-<pkey16>-nvrtc13.0.cubin  the binary NVRTC produced, unchanged
        <name>-<pkey16>-nvrtc13.0.json   metadata (spec, options, sha256, ...), written last
        <name>-<pkey16>-nvrtc13.0.lock   the per-entry file lock

An entry is the pair; the metadata is committed last, so a binary without
metadata is an unfinished write (not corruption) that the next writer
replaces.  The lock only saves duplicate compiles: correctness rests on the
atomic replace, so a lock that cannot be had in time degrades to compiling
without it.  A root that is not ours (owner, mode) is not used at all; a
directory below it that is not ours is read from by no one (checked on
every read, named in one warning) and moved aside by the next write; a bad
file is moved aside and rebuilt once.
"""

from __future__ import annotations

import errno
import os
import threading
import warnings
from pathlib import Path
from types import ModuleType
from typing import Callable

from .. import log
from ..compiler import CompiledKernel
from .config import (
    DEFAULT_LOCK_TIMEOUT, ENV_CACHE_DIR, ENV_GROUP, MAX_METADATA_BYTES, DiskCacheWarning, home_problem, user_stacklevel,
)
from .entry import BuildOutcome, CachedBinary, EntryInfo, EntryMetadata, PruneResult, metadata_for, outcome_from
from .files import (EntryLock, LocksUnsupported, LockTimeout, Trust, UntrustedFile, atomic_write, ensure_dir_chain,
                    make_dir, read_capped, remove_aside, touch, unlink_quietly, untrusted_dir)
from .keys import FORMAT_VERSION, BuildRequest, entry_stem, version_text
from .nvrtc_record import NvrtcRecord

#: Write errors a retry can fix: the tree was renamed away by ``cache clear``,
#: or a path is a directory where a file belongs (healed before the retry).
_TRANSIENT = {errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.ENOTEMPTY, errno.EEXIST}
_ATTEMPTS = 5


def _maintenance() -> ModuleType:
    """``cache.maintenance``, imported on first use: a warm process that only reads never needs it."""
    from . import maintenance

    return maintenance


class DiskCache:
    """The cache under ``root``; obtain it through ``default_cache()`` so each root warns once per process."""

    enabled = True

    def __init__(self, root: Path, *, lock_timeout: float = DEFAULT_LOCK_TIMEOUT, strict_nvrtc: bool = False,
                 compatible_nvrtc: tuple[str, ...] = (), group: int | None = None) -> None:
        self.root = Path(root)
        self.lock_timeout = lock_timeout
        self.strict_nvrtc = strict_nvrtc
        self.compatible_nvrtc = tuple(compatible_nvrtc)
        self.trust = Trust.current(group)
        self._problem: str | None = None  # why nothing more is written (or read, if untrusted)
        self._untrusted = False
        self._opened = False
        self._swept = False
        self._nvrtc_record = NvrtcRecord(self.format_dir, self._read, self.trust, lambda: self._problem is None)
        self._warned: set[str] = set()
        self._guard = threading.Lock()
        self._warn_guard = threading.Lock()

    @property
    def writable(self) -> bool:
        """False once the root proved unusable or a write failed in this process; reads go on if trusted."""
        self._open()
        return self._problem is None

    @property
    def write_problem(self) -> str | None:
        """Why this process writes nothing to the cache, or ``None``."""
        self._open()
        return self._problem

    @property
    def format_dir(self) -> Path:
        return self.root / f"v{FORMAT_VERSION}"

    def target_dir(self, target_tag: str) -> Path:
        return self.format_dir / target_tag

    # ---- opening: trust the root, sweep debris ---------------------------------------------------

    def _open(self, *, create: bool = False) -> bool:
        """Whether the root may be read: checked (and swept) once per process, created only to write."""
        if self._opened:
            return not self._untrusted
        if not create and not os.path.lexists(self.root):
            return True  # nothing to read yet; the first write creates and checks it
        with self._guard:
            if not self._opened:
                self._check_root()
                self._opened = True
        return not self._untrusted

    def _may_write(self) -> bool:
        """Whether this process may write; the first writer sweeps dead writers' debris (reads never need to)."""
        self._open(create=True)
        if self._problem is None and not self._swept:
            self._swept = True
            _maintenance().sweep_dead_scratch(self.format_dir, self.trust)
        return self._problem is None

    def _check_root(self) -> None:
        try:
            if not os.path.lexists(self.root):
                self.root.parent.mkdir(parents=True, exist_ok=True)
                try:
                    make_dir(self.root, self.trust)
                except FileExistsError:  # another process made it first
                    pass
            st = os.stat(self.root)  # the root itself may be a symlink the user chose; what it names is checked
        except OSError as exc:
            cause = home_problem(self.root)
            if isinstance(exc, (FileExistsError, NotADirectoryError)) and exc.filename:
                exc_text = f"{exc.filename} is not a directory"  # mkdir's "File exists" hides that
            else:
                exc_text = str(exc)
            detail = f"{exc_text}; {cause}" if cause else exc_text
            self._problem = f"cannot create files in the kernel cache {self.root} ({detail})"
            self._untrusted = True
            self._warn_unwritable()
            return
        problem = self.trust.problem(st, directory=True)
        if problem is not None:
            self._untrusted = True
            self._problem = f"not using the kernel cache {self.root}: it {problem}"
            self.warn_once("untrusted", f"{self._problem}. Kernels compiled now stay in memory for this process. "
                                        f"Use a directory only you can write (chmod 700), set {ENV_CACHE_DIR} to "
                                        f"one, or set {ENV_GROUP} to share a group-owned cache")

    # ---- reading ---------------------------------------------------------------------------------

    def lookup(self, request: BuildRequest) -> CachedBinary | None:
        """A verified entry for ``request``, or ``None``.  Never raises on a bad entry; heals bad paths."""
        return self._lookup(request, corrupt=None)

    def _lookup(self, request: BuildRequest, *, corrupt: list[str] | None) -> CachedBinary | None:
        """As ``lookup``; with a ``corrupt`` list, what is corrupt is added to it instead of logged."""
        directory = self.target_dir(request.target.tag)
        if not self.readable_dir(directory):
            return None
        running = self._running(request)
        for version in self._versions_for(request):
            stem = entry_stem(request.name, request.portable_key, version)
            exact = request.nvrtc_version is not None and version == running
            found = self._read_verified(directory / f"{stem}.json", request, expect_exact=exact, corrupt=corrupt)
            if found is not None:
                return found
        return None

    def _running(self, request: BuildRequest) -> str | None:
        """The NVRTC version of an exact request; for a probe, the running one (see ``nvrtc_record``)."""
        if request.nvrtc_version is not None:
            return version_text(request.nvrtc_version)
        return self._nvrtc_record.running_version()

    def _versions_for(self, request: BuildRequest) -> list[str]:
        """NVRTC versions whose entries may serve ``request``, best first: never "newer is better".

        The running version (for a probe in a process that cannot load NVRTC:
        the one this cache last saw compile), then, for cubins, the explicitly
        listed compatible versions.  PTX is never shared across versions.
        """
        if request.nvrtc_version is None and self.strict_nvrtc:
            return []
        running = self._running(request)
        versions = [running] if running is not None else []
        if request.target.kind == "cubin" and not self.strict_nvrtc:
            versions += [v for v in self.compatible_nvrtc if v not in versions]
        return versions

    def _read_verified(self, meta_path: Path, request: BuildRequest, *, expect_exact: bool,
                       corrupt: list[str] | None) -> CachedBinary | None:
        raw = self._read(meta_path, MAX_METADATA_BYTES)
        if raw is None:
            return None
        path = meta_path  # the file a problem is named by: the metadata, or the binary it describes
        try:
            metadata = EntryMetadata.from_json(raw)
        except ValueError as exc:
            problem = str(exc)
        else:
            problem = metadata.mismatch(request, meta_path.name, expect_exact=expect_exact)
            if problem is None and not os.path.lexists(meta_path.with_name(metadata.payload_name)):
                problem = "its binary is missing"
        if problem is None:
            path = meta_path.with_name(metadata.payload_name)
            payload = self._read(path, metadata.size)
            if payload is None:
                return None
            problem = metadata.verify(payload)
        if problem is not None:
            if corrupt is None:
                log.warning("corrupt cache entry %s: %s; not loading it", path, problem)
            else:
                corrupt.append(f"{path}: {problem}")
            return None
        touch(path)
        exact = request.nvrtc_version is not None and metadata.key == request.key
        return CachedBinary(payload, metadata, path, exact=exact)

    def _read(self, path: Path, cap: int) -> bytes | None:
        """A trusted file's bytes, or ``None`` (absent, unreadable, or untrusted and so moved aside)."""
        try:
            return read_capped(path, cap, self.trust)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except UntrustedFile as exc:
            self._heal(path, exc.problem)
        except OSError as exc:
            log.warning("cannot read cache file %s (%s); treating it as a miss", path, exc)
        return None

    def _heal(self, path: Path, problem: str) -> None:
        log.warning("cache path %s %s; moved it aside, the next build rewrites it", path, problem)
        remove_aside(path)

    # ---- building --------------------------------------------------------------------------------

    def get_or_build(self, request: BuildRequest, compile_fn: Callable[[], CompiledKernel], *,
                     accept_other_nvrtc: bool = True) -> BuildOutcome:
        """The binary for ``request``: from disk if a verified entry exists, else compiled (and stored).

        Concurrent callers in other processes wait on the entry's lock and
        then find the entry the first one wrote, so a kernel is compiled once
        per machine.  Errors from ``compile_fn`` propagate unchanged.
        """
        corrupt: list[str] = []  # looked up twice (before and under the lock), said once
        found = self._lookup_for_build(request, accept_other_nvrtc, corrupt)
        if found is not None:
            for problem in corrupt:
                log.warning("not loading corrupt cache entry %s", problem)
            if found.exact:  # the running NVRTC is known here: keep the warm-start record current
                self._nvrtc_record.remember(request.nvrtc_version)  # type: ignore[arg-type]
            return outcome_from(found)
        # Only metadata that failed verification is corruption: a binary alone
        # is a write cut short between its two commits.
        meta_path = self.target_dir(request.target.tag) / f"{request.stem}.json"
        corrupt_before = self._open() and os.path.lexists(meta_path)
        lock = self._acquire_lock(request)
        try:
            if lock is not None:
                found = self._lookup_for_build(request, accept_other_nvrtc, [])
                if found is not None:
                    return outcome_from(found)
            compiled = compile_fn()
            path, problem = self._write(metadata_for(request, compiled), compiled.binary)
        finally:
            if lock is not None:
                lock.release()
        if path is not None:
            self._nvrtc_record.remember(compiled.nvrtc_version)
        replaced = corrupt_before and path is not None
        if corrupt:
            log.warning("%s corrupt cache entry %s", "replaced" if replaced else "not loading", corrupt[0])
        elif replaced:
            log.warning("replaced corrupt cache entry %s", path)
        return BuildOutcome(compiled.binary, True, compiled.compile_seconds, path is not None, True, path,
                            replaced_corrupt=replaced, store_problem=problem)

    def _lookup_for_build(self, request: BuildRequest, accept_other_nvrtc: bool,
                          corrupt: list[str]) -> CachedBinary | None:
        found = self._lookup(request, corrupt=corrupt)
        if found is not None and not found.exact and not accept_other_nvrtc:
            return None
        return found

    def _acquire_lock(self, request: BuildRequest) -> EntryLock | None:
        """The entry's lock, or ``None`` (after a log line) when it cannot be had in time or at all."""
        if not self._may_write():
            return None
        directory = self.target_dir(request.target.tag)
        lock_path = directory / f"{request.stem}.lock"
        for _ in range(_ATTEMPTS):
            lock = EntryLock(lock_path, self.lock_timeout, self.trust)
            try:
                self._ensure_dirs(directory)
                lock.acquire()
                return lock
            except LockTimeout:
                log.warning("cache lock %s still held after %.1f s (a stuck process?); compiling %s without "
                            "waiting", lock_path, self.lock_timeout, request.name)
                return None
            except LocksUnsupported as exc:  # the atomic write needs no lock: at most a duplicate compile
                log.info("no file lock on %s (%s); compiling %s without one", lock_path, exc, request.name)
                return None
            except UntrustedFile as exc:
                self._heal(lock_path, exc.problem)
            except OSError as exc:
                if exc.errno not in _TRANSIENT:
                    self._disable_writes(f"cannot create files in the kernel cache {self.root} ({exc})")
                    return None
        return None  # compiling without the lock is safe: the write is atomic

    def write_entry(self, metadata: EntryMetadata, payload: bytes) -> Path | None:
        """Write one entry, binary then metadata; ``None`` if writing is off or failed (see ``write_problem``)."""
        return self._write(metadata, payload)[0]

    def _write(self, metadata: EntryMetadata, payload: bytes) -> tuple[Path | None, str | None]:
        """The binary's path, or ``None`` and why it was not written."""
        if not self._may_write():
            return None, self._problem
        directory = self.target_dir(metadata.target)
        payload_path = directory / metadata.payload_name
        for _ in range(_ATTEMPTS):
            try:
                self._ensure_dirs(directory)
                self._replace(payload_path, payload)
                self._replace(directory / f"{metadata.stem}.json", metadata.to_json())
                return payload_path, None
            except OSError as exc:
                if exc.errno in _TRANSIENT:
                    continue  # the tree was renamed away (cache clear) or a path was healed: again
                reason = "the disk is full" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else str(exc)
                self._disable_writes(f"cannot write to the kernel cache {self.root} ({reason})")
                return None, self._problem
        # Not a reason to stop writing: the next entry will most likely land.
        problem = f"the cache directory {directory} kept disappearing while {metadata.stem} was written (cache clear?)"
        log.warning("%s; not stored", problem)
        return None, problem

    def _replace(self, path: Path, data: bytes) -> None:
        """``atomic_write``, after moving aside anything at ``path`` that is not a regular file of ours."""
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            st = None
        if st is not None:
            problem = self.trust.problem(st, directory=False)
            if problem is not None:
                self._heal(path, problem)
        atomic_write(path, data, self.trust)

    def _ensure_dirs(self, directory: Path) -> None:
        for path, problem in ensure_dir_chain(self.root, directory, self.trust):
            log.warning("cache directory %s %s; moved it aside and made a new one", path, problem)

    # ---- directories any cache layer under the root may use --------------------------------------

    def readable_dir(self, directory: Path) -> bool:
        """Whether every directory from the root down to ``directory`` is ours, asked before every read.

        By this cache and any other layer under the root (the CPU kernels): a directory that is not ours
        is named in one warning, nothing under it is read, and the next write moves it aside.
        """
        if not self._open():
            return False
        found = untrusted_dir(self.root, directory, self.trust)
        if found is None:
            return True
        path, problem = found
        self.warn_once(f"directory {path}", f"not reading the kernel cache directory {path}: it {problem}. "
                                            f"The next kernel stored there moves it aside; or remove it yourself")
        return False

    def writable_dir(self, directory: Path) -> bool:
        """Whether files may be written under ``directory``, its chain made with exact modes (bad ones moved aside)."""
        if not self._may_write():
            return False
        try:
            self._ensure_dirs(directory)
        except OSError as exc:
            self._disable_writes(f"cannot create directories in the kernel cache {self.root} ({exc})")
            return False
        return True

    def evict(self, path: Path) -> None:
        """Remove the entry whose binary is ``path`` (metadata first, so no reader sees half of it)."""
        for victim in (path.with_suffix(".json"), path):
            unlink_quietly(victim)
        log.warning("evicted cache entry %s", path)

    def _disable_writes(self, message: str) -> None:
        """Stop writing for this process, and say once which setting moves the cache somewhere usable."""
        self._problem = message
        self._warn_unwritable()

    def _warn_unwritable(self) -> None:
        self.warn_once("unwritable", f"{self._problem}; kernels compiled from now on stay in memory for this "
                                     f"process. Set {ENV_CACHE_DIR} to a writable directory with free space to "
                                     f"cache them")

    def warn_once(self, topic: str, message: str) -> None:
        with self._warn_guard:
            if topic in self._warned:
                return
            self._warned.add(topic)
        log.warning(message)
        warnings.warn(message, DiskCacheWarning, stacklevel=user_stacklevel())

    # ---- maintenance -----------------------------------------------------------------------------

    def entries(self) -> list[EntryInfo]:
        """Every readable entry of the current format, in no particular order."""
        return _maintenance().list_entries(self.format_dir, self.trust) if self._open() else []

    def prune(self, max_bytes: int) -> PruneResult:
        """Delete least recently used entries until the cache holds at most ``max_bytes``, and debris."""
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be zero or more, got {max_bytes}")
        return _maintenance().prune(self.format_dir, self.trust, max_bytes) if self._open() else PruneResult(0, 0, 0)

    def clear(self) -> int:
        """Remove every entry of every format version; returns the number of entries removed."""
        return _maintenance().clear(self.root) if self._open() else 0

