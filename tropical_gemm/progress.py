"""A one-line progress bar for long CLI commands (``warmup``, ``bench``).

It draws on stderr and only when stderr is a terminal, so piped output,
logs and ``--json`` on stdout stay clean.
"""

from __future__ import annotations

from typing import Any


class ProgressBar:
    """``[#####.....] 12/48 label`` redrawn in place on a terminal, nothing otherwise."""

    WIDTH = 30

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._live = bool(getattr(stream, "isatty", lambda: False)())
        self._drawn = False

    def update(self, done: int, total: int, label: str) -> None:
        """Show that ``done`` of ``total`` steps are finished, the last being ``label``."""
        if not self._live:
            return
        filled = self.WIDTH * done // max(total, 1)
        line = f"[{'#' * filled}{'.' * (self.WIDTH - filled)}] {done}/{total} {label}"
        self._stream.write("\r\x1b[2K" + line)
        self._stream.flush()
        self._drawn = True

    def finish(self) -> None:
        """End the bar's line, so whatever is printed next starts on a fresh one."""
        if self._drawn:
            self._stream.write("\n")
            self._stream.flush()
