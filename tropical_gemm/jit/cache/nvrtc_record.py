"""Which NVRTC runs, known on a warm start without loading NVRTC: the cache's ``nvrtc-running`` record.

Every exact cache key holds the NVRTC version, and loading the library to
ask it (a ``dlopen``) would cost a warm start more than the rest of its
lookup.  So the cache records, beside the version, which library file
reported it (path, size, modification time): a process that would load that
very file takes the version from the record.  A process that cannot load
NVRTC at all (a node that only runs what others compiled) takes the
recorded version as it stands.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable

from .. import compiler, log
from .files import Trust, atomic_write
from .keys import version_text

RECORD_NAME = "nvrtc-running"

#: ``read(path, cap)``: a trusted file's bytes, or ``None`` (the cache's own read, which heals bad paths).
Reader = Callable[[Path, int], "bytes | None"]


class NvrtcRecord:
    """The record in one cache's format directory, read at most once per process and mended when stale."""

    def __init__(self, format_dir: Path, read: Reader, trust: Trust, may_write: Callable[[], bool]) -> None:
        self.path = format_dir / RECORD_NAME
        self._read = read
        self._trust = trust
        self._may_write = may_write  # False once the cache has stopped writing in this process
        self._lines: tuple[str, ...] | None = None

    def recorded(self) -> tuple[str | None, str | None]:
        """The recorded NVRTC version and the identity of the library that reported it (either may be None)."""
        if self._lines is None:
            raw = self._read(self.path, 1024)
            self._lines = tuple(raw.decode("ascii", "replace").splitlines()[:2]) if raw else ()
        version, identity = (*self._lines, None, None)[:2]
        return version or None, identity or None

    def running_version(self) -> str | None:
        """The running NVRTC's version: from the record when it names the library this process would load.

        Else asked of NVRTC, and recorded; a process that cannot load NVRTC
        falls back to the recorded version (None where there is none).
        """
        recorded, identity = self.recorded()
        if identity is not None and identity == compiler.nvrtc_identity(loaded=False):
            return recorded
        try:
            running = compiler.nvrtc_version()
        except compiler.NvrtcUnavailableError:  # a load-only node: the version this cache's compiles recorded
            return recorded
        if os.path.isdir(self.path.parent):  # else the first compile creates it, and records the version then
            self.remember(running)
        return version_text(running)

    def remember(self, version: tuple[int, int]) -> None:
        """Record the NVRTC that ran and its library file, for warm starts and for nodes that cannot load it."""
        record = (version_text(version), compiler.nvrtc_identity(loaded=True) or "")
        if self.recorded() == (record[0], record[1] or None) or not self._may_write():
            return
        self._lines = record  # tried once per process, written or not
        try:
            atomic_write(self.path, "\n".join(record).encode() + b"\n", self._trust)
        except OSError as exc:
            log.info("cannot record the running NVRTC version in %s (%s)", self.path.parent, exc)
