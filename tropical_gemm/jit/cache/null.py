"""The cache used where disk caching is off: every build compiles, nothing is read or written.

Like numba's ``NullCache``: callers hold one object with the same methods
instead of checking ``root is None`` before every cache call.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from ..compiler import CompiledKernel
from .config import ENV_DISABLE
from .entry import BuildOutcome, CachedBinary, EntryInfo, EntryMetadata, PruneResult
from .keys import BuildRequest

DISABLED = f"the disk cache is disabled ({ENV_DISABLE})"


class NullCache:
    """No disk cache: ``lookup`` misses, ``get_or_build`` compiles, maintenance has nothing to do."""

    enabled = False
    writable = False
    root: Path | None = None
    write_problem: str | None = DISABLED

    def lookup(self, request: BuildRequest) -> CachedBinary | None:
        return None

    def get_or_build(self, request: BuildRequest, compile_fn: Callable[[], CompiledKernel], *,
                     accept_other_nvrtc: bool = True) -> BuildOutcome:
        compiled = compile_fn()
        return BuildOutcome(compiled.binary, True, compiled.compile_seconds, False, True, None,
                            store_problem=DISABLED)

    def write_entry(self, metadata: EntryMetadata, payload: bytes) -> Path | None:
        return None

    def evict(self, path: Path) -> None:
        return None

    def entries(self) -> list[EntryInfo]:
        return []

    def prune(self, max_bytes: int) -> PruneResult:
        if max_bytes < 0:
            raise ValueError(f"max_bytes must be zero or more, got {max_bytes}")
        return PruneResult(0, 0, 0)

    def clear(self) -> int:
        return 0
