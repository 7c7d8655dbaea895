"""tropical_gemm.dask on several GPUs: one worker per GPU, or chunks on several GPUs of one process.

The first tests need no GPU: ``local_gpu_cluster`` starts its worker
processes with ``CUDA_VISIBLE_DEVICES`` set, whether or not a GPU is there.
The ``gpu`` tests compare cupy-chunked products, computed on two GPUs, with
``tropical_gemm.matmul`` on the whole arrays on the CPU, bit for bit.
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
from conftest import gpu_unavailable_reason  # noqa: E402
from test_dask import assert_identical, operands  # noqa: E402

#: (M, K, N) and the row, K and column blocks: K in three uneven blocks.
SHAPE = (96, 150, 80)
ROWS, KS, COLS = (40, 56), (50, 64, 36), (30, 50)


def worker_names(client) -> dict[str, str]:
    """Worker name (``gpu-<device>``) → address."""
    return {w["name"]: address for address, w in client.scheduler_info()["workers"].items()}


def test_local_gpu_cluster_shows_each_worker_its_own_gpu():
    with tgd.local_gpu_cluster(devices=[0, 1]) as cluster, distributed.Client(cluster, timeout="60s") as client:
        names = worker_names(client)
        seen = client.run(lambda: os.environ["CUDA_VISIBLE_DEVICES"])
        assert sorted(names) == ["gpu-0", "gpu-1"]
        assert (seen[names["gpu-0"]], seen[names["gpu-1"]]) == ("0", "1")
        assert set(client.nthreads().values()) == {1}


def test_devices_are_numbered_as_this_process_sees_them(monkeypatch):
    # The mask names GPUs that need not exist.  distributed's GPU monitor looks
    # up the first GPU of the mask through NVML (an error where NVML is there),
    # so it is switched off: in this process, whose NVML state may be set by an
    # earlier test, and in the workers, which inherit the config.
    from distributed.diagnostics import nvml

    monkeypatch.setattr(nvml, "device_get_count", lambda: 0)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    with (dask.config.set({"distributed.diagnostics.nvml": False}),
          tgd.local_gpu_cluster(devices=[1]) as cluster,
          distributed.Client(cluster, timeout="60s") as client):
        assert list(client.run(lambda: os.environ["CUDA_VISIBLE_DEVICES"]).values()) == ["5"]
    with pytest.raises(ValueError, match=r"device 2 is not among the 2 GPUs that CUDA_VISIBLE_DEVICES='3,5' shows"):
        tgd.local_gpu_cluster(devices=[2])


@pytest.mark.parametrize("devices", [[], [0, 0]])
def test_devices_must_name_each_gpu_once(devices):
    with pytest.raises(ValueError, match="at least one GPU, each once"):
        tgd.local_gpu_cluster(devices=devices)


def test_all_gpus_without_a_gpu_is_a_clear_error():
    if gpu_unavailable_reason() is None:
        pytest.skip("a CUDA GPU is usable here")
    with pytest.raises(RuntimeError, match=r"local_gpu_cluster\(\) found no CUDA GPU .*pass devices="):
        tgd.local_gpu_cluster()


# ---- on GPUs ------------------------------------------------------------------------------------------


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


@pytest.fixture(scope="module")
def gpu_client():
    with tgd.local_gpu_cluster() as cluster, distributed.Client(cluster, timeout="60s") as client:
        client.wait_for_workers(len(cluster.workers), timeout=120)
        yield client


@pytest.mark.gpu
@pytest.mark.multi_gpu
@pytest.mark.parametrize("semiring, dtype", [("max_plus", "float32"), ("max_min", "int32")])
def test_cupy_chunks_on_a_cluster_of_two_gpus_equal_the_single_array_product(gpu_client, semiring, dtype):
    client = gpu_client
    names = worker_names(client)
    workers = sorted(names)[:2]
    addresses = [names[w] for w in workers]  # client.run takes addresses, client.submit names too
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
    import cupy

    loads = client.run(lambda: tg.jit.stats()["loads"], workers=addresses)
    assert all(n > 0 for n in loads.values()), loads  # both workers ran kernels
    assert set(client.run(lambda: cupy.cuda.runtime.getDeviceCount(), workers=addresses).values()) == {1}
    gpus = client.run(gpu_identity, workers=addresses)
    assert len(set(gpus.values())) == 2, gpus  # on two different GPUs


def gpu_identity() -> tuple:
    """What tells this process's device 0 apart from other GPUs: UUID and full PCI location.

    The bus number alone is not enough: on the H200 pair tested, both GPUs report bus 0.
    """
    import cupy

    props = cupy.cuda.runtime.getDeviceProperties(0)
    return tuple(bytes(v) if isinstance(v, (bytes, bytearray)) else v
                 for v in (props.get(k) for k in ("uuid", "pciDomainID", "pciBusID", "pciDeviceID")))


@pytest.mark.gpu
@pytest.mark.multi_gpu
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
