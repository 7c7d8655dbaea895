"""Test support: compile workers started with this folder on PYTHONPATH compile slowly, and log each compile.

``TG_TEST_COMPILE_DELAY`` (seconds) is slept before each NVRTC run in a
worker; ``TG_TEST_COMPILE_LOG`` (a file) gets a line per compile: the
kernel's name, the worker's pid, and when it started and ended.  Only the
worker's ``compile_program`` is wrapped, so the parent's own compiles (the
baseline kernel) are neither slowed nor logged.
"""

import os
import time

_DELAY = float(os.environ.get("TG_TEST_COMPILE_DELAY") or 0)
_LOG = os.environ.get("TG_TEST_COMPILE_LOG")

if _DELAY or _LOG:
    from tropical_gemm.jit import compile_worker

    _compile = compile_worker.compile_program

    def _slow_logged_compile(source, name, *args, **kwargs):
        started = time.time()
        time.sleep(_DELAY)
        kernel = _compile(source, name, *args, **kwargs)
        if _LOG:
            with open(_LOG, "a") as log:
                log.write(f"{name} {os.getpid()} {started:.6f} {time.time():.6f}\n")
        return kernel

    compile_worker.compile_program = _slow_logged_compile
