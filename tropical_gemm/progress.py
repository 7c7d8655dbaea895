"""Progress of long CLI commands (``warmup``, ``bench``), drawn by tqdm on stderr.

On a terminal it is tqdm's bar, redrawn in place, with the rate and the time
left.  Elsewhere (a CI log, ``2>log``) a bar would be one endless line of
carriage returns, and silence looks like a hang, so it writes one plain line
of the same figures every ``interval`` seconds, and at the end.  stdout is
never touched, so ``--json`` stays clean.
"""

from __future__ import annotations

import time
from typing import Any

from tqdm import tqdm

#: Seconds between two lines when the stream is not a terminal.
LOG_INTERVAL = 5.0


class ProgressBar:
    """``done`` of ``total`` steps with their rate and time left: tqdm's bar on a terminal, a line now and then otherwise."""

    def __init__(self, stream: Any, *, unit: str = "step", description: str = "", interval: float = LOG_INTERVAL,
                 clock: Any = time.monotonic) -> None:
        self._stream = stream
        self._live = bool(getattr(stream, "isatty", lambda: False)())
        self._unit, self._description, self._interval, self._clock = unit, description, interval, clock
        self._bar: "tqdm | None" = None
        self._started = clock()
        self._last_line = float("-inf")
        self._pending: "tuple[int, int, str] | None" = None

    def update(self, done: int, total: int, label: str) -> None:
        """Show that ``done`` of ``total`` steps are finished, the last being ``label``."""
        now = self._clock()
        if self._live:
            self._draw(done, total, label)
        elif now - self._last_line >= self._interval or done >= total:
            self._line(done, total, label, now)
        else:
            self._pending = (done, total, label)

    def finish(self) -> None:
        """End the bar (or write the last line not yet written), so what is printed next starts on a fresh line."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        elif self._pending is not None:
            self._line(*self._pending, self._clock())

    def _draw(self, done: int, total: int, label: str) -> None:
        if self._bar is None:
            self._bar = tqdm(total=total, desc=self._description or None, unit=self._unit, file=self._stream,
                             dynamic_ncols=True, leave=True, mininterval=0.1)
        self._bar.total = total
        self._bar.set_postfix_str(label, refresh=False)
        self._bar.update(done - self._bar.n)

    def _line(self, done: int, total: int, label: str, now: float) -> None:
        meter = tqdm.format_meter(done, total, now - self._started, prefix=self._description,
                                  unit=self._unit, ncols=0)
        self._stream.write(f"{meter} {label}\n")
        self._stream.flush()
        self._last_line = now
        self._pending = None
