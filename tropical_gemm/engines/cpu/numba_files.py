"""numba's files for the CPU kernels, in our cache: what ``tropical-gemm cache`` counts and removes.

numba writes, under ``<cache root>/numba-cpu/``, one index (``.nbi``) per
kernel function and one object file (``.nbc``) per compiled variant; each
variant counts as one entry.  This module only lists and deletes: what numba
may load is governed by ``numba_cache``.  It never imports numba, and never
follows a link.
"""

from __future__ import annotations

import os
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from ...jit.cache import DiskCache, PruneResult
from ...jit.cache.files import aside_name

#: The sub-folder of the cache root numba writes to (``numba_cache.SUBDIR``, which imports numba).
SUBDIR = "numba-cpu"

#: How ``cache info`` and ``cache list`` name these entries' target.
TARGET = "cpu-numba"


@dataclass(frozen=True)
class NumbaFile:
    path: Path
    size: int
    modified: float

    @property
    def is_variant(self) -> bool:
        return self.path.suffix == ".nbc"


def files(root: Path) -> list[NumbaFile]:
    """Every regular file under ``root/numba-cpu`` (links neither followed nor listed)."""
    try:
        if not stat.S_ISDIR(os.lstat(root / SUBDIR).st_mode):
            return []
    except OSError:
        return []
    found = []
    for folder, _, names in os.walk(root / SUBDIR, followlinks=False):
        for name in names:
            path = Path(folder, name)
            try:
                info = os.lstat(path)
            except OSError:
                continue
            if stat.S_ISREG(info.st_mode):
                found.append(NumbaFile(path, info.st_size, info.st_mtime))
    return found


def summary(root: Path) -> dict[str, int]:
    """Entries (compiled variants) and bytes (all of numba's files)."""
    found = files(root)
    return {"entries": sum(f.is_variant for f in found), "bytes": sum(f.size for f in found)}


def clear(root: Path) -> int:
    """Delete numba's folder; returns how many compiled variants it held.

    The folder is renamed away first, as ``cache clear`` does with ours: a
    numba writing at that moment finds its folder gone and writes a new one.
    A link in its place is removed, never followed.
    """
    folder = root / SUBDIR
    if not os.path.lexists(folder):
        return 0
    if not stat.S_ISDIR(os.lstat(folder).st_mode):
        os.unlink(folder)
        return 0
    count = sum(f.is_variant for f in files(root))
    aside = root / aside_name(SUBDIR)
    try:
        os.rename(folder, aside)
    except FileNotFoundError:  # another clear got there first
        return 0
    shutil.rmtree(aside, ignore_errors=True)
    return count


@dataclass(frozen=True)
class NumbaKernel:
    """One kernel function's files: its index and every compiled variant, removed together (the index names them)."""

    files: tuple[NumbaFile, ...]

    @property
    def size(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def last_used(self) -> float:
        """When numba last wrote one of its files: it writes a variant when it compiles one."""
        return max(f.modified for f in self.files)

    @property
    def variants(self) -> int:
        return sum(f.is_variant for f in self.files)


def kernels(root: Path) -> list[NumbaKernel]:
    """numba's files grouped by kernel function (``X.nbi`` with its ``X.<n>.nbc``)."""
    groups: dict[Path, list[NumbaFile]] = {}
    for found in files(root):
        name = found.path.name
        stem = name[: -len(".nbi")] if name.endswith(".nbi") else name.rsplit(".", 2)[0]
        groups.setdefault(found.path.with_name(stem), []).append(found)
    return [NumbaKernel(tuple(group)) for group in groups.values()]


def remove(kernel: NumbaKernel) -> None:
    """Delete one kernel function's files, its index first (no numba sees an index without its variants)."""
    for found in sorted(kernel.files, key=lambda f: not f.path.name.endswith(".nbi")):
        try:
            os.unlink(found.path)
        except FileNotFoundError:  # another prune or clear got there first
            pass


def prune_with_gpu_entries(cache: DiskCache, max_bytes: int) -> PruneResult:
    """``cache.prune`` with numba's CPU kernels in the same budget, least recently used first.

    A CPU kernel goes with all its variants.  The GPU entries to remove are
    the oldest ones of this joint order, so ``cache.prune`` is given what the
    GPU entries that stay hold (and removes the debris as always).
    """
    cpu = kernels(cache.root)
    gpu = [(entry.last_used, entry.size, None) for entry in cache.entries()]
    gpu_kept = sum(size for _, size, _ in gpu)
    total = gpu_kept + sum(kernel.size for kernel in cpu)
    cpu_removed: list[NumbaKernel] = []
    for _, size, kernel in sorted(gpu + [(k.last_used, k.size, k) for k in cpu], key=lambda item: item[0]):
        if total <= max_bytes:
            break
        total -= size
        if kernel is None:
            gpu_kept -= size
        else:
            cpu_removed.append(kernel)
    for kernel in cpu_removed:
        remove(kernel)
    result = cache.prune(gpu_kept)
    freed = sum(kernel.size for kernel in cpu_removed)
    return PruneResult(result.removed + sum(kernel.variants for kernel in cpu_removed), result.freed_bytes + freed,
                       result.remaining_bytes + sum(kernel.size for kernel in cpu) - freed)
