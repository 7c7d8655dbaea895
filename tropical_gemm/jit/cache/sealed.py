"""Sealed files: stored with the SHA-256 of their contents, read back only if it still matches.

For cache files whose format runs code when loaded (numba's pickled index
and object files): the bytes handed to the loader are the bytes that were
read and checked, never the path re-opened.  A file without our seal (one
numba wrote by itself, one copied in, a pickle planted by hand) or whose
contents no longer match it is refused unread by the loader.

The seal proves that the file is the one stored, not who stored it: that
rests on the owner, mode and directory checks of :mod:`.files`, which a
sealed read applies too (it is a :func:`~.files.read_capped`).

Layout: one header line, ``tropical-gemm sealed sha256:<64 hex> size:<n>``,
then the ``n`` bytes.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from .files import Trust, UntrustedFile, atomic_write, read_capped

_HEADER = re.compile(rb"tropical-gemm sealed sha256:([0-9a-f]{64}) size:([0-9]{1,12})\n")
#: The most a header line can take (its digits are bounded by the pattern).
HEADER_BYTES = 128


def seal(data: bytes) -> bytes:
    """``data`` behind its header line."""
    return b"tropical-gemm sealed sha256:%s size:%d\n" % (hashlib.sha256(data).hexdigest().encode(), len(data)) + data


def unseal(raw: bytes, path: Path) -> bytes:
    """The contents of a sealed file's bytes ``raw``; :class:`UntrustedFile` naming ``path`` if they do not match."""
    header = _HEADER.match(raw, 0, HEADER_BYTES)
    if header is None:
        raise UntrustedFile(path, "carries no seal (a digest written when it was stored), so it is not ours")
    data = raw[header.end():]
    if len(data) != int(header.group(2)) or hashlib.sha256(data).hexdigest().encode() != header.group(1):
        raise UntrustedFile(path, "does not match the digest written when it was stored")
    return data


def write_sealed(path: Path, data: bytes, trust: Trust) -> None:
    """Store ``data`` at ``path`` with its seal (atomically, with the cache's exact mode)."""
    atomic_write(path, seal(data), trust)


def read_sealed(path: Path, cap: int, trust: Trust) -> bytes:
    """The contents stored at ``path`` by :func:`write_sealed`, at most ``cap`` bytes of them.

    Raises ``FileNotFoundError`` when absent, and :class:`UntrustedFile`
    when the file is not a trusted regular file, is too large, or does not
    match its seal.
    """
    return unseal(read_capped(path, cap + HEADER_BYTES, trust), path)
