"""Background compiles in a child process, so that they outlive neither correctness nor the caller's exit.

Why a process and not a thread: an NVRTC compile cannot be stopped once it
has started.  A daemon thread still inside ``nvrtcCompileProgram`` when the
interpreter exits races the C library's exit handlers (NVRTC is unloaded
under it), and the process dies by SIGSEGV or SIGABRT after printing a
correct result.  A child process has its own address space: the caller
exits however it exits (return, ``sys.exit``, an exception, Ctrl-C,
SIGTERM) with its own status, and the child finishes the compiles it was
handed and stores them in the disk cache, behind the cache's file lock, for
the next process.  PyTorch Inductor keeps its compile workers apart from the
caller for the same reason.

* The child runs ``run_job(DIR)`` in a fresh interpreter, in a session of its own, so the terminal's Ctrl-C (sent to the caller's process
  group) does not cut a compile short.  It reads its job (the cache
  root and the build requests, sources included) from ``DIR/job.json`` and
  writes each binary and a ``results.json`` there; it never touches a GPU.
* At exit the caller waits for its unfinished workers: only the compiles
  already started, and at most ``TROPICAL_GEMM_EXIT_WAIT`` seconds (default
  60), so that a script run twice in a row finds its kernels on disk.
  ``TROPICAL_GEMM_EXIT_WAIT=0`` exits at once; the workers still finish
  and store their kernels, a moment later.
* The folder is removed by whichever side is done with it last: the caller
  once it has read the results, or, when the caller exits without reading
  them, the worker or the caller's exit (``_leave``), never neither.
* After ``os.fork()`` the child process forgets its parent's workers: they
  are not its children, and their results are the parent's to read.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from .cache import BuildOutcome, BuildRequest, CacheConfig, cache_for
from .compiler import Target, compile_program
from .exit_wait import exit_wait_seconds

JOB_FILE = "job.json"
RESULTS_FILE = "results.json"
#: Created by the first of the two sides (worker, exiting caller) to be done with the folder.
LEFT_FILE = "left"


class BackgroundCompileError(RuntimeError):
    """A compile in a worker process failed; the message carries the worker's exception type and text."""


# ----------------------------------------------------------------- the job on disk


def request_to_json(request: BuildRequest) -> dict[str, Any]:
    return {"name": request.name, "source": request.source, "target": list(request.target),
            "nvrtc_version": None if request.nvrtc_version is None else list(request.nvrtc_version),
            "package_version": request.package_version,
            "spec": None if request.spec is None else dict(request.spec),
            "extra_options": list(request.extra_options)}


def request_from_json(fields: dict[str, Any]) -> BuildRequest:
    version = fields["nvrtc_version"]
    return BuildRequest(name=fields["name"], source=fields["source"], target=Target(*fields["target"]),
                        nvrtc_version=None if version is None else tuple(version),
                        package_version=fields["package_version"], spec=fields["spec"],
                        extra_options=tuple(fields["extra_options"]))


def _outcome_to_json(outcome: BuildOutcome) -> dict[str, Any]:
    fields = outcome._asdict()
    del fields["binary"]
    fields["path"] = None if outcome.path is None else str(outcome.path)
    return fields


def _outcome_from_json(fields: dict[str, Any], binary: bytes) -> BuildOutcome:
    path = fields.pop("path")
    return BuildOutcome(binary=binary, path=None if path is None else Path(path), **fields)


# ------------------------------------------------------------------- the caller's side


class Worker:
    """One child process compiling some build requests; ``outcomes()`` once ``done()``."""

    def __init__(self, process: Any, directory: Path) -> None:
        self._process, self.directory = process, directory

    def done(self) -> bool:
        return self._process.poll() is not None

    def wait(self, timeout: "float | None" = None) -> bool:
        """Block until the worker has exited; False if ``timeout`` (s) ran out first."""
        import subprocess

        try:
            self._process.wait(timeout)
        except subprocess.TimeoutExpired:
            return False
        return True

    def outcomes(self) -> list[BuildOutcome]:
        """What the finished worker built, in request order; a failure raises ``BackgroundCompileError``."""
        try:
            return self._read_outcomes()
        finally:
            _remove(self.directory)
            self._forget()

    def abandon(self) -> None:
        """The caller exits without reading the results: the folder goes now if the worker is done, else with it."""
        if self.done() or not _leave(self.directory):
            _remove(self.directory)
        self._forget()

    def _forget(self) -> None:
        if self in _live:
            _live.remove(self)

    def _read_outcomes(self) -> list[BuildOutcome]:
        try:
            results = json.loads((self.directory / RESULTS_FILE).read_text())
        except (OSError, ValueError) as exc:
            raise BackgroundCompileError(
                f"the compile worker exited with status {self._process.returncode} and left no results ({exc}); "
                f"its stderr: {_tail(self.directory / 'stderr')}") from None
        if "error" in results:
            raise BackgroundCompileError(results["error"])
        return [_outcome_from_json(fields, (self.directory / f"{index}.bin").read_bytes())
                for index, fields in enumerate(results["outcomes"])]


def _tail(path: Path, limit: int = 2000) -> str:
    try:
        return path.read_text(errors="replace")[-limit:].strip() or "(empty)"
    except OSError:
        return "(none)"


