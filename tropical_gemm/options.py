"""Checks of command-line option values, shared by the CLI and the benchmark's arguments."""

from __future__ import annotations

import argparse
from typing import Callable


def checked_number(text: str, convert: Callable[[str], float], minimum: float, what: str) -> float:
    """``convert(text)`` for an option's value, or argparse's error saying what the option takes.

    ``convert`` raises ``ValueError`` for text that is no number; a number
    below ``minimum`` is refused too.
    """
    try:
        value = convert(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not {what}: {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"{what} must be at least {minimum}, got {text!r}")
    return value
