"""The hostile bundles of issue 35, built in a second each: small files that unpack to gigabytes.

A ``.tar.gz`` may hold several gzip members back to back, and its reader
unpacks them as one stream; so a run of zeros is one compressed mebibyte of
zeros repeated, and a bundle of gigabytes costs no time to write.
"""

from __future__ import annotations

import gzip
import json
import tarfile
from pathlib import Path

MIB = 2**20
_ZERO_MIB = gzip.compress(b"\0" * MIB, 9)
STEM = "v2/sm_90/tg_k{}-0123456789abcdef-nvrtc13.5"
MANIFEST_NAME = "tropical-gemm-bundle.json"


def _header(name: str, size: int, kind: bytes = tarfile.REGTYPE) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.type = size, kind
    return info.tobuf(tarfile.USTAR_FORMAT)


def _padding(size: int) -> bytes:
    return b"\0" * (-size % tarfile.BLOCKSIZE)


def _zeros(size: int) -> bytes:
    """``size`` zero bytes (a whole number of MiB, plus the tar padding), compressed."""
    assert size % MIB == 0
    return _ZERO_MIB * (size // MIB)


def _member(name: str, data: bytes) -> bytes:
    return gzip.compress(_header(name, len(data)) + data + _padding(len(data)), 1)


def _manifest(entries: list[tuple[str, int]]) -> bytes:
    records = [{"metadata": STEM.format(i) + ".json", "payload": STEM.format(i) + ".cubin", "sha256": "0" * 64,
                "size": size} for i, (_, size) in enumerate(entries)]
    data = json.dumps({"bundle_format": 1, "cache_format": 2, "entries": records}).encode()
    return _member(MANIFEST_NAME, data)


_END = gzip.compress(b"\0" * (2 * tarfile.BLOCKSIZE))


def extended_header_bomb(path: Path, kind: bytes, size: int = 300 * MIB) -> Path:
    """A pax header (``kind`` ``x``) or a GNU long name (``L``) of ``size`` bytes, then a small member."""
    body = gzip.compress(_header("././@Header", size, kind)) + _zeros(size)
    path.write_bytes(body + _member(STEM.format(0) + ".json", b"{}") + _END)
    return path


def big_members(path: Path, count: int = 8, size: int = 256 * MIB) -> Path:
    """A manifest listing ``count`` binaries of ``size`` bytes, then those binaries (zeros)."""
    parts = [_manifest([(STEM.format(i), size) for i in range(count)])]
    for i in range(count):
        parts += [gzip.compress(_header(STEM.format(i) + ".cubin", size)), _zeros(size)]
    path.write_bytes(b"".join(parts) + _END)
    return path


def many_members(path: Path, count: int = 200_000) -> Path:
    """A manifest listing one entry, then ``count`` one-byte members."""
    template, block = _header(STEM.format(0) + ".json", 1), bytearray()
    for i in range(count):  # tobuf() per member would take half a minute: patch the name and checksum
        header = bytearray(template)
        header[0:100] = (STEM.format(i) + ".json").encode().ljust(100, b"\0")
        header[148:156] = b" " * 8
        header[148:155] = b"%06o\0" % sum(header)
        block += header + b"{" + _padding(1)
    path.write_bytes(_manifest([(STEM.format(0), 1)]) + gzip.compress(bytes(block), 1) + _END)
    return path


def deep_manifest(path: Path, depth: int = 5000) -> Path:
    path.write_bytes(_member(MANIFEST_NAME, b"[" * depth + b"]" * depth) + _END)
    return path
