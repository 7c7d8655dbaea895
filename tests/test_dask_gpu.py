"""tropical_gemm.dask on several GPUs: dask-cuda's ``LocalCUDACluster``, or chunks on several GPUs of one process.

The products are cupy-chunked, computed on two GPUs, and compared bit for
bit with ``tropical_gemm.matmul`` on the whole arrays on the CPU.  A user's
script that runs a product on a two-GPU cluster is run twice: both runs
must exit cleanly (the script and every worker), and the second must find
every kernel on disk.  dask-cuda is imported by these tests only: where it
is missing they skip with the reason, and fail under ``--require-gpu``.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

da = pytest.importorskip("dask.array")
distributed = pytest.importorskip("distributed")
import dask  # noqa: E402

import tropical_gemm as tg  # noqa: E402
import tropical_gemm.dask as tgd  # noqa: E402
from jit_helpers import last_json_line, run_python  # noqa: E402
from test_dask import assert_identical, operands  # noqa: E402
from tropical_gemm.jit import cache as dc  # noqa: E402

pytestmark = [pytest.mark.gpu, pytest.mark.multi_gpu]

#: (M, K, N) and the row, K and column blocks: K in three uneven blocks.
SHAPE = (96, 150, 80)
ROWS, KS, COLS = (40, 56), (50, 64, 36), (30, 50)


@pytest.fixture(scope="module")
def dask_cuda(pytestconfig):
    try:
        import dask_cuda
    except ImportError as exc:
        why = f"dask-cuda is not importable ({exc}); pip install 'tropical-gemm-jit[dask-cuda]'"
        if pytestconfig.getoption("--require-gpu"):
            pytest.fail(why, pytrace=False)
        pytest.skip(why)
    return dask_cuda


@pytest.fixture(scope="module")
def gpu_client(dask_cuda):
    """A client of a ``LocalCUDACluster`` of two workers, one per GPU."""
    with (dask_cuda.LocalCUDACluster(n_workers=2, dashboard_address=None) as cluster,
          distributed.Client(cluster, timeout="60s") as client):
        client.wait_for_workers(2, timeout=120)
        yield client


def worker_gpus(client) -> dict[str, str]:
    """Worker address → the GPU it was given (the first of its ``CUDA_VISIBLE_DEVICES``, its device 0)."""
    return client.run(lambda: os.environ["CUDA_VISIBLE_DEVICES"].split(",")[0])


def blocks_of(x: np.ndarray, rows: tuple[int, ...], cols: tuple[int, ...]):
    """``x`` cut into blocks, as a nested list with each block's (row, column) index."""
    r, c = np.cumsum((0, *rows)), np.cumsum((0, *cols))
    return [[((i, j), x[r[i]:r[i + 1], c[j]:c[j + 1]]) for j in range(len(cols))] for i in range(len(rows))]


def made_on_workers(client, x: np.ndarray, rows, cols, workers: list[str]) -> da.Array:
    """``x`` as a dask array of cupy chunks, block (i, j) created on worker ``(i + j) % len(workers)``."""
    import cupy

    meta = cupy.empty((0, 0), x.dtype)
    return da.block([[da.from_delayed(client.submit(cupy.asarray, block, workers=[workers[(i + j) % len(workers)]],
                                                    pure=False), block.shape, dtype=x.dtype, meta=meta)
                      for (i, j), block in row] for row in blocks_of(x, rows, cols)])


def to_host(x: da.Array) -> da.Array:
    import cupy

    return x.map_blocks(cupy.asnumpy, meta=np.empty((0,) * x.ndim, x.dtype))


def gpu_identity() -> tuple:
    """What tells this process's device 0 apart from other GPUs: UUID and full PCI location.

    The bus number alone is not enough: on the H200 pair tested, both GPUs report bus 0.
    """
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(0)
    return tuple(bytes(v) if isinstance(v, (bytes, bytearray)) else v
                 for v in (props.get(k) for k in ("uuid", "pciDomainID", "pciBusID", "pciDeviceID")))


@pytest.mark.parametrize("semiring, dtype", [("max_plus", "float32"), ("max_min", "int32")])
def test_cupy_chunks_on_a_cluster_of_two_gpus_equal_the_single_array_product(gpu_client, semiring, dtype):
    """Blocks alternate between the workers, so chunk products and ⊕ combines take operands from both GPUs."""
    client = gpu_client
    workers = sorted(worker_gpus(client))
    a, b = operands(dtype, SHAPE, seed=11)
    want_c, want_k = tg.matmul(a, b, semiring, argmax=True)
    x = made_on_workers(client, a, ROWS, KS, workers)
    y = made_on_workers(client, b, KS, COLS, workers)
    c, k = tgd.matmul(x, y, semiring, argmax=True)
    futures = client.compute([to_host(c), to_host(k), to_host(tgd.matmul(x, y, semiring))])
    distributed.wait(futures, timeout=300)
    got_c, got_k, values_only = client.gather(futures)
    assert_identical(got_c, want_c)
    assert_identical(got_k, want_k)
    assert_identical(values_only, want_c)
    loads = client.run(lambda: tg.jit.stats()["loads"], workers=workers)
    assert all(n > 0 for n in loads.values()), loads  # both workers ran kernels
    gpus = client.run(gpu_identity, workers=workers)
    assert len(set(gpus.values())) == 2, gpus  # on two different GPUs


