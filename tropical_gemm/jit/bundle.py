"""Cache bundles: a ``.tar.gz`` of cache entries to build once and ship to many nodes.

A bundle holds a manifest (``tropical-gemm-bundle.json``) and, for each
entry, its binary and its metadata at their cache paths (``v2/sm_90/...``).
Import checks everything before it writes anything: member names must be
plain cache paths (no ``..``, links or devices), the metadata must parse and
belong to its file name, and each binary's size and SHA-256 must match both
its metadata and the manifest.  One bad entry rejects the whole bundle, so
a node never ends up with half a bundle.  Members are streamed with a cap
(the cache's own limits for metadata and binaries), so a small archive that
unpacks to gigabytes is refused before it is read.  Entries are then written
like freshly compiled ones (temp file, fsync, ``os.replace``).

A checksum proves integrity, not origin: a cubin is executable code, so
import bundles only from sources you would take a wheel from.
"""

from __future__ import annotations

import hashlib
import io
import json
import re
import tarfile
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable

from .._version import __version__
from . import log
from .cache import FORMAT_VERSION, DiskCache, EntryMetadata, KernelCache, payload_suffix
from .cache.config import MAX_BINARY_BYTES, MAX_METADATA_BYTES
from .cache.files import UntrustedFile, read_capped

BUNDLE_FORMAT = 1
MANIFEST_NAME = "tropical-gemm-bundle.json"

_ENTRY_PATH = re.compile(
    r"^v(?P<format>\d+)/(?P<target>(?:sm|compute)_\d+)/(?P<stem>[A-Za-z0-9_]+-[0-9a-f]{16}-nvrtc\d+\.\d+)"
    r"(?P<suffix>\.json|\.cubin|\.ptx)$"
)


class BundleError(ValueError):
    """A bundle that is malformed, corrupt, or for another cache format."""


@dataclass(frozen=True)
class ImportResult:
    imported: int
    package_versions: tuple[str, ...]


