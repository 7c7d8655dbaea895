"""One cache entry: its metadata (JSON next to the binary), how it is checked, what a build returns.

An entry is used only if its metadata parses with the right types, belongs
to its file name and schema, describes the requested program (key, kernel
name, target, options) and the binary has the recorded size and SHA-256.
Anything else is a miss that the next writer heals.

The records here are NamedTuples rather than frozen dataclasses, as are
the other records that a warm call's imports define (but the specs):
creating a dataclass runs generated code through the compiler, which cost
a warm process more than its whole kernel lookup.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Mapping, NamedTuple

from ..compiler import CompiledKernel
from .config import MAX_BINARY_BYTES
from .keys import FORMAT_VERSION, BuildRequest, entry_stem, full_key, payload_suffix, version_text

_FIELD_TYPES: dict[str, Any] = {
    "format": int, "key": str, "portable_key": str, "name": str, "target": str, "options": list,
    "nvrtc_version": str, "package_version": str, "sha256": str, "size": int,
    "compile_seconds": (int, float), "created": str,
}


class EntryMetadata(NamedTuple):
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
        data = self._asdict()
        data["options"] = list(self.options)
        return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8")

    @classmethod
    def from_json(cls, raw: bytes) -> "EntryMetadata":
        """Parse and type-check; any deviation is a ``ValueError`` (treated as corruption)."""
        try:
            data = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"metadata is not JSON: {exc}") from None
        except RecursionError:  # ours is two levels deep; a deeper one is planted or garbage
            raise ValueError("metadata is nested too deeply to be ours") from None
        if not isinstance(data, dict):
            raise ValueError("metadata is not a JSON object")
        for name, kind in _FIELD_TYPES.items():
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
        if self.key != full_key(self.portable_key, self.nvrtc_version):
            return "metadata key is inconsistent with its NVRTC version"
        if not 0 < self.size <= MAX_BINARY_BYTES:
            return f"metadata size {self.size} is outside 1..{MAX_BINARY_BYTES} bytes"
        return None

    def verify(self, payload: bytes) -> str | None:
        """Why ``payload`` is not this entry's binary, or ``None`` if it is."""
        if len(payload) != self.size:
            return f"binary has {len(payload)} bytes, metadata says {self.size}"
        if hashlib.sha256(payload).hexdigest() != self.sha256:
            return "binary does not match its SHA-256"
        # Another kernel's binary under a rewritten checksum passes this; the
        # driver then refuses it by name, and the registry evicts and rebuilds.
        return None

    def mismatch(self, request: BuildRequest, file_name: str, *, expect_exact: bool) -> str | None:
        """Why this (consistent) metadata, read from ``file_name``, is not an entry for ``request``."""
        problem = self.inconsistency()
        if problem is not None:
            return problem
        if self.stem + ".json" != file_name:
            return "metadata does not belong to this file name"
        if self.portable_key != request.portable_key or self.name != request.name:
            return "metadata describes another program"
        if self.target != request.target.tag or self.options != request.options:
            return "metadata describes another target or options"
        if expect_exact and self.key != request.key:
            return "metadata key does not match the expected key"
        return None


def metadata_for(request: BuildRequest, compiled: CompiledKernel) -> EntryMetadata:
    from datetime import datetime, timezone  # here: only a compile writes an entry, and warm starts import less

    return EntryMetadata(
        format=FORMAT_VERSION, key=request.key, portable_key=request.portable_key, name=request.name,
        target=request.target.tag, options=compiled.options, nvrtc_version=version_text(compiled.nvrtc_version),
        package_version=request.package_version, sha256=hashlib.sha256(compiled.binary).hexdigest(),
        size=len(compiled.binary), compile_seconds=round(compiled.compile_seconds, 6),
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        spec=dict(request.spec) if request.spec is not None else None, log=compiled.log,
    )


class CachedBinary(NamedTuple):
    """A verified entry read from disk.  ``exact`` is False for a listed compatible NVRTC version's cubin."""

    binary: bytes
    metadata: EntryMetadata
    path: Path
    exact: bool


class BuildOutcome(NamedTuple):
    """What the cache did to produce a binary: read it (``compiled`` False) or compile and store it.

    ``store_problem`` says why a compiled binary was not stored (``stored``
    False), e.g. a read-only or full disk, or a disabled cache.

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
    store_problem: str | None = None


def outcome_from(found: CachedBinary) -> BuildOutcome:
    return BuildOutcome(found.binary, False, 0.0, False, found.exact, found.path)


class EntryInfo(NamedTuple):
    """One entry as ``cache list`` and ``prune`` see it."""

    metadata: EntryMetadata
    payload_path: Path
    metadata_path: Path
    size: int  # bytes on disk, binary plus metadata
    last_used: float  # the binary's mtime, refreshed on every disk hit


class PruneResult(NamedTuple):
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
