"""The cache key schema: labelled, length-prefixed SHA-256 with a schema version.

Each field enters the hash as ``len(label) label len(value) value`` after a
fixed domain tag and the schema version, so no two different field lists
can hash the same byte stream, and a key from one schema can never equal a
key from another.  Changing what is hashed, or how, bumps
:data:`SCHEMA_VERSION`; entries live under ``v<SCHEMA_VERSION>/``, so old
ones are ignored (and left to ``cache clear``), never misread.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Mapping

from ..compiler import Target

#: v1: unlabelled length-prefixed fields, umask-mode files.
#: v2: labelled fields under a domain tag; 0600/0700 files (see docs/jit.md, "Trust").
SCHEMA_VERSION = 2

#: The on-disk format version: the ``v<N>/`` directory, the bundle's ``cache_format``.
FORMAT_VERSION = SCHEMA_VERSION

_DOMAIN = b"tropical_gemm.jit.cache"


def hash_fields(*fields: tuple[str, str]) -> str:
    """SHA-256 over ``(label, value)`` pairs, each part length-prefixed."""
    digest = hashlib.sha256()
    digest.update(_DOMAIN)
    digest.update(SCHEMA_VERSION.to_bytes(4, "little"))
    for label, value in fields:
        for part in (label.encode("utf-8"), value.encode("utf-8")):
            digest.update(len(part).to_bytes(8, "little"))
            digest.update(part)
    return digest.hexdigest()


def version_text(version: tuple[int, int]) -> str:
    return f"{version[0]}.{version[1]}"


def full_key(portable_key: str, nvrtc_version: str) -> str:
    """The portable key bound to one NVRTC version: what an entry's metadata records and is checked against."""
    return hash_fields(("portable_key", portable_key), ("nvrtc_version", nvrtc_version))


def entry_stem(name: str, portable_key: str, nvrtc_version: str) -> str:
    return f"{name}-{portable_key[:16]}-nvrtc{nvrtc_version}"


def payload_suffix(target_tag: str) -> str:
    return ".cubin" if target_tag.startswith("sm_") else ".ptx"


@dataclass(frozen=True)
class BuildRequest:
    """Everything that determines one binary, and so one cache entry."""

    name: str  # the extern "C" entry point
    source: str
    target: Target
    # None for a probe: "this program from an allowed NVRTC", which a warm
    # start uses so that it need not load the NVRTC library.
    nvrtc_version: tuple[int, int] | None
    package_version: str
    spec: Mapping[str, Any] | None = field(default=None, compare=False)
    #: Options of this kernel beyond the target's (see ``source.kernel_options``).
    extra_options: tuple[str, ...] = ()

    @property
    def options(self) -> tuple[str, ...]:
        """The full NVRTC option list, as compiled and as hashed."""
        return self.target.options + self.extra_options

    @cached_property
    def portable_key(self) -> str:
        """The key without the NVRTC version: equal for the same program built by any NVRTC."""
        return hash_fields(
            ("package_version", self.package_version), ("entry", self.name), ("source", self.source),
            ("options", "\0".join(self.options)), ("target", self.target.tag),
        )

    @cached_property
    def key(self) -> str:
        """SHA-256 over schema version, package version, entry, source, options, arch and NVRTC version."""
        return full_key(self.portable_key, version_text(self.nvrtc_version))  # type: ignore[arg-type]

    @property
    def stem(self) -> str:
        return entry_stem(self.name, self.portable_key, version_text(self.nvrtc_version))  # type: ignore[arg-type]