def export_bundle(cache: KernelCache, path: Path, *, targets: Iterable[str] | None = None) -> int:
    """Write the cache's entries (optionally only some targets, e.g. ``["sm_90"]``) to ``path``.

    Returns the number of entries written.  Raises ``BundleError`` when the
    cache is off or holds nothing to export.
    """
    if not isinstance(cache, DiskCache):
        raise BundleError(f"{cache.write_problem}; nothing to export")
    wanted = set(targets) if targets is not None else None
    entries = [e for e in cache.entries() if wanted is None or e.metadata.target in wanted]
    if not entries:
        raise BundleError(f"no cache entries to export from {cache.root}"
                          + (f" for {', '.join(sorted(wanted))}" if wanted else ""))
    records = []
    members: list[tuple[str, bytes]] = []
    for entry in sorted(entries, key=lambda e: (e.metadata.target, e.metadata.stem)):
        try:
            payload = read_capped(entry.payload_path, entry.metadata.size, cache.trust)
        except (OSError, UntrustedFile) as exc:
            log.warning("not exporting unreadable cache entry %s: %s", entry.payload_path, exc)
            continue
        problem = entry.metadata.verify(payload)
        if problem is not None:
            log.warning("not exporting corrupt cache entry %s: %s", entry.payload_path, problem)
            continue
        base = f"v{FORMAT_VERSION}/{entry.metadata.target}/{entry.metadata.stem}"
        members += [(base + payload_suffix(entry.metadata.target), payload), (base + ".json", entry.metadata.to_json())]
        records.append({"metadata": base + ".json", "payload": base + payload_suffix(entry.metadata.target),
                        "sha256": entry.metadata.sha256, "size": entry.metadata.size})
    manifest = {
        "bundle_format": BUNDLE_FORMAT, "cache_format": FORMAT_VERSION, "package_version": __version__,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"), "entries": records,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as archive:
        _add_member(archive, MANIFEST_NAME, json.dumps(manifest, indent=2).encode())
        for name, data in members:
            _add_member(archive, name, data)
    return len(records)


def _add_member(archive: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    info.mtime = int(datetime.now(timezone.utc).timestamp())
    archive.addfile(info, io.BytesIO(data))


def import_bundle(cache: KernelCache, path: Path) -> ImportResult:
    """Verify every entry of the bundle at ``path``, then write them all into ``cache``."""
    if not cache.writable:
        raise BundleError(f"{cache.write_problem}; cannot import")
    files = _read_members(path)
    manifest = _parse_manifest(files.pop(MANIFEST_NAME, None), path)
    verified: list[tuple[EntryMetadata, bytes]] = []
    listed: set[str] = set()
    for record in manifest["entries"]:
        metadata, payload = _verified_entry(record, files, path)
        verified.append((metadata, payload))
        listed.update((record["metadata"], record["payload"]))
    unlisted = sorted(set(files) - listed)
    if unlisted:
        raise BundleError(f"{path}: files not listed in the manifest: {', '.join(unlisted[:5])}")
    for metadata, payload in verified:
        if cache.write_entry(metadata, payload) is None:
            raise BundleError(f"{cache.write_problem}; nothing more was imported")
    versions = tuple(sorted({m.package_version for m, _ in verified}))
    if versions and versions != (__version__,):
        log.warning("bundle %s holds kernels for tropical_gemm %s; this is %s, which will not use them",
                    path, ", ".join(versions), __version__)
    return ImportResult(len(verified), versions)


def _read_members(path: Path) -> dict[str, bytes]:
    """Every member as bytes, refusing anything but regular files at expected paths."""
    files: dict[str, bytes] = {}
    try:
        with tarfile.open(path, "r:*") as archive:
            for member in archive:
                if member.name != MANIFEST_NAME and not _ENTRY_PATH.match(member.name):
                    raise BundleError(f"{path}: unexpected member {member.name!r}")
                if not member.isfile():
                    raise BundleError(f"{path}: member {member.name!r} is not a regular file")
                if member.name in files:
                    raise BundleError(f"{path}: member {member.name!r} appears twice")
                files[member.name] = _read_member(archive, member, path)
    except (tarfile.TarError, EOFError, OSError) as exc:
        raise BundleError(f"{path} is not a readable bundle: {exc}") from exc
    return files


def _read_member(archive: tarfile.TarFile, member: tarfile.TarInfo, path: Path) -> bytes:
    """One member's bytes, refused unread if its header claims more than a cache file may hold."""
    cap = MAX_METADATA_BYTES if member.name.endswith(".json") else MAX_BINARY_BYTES
    if member.size > cap:
        raise BundleError(f"{path}: member {member.name!r} claims {member.size} bytes, more than the {cap} "
                          "a cache file may hold")
    extracted = archive.extractfile(member)
    assert extracted is not None  # regular files always extract
    data = extracted.read(cap + 1)
    if len(data) > cap:
        raise BundleError(f"{path}: member {member.name!r} holds more than {cap} bytes")
    return data


def _parse_manifest(raw: bytes | None, path: Path) -> dict:
    if raw is None:
        raise BundleError(f"{path} has no {MANIFEST_NAME}; is it a tropical_gemm cache bundle?")
    try:
        manifest = json.loads(raw)
    except ValueError as exc:
        raise BundleError(f"{path}: manifest is not JSON ({exc})") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("entries"), list):
        raise BundleError(f"{path}: manifest has no entry list")
    if manifest.get("bundle_format") != BUNDLE_FORMAT:
        raise BundleError(f"{path}: bundle format {manifest.get('bundle_format')!r}; this version reads {BUNDLE_FORMAT}")
    if manifest.get("cache_format") != FORMAT_VERSION:
        raise BundleError(f"{path}: bundle holds cache format {manifest.get('cache_format')!r}; "
                          f"this version of tropical_gemm uses {FORMAT_VERSION}")
    return manifest


def _verified_entry(record: object, files: dict[str, bytes], path: Path) -> tuple[EntryMetadata, bytes]:
    if not isinstance(record, dict) or not all(isinstance(record.get(k), str) for k in ("metadata", "payload", "sha256")):
        raise BundleError(f"{path}: malformed manifest record {record!r}")
    meta_name, payload_name = record["metadata"], record["payload"]
    if meta_name not in files or payload_name not in files:
        raise BundleError(f"{path}: manifest lists {meta_name} but the bundle lacks it or its binary")
    try:
        metadata = EntryMetadata.from_json(files[meta_name])
    except ValueError as exc:
        raise BundleError(f"{path}: {meta_name}: {exc}") from None
    inconsistency = metadata.inconsistency()
    if inconsistency is not None:
        raise BundleError(f"{path}: {meta_name}: {inconsistency}")
    expected_base = f"v{FORMAT_VERSION}/{metadata.target}/{metadata.stem}"
    if meta_name != expected_base + ".json" or payload_name != expected_base + payload_suffix(metadata.target):
        raise BundleError(f"{path}: {meta_name} does not describe the entry stored under that name")
    payload = files[payload_name]
    problem = metadata.verify(payload)
    if problem is None and hashlib.sha256(payload).hexdigest() != record["sha256"]:
        problem = "binary does not match the manifest's SHA-256"
    if problem is not None:
        raise BundleError(f"{path}: {payload_name}: {problem}")
    return metadata, payload
