"""The JIT's logger, ``tropical_gemm.jit``, without importing ``logging`` on the warm path.

A warm first call logs its disk hit at INFO; importing ``logging`` for that
would cost every fresh process its import time.  Until something imports
``logging``, nothing can have configured a handler or a level, so the
default (WARNING on the root logger) would drop INFO and DEBUG records:
those are skipped while ``logging`` is absent, and WARNING and above import
it and log as usual.
"""

from __future__ import annotations

import sys
from typing import Any

NAME = "tropical_gemm.jit"


def _logger(imported_only: bool) -> Any:
    """The ``logging`` logger; None when ``imported_only`` and ``logging`` was never imported."""
    if imported_only and "logging" not in sys.modules:
        return None
    import logging
    return logging.getLogger(NAME)


def info(msg: str, *args: object) -> None:
    """Log at INFO, if ``logging`` is loaded (so could be configured to show it)."""
    logger = _logger(imported_only=True)
    if logger is not None:
        logger.info(msg, *args, stacklevel=2)


def warning(msg: str, *args: object) -> None:
    """Log at WARNING, importing ``logging`` if needed (its last-resort handler shows it)."""
    _logger(imported_only=False).warning(msg, *args, stacklevel=2)
