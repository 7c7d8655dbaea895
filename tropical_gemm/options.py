"""Checks of command-line option values, shared by the CLI, the demo and the benchmark's arguments.

Every numeric option goes through ``checked_number``: infinity, NaN,
overflow and values outside the option's range are argparse errors that name
the option, and only ASCII digits count (``int`` alone reads other scripts'
digits too).
"""

from __future__ import annotations

import argparse
import math
from typing import Callable

from .jit.cache.config import comma_list

def checked_number(text: str, convert: Callable[[str], float], minimum: float, what: str,
                   maximum: float | None = None) -> float:
    """``convert(text)`` for an option's value, or argparse's error saying what the option takes.

    ``convert`` raises ``ValueError`` (or ``OverflowError``) for text that is
    no number; infinity, NaN and a number outside ``minimum``..``maximum``
    are refused too.  argparse puts the option's name before the message.
    """
    shown = repr(text if len(text) <= 40 else text[:30] + "...")
    try:
        value = convert(text)
    except (ValueError, OverflowError):
        raise argparse.ArgumentTypeError(f"not {what}: {shown}") from None
    if isinstance(value, float) and not math.isfinite(value):  # an int is finite (and may exceed a float)
        raise argparse.ArgumentTypeError(f"{what} must be a finite number, got {shown}")
    if value < minimum:
        raise argparse.ArgumentTypeError(f"{what} must be at least {minimum}, got {shown}")
    if maximum is not None and value > maximum:
        raise argparse.ArgumentTypeError(f"{what} must be at most {maximum}, got {shown}")
    return value


def whole_number(minimum: int, maximum: int | None = None, what: str = "a whole number") -> Callable[[str], int]:
    """An argparse ``type`` for an integer option within ``minimum``..``maximum`` (ASCII digits only)."""
    def parse(text: str) -> int:
        return int(checked_number(text, ascii_int, minimum, what, maximum))

    return parse


def real_number(minimum: float, what: str = "a number") -> Callable[[str], float]:
    """An argparse ``type`` for a finite float option of at least ``minimum``."""
    def parse(text: str) -> float:
        return checked_number(text, ascii_float, minimum, what)

    return parse


def ascii_int(text: str) -> int:
    if not text.isascii():  # int() also reads "٣" as 3
        raise ValueError(text)
    return int(text)


def ascii_float(text: str) -> float:
    if not text.isascii():
        raise ValueError(text)
    return float(text)


def arch_list(text: str) -> str:
    """An argparse ``type`` for ``--arch``: each comma-separated item must read as an architecture."""
    from .jit.compiler import UnsupportedArchError, parse_arch

    for item in comma_list(text) or [text]:
        try:
            parse_arch(item)
        except UnsupportedArchError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
    return text


_SIZE_UNITS = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4}


#: The largest size an option takes: what a signed 64-bit file offset can count.
MAX_SIZE = 2**63 - 1


def _bytes(text: str) -> float:
    """``"1.5G"`` as bytes; ``ValueError`` for text that is no size."""
    cleaned = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = cleaned[-1:] if cleaned[-1:] in _SIZE_UNITS else ""
    return ascii_float(cleaned[:len(cleaned) - len(unit)]) * _SIZE_UNITS[unit]


def parse_size(text: str) -> int:
    """Bytes from ``"1048576"``, ``"500K"``, ``"20M"``, ``"1.5G"`` (powers of 1024)."""
    return int(checked_number(text, _bytes, 0, "a size (bytes, or with a K/M/G/T suffix)", MAX_SIZE))
