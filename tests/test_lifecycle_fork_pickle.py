"""fork and pickling in a user's processes (issue 29): workers that inherit or receive the package keep working.

Dask, joblib/loky, Ray and multiprocessing's spawn pickle user functions
that name the package; fork copies a process with whatever state it had,
including background compiles and locks.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import time

import numpy as np
import pytest

import lifecycle_tasks
import tropical_gemm as tg
from jit_helpers import cache_files, run_python, slow_workers
from tropical_gemm.jit import driver

cloudpickle = pytest.importorskip("cloudpickle")


def run_forked(task) -> int:
    """``task()`` in a child made by ``os.fork()``; its exit status (1 when it raised or returned falsy)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover (the child)
        try:
            os._exit(0 if task() else 1)
        except BaseException:
            os._exit(1)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def same_as_naive() -> bool:
    ours, naive = lifecycle_tasks.max_plus_of_seed(7)
    return bool(np.array_equal(ours, naive))


@pytest.mark.parametrize("call_first", [False, True], ids=["after import", "after a CPU call"])
def test_a_forked_child_computes(call_first):
    if call_first:
        assert same_as_naive()
    assert run_forked(same_as_naive) == 0


def test_a_fork_pool_computes_after_a_cpu_call():
    assert same_as_naive()
    with multiprocessing.get_context("fork").Pool(2) as pool:
        for ours, naive in pool.map(lifecycle_tasks.max_plus_of_seed, range(4)):
            np.testing.assert_array_equal(ours, naive)


def test_a_spawn_pool_imports_the_package_by_name():
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        ours, naive = pool.apply(lifecycle_tasks.max_plus_of_seed, (3,))
    np.testing.assert_array_equal(ours, naive)


@pytest.mark.nvrtc
@pytest.mark.tiered
def test_a_forked_child_forgets_its_parents_background_compiles(cache_root, monkeypatch):
    """The child neither sees the parent's compile as its own nor waits for it at exit; the parent's still lands."""
    slow_workers(monkeypatch, 3)
    code = """
        import os, sys, time
        from jit_helpers import gpu_free_registry
        from tropical_gemm.jit import make_spec
        from tropical_gemm.jit.tiering import Tiers
        tiers = Tiers(gpu_free_registry()); tiers.set_enabled(True)
        assert tiers.serve_baseline(make_spec("backward", "max_plus", "float32"), 0)
        pid = os.fork()
        if pid == 0:
            started = time.monotonic()
            pending = tiers.stats()["pending_compiles"]
            sys.exit(0 if pending == 0 else 5)   # a normal exit: atexit runs, and must not wait
        start = time.monotonic()
        status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
        print(status, round(time.monotonic() - start, 1))
    """
    result = run_python(code, {"TROPICAL_GEMM_CACHE_DIR": str(cache_root)})
    assert (result.returncode, result.stderr) == (0, "")
    status, child_seconds = result.stdout.split()
    assert status == "0" and float(child_seconds) < 2.5  # the compile takes 3 s: the child did not wait
    assert len(cache_files(cache_root, ".cubin")) == 1  # the parent's exit waited for its own worker


def test_cuda_in_a_forked_child_is_a_clear_error(monkeypatch):
    """Where the parent initialised CUDA, the child's first driver call raises instead of hanging."""
    monkeypatch.setattr(driver, "_initialised_in", os.getpid() + 1)  # as if the parent had: we are its child
    with pytest.raises(driver.CudaAfterForkError, match="fork.*'spawn'"):
        driver.library()


def test_the_package_pickles_by_reference():
    assert pickle.loads(pickle.dumps(tg)) is tg
    assert cloudpickle.loads(cloudpickle.dumps(tg)) is tg


def test_closures_naming_the_package_run_in_a_fresh_process(tmp_path):
    """cloudpickle (as Dask, loky and Ray use it) of closures over tg.matmul, tg.einsum and tropical_gemm.torch."""
    torch = pytest.importorskip("torch")
    import tropical_gemm.torch as torch_front
    a = np.random.default_rng(1).standard_normal((4, 6))

    def closure():
        return (tg.matmul(a, a.T, "max_plus"), tg.einsum("ij,kj->ik", a, a),
                torch_front.tropical_matmul(torch.from_numpy(a), torch.from_numpy(a.T)).numpy())

    (tmp_path / "closure.pkl").write_bytes(cloudpickle.dumps(closure))
    code = f"""
        import pickle, numpy as np
        results = pickle.loads(open({str(tmp_path / "closure.pkl")!r}, "rb").read())()
        print(all(np.array_equal(results[0], r) for r in results))
    """
    result = run_python(code, {})
    assert (result.returncode, result.stdout.strip()) == (0, "True"), result.stderr
    naive = (a[:, None, :] + a[None, :, :]).max(axis=2)
    np.testing.assert_array_equal(closure()[0], naive)


def test_a_closure_runs_on_a_local_process_cluster():
    distributed = pytest.importorskip("distributed")
    a = np.random.default_rng(2).standard_normal((8, 5))
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None,
                                  silence_logs=40) as cluster, distributed.Client(cluster) as client:
        started = time.monotonic()
        got = client.submit(lambda x: tg.matmul(x, x.T, "min_plus"), a).result(timeout=120)
        assert time.monotonic() - started < 120
    np.testing.assert_array_equal(got, (a[:, None, :] + a[None, :, :]).min(axis=2))


@pytest.mark.gpu
def test_a_child_forked_after_a_gpu_call_gets_the_fork_error_not_a_hang(cache_root):
    code = """
        import os, signal, cupy, numpy as np
        import tropical_gemm as tg
        from tropical_gemm.jit.driver import CudaAfterForkError
        a = cupy.asarray(np.random.default_rng(0).standard_normal((64, 64), dtype=np.float32))
        tg.matmul(a, a); cupy.cuda.Device().synchronize()
        pid = os.fork()
        if pid == 0:
            signal.alarm(60)          # a hang ends the child by SIGALRM, and the test fails
            try:
                tg.matmul(a, a)
            except CudaAfterForkError:
                os._exit(0)
            except BaseException:
                os._exit(2)
            os._exit(3)
        print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
    """
    result = run_python(code, {"TROPICAL_GEMM_CACHE_DIR": str(cache_root)})
    assert (result.returncode, result.stdout.strip()) == (0, "0"), result.stderr
