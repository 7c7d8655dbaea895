"""A user's process lifecycle without a GPU: start compiles, exit at once, run again (issue 29).

Every case runs real fresh interpreters through the real tiering code, the
real NVRTC (which compiles for sm_90 with no GPU) and the real disk cache;
only loading into a GPU is a recording.  The process under test exits while
its background compiles are under way, in each way a script can end, and
must end with its own status, print nothing but its own output, and leave
its kernels on disk for the next process, which then compiles nothing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from jit_helpers import REPO, cache_files, compile_log, last_json_line, run_python, slow_workers

pytestmark = [pytest.mark.nvrtc, pytest.mark.tiered]

#: Real tuned kernels of one square product with argmax and its backward: what a torch forward prefetches.
SPECS = """[make_spec("forward", "max_plus", "float32", tile="square"),
            make_spec("argmax_resolve", "max_plus", "float32"), make_spec("backward", "max_plus", "float32")]"""

#: A script's first call, as the engine makes it: background compiles of SPECS, then ``{ending}``.
SCRIPT = """
    import json, sys, time
    from jit_helpers import RecordingLoader
    from tropical_gemm.jit import Registry, make_spec, resolve_target
    from tropical_gemm.jit.tiering import Tiers
    registry = Registry(loader=RecordingLoader(), target_for_device=lambda device: resolve_target("sm_90"))
    tiers = Tiers(registry); tiers.set_enabled(True)
    specs = {specs}
    served_baseline = [tiers.serve_baseline(spec, 0) for spec in specs]
    print(json.dumps({{"served_baseline": served_baseline, "compiled": registry.stats()["compiled"],
                      "background_compiles": tiers.stats()["background_compiles"]}}), flush=True)
    {ending}
