"""How tropical_gemm.dask scales from one GPU to two, and what the Dask path costs over a direct call.

Both parts use float32 max_plus.  One tropical multiply-add counts as 2 ops,
as in throughput.py, so T ops/s = 2·M·N·K / seconds.

* Strong scaling: one N×N×N product (N = 32768 by default, ``--size``) through
  ``tropical_gemm.dask`` on ``local_gpu_cluster(devices=[0])`` and on
  ``local_gpu_cluster(devices=[0, 1])``.  A is cut into 2 row blocks, one per
  GPU of the larger cluster, made on the workers (cupy random chunks); B is
  one chunk, replicated to every worker before timing (the time to replicate
  it is reported apart), and the scheduler's active memory manager is
  stopped, since it drops replicas no queued task needs.  Each output row block then needs only data already
  on its worker: cutting N or K too would make chunk products wait for
  gigabyte chunks to cross between worker processes, which without UCX goes
  through host memory over TCP and would measure that, not the product.  The
  same graph runs on both clusters: on one GPU its two chunk products run one
  after the other.  Each output row block is pinned (``dask.annotate``) to
  the worker that made its A block: left to itself, the scheduler put both
  blocks on one GPU in all but the first run (H200 pair, 2026-11-23).  A run is ``persist()`` of the product, ``wait()``, then a
  device synchronisation on every worker (a task returns once its kernels are
  queued); the first run is reported as cold, then the median of 3.  The
  result stays on the workers; a few rows of each output block are checked
  there against a direct ``tropical_gemm.matmul`` of those rows.
* Overhead, at 8192³ (``--overhead-size``) on GPU 0: a direct, synchronised
  ``tropical_gemm.matmul`` call against ``tropical_gemm.dask`` with one chunk
  and with 2×2 chunks per operand (K cut in two, so the ⊕ combine runs), under
  the threaded scheduler in this process and on the one-GPU cluster (inputs
  made on the worker).  Ratios are to the direct call.

Needs two GPUs; with fewer it says why and exits 0 without writing anything,
unless ``--allow-one-gpu`` is given, which runs the one-GPU parts.  Kernels
come from TROPICAL_GEMM_CACHE_DIR (shared with the workers), or are compiled
on first use.  About a minute on two H200s.

    python benchmarks/dask_scaling.py [--size 32768] [--overhead-size 8192] [--allow-one-gpu] [--out benchmarks/results]

Writes ``dask-scaling-<device>-<date>.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

import tropical_gemm as tg
from results_file import save_report  # benchmarks/ is this script's own directory

REPS = 3
ROW_BLOCKS = 2


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def gpu_count() -> int:
    """GPUs cupy sees, 0 without cupy or a driver (counted without creating a CUDA context)."""
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount()
    except Exception:
        return 0


def tops(size: int, seconds: float) -> float:
    return 2.0 * size**3 / seconds / 1e12


def cut(size: int, parts: int) -> list[int]:
    """``size`` cut into ``parts`` nearly equal blocks."""
    return [size // parts + (i < size % parts) for i in range(parts)]


# ------------------------------------------------------------- worker side


def random_block(shape: tuple[int, int], seed: int) -> Any:
    """A float32 cupy block in [0, 1), made on the GPU of whichever process runs this."""
    import cupy

    return cupy.random.RandomState(seed).random_sample(shape, dtype=np.float32)


def synchronize() -> None:
    import cupy

    cupy.cuda.Device().synchronize()


def release_gpu_memory() -> None:
    """Hand this process's cached, unused GPU blocks back to the driver."""
    import cupy

    cupy.get_default_memory_pool().free_all_blocks()