def _leave(directory: Path) -> bool:
    """Say that one side is done with ``directory``; False when the other side had said so already.

    Creating a file is atomic: of the worker and the exiting caller, exactly
    one finds the other gone, and removes the folder.
    """
    try:
        os.close(os.open(directory / LEFT_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except OSError:  # the other side left first (the file exists), or the folder is gone already
        return False
    return True


def _remove(directory: Path) -> None:
    import shutil

    shutil.rmtree(directory, ignore_errors=True)


_live: list[Worker] = []

#: The worker's program.  Not ``-m`` this module: the package imports it first, and runpy would
#: run it twice.  The packages ``tropical_gemm`` and ``tropical_gemm.jit`` stand in as bare
#: namespaces (argv[2] and argv[3] are their folders), so that their ``__init__`` does not run:
#: a worker needs the compiler and the cache, not numpy and the API, and the start-up it saves is
#: time a call may spend waiting for a kernel the worker compiles.
_WORKER_MAIN = """
import sys, types
for name, folder in (("tropical_gemm", sys.argv[2]), ("tropical_gemm.jit", sys.argv[3])):
    if name not in sys.modules:
        package = sys.modules[name] = types.ModuleType(name)
        package.__path__ = [folder]
from tropical_gemm.jit.compile_worker import run_job
run_job(sys.argv[1])
"""


def start(requests: Sequence[BuildRequest], cache_root: Path | None) -> Worker:
    """Compile ``requests`` into the cache at ``cache_root`` (None: no disk cache) in a new worker process."""
    import subprocess
    import tempfile

    directory = Path(tempfile.mkdtemp(prefix="tropical_gemm-compile-"))
    try:
        job = {"parent": os.getpid(), "cache_root": None if cache_root is None else str(cache_root),
               "requests": [request_to_json(r) for r in requests]}
        (directory / JOB_FILE).write_text(json.dumps(job))
        with open(directory / "stderr", "wb") as stderr:
            jit_folder = Path(__file__).resolve().parent
            process = subprocess.Popen([sys.executable, "-c", _WORKER_MAIN, str(directory), str(jit_folder.parent),
                                        str(jit_folder)], stdin=subprocess.DEVNULL,
                                       stdout=subprocess.DEVNULL, stderr=stderr, close_fds=True,
                                       start_new_session=True)
    except BaseException:  # no worker will ever read or remove the folder
        _remove(directory)
        raise
    worker = Worker(process, directory)
    global _exit_wait_registered
    if not _exit_wait_registered:
        import atexit

        atexit.register(wait_at_exit)
        _exit_wait_registered = True
    _live.append(worker)
    return worker


_exit_wait_registered = False


def wait_at_exit() -> None:
    """Let the compiles this process started finish, so that their kernels are on disk for the next one.

    Bounded by the workers themselves and by ``TROPICAL_GEMM_EXIT_WAIT``; a
    Ctrl-C during the wait ends it quietly (the workers finish on their own).
    Nobody reads the results now: each worker's folder is abandoned.
    """
    try:
        try:
            budget = exit_wait_seconds()
        except ValueError as exc:
            print(f"tropical_gemm: {exc}; not waiting for background compiles", file=sys.stderr)
            return
        deadline = time.monotonic() + budget
        for worker in list(_live):
            if not worker.wait(max(0.0, deadline - time.monotonic())):
                return
    except KeyboardInterrupt:
        return
    finally:
        for worker in list(_live):
            worker.abandon()


def _forget_in_child() -> None:
    """After ``os.fork()``: the parent's workers are not this process's children."""
    _live.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_in_child)


# -------------------------------------------------------------------- the worker's side


def run_job(folder: str) -> None:
    """Build every request of the job in ``folder`` through the disk cache; write the binaries and results."""
    directory = Path(folder)
    job = json.loads((directory / JOB_FILE).read_text())
    try:
        _build_all(directory, job)
    finally:
        # nobody reads the results of a caller that has gone (killed), or that left them at its exit
        if os.getppid() != job["parent"] or not _leave(directory):
            _remove(directory)


def _build_all(directory: Path, job: dict[str, Any]) -> None:
    root = job["cache_root"]
    cache = cache_for(CacheConfig.from_env()._replace(root=None if root is None else Path(root)))
    outcomes: list[dict[str, Any]] = []
    results: dict[str, Any] = {"outcomes": outcomes}
    for index, fields in enumerate(job["requests"]):
        request = request_from_json(fields)
        try:
            outcome = cache.get_or_build(request, lambda r=request: compile_program(
                r.source, r.name, r.target, r.extra_options))
        # Whatever went wrong belongs to the caller, who logs it and keeps its baseline kernel.
        except Exception as exc:
            results = {"error": f"{request.name}: {type(exc).__name__}: {exc}"}
            break
        (directory / f"{index}.bin").write_bytes(outcome.binary)
        outcomes.append(_outcome_to_json(outcome))
    scratch = directory / (RESULTS_FILE + ".part")
    scratch.write_text(json.dumps(results))
    os.replace(scratch, directory / RESULTS_FILE)
