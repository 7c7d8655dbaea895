"""The per-kernel disk cache, by concern (see docs/jit.md, "Cache"):

* ``config``: environment variables and defaults;
* ``keys``: the versioned, labelled key schema and entry names;
* ``entry``: the metadata format and its verification;
* ``files``: trusted file access (owner/mode checks of files and of every directory from the root
  down, capped reads, atomic writes, locks);
* ``sealed``: files stored with their SHA-256 and read back only if it matches (for formats that
  run code when loaded, such as numba's pickles);
* ``store``: ``DiskCache``, lookup, lock, write, heal;
* ``nvrtc_record``: the running NVRTC's version, recorded so that a warm start need not load NVRTC;
* ``maintenance``: list, prune, clear, debris;
* ``null``: ``NullCache`` where caching is off;
* ``protocol``: ``KernelCache``, what the registry depends on.
"""

from __future__ import annotations

import os  # noqa: F401  (tests patch os functions through this module)
import threading

from .config import (
    DEFAULT_LOCK_TIMEOUT, ENV_CACHE_DIR, ENV_COMPATIBLE_NVRTC, ENV_DISABLE, ENV_GROUP, ENV_LOCK_TIMEOUT,
    ENV_STRICT_NVRTC, STALE_SECONDS, CacheConfig, DiskCacheWarning, cache_dir, comma_list, disk_cache_enabled,
    lock_timeout,
)
from .entry import BuildOutcome, CachedBinary, EntryInfo, EntryMetadata, PruneResult, metadata_for
from .keys import FORMAT_VERSION, SCHEMA_VERSION, BuildRequest, entry_stem, payload_suffix
from .null import NullCache
from .protocol import KernelCache
from .store import DiskCache

__all__ = [
    "DEFAULT_LOCK_TIMEOUT", "ENV_CACHE_DIR", "ENV_COMPATIBLE_NVRTC", "ENV_DISABLE", "ENV_GROUP", "ENV_LOCK_TIMEOUT",
    "ENV_STRICT_NVRTC", "FORMAT_VERSION", "SCHEMA_VERSION", "STALE_SECONDS", "BuildOutcome", "BuildRequest",
    "CacheConfig", "CachedBinary", "DiskCache", "DiskCacheWarning", "EntryInfo", "EntryMetadata", "KernelCache",
    "NullCache", "PruneResult", "cache_dir", "cache_for", "comma_list", "default_cache", "disk_cache_enabled",
    "entry_stem", "lock_timeout", "metadata_for", "payload_suffix",
]

_caches: dict[CacheConfig, KernelCache] = {}
_caches_guard = threading.Lock()


def cache_for(config: CacheConfig) -> KernelCache:
    """The cache for one configuration, one instance per process (so its warnings come once)."""
    with _caches_guard:
        cache = _caches.get(config)
        if cache is None:
            cache = _caches[config] = NullCache() if config.root is None else DiskCache(
                config.root, lock_timeout=config.lock_timeout, strict_nvrtc=config.strict_nvrtc,
                compatible_nvrtc=config.compatible_nvrtc, group=config.group)
        return cache


def default_cache() -> KernelCache:
    """The cache the environment asks for: a ``DiskCache``, or a ``NullCache`` when disabled."""
    return cache_for(CacheConfig.from_env())
