"""What the registry, warm-up and bundles need from a kernel cache; ``DiskCache`` and ``NullCache`` both fit."""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Protocol

from ..compiler import CompiledKernel
from .entry import BuildOutcome, CachedBinary, EntryInfo, EntryMetadata, PruneResult
from .keys import BuildRequest


class KernelCache(Protocol):
    """A store of verified kernel binaries keyed by :class:`BuildRequest`."""

    @property
    def enabled(self) -> bool: ...

    @property
    def writable(self) -> bool: ...

    @property
    def root(self) -> Path | None: ...

    @property
    def write_problem(self) -> str | None:
        """Why nothing is written, or ``None``."""

    def lookup(self, request: BuildRequest) -> CachedBinary | None: ...

    def get_or_build(self, request: BuildRequest, compile_fn: Callable[[], CompiledKernel], *,
                     accept_other_nvrtc: bool = True) -> BuildOutcome: ...

    def write_entry(self, metadata: EntryMetadata, payload: bytes) -> Path | None: ...

    def evict(self, path: Path) -> None:
        """Remove the entry whose binary is ``path`` (one that the driver refused)."""

    def entries(self) -> list[EntryInfo]: ...

    def prune(self, max_bytes: int) -> PruneResult: ...

    def clear(self) -> int: ...