USERS_SCRIPT = """
import json, logging
import cupy, distributed, numpy as np
from dask_cuda import LocalCUDACluster
import tropical_gemm as tg, tropical_gemm.dask as tgd
from test_dask import operands
from test_dask_gpu import made_on_workers, to_host, worker_gpus

a, b = operands("float32", (300, 400, 200), seed=21)
want_c, want_k = tg.matmul(a, b, "max_plus", argmax=True)
nannies = logging.getLogger("distributed.nanny")  # they say, at INFO, how a worker ended that did not exit with 0
nannies.setLevel(logging.INFO)
nannies.addHandler(logging.StreamHandler())
with LocalCUDACluster(n_workers=2, dashboard_address=None) as cluster, distributed.Client(cluster) as client:
    workers = sorted(worker_gpus(client))
    x = made_on_workers(client, a, (150, 150), (250, 150), workers)
    y = made_on_workers(client, b, (250, 150), (120, 80), workers)
    c, k = tgd.matmul(x, y, "max_plus", argmax=True)
    got_c, got_k = client.gather(client.compute([to_host(c), to_host(k)]))
    stats = client.run(lambda: {key: tg.jit.stats()[key] for key in ("compiled", "disk_hits", "loads")})
equal = bool(np.array_equal(got_c, want_c, equal_nan=True) and np.array_equal(got_k, want_k))
print(json.dumps({"equal": equal, "workers": list(stats.values())}))
"""

#: What the nannies and Python write when a worker or the script does not end cleanly.
UNCLEAN = ("killed by signal", "killed by unknown signal", "exited with status", "still alive after",
           "Traceback")


def test_workers_exit_cleanly_and_the_second_run_is_warm(dask_cuda, cache_root):
    """A user's script, run twice over one empty cache: each exits 0, its workers too; the second compiles nothing."""
    runs = []
    for _ in range(2):
        done = run_python(USERS_SCRIPT, {dc.ENV_CACHE_DIR: str(cache_root)}, timeout=300)
        assert done.returncode == 0, done.stderr
        unclean = [line for line in done.stderr.splitlines() if any(word in line for word in UNCLEAN)]
        assert not unclean, done.stderr
        runs.append(last_json_line(done.stdout))
    first, second = runs
    assert first["equal"] and second["equal"]
    assert len(first["workers"]) == len(second["workers"]) == 2
    assert sum(w["compiled"] for w in first["workers"]) >= 1
    assert all(w["loads"] > 0 for w in first["workers"] + second["workers"])  # both workers ran kernels
    assert all(w["compiled"] == 0 and w["disk_hits"] == w["loads"] for w in second["workers"]), second


@pytest.mark.parametrize("scheduler", ["threads", "sync"])
def test_chunks_on_both_gpus_of_one_process_meet_in_tasks(scheduler):
    """Block (i, j) of each operand on device (i + j) % 2: half the chunk products get operands from both."""
    import cupy

    def on_device(x: np.ndarray, rows, cols) -> da.Array:
        meta = cupy.empty((0, 0), x.dtype)  # one device for the metas, which Dask concatenates
        placed = []
        for row in blocks_of(x, rows, cols):
            placed.append([])
            for (i, j), block in row:
                with cupy.cuda.Device((i + j) % 2):
                    placed[-1].append(da.from_array(cupy.asarray(block), chunks=block.shape, name=False, meta=meta))
        return da.block(placed)

    a, b = operands("float32", SHAPE, seed=12)
    want_c, want_k = tg.matmul(a, b, "min_plus", argmax=True)
    c, k = tgd.matmul(on_device(a, ROWS, KS), on_device(b, KS, COLS), "min_plus", argmax=True)
    got_c, got_k = dask.compute(to_host(c), to_host(k), scheduler=scheduler)
    assert_identical(got_c, want_c)
    assert_identical(got_k, want_k)
    blocks = dask.compute(*c.to_delayed().ravel(), scheduler=scheduler)
    devices = [block.device.id for block in blocks]
    assert devices == [i % 2 for i in range(len(ROWS)) for _ in COLS]  # where A[i, first K block] lives
