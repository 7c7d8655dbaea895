"""How long a process waits at exit for the compiles it started: one rule, read by both kinds of compile.

Background compiles run in worker processes (``compile_worker``) and a user's own threads may call
the compiler directly (``compiler``).  Both must be finished, or knowingly abandoned, before the
interpreter exits; this module is the one place that says for how long.  It imports nothing of the
package so that either side may import it without a circle.
"""

from __future__ import annotations

import os

#: Environment switch: seconds a process waits at exit for its background compiles ("0": none).
ENV_EXIT_WAIT = "TROPICAL_GEMM_EXIT_WAIT"

#: The default bound of that wait: a kernel compiles in about a second, so a minute means NVRTC is stuck.
DEFAULT_EXIT_WAIT = 60.0


def exit_wait_seconds() -> float:
    """How long exit waits for unfinished compiles: ``TROPICAL_GEMM_EXIT_WAIT`` seconds, or the default.

    Examples:
        >>> import os
        >>> from tropical_gemm.jit.exit_wait import exit_wait_seconds
        >>> os.environ["TROPICAL_GEMM_EXIT_WAIT"] = "0"; exit_wait_seconds()
        0.0
        >>> del os.environ["TROPICAL_GEMM_EXIT_WAIT"]; exit_wait_seconds()
        60.0
    """
    text = os.environ.get(ENV_EXIT_WAIT, "").strip()
    if not text:
        return DEFAULT_EXIT_WAIT
    try:
        seconds = float(text)
    except ValueError:
        seconds = -1.0
    if not 0 <= seconds < float("inf"):
        raise ValueError(f"{ENV_EXIT_WAIT}={text!r}: expected a number of seconds, 0 or more "
                         "(0 exits at once and lets background compiles finish on their own)")
    return seconds
