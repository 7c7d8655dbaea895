"""Keeping a cache tidy: listing, LRU pruning, clearing, and sweeping what dead writers left.

Scratch paths (temp files and moved-aside paths) carry their writer's pid
and host in their names, so the first write to the cache in a process
removes those whose writer is gone, instead of waiting for a prune.  ``clear`` renames a
version tree away before deleting it, so processes writing at that moment
simply recreate the directories and carry on.
"""

from __future__ import annotations

import os
import shutil
import stat
import time
from pathlib import Path
from typing import Iterator

from .config import MAX_METADATA_BYTES, STALE_SECONDS
from .entry import EntryInfo, EntryMetadata, PruneResult
from .files import Trust, UntrustedFile, aside_name, is_scratch, owner_is_gone, read_capped, \
    remove_tree_or_file, unlink_quietly
from .. import log

_ENTRY_SUFFIXES = (".json", ".cubin", ".ptx")


def _target_dirs(format_dir: Path, trust: Trust) -> Iterator[Path]:
    """The target directories under ``format_dir`` that are ours (lookups warn about the others)."""
    try:
        if trust.problem(os.lstat(format_dir), directory=True) is not None:
            return
        names = sorted(os.listdir(format_dir))
    except OSError:
        return
    for name in names:
        path = format_dir / name
        try:
            if not name.startswith(".") and trust.problem(os.lstat(path), directory=True) is None:
                yield path
        except OSError:
            continue


def _names(directory: Path) -> list[str]:
    try:
        return sorted(os.listdir(directory))
    except OSError:
        return []


def sweep_dead_scratch(format_dir: Path, trust: Trust) -> int:
    """Remove temp files and moved-aside paths whose writing process on this host has exited."""
    removed = 0
    for directory in (format_dir.parent, format_dir, *_target_dirs(format_dir, trust)):
        for name in _names(directory):
            if is_scratch(name) and owner_is_gone(name):
                remove_tree_or_file(directory / name)
                removed += 1
    return removed


def _read_metadata(path: Path, trust: Trust) -> EntryMetadata:
    return EntryMetadata.from_json(read_capped(path, MAX_METADATA_BYTES, trust))


def list_entries(format_dir: Path, trust: Trust) -> list[EntryInfo]:
    """Every readable, trusted entry of the current format, in no particular order."""
    found: list[EntryInfo] = []
    for directory in _target_dirs(format_dir, trust):
        for name in _names(directory):
            if not name.endswith(".json") or name.startswith("."):
                continue
            meta_path = directory / name
            try:
                metadata = _read_metadata(meta_path, trust)
                if metadata.stem + ".json" != name:
                    continue
                payload_path = directory / metadata.payload_name
                payload_stat = os.lstat(payload_path)
                if not stat.S_ISREG(payload_stat.st_mode):
                    continue
                size = payload_stat.st_size + os.lstat(meta_path).st_size
            except (OSError, ValueError, UntrustedFile):
                continue
            found.append(EntryInfo(metadata, payload_path, meta_path, size, payload_stat.st_mtime))
    return found


def prune(format_dir: Path, trust: Trust, max_bytes: int) -> PruneResult:
    """Remove debris, then least recently used entries until at most ``max_bytes`` remain.

    Entries of other format versions are left to ``clear`` (another
    installed version of the library may still use them).
    """
    removed, freed = remove_debris(format_dir, trust)
    entries = sorted(list_entries(format_dir, trust), key=lambda e: e.last_used)
    total = sum(e.size for e in entries)
    for entry in entries:
        if total <= max_bytes:
            break
        for path in (entry.metadata_path, entry.payload_path, entry.metadata_path.with_suffix(".lock")):
            unlink_quietly(path)
        total -= entry.size
        freed += entry.size
        removed += 1
        log.info("pruned cache entry %s", entry.payload_path)
    return PruneResult(removed, freed, total)


def remove_debris(format_dir: Path, trust: Trust) -> tuple[int, int]:
    """Scratch files of dead or long-gone writers, unparseable metadata, and old binaries without metadata."""
    now = time.time()
    removed = freed = 0
    for directory in _target_dirs(format_dir, trust):
        names = _names(directory)
        described: set[str] = set()
        for name in names:
            if name.endswith(".json") and not name.startswith("."):
                try:
                    described.add(_read_metadata(directory / name, trust).payload_name)
                except (ValueError, UntrustedFile):
                    freed += _size_or_zero(directory / name)
                    remove_tree_or_file(directory / name)
                    removed += 1
                except OSError:
                    continue
        for name in names:
            path = directory / name
            is_orphan = name.endswith((".cubin", ".ptx")) and not name.startswith(".") and name not in described
            old = now - _mtime_or_now(path) > STALE_SECONDS
            if (is_scratch(name) and (old or owner_is_gone(name))) or (is_orphan and old):
                freed += _size_or_zero(path)
                remove_tree_or_file(path)
                removed += 1
    return removed, freed


def count_entries(version_dir: Path) -> int:
    """Entries under one ``v<N>/`` tree: distinct stems of metadata and binaries (whole or not)."""
    stems = set()
    for directory, _, files in os.walk(version_dir):
        for name in files:
            if name.endswith(_ENTRY_SUFFIXES) and not name.startswith("."):
                stems.add((directory, name.rsplit(".", 1)[0]))
    return len(stems)


def clear(root: Path) -> int:
    """Remove every ``v<N>/`` tree (every format version); returns the number of entries removed.

    Each tree is renamed away first, so writers never see half a tree:
    their next write recreates the directories.  Only our own layout is
    touched, so a cache directory that holds other files is safe.
    """
    count = 0
    for name in _names(root):
        path = root / name
        aside = root / aside_name(name)
        try:
            if not (name[:1] == "v" and name[1:].isdigit() and stat.S_ISDIR(os.lstat(path).st_mode)):
                continue
            os.rename(path, aside)
        except FileNotFoundError:  # another clear got there first
            continue
        count += count_entries(aside)
        shutil.rmtree(aside, ignore_errors=True)
        if os.path.lexists(aside):  # a file we may not delete: left for the sweep, and said
            log.warning("could not remove all of %s; it is out of the cache's way", aside)
    return count


def _size_or_zero(path: Path) -> int:
    try:
        return os.lstat(path).st_size
    except OSError:
        return 0


def _mtime_or_now(path: Path) -> float:
    try:
        return os.lstat(path).st_mtime
    except OSError:
        return time.time()