def rows_agree(c_block: Any, a_block: Any, b: Any) -> bool:
    """A few rows of an output block equal a direct product of those rows (another kernel family)."""
    import cupy

    rows = sorted({0, c_block.shape[0] // 2, c_block.shape[0] - 1})
    return bool(cupy.array_equal(c_block[rows], tg.matmul(a_block[rows], b, "max_plus")))


# ------------------------------------------------------------- client side


def on_workers(client, rows: list[int], cols: list[int], workers: list[str], seed: int) -> tuple[Any, dict]:
    """A dask array of cupy blocks made on the workers, block (i, j) on worker (i + j) % n; and its futures.

    Each block's future has the array's own key for it, as in a persisted
    array, so a graph using the array reads the block where it was made.
    """
    import cupy
    import dask.array as da
    from dask.base import tokenize

    name = f"random-{tokenize(rows, cols, workers, seed)}"
    futures = {(name, i, j): client.submit(random_block, (r, c), seed + i * len(cols) + j, key=(name, i, j),
                                           workers=[workers[(i + j) % len(workers)]])
               for i, r in enumerate(rows) for j, c in enumerate(cols)}
    array = da.Array(dict(futures), name, (tuple(rows), tuple(cols)), dtype=np.float32,
                     meta=cupy.empty((0, 0), np.float32))
    return array, futures


def cluster_timings(client, product: Any) -> tuple[dict[str, Any], Any]:
    """Timings of persisting ``product`` (as ``timings``), each run computing it anew; and the last result.

    A run is persist + wait + a device synchronisation on every worker, since
    a task returns once its kernels are queued.  Between runs the scheduler
    must have forgotten the result and every partial one (the keys that are
    not input blocks), or it would hand back the ones in memory.
    """
    import distributed

    keys = [key for key, task in dict(product.__dask_graph__()).items() if not isinstance(task, distributed.Future)]
    samples = []
    for run in range(REPS + 1):
        start = time.perf_counter()
        result = client.persist(product, optimize_graph=False)  # optimising would drop the placement annotation
        distributed.wait(result)
        client.run(synchronize)
        samples.append(time.perf_counter() - start)
        progress(f"  {samples[-1]:.4f} s")
        if run < REPS:
            del result
            forgotten(client, keys)
    return {"cold_s": samples[0], "seconds": statistics.median(samples[1:]), "samples_s": samples[1:]}, result


def forgotten(client, keys: list) -> None:
    """Wait until the scheduler holds none of ``keys`` (released once their last future is gone)."""
    deadline = time.monotonic() + 60
    while client.run_on_scheduler(lambda dask_scheduler: any(key in dask_scheduler.tasks for key in keys)):
        if time.monotonic() > deadline:
            raise RuntimeError("the scheduler still holds the previous result after 60 s")
        time.sleep(0.01)


def timings(run: Callable[[], float]) -> dict[str, Any]:
    """The first (cold) run, then the median of REPS more."""
    cold = run()
    samples = [run() for _ in range(REPS)]
    return {"cold_s": cold, "seconds": statistics.median(samples), "samples_s": samples}


def worker_names(client) -> dict[str, str]:
    return {address: w["name"] for address, w in client.scheduler_info()["workers"].items()}


def scaling_point(devices: list[int], size: int, overhead_size: int) -> dict[str, Any]:
    """The product on a cluster of ``devices``: timings, where the output blocks are, and the row check.

    On a one-GPU cluster, the cluster part of the overhead comparison runs too.
    """
    import dask
    import distributed

    import tropical_gemm.dask as tgd

    progress(f"cluster on GPUs {devices}: starting")
    with tgd.local_gpu_cluster(devices=devices) as cluster, distributed.Client(cluster) as client:
        client.wait_for_workers(len(devices), timeout=120)
        workers = sorted(worker_names(client).values())
        a, a_blocks = on_workers(client, cut(size, ROW_BLOCKS), [size], workers, seed=1)
        b, b_blocks = on_workers(client, [size], [size], workers, seed=100)
        distributed.wait([*a_blocks.values(), *b_blocks.values()])
        client.run(synchronize)
        client.amm.stop()  # its ReduceReplicas policy would drop B's copies between runs (seen: 1.4 s runs became 5.7 s)
        start = time.perf_counter()
        client.replicate(list(b_blocks.values()))
        replicate_s = time.perf_counter() - start
        progress(f"  inputs made on the workers; B on all {len(workers)} in {replicate_s:.2f} s")
        with dask.annotate(workers=lambda key: [workers[key[1] % len(workers)]], allow_other_workers=False):
            product = tgd.matmul(a, b, "max_plus")  # key[1] of every task of the product: its row block
        result, c = cluster_timings(client, product)
        names = worker_names(client)
        placement: dict[str, int] = {}
        for holders in client.who_has(c).values():
            for address in holders:
                placement[names[address]] = placement.get(names[address], 0) + 1
        c_blocks = {f.key: f for f in distributed.futures_of(c)}
        (b_block,) = b_blocks.values()
        checks = [client.submit(rows_agree, c_blocks[c_key], a_blocks[a_key], b_block, pure=False)
                  for (c_key,), (a_key,) in zip(c.__dask_keys__(), a.__dask_keys__())]
        rows_ok = all(client.gather(checks))
        progress(f"  rows of every output block agree with a direct product: {rows_ok}")
        overhead = cluster_overhead(client, workers[0], overhead_size) if len(devices) == 1 else {}
    return {"gpus": len(devices), **result, "tops": tops(size, result["seconds"]), "replicate_b_s": replicate_s,
            "placement": placement, "rows_agree": rows_ok, "overhead": overhead}


def cluster_overhead(client, worker: str, size: int) -> dict[str, float]:
    """The overhead product on the one-GPU cluster, with one chunk and with 2×2 chunks per operand."""
    import distributed

    import tropical_gemm.dask as tgd

    out = {}
    for label, parts in (("cluster_1_chunk_s", 1), ("cluster_2x2_s", 2)):
        a, a_blocks = on_workers(client, cut(size, parts), cut(size, parts), [worker], seed=7)
        b, b_blocks = on_workers(client, cut(size, parts), cut(size, parts), [worker], seed=70)
        distributed.wait([*a_blocks.values(), *b_blocks.values()])
        out[label] = cluster_timings(client, tgd.matmul(a, b, "max_plus"))[0]["seconds"]
        progress(f"  {label}: {out[label]:.4f} s")
    return out


# ---------------------------------------------------------------- in-process


def local_overhead(size: int) -> dict[str, float]:
    """Direct call against the Dask path under the threaded scheduler, all on GPU 0 of this process."""
    import dask
    import dask.array as da

    import tropical_gemm.dask as tgd

    a, b = random_block((size, size), 7), random_block((size, size), 70)

    def timed(fn: Callable[[], Any]) -> float:
        def run() -> float:
            start = time.perf_counter()
            fn()
            synchronize()
            return time.perf_counter() - start

        return timings(run)["seconds"]

    out = {"direct_s": timed(lambda: tg.matmul(a, b, "max_plus"))}
    progress(f"  direct_s: {out['direct_s']:.4f} s")
    for label, parts in (("threads_1_chunk_s", 1), ("threads_2x2_s", 2)):
        chunks = (cut(size, parts), cut(size, parts))
        x = da.from_array(a, chunks=chunks, asarray=False, name=False)
        y = da.from_array(b, chunks=chunks, asarray=False, name=False)
        out[label] = timed(lambda: dask.compute(tgd.matmul(x, y, "max_plus"), scheduler="threads"))
        progress(f"  {label}: {out[label]:.4f} s")
    return out


# -------------------------------------------------------------------- report


def environment(gpus: int) -> dict[str, Any]:
    import cupy
    import dask
    import distributed

    props = cupy.cuda.runtime.getDeviceProperties(0)
    return {
        "device": props["name"].decode(), "gpus": gpus, "arch": f"sm_{props['major']}{props['minor']}",
        "versions": {"tropical_gemm": tg.__version__, "cupy": cupy.__version__, "dask": dask.__version__,
                     "distributed": distributed.__version__, "numpy": np.__version__,
                     "python": platform.python_version(), "cuda_driver": cupy.cuda.runtime.driverGetVersion()},
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join(["python3", *sys.argv]),
    }


def run(size: int, overhead_size: int, gpus: int) -> dict[str, Any]:
    report: dict[str, Any] = {"environment": environment(gpus), "size": size, "overhead_size": overhead_size,
                              "row_blocks": ROW_BLOCKS, "ops": "2*M*N*K per product (a multiply-add is 2 ops)"}
    progress(f"{report['environment']['device']} x {gpus}; overhead at {overhead_size}^3 in this process (GPU 0)")
    overhead = local_overhead(overhead_size)
    release_gpu_memory()  # its operands are gone with it; the clusters' workers need the memory
    points = [scaling_point([0], size, overhead_size)]
    if gpus >= 2:
        points.append(scaling_point([0, 1], size, overhead_size))
    for point in points:
        overhead.update(point.pop("overhead"))
    report["overhead"] = {**overhead, **{label.removesuffix("_s") + "_ratio": seconds / overhead["direct_s"]
                                         for label, seconds in overhead.items() if label != "direct_s"}}
    for point in points:
        point["speedup"] = points[0]["seconds"] / point["seconds"]
        point["efficiency_per_gpu"] = point["speedup"] / point["gpus"]
    report["scaling"] = points
    return report


def table(report: dict[str, Any]) -> list[str]:
    env, size = report["environment"], report["size"]
    lines = [f"{env['device']} x {env['gpus']}: float32 max_plus {size}^3 through tropical_gemm.dask "
             f"(A in {report['row_blocks']} row blocks, B on every GPU)",
             "  GPUs   seconds   cold (s)  T ops/s  speedup  per-GPU eff.  output blocks       rows agree"]
    for p in report["scaling"]:
        placed = ", ".join(f"{name}: {count}" for name, count in sorted(p["placement"].items()))
        lines.append(f"  {p['gpus']:<5} {p['seconds']:8.3f} {p['cold_s']:10.3f} {p['tops']:8.2f} {p['speedup']:8.2f}"
                     f" {p['efficiency_per_gpu']:12.0%}  {placed:<19} {p['rows_agree']}")
    o = report["overhead"]
    lines.append(f"overhead at {report['overhead_size']}^3 on GPU 0          seconds   ratio to direct")
    for label in ("direct_s", "threads_1_chunk_s", "threads_2x2_s", "cluster_1_chunk_s", "cluster_2x2_s"):
        name = label.removesuffix("_s")
        lines.append(f"  {name.replace('_', ' '):<33} {o[label]:9.4f} {o.get(name + '_ratio', 1.0):9.2f}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=32768, help="N of the N×N×N scaling product")
    parser.add_argument("--overhead-size", type=int, default=8192, help="N of the overhead product")
    parser.add_argument("--allow-one-gpu", action="store_true", help="with one GPU, run the one-GPU parts")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args(argv)
    gpus = gpu_count()
    if gpus < 1 or (gpus < 2 and not args.allow_one_gpu):
        print(f"dask_scaling needs 2 GPUs (or 1 with --allow-one-gpu); cupy sees {gpus}: nothing measured")
        return 0
    report = run(args.size, args.overhead_size, gpus)
    save_report(report, args.out, "dask-scaling", table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