"""


def script(ending: str = "") -> str:
    return textwrap.dedent(SCRIPT).format(specs=SPECS, ending=ending)


#: Ctrl-C as a terminal delivers it to a Python it started: a test runner started in the background by a
#: non-interactive shell ignores SIGINT, and a child inherits that (Python then installs no handler).
TERMINAL_CTRL_C = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"


def start(code: str, env: dict[str, str], *, session: bool = False) -> subprocess.Popen:
    """A fresh interpreter running ``code`` with the test's environment, as ``run_python`` makes it."""
    paths = [str(REPO / "tests"), str(REPO), os.environ.get("PYTHONPATH", "")]
    full_env = {**os.environ, **env, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    return subprocess.Popen([sys.executable, "-c", TERMINAL_CTRL_C + code], env=full_env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=session)


def cubins(root: Path) -> int:
    return len(cache_files(root, ".cubin"))


def wait_for_cubins(root: Path, count: int, timeout: float = 120) -> int:
    deadline = time.monotonic() + timeout
    while cubins(root) < count and time.monotonic() < deadline:
        time.sleep(0.1)
    return cubins(root)


def second_run(root: Path) -> dict:
    """A fresh process on the cache the first one left: every kernel served tuned, nothing compiled."""
    result = run_python(script(), {"TROPICAL_GEMM_CACHE_DIR": str(root)})
    assert (result.returncode, result.stderr) == (0, "")
    return last_json_line(result.stdout)


def test_twenty_processes_exiting_during_their_compiles_exit_cleanly_and_compile_each_kernel_once(
        cache_root, monkeypatch, tmp_path):
    log = tmp_path / "compiles.log"
    slow_workers(monkeypatch, 0, log)
    processes = [start(script(), {"TROPICAL_GEMM_CACHE_DIR": str(cache_root)}) for _ in range(20)]
    results = [(p.wait(240), *p.communicate()) for p in processes]
    for status, out, err in results:
        assert (status, err) == (0, "")
        # a process that starts after another's worker stored a kernel is served it tuned at once
        assert len(last_json_line(out)["served_baseline"]) == 3
    assert cubins(cache_root) == 3  # the exit waited for the workers: all on disk now
    names = [name for name, *_ in compile_log(log)]
    assert sorted(names) == sorted(set(names)) and len(names) == 3  # each compiled once, by one worker
    again = second_run(cache_root)
    assert again == {"served_baseline": [False, False, False], "compiled": 0, "background_compiles": 0}


@pytest.mark.parametrize("ending, status, stderr_end", [
    ("", 0, ""),
    ("sys.exit(3)", 3, ""),
    ("raise ValueError('the script failed')", 1, "ValueError: the script failed\n"),
])
def test_every_way_of_ending_keeps_its_status_and_leaves_the_kernels_on_disk(cache_root, ending, status,
                                                                            stderr_end):
    result = run_python(script(ending), {"TROPICAL_GEMM_CACHE_DIR": str(cache_root)})
    assert result.returncode == status
    assert result.stderr.endswith(stderr_end) and ("Traceback" in result.stderr) == bool(stderr_end)
    assert cubins(cache_root) == 3
    assert second_run(cache_root)["compiled"] == 0


def plain_python_status_on_ctrl_c() -> int:
    """What Python itself ends with on an uncaught Ctrl-C (it re-raises SIGINT): the status to keep."""
    child = subprocess.Popen([sys.executable, "-c", TERMINAL_CTRL_C + "import time; print('ready', flush=True); "
                              "time.sleep(30)"],
                             stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    child.stdout.readline()
    os.killpg(child.pid, signal.SIGINT)
    return child.wait(30)


def test_ctrl_c_during_a_background_compile_ends_as_python_does_and_the_compile_lands(cache_root, monkeypatch):
    slow_workers(monkeypatch, 2)
    # Ctrl-C reaches the terminal's whole process group: the script's own session stands in for it.
    child = start(script("time.sleep(60)"), {"TROPICAL_GEMM_CACHE_DIR": str(cache_root)}, session=True)
    child.stdout.readline()
    os.killpg(child.pid, signal.SIGINT)
    status = child.wait(120)
    err = child.stderr.read()
    assert status == plain_python_status_on_ctrl_c()
    assert err.rstrip().endswith("KeyboardInterrupt") and "Fatal" not in err and "Exception ignored" not in err
    assert cubins(cache_root) == 3  # the workers are in a session of their own; exit waited for them


def test_ctrl_c_during_the_exit_wait_ends_it_quietly(cache_root, monkeypatch):
    slow_workers(monkeypatch, 4)
    child = start(script(), {"TROPICAL_GEMM_CACHE_DIR": str(cache_root)}, session=True)
    child.stdout.readline()
    time.sleep(0.5)  # the script has returned; its exit waits for the workers
    os.killpg(child.pid, signal.SIGINT)
    assert (child.wait(60), child.stderr.read()) == (0, "")
    assert wait_for_cubins(cache_root, 3) == 3  # the workers finished on their own


def test_sigterm_kills_the_script_not_its_compiles(cache_root, monkeypatch):
    slow_workers(monkeypatch, 1)
    child = start(script("time.sleep(60)"), {"TROPICAL_GEMM_CACHE_DIR": str(cache_root)})
    child.stdout.readline()
    child.terminate()
    assert (child.wait(60), child.stderr.read()) == (-signal.SIGTERM, "")
    assert wait_for_cubins(cache_root, 3) == 3
    assert second_run(cache_root)["compiled"] == 0


def test_exit_wait_off_exits_at_once_and_the_kernels_still_land(cache_root, monkeypatch):
    slow_workers(monkeypatch, 3)
    started = time.monotonic()
    result = run_python(script(), {"TROPICAL_GEMM_CACHE_DIR": str(cache_root), "TROPICAL_GEMM_EXIT_WAIT": "0"})
    assert (result.returncode, result.stderr) == (0, "")
    assert time.monotonic() - started < 3 + 2  # not the whole compile: the delay alone is 3 s a kernel
    assert cubins(cache_root) < 3
    assert wait_for_cubins(cache_root, 3) == 3


def test_a_bad_exit_wait_setting_is_named_not_a_traceback(cache_root):
    result = run_python(script(), {"TROPICAL_GEMM_CACHE_DIR": str(cache_root), "TROPICAL_GEMM_EXIT_WAIT": "soon"})
    assert result.returncode == 0
    assert result.stderr.startswith("tropical_gemm: TROPICAL_GEMM_EXIT_WAIT='soon'")
    assert "Traceback" not in result.stderr


def test_ctrl_c_during_a_foreground_compile_ends_as_python_does(cache_root):
    code = textwrap.dedent(f"""
        from jit_helpers import RecordingLoader
        from tropical_gemm.jit import Registry, make_spec, resolve_target
        registry = Registry(loader=RecordingLoader(), target_for_device=lambda device: resolve_target("sm_90"))
        print("compiling", flush=True)
        for spec in {SPECS} * 20:
            registry.build(spec, resolve_target("sm_90"))
    """)
    child = start(code, {"TROPICAL_GEMM_CACHE_DIR": str(cache_root)}, session=True)
    child.stdout.readline()
    time.sleep(0.3)  # inside NVRTC, most likely
    os.killpg(child.pid, signal.SIGINT)
    status, err = child.wait(120), child.stderr.read()
    assert status == plain_python_status_on_ctrl_c()
    assert err.rstrip().endswith("KeyboardInterrupt") and "Fatal" not in err


@pytest.mark.parametrize("exit_wait", ["", "0"])
def test_exiting_while_the_users_own_threads_compile_waits_for_them(cache_root, exit_wait):
    """A user's daemon threads inside NVRTC at exit: the interpreter waits for them, never unloads it under them.

    ``TROPICAL_GEMM_EXIT_WAIT=0`` abandons worker processes, which finish on their own; a compile in one
    of the process's own threads cannot, so it is waited for all the same.
    """
    code = textwrap.dedent("""
        import threading, time
        from tropical_gemm.jit import compile_spec, make_spec
        def compile_all(semiring):
            for kind in ("forward", "backward", "argmax_resolve"):
                compile_spec(make_spec(kind, semiring, "float32"), "sm_90")
        semirings = ("max_plus", "min_plus", "max_times", "max_min", "min_max")
        for semiring in semirings:  # distinct kernels: the threads are inside NVRTC together
            threading.Thread(target=compile_all, args=(semiring,), daemon=True).start()
        time.sleep(0.5)
        print("exiting", flush=True)
    """)
    env = {"TROPICAL_GEMM_CACHE_DIR": str(cache_root)}
    if exit_wait:
        env["TROPICAL_GEMM_EXIT_WAIT"] = exit_wait
    result = run_python(code, env)
    assert (result.returncode, result.stdout, result.stderr) == (0, "exiting\n", "")
    assert cubins(cache_root) >= 1  # the compiles inside NVRTC at exit finished; the threads' later ones never began
    again = run_python(code.replace("time.sleep(0.5)", "time.sleep(0)").replace(
        "daemon=True).start()", "daemon=False).start()").replace(
        'print("exiting", flush=True)', 'pass') + textwrap.dedent("""
        import atexit, json, tropical_gemm.jit as jit
        atexit.register(lambda: print(json.dumps(jit.stats()), flush=True))
    """), env)
    stats = last_json_line(again.stdout)  # a thread stopped while storing left a miss, never a bad entry
    assert (again.returncode, stats["compiled"] + stats["disk_hits"], stats["corrupt_replaced"]) == (0, 15, 0)
    assert stats["disk_hits"] >= 1


@pytest.mark.parametrize("exit_wait", ["", "0"])
def test_a_process_that_exits_without_reading_its_workers_results_leaves_no_folder_behind(
        cache_root, monkeypatch, tmp_path, exit_wait):
    """Each worker's job folder goes once both sides are done with it: waited for at exit, or abandoned."""
    slow_workers(monkeypatch, 0.5)
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {"TROPICAL_GEMM_CACHE_DIR": str(cache_root), "TMPDIR": str(temp), "TROPICAL_GEMM_EXIT_WAIT": exit_wait}
    result = run_python(script(), env)
    assert (result.returncode, result.stderr) == (0, "")
    assert wait_for_cubins(cache_root, 3) == 3
    deadline = time.monotonic() + 30
    while any(temp.iterdir()) and time.monotonic() < deadline:  # an abandoned worker removes its own
        time.sleep(0.1)
    assert sorted(p.name for p in temp.iterdir()) == []


def test_an_exit_handler_that_compiles_is_not_made_to_wait_for_itself(cache_root):
    """A handler registered before the import runs after ours: its compile goes ahead, never a hang."""
    code = textwrap.dedent("""
        import atexit
        def compile_at_exit():
            from tropical_gemm.jit import compile_spec, make_spec
            compile_spec(make_spec("forward", "min_plus", "float32"), "sm_90")
            print("compiled at exit", flush=True)
        atexit.register(compile_at_exit)
        from tropical_gemm.jit import compile_spec, make_spec
        compile_spec(make_spec("forward", "max_plus", "float32"), "sm_90")
    """)
    result = run_python(code, {"TROPICAL_GEMM_CACHE_DIR": str(cache_root)}, timeout=60)
    assert (result.returncode, result.stdout, result.stderr) == (0, "compiled at exit\n", "")
    assert cubins(cache_root) == 2


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork is POSIX-only")
def test_a_child_forked_while_a_thread_compiles_does_not_wait_at_exit_for_the_parents_compile(cache_root):
    code = textwrap.dedent("""
        import os, sys, threading, time
        from tropical_gemm.jit import compile_spec, make_spec
        from tropical_gemm.jit import compiler
        threading.Thread(target=compile_spec, args=(make_spec("forward", "max_plus", "float32", tile="square"),
                                                    "sm_90"), daemon=True).start()
        while compiler._nvrtc_running == 0:  # the parent's thread is inside NVRTC
            time.sleep(0.001)
        forked = time.monotonic()
        child = os.fork()
        if child == 0:
            sys.exit(0)
        _, status = os.waitpid(child, 0)
        print(f"child status {os.waitstatus_to_exitcode(status)} after {time.monotonic() - forked:.1f} s", flush=True)
    """)
    result = run_python(code, {"TROPICAL_GEMM_CACHE_DIR": str(cache_root), "TROPICAL_GEMM_EXIT_WAIT": "30"})
    assert (result.returncode, result.stderr) == (0, "")
    status, seconds = result.stdout.split()[2], float(result.stdout.split()[4])
    assert status == "0" and seconds < 10  # not the 30 s bound: the child has no compile of its own to wait for
