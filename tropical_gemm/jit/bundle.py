"""Cache bundles: a ``.tar.gz`` of cache entries to build once and ship to many nodes.

A bundle holds a manifest (``tropical-gemm-bundle.json``, its first member)
and, for each entry, its binary and its metadata at their cache paths
(``v2/sm_90/...``).  Import checks everything before it writes anything, and
bounds everything before it reads it:

* the bundle must be a regular file (a FIFO or ``/dev/zero`` is refused
  before any read);
* extended tar headers (pax, GNU long names) larger than ours can be are
  refused from their 512-byte header, before ``tarfile`` reads them;
* the manifest comes first, and is checked before any binary is read: its
  names must be plain cache paths, its entries at most
  ``MAX_BUNDLE_ENTRIES``, each binary at most ``MAX_MEMBER_BYTES``, all of
  them at most ``MAX_BUNDLE_BYTES``;
* every later member must be one the manifest lists, a regular file, of the
  size it lists, read with that cap, and match its SHA-256; the metadata
  must parse and belong to its file name, and agree with its binary.

One bad entry rejects the whole bundle, so a node never ends up with half
a bundle.  Entries are then written like freshly compiled ones (temp file,
fsync, ``os.replace``).

A checksum proves integrity, not origin: a cubin is executable code, so
import bundles only from sources you would take a wheel from.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
import stat
import tarfile
import zlib
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterable

from .._version import __version__
from . import log
from .cache import FORMAT_VERSION, DiskCache, EntryMetadata, KernelCache, payload_suffix
from .cache.config import MAX_METADATA_BYTES
from .cache.files import UntrustedFile, read_capped, temp_name, unlink_quietly

BUNDLE_FORMAT = 1
MANIFEST_NAME = "tropical-gemm-bundle.json"

#: Bounds checked from a header before what it describes is read.  Our
#: member names are short, so an extended header (pax, GNU long name) of
#: more than this is not ours.
MAX_HEADER_BYTES = 64 * 1024
#: Entries one bundle may list: the whole catalogue for over a dozen targets.
MAX_BUNDLE_ENTRIES = 16_384
#: One binary (ours are well under a megabyte) and all members together.
MAX_MEMBER_BYTES = 16 * 2**20
MAX_BUNDLE_BYTES = 2**30

_EXTENDED_HEADERS = {tarfile.XHDTYPE: "pax header", tarfile.XGLTYPE: "pax global header",
                     tarfile.SOLARIS_XHDTYPE: "pax header", tarfile.GNUTYPE_LONGNAME: "GNU long name",
                     tarfile.GNUTYPE_LONGLINK: "GNU long link name"}

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
        if problem is None and entry.metadata.size > MAX_MEMBER_BYTES:
            problem = f"its {entry.metadata.size} bytes are more than the {MAX_MEMBER_BYTES} a bundle may carry"
        if problem is not None:
            log.warning("not exporting cache entry %s: %s", entry.payload_path, problem)
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
    # Written beside ``path`` and renamed over it: an export cut short (a full disk, Ctrl-C) leaves
    # whatever was at ``path`` before, never the first part of a bundle.
    scratch = path.with_name(temp_name(path.name))
    try:
        with tarfile.open(scratch, "w:gz") as archive:
            _add_member(archive, MANIFEST_NAME, json.dumps(manifest, indent=2).encode())
            for name, data in members:
                _add_member(archive, name, data)
        os.replace(scratch, path)
    except BaseException:
        unlink_quietly(scratch)
        raise
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
    try:
        verified = _read_verified(path)
    except BundleError as exc:
        raise BundleError(f"{path}: {exc}") from None
    for metadata, payload in verified:
        if cache.write_entry(metadata, payload) is None:
            raise BundleError(f"{cache.write_problem}; nothing more was imported")
    versions = tuple(sorted({m.package_version for m, _ in verified}))
    if versions and versions != (__version__,):
        log.warning("bundle %s holds kernels for tropical_gemm %s; this is %s, which will not use them",
                    path, ", ".join(versions), __version__)
    return ImportResult(len(verified), versions)


def _read_verified(path: Path) -> list[tuple[EntryMetadata, bytes]]:
    """Every entry of the bundle, verified; a :class:`BundleError` (without the path) for the first problem."""
    with _open_regular_file(path) as stream:
        try:
            with tarfile.open(fileobj=stream, mode="r:gz", tarinfo=_BoundedTarInfo) as archive:
                first = archive.next()
                if first is None or first.name != MANIFEST_NAME:
                    raise BundleError(f"its first member is not {MANIFEST_NAME}; is it a tropical_gemm cache bundle?")
                manifest = _parse_manifest(_read_member(archive, first, MAX_METADATA_BYTES))
                files = _read_listed_members(archive, manifest)
        except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
            raise BundleError(f"not a readable bundle: {exc}") from None
        except RecursionError:  # a chain of extended headers, each naming the next
            raise BundleError("not a readable bundle: its headers are nested too deeply") from None
    return [_verified_entry(record, files) for record in manifest["entries"]]


def _open_regular_file(path: Path) -> io.BufferedReader:
    """``path`` opened for reading if it is a regular file; a FIFO or a device is refused before any read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except OSError as exc:
        raise BundleError(f"cannot open it ({exc.strerror})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise BundleError("is not a regular file")
        os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


class _BoundedTarInfo(tarfile.TarInfo):
    """A tar header whose extended headers (pax, GNU long names) are refused unread when too large to be ours.

    ``tarfile`` reads such a header whole, whatever size it claims, before
    the member it describes; ``_proc_member`` is its documented hook for
    subclasses, called right after the 512-byte header block is parsed.
    """

    def _proc_member(self, tarfile: tarfile.TarFile) -> tarfile.TarInfo:
        kind = _EXTENDED_HEADERS.get(self.type)
        if kind is not None and self.size > MAX_HEADER_BYTES:
            raise BundleError(f"a {kind} of {self.size} bytes, more than the {MAX_HEADER_BYTES} a bundle's may hold")
        return super()._proc_member(tarfile)


def _read_listed_members(archive: tarfile.TarFile, manifest: dict) -> dict[str, bytes]:
    """The members after the manifest, each one the manifest lists (payloads: the size and SHA-256 it lists)."""
    listed = {r["metadata"]: (None, None) for r in manifest["entries"]}
    listed.update({r["payload"]: (r["size"], r["sha256"]) for r in manifest["entries"]})
    files: dict[str, bytes] = {}
    total = 0
    while (member := archive.next()) is not None:
        if member.name not in listed:
            raise BundleError(f"member {member.name!r} is not listed in the manifest")
        if not member.isfile():
            raise BundleError(f"member {member.name!r} is not a regular file")
        if member.name in files:
            raise BundleError(f"member {member.name!r} appears twice")
        size, sha256 = listed[member.name]
        if size is not None and member.size != size:
            raise BundleError(f"member {member.name!r} holds {member.size} bytes; the manifest lists {size}")
        total += member.size
        if total > MAX_BUNDLE_BYTES:
            raise BundleError(f"its members hold more than the {MAX_BUNDLE_BYTES} bytes a bundle may")
        files[member.name] = data = _read_member(archive, member, MAX_METADATA_BYTES if size is None else size)
        if sha256 is not None and hashlib.sha256(data).hexdigest() != sha256:
            raise BundleError(f"{member.name}: binary does not match the manifest's SHA-256")
    missing = sorted(set(listed) - set(files))
    if missing:
        raise BundleError(f"the manifest lists {', '.join(missing[:5])}, which the bundle lacks")
    return files


def _read_member(archive: tarfile.TarFile, member: tarfile.TarInfo, cap: int) -> bytes:
    """One member's bytes, refused unread if its header claims more than ``cap``."""
    if member.size > cap:
        raise BundleError(f"member {member.name!r} claims {member.size} bytes, more than the {cap} it may hold")
    extracted = archive.extractfile(member)
    assert extracted is not None  # regular files always extract
    data = extracted.read(cap + 1)
    if len(data) > cap:
        raise BundleError(f"member {member.name!r} holds more than {cap} bytes")
    return data


def _parse_manifest(raw: bytes) -> dict:
    """The manifest, with every record's names, size and checksum checked and the total bounded."""
    try:
        manifest = json.loads(raw)
    except ValueError as exc:
        raise BundleError(f"{MANIFEST_NAME} is not JSON ({exc})") from None
    except RecursionError:
        raise BundleError(f"{MANIFEST_NAME} is nested too deeply to be one") from None
    if not isinstance(manifest, dict) or not isinstance(manifest.get("entries"), list):
        raise BundleError(f"{MANIFEST_NAME} has no entry list")
    if manifest.get("bundle_format") != BUNDLE_FORMAT:
        raise BundleError(f"bundle format {manifest.get('bundle_format')!r}; this version reads {BUNDLE_FORMAT}")
    if manifest.get("cache_format") != FORMAT_VERSION:
        raise BundleError(f"it holds cache format {manifest.get('cache_format')!r}; "
                          f"this version of tropical_gemm uses {FORMAT_VERSION}")
    records = manifest["entries"]
    if len(records) > MAX_BUNDLE_ENTRIES:
        raise BundleError(f"{MANIFEST_NAME} lists {len(records)} entries, more than the {MAX_BUNDLE_ENTRIES} "
                          "a bundle may hold")
    for record in records:
        _check_record(record)
    total = sum(r["size"] for r in records)
    if total > MAX_BUNDLE_BYTES:
        raise BundleError(f"{MANIFEST_NAME} lists {total} bytes of binaries, more than the {MAX_BUNDLE_BYTES} "
                          "a bundle may hold")
    return manifest


def _check_record(record: object) -> None:
    if not (isinstance(record, dict) and all(isinstance(record.get(k), str) for k in ("metadata", "payload", "sha256"))
            and type(record.get("size")) is int):
        raise BundleError(f"malformed manifest record {str(record)[:200]}")
    meta, payload = _ENTRY_PATH.match(record["metadata"]), _ENTRY_PATH.match(record["payload"])
    if meta is None or payload is None or meta["suffix"] != ".json" or payload["suffix"] == ".json":
        raise BundleError(f"manifest record names no cache entry: {record['metadata']!r}, {record['payload']!r}")
    if not 0 < record["size"] <= MAX_MEMBER_BYTES:
        raise BundleError(f"manifest record {record['payload']!r} lists {record['size']} bytes, outside "
                          f"1..{MAX_MEMBER_BYTES}")


def _verified_entry(record: dict, files: dict[str, bytes]) -> tuple[EntryMetadata, bytes]:
    meta_name, payload_name = record["metadata"], record["payload"]
    try:
        metadata = EntryMetadata.from_json(files[meta_name])
    except ValueError as exc:
        raise BundleError(f"{meta_name}: {exc}") from None
    inconsistency = metadata.inconsistency()
    if inconsistency is not None:
        raise BundleError(f"{meta_name}: {inconsistency}")
    expected_base = f"v{FORMAT_VERSION}/{metadata.target}/{metadata.stem}"
    if meta_name != expected_base + ".json" or payload_name != expected_base + payload_suffix(metadata.target):
        raise BundleError(f"{meta_name} does not describe the entry stored under that name")
    payload = files[payload_name]
    problem = metadata.verify(payload)
    if problem is not None:
        raise BundleError(f"{payload_name}: {problem}")
    return metadata, payload
