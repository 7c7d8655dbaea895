"""How tropical_gemm.dask scales over the GPUs of one host, on dask-cuda's LocalCUDACluster.

Everything is float32 max_plus; one tropical multiply-add counts 2 ops, as in
throughput.py.  One ``LocalCUDACluster`` of every GPU found (one worker per
GPU) serves all parts; a run on fewer GPUs pins its tasks to the first
workers.  Inputs are made on the workers (cupy random blocks), where the
parts need them, so that only the moves a part is about are timed.

* Strong scaling: one N×N×N product (N = 32768, ``--size``) on 1, 2, 4...
  GPUs (powers of two, and all of them).  On n GPUs, A is cut into n row
  blocks, block i made on worker i; B is one chunk, replicated to every
  worker once before timing (the time is reported apart), and the
  scheduler's active memory manager is stopped, since it drops replicas no
  queued task needs.  Each output row block is pinned (``dask.annotate``)
  to the worker of its A block: left to itself, the scheduler put both
  output row blocks on one GPU in all but the first run (two H200s,
  2026-11-23).
* Weak scaling: n GPUs each compute ``--weak-rows`` rows (N/4 by default)
  of C against the same B, so the work per GPU is fixed.
* Moving chunks (2 GPUs or more): M = N = N/2 and K = N, K cut
  into one block per GPU, A's and B's K block k made on worker k.  Each
  chunk product runs where its operands are, and the ⊕ combine tree runs on
  the worker of its earlier K range, so every combine receives the other
  range's partial C from another GPU (``n − 1`` of them).  The workers'
  transfer logs give the bytes moved, the time they were in flight (union
  of intervals, as a share of the run) and the bandwidth of one transfer.
* Overhead, at 8192³ (``--overhead-size``): a direct, synchronised
  ``tropical_gemm.matmul`` call on GPU 0 in this process, against
  ``tropical_gemm.dask`` with one chunk (and 2×2 chunks) per operand under
  the threaded scheduler here and on worker 0 of the cluster.  On the
  cluster the graph is persisted as a user's ``persist()`` does, optimised
  (each chunk product fused with its synchronisation into one task) and
  placed by ``persist(workers=...)``; unoptimised, each of them is two
  tasks, a scheduler round trip more, reported beside it.  The round trip
  of a one-element task on worker 0, persisted the same way, is the floor
  any cluster call pays, whatever the product.

A run is ``persist()`` of the graph, whose last task on each output block
synchronises the worker's GPU (a chunk product returns once its kernels are
queued), then ``wait()``.  The first run is reported as cold, then the
median of 3; between runs the scheduler forgets every result.  A few rows
of each scaling point's output blocks are checked on their worker against
a direct product of those rows.  Kernels come from TROPICAL_GEMM_CACHE_DIR,
which the workers inherit.  The report's ``model`` entry holds the inputs of
benchmarks/scale_model.py (ops/s per GPU, bytes/s of a transfer, usable
device memory) and its answers for 8 and 64 GPUs in a minute.

    python benchmarks/dask_scaling.py [--size 32768] [--weak-rows 8192] [--overhead-size 8192] [--out DIR]

Needs dask-cuda (``pip install 'tropical-gemm-jit[dask-cuda]'``).  Writes
``dask-scaling-<n>gpu-<device>-<date>.json`` and a PNG beside it, and prints
a table.  Each point is one cold and 3 timed runs, so that the whole fits
one call of a few minutes on a 4-GPU machine.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import shlex
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

import tropical_gemm as tg
from results_file import pyplot, save_figure, save_report  # benchmarks/ is this script's own directory
from scale_model import model_of_run

REPS = 3
#: dask-cuda spills device chunks to host memory past this share of the GPU (its default device_memory_limit).
DEVICE_MEMORY_SHARE = 0.8
OVERHEAD_TARGET = 1.10
SPEEDUP_TARGETS = {2: 1.9, 4: 3.6}


def progress(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def gpu_count() -> int:
    """GPUs cupy sees, 0 without cupy or a driver (counted without creating a CUDA context)."""
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount()
    except Exception:  # ImportError, or the CUDA runtime's error (no driver, no device)
        return 0


def cut(size: int, parts: int) -> list[int]:
    """``size`` cut into ``parts`` nearly equal blocks."""
    return [size // parts + (i < size % parts) for i in range(parts)]


def gpu_counts(gpus: int) -> list[int]:
    """1, 2, 4... up to ``gpus``, and ``gpus`` itself."""
    counts = [1 << i for i in range(gpus.bit_length()) if 1 << i <= gpus]
    return counts if counts[-1] == gpus else [*counts, gpus]


def owner_of_k_range(key: tuple) -> int:
    """The first K block of the range a task of ``tropical_gemm.dask.matmul``'s graph covers (2-D operands).

    ``(name-partial, i, k, j)`` is the product of K block k; ``(name-combine-L,
    i, p, j)`` combines the ranges starting at blocks ``p·2^(L+1)`` and
    ``p·2^(L+1) + 2^L``; the result ``(name, i, j)`` and what follows it
    start at block 0.
    """
    label = str(key[0])
    if label.endswith("-partial"):
        return key[2]
    head, _, level = label.rpartition("-combine-")
    return key[2] << (int(level) + 1) if head and level.isdigit() else 0


def union_seconds(intervals: list[tuple[float, float]]) -> float:
    """How long at least one of the ``(start, stop)`` intervals was open."""
    total, end = 0.0, float("-inf")
    for start, stop in sorted(intervals):
        if stop > end:
            total += stop - max(start, end)
            end = stop
    return total


# ------------------------------------------------------------- worker side


def random_block(shape: tuple[int, int], seed: int) -> Any:
    """A float32 cupy block in [0, 1), made on the GPU of whichever process runs this."""
    import cupy

    return cupy.random.RandomState(seed).random_sample(shape, dtype=np.float32)


def synchronized(block: Any) -> Any:
    """``block`` once its GPU has finished the work queued for it."""
    block.device.synchronize()
    return block


def rows_agree(c_block: Any, a_block: Any, b: Any) -> bool:
    """A few rows of an output block equal a direct product of those rows (another kernel family)."""
    import cupy

    rows = sorted({0, c_block.shape[0] // 2, c_block.shape[0] - 1})
    return bool(cupy.array_equal(c_block[rows], tg.matmul(a_block[rows], b, "max_plus")))


def take_transfer_log(dask_worker: Any) -> list[dict[str, float]]:
    """The worker's incoming transfers since the last call (bytes, start, stop), emptying its log."""
    log = [{"bytes": t["total"], "start": t["start"], "stop": t["stop"]} for t in dask_worker.transfer_incoming_log]
    dask_worker.transfer_incoming_log.clear()
    return log


# ------------------------------------------------------------- client side


class Cluster:
    """A client of the LocalCUDACluster, its workers in GPU order, and the parts' helpers."""

    def __init__(self, client: Any) -> None:
        self.client = client
        first_gpu = client.run(lambda: int(os.environ["CUDA_VISIBLE_DEVICES"].split(",")[0]))
        self.workers = sorted(first_gpu, key=first_gpu.get)

    def made(self, rows: list[int], cols: list[int], owner: Callable[[int, int], int], seed: int) -> tuple[Any, list]:
        """A dask array of cupy blocks, block (i, j) made on worker ``owner(i, j)``; and its futures.

        Each block's future has the array's own key, as in a persisted
        array, so a graph using the array reads each block where it was made.
        """
        import dask.array as da
        import distributed
        from dask.base import tokenize

        name = f"random-{tokenize(rows, cols, seed, [owner(i, j) for i in range(len(rows)) for j in range(len(cols))])}"
        futures = {(name, i, j): self.client.submit(random_block, (r, c), seed + i * len(cols) + j, key=(name, i, j),
                                                    workers=[self.workers[owner(i, j)]], allow_other_workers=False)
                   for i, r in enumerate(rows) for j, c in enumerate(cols)}
        distributed.wait(list(futures.values()))
        array = da.Array(dict(futures), name, (tuple(rows), tuple(cols)), meta=random_block((0, 0), seed))
        return array, list(futures.values())

    def product(self, a: Any, b: Any, worker_of: Callable[[tuple], int] | None) -> Any:
        """``tgd.matmul(a, b)`` then a synchronisation per output block, every task pinned to ``worker_of(key)``.

        With no ``worker_of``, the tasks carry no annotation (``timings`` then places them).
        """
        import contextlib

        import dask

        import tropical_gemm.dask as tgd

        workers = self.workers  # the annotation travels to the scheduler: it must not hold the client
        pinned = (contextlib.nullcontext() if worker_of is None
                  else dask.annotate(workers=lambda key: [workers[worker_of(key)]], allow_other_workers=False))
        with pinned:
            c = tgd.matmul(a, b, "max_plus")
            return c.map_blocks(synchronized, meta=c._meta)

    def timings(self, product: Any, on_worker: int | None = None) -> tuple[dict[str, Any], Any]:
        """Cold run, then the median of REPS, each computing ``product`` anew; and the last result.

        ``on_worker``: persist the optimised graph there (tasks fused, as a user's
        ``persist()`` does); else persist it unoptimised, which keeps each task's
        own annotation.  Each run's incoming transfers, summed over the workers, go with it.
        """
        import distributed

        inputs = {future.key for future in distributed.futures_of(product)}
        placement = ({"optimize_graph": False} if on_worker is None  # optimising would drop the annotations
                     else {"workers": [self.workers[on_worker]], "allow_other_workers": False})
        self.client.run(take_transfer_log)
        runs = []
        graph_keys = {key for key in product.__dask_graph__() if key not in inputs}
        for run in range(REPS + 1):
            start = time.perf_counter()
            result = self.client.persist(product, **placement)
            distributed.wait(result)
            seconds = time.perf_counter() - start
            transfers = [t for log in self.client.run(take_transfer_log).values() for t in log]
            runs.append({"seconds": seconds, "bytes_moved": sum(t["bytes"] for t in transfers),
                         "transfer_busy_s": union_seconds([(t["start"], t["stop"]) for t in transfers]),
                         "transfer_sum_s": sum(t["stop"] - t["start"] for t in transfers)})
            progress(f"  {seconds:.4f} s, {runs[-1]['bytes_moved'] / 2**30:.2f} GiB moved")
            keys = graph_keys | ({future.key for future in distributed.futures_of(result)} - inputs)
            if run < REPS:  # fused, the result's keys are not the graph's
                del result
                self.forget(list(keys))
        warm = sorted(runs[1:], key=lambda r: r["seconds"])[len(runs[1:]) // 2]
        return {"cold_s": runs[0]["seconds"], **warm, "samples_s": [r["seconds"] for r in runs[1:]]}, result

    def forget(self, keys: list) -> None:
        """Wait until the scheduler holds none of ``keys`` (released once their last future is gone)."""
        deadline = time.monotonic() + 60
        while self.client.run_on_scheduler(lambda dask_scheduler: any(key in dask_scheduler.tasks for key in keys)):
            if time.monotonic() > deadline:
                raise RuntimeError("the scheduler still holds the previous result after 60 s")
            time.sleep(0.01)


def row_blocks_point(cluster: Cluster, gpus: int, rows: int, b: Any, b_block: Any, size: int, seed: int) -> dict:
    """``rows`` × size times size × size on ``gpus`` workers, A's row block i made on worker i; rows checked."""
    import distributed

    a, a_blocks = cluster.made(cut(rows, gpus), [size], lambda i, j: i, seed=seed)
    result, c = cluster.timings(cluster.product(a, b, lambda key: key[1]))  # key[1]: the task's row block
    c_blocks = distributed.futures_of(c)
    checks = [cluster.client.submit(rows_agree, c_block, a_block, b_block, pure=False)
              for c_block, a_block in zip(sorted(c_blocks, key=lambda f: f.key), a_blocks)]
    rows_ok = all(cluster.client.gather(checks))
    progress(f"  {gpus} GPU(s), {rows} rows: rows of every output block agree with a direct product: {rows_ok}")
    return {"gpus": gpus, "m": rows, **result, "tops": 2.0 * rows * size * size / result["seconds"] / 1e12,
            "rows_agree": rows_ok}


def scaling(cluster: Cluster, size: int, weak_rows: int) -> dict[str, Any]:
    """B replicated to every worker, then the strong and the weak scaling points."""
    b, (b_block,) = cluster.made([size], [size], lambda i, j: 0, seed=100)
    cluster.client.amm.stop()  # its ReduceReplicas policy would drop B's copies between runs
    start = time.perf_counter()
    cluster.client.replicate([b_block])
    replicate_s = time.perf_counter() - start
    progress(f"B ({4 * size * size / 2**30:.0f} GiB) on all {len(cluster.workers)} workers in {replicate_s:.2f} s")
    strong, weak = [], []
    for gpus in gpu_counts(len(cluster.workers)):
        progress(f"strong scaling, {gpus} GPU(s)")
        strong.append(row_blocks_point(cluster, gpus, size, b, b_block, size, seed=1000 * gpus))
        progress(f"weak scaling, {gpus} GPU(s)")
        weak.append(row_blocks_point(cluster, gpus, weak_rows * gpus, b, b_block, size, seed=1000 * gpus + 500))
    for point in strong:
        point["speedup"] = strong[0]["seconds"] / point["seconds"]
        point["efficiency"] = point["speedup"] / point["gpus"]
        if point["gpus"] in SPEEDUP_TARGETS:
            point["target"] = SPEEDUP_TARGETS[point["gpus"]]
            point["met"] = point["speedup"] >= point["target"]
    for point in weak:
        point["efficiency"] = weak[0]["seconds"] / point["seconds"]
    return {"replicate_b_s": replicate_s, "replicate_b_bytes": 4 * size * size * (len(cluster.workers) - 1),
            "strong": strong, "weak": weak}


def moving_chunks(cluster: Cluster, size: int, k: int) -> dict[str, Any]:
    """A size × k times k × size product, K cut into one block per worker: the ⊕ combines cross GPUs."""
    gpus = len(cluster.workers)
    progress(f"moving chunks: {size}×{k}×{size}, K in {gpus} blocks, one per GPU")
    a, _ = cluster.made([size], cut(k, gpus), lambda i, j: j, seed=7000)
    b, _ = cluster.made(cut(k, gpus), [size], lambda i, j: i, seed=8000)
    result, _ = cluster.timings(cluster.product(a, b, owner_of_k_range))
    moved = result["bytes_moved"]
    return {"gpus": gpus, "m": size, "k": k, "n": size, **result,
            "transfer_share": result["transfer_busy_s"] / result["seconds"],
            "link_bytes_per_s": moved / result["transfer_sum_s"] if result["transfer_sum_s"] else None,
            "expected_bytes": 4 * size * size * (gpus - 1)}


def cluster_overhead(cluster: Cluster, size: int) -> dict[str, float]:
    """The overhead product on worker 0, with one chunk and with 2×2 chunks per operand, fused and not.

    And the cluster's round trip alone: a one-element chunk through the same graph shape.
    """
    tiny, _ = cluster.made([1], [1], lambda i, j: 0, seed=3)
    out = {"cluster_round_trip_s": cluster.timings(tiny.map_blocks(synchronized, meta=tiny._meta),
                                                   on_worker=0)[0]["seconds"]}
    for label, parts in (("cluster_1_chunk", 1), ("cluster_2x2", 2)):
        a, _ = cluster.made(cut(size, parts), cut(size, parts), lambda i, j: 0, seed=7)
        b, _ = cluster.made(cut(size, parts), cut(size, parts), lambda i, j: 0, seed=70)
        out[f"{label}_s"] = cluster.timings(cluster.product(a, b, None), on_worker=0)[0]["seconds"]
        out[f"{label}_unfused_s"] = cluster.timings(cluster.product(a, b, lambda key: 0))[0]["seconds"]
        progress(f"  {label}: {out[f'{label}_s']:.4f} s fused, {out[f'{label}_unfused_s']:.4f} s not")
    return out


def local_overhead(size: int) -> dict[str, float]:
    """Direct call against the Dask path under the threaded scheduler, all on GPU 0 of this process."""
    import cupy
    import dask
    import dask.array as da

    import tropical_gemm.dask as tgd

    a, b = random_block((size, size), 7), random_block((size, size), 70)

    def timed(fn: Callable[[], Any]) -> float:
        def run() -> float:
            start = time.perf_counter()
            fn()
            cupy.cuda.Device().synchronize()
            return time.perf_counter() - start

        run()  # cold
        return statistics.median(run() for _ in range(REPS))

    out = {"direct_s": timed(lambda: tg.matmul(a, b, "max_plus"))}
    for label, parts in (("threads_1_chunk_s", 1), ("threads_2x2_s", 2)):
        chunks = (cut(size, parts), cut(size, parts))
        x = da.from_array(a, chunks=chunks, asarray=False, name=False)
        y = da.from_array(b, chunks=chunks, asarray=False, name=False)
        out[label] = timed(lambda: dask.compute(tgd.matmul(x, y, "max_plus"), scheduler="threads"))
    progress("  " + ", ".join(f"{label}: {seconds:.4f} s" for label, seconds in out.items()))
    del a, b
    cupy.get_default_memory_pool().free_all_blocks()  # the cluster's worker on GPU 0 needs the memory
    return out


# -------------------------------------------------------------------- report


def environment(gpus: int) -> dict[str, Any]:
    import cupy
    import dask
    import dask_cuda
    import distributed

    props = cupy.cuda.runtime.getDeviceProperties(0)
    return {
        "device": props["name"].decode(), "gpus": gpus, "arch": f"sm_{props['major']}{props['minor']}",
        "memory_bytes": props["totalGlobalMem"],
        "versions": {"tropical_gemm": tg.__version__, "cupy": cupy.__version__, "dask": dask.__version__,
                     "distributed": distributed.__version__, "dask_cuda": dask_cuda.__version__,
                     "numpy": np.__version__, "python": platform.python_version(),
                     "cuda_driver": cupy.cuda.runtime.driverGetVersion()},
        "transport": "tcp (LocalCUDACluster's default protocol)",
        "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "command": shlex.join(["python3", *sys.argv]),
    }


def run(args: argparse.Namespace, gpus: int) -> dict[str, Any]:
    import distributed
    from dask_cuda import LocalCUDACluster

    report: dict[str, Any] = {"environment": environment(gpus), "size": args.size, "weak_rows": args.weak_rows,
                              "overhead_size": args.overhead_size,
                              "ops": "2*M*N*K per product (a multiply-add is 2 ops)"}
    progress(f"{report['environment']['device']} x {gpus}; overhead at {args.overhead_size}^3 in this process")
    overhead = local_overhead(args.overhead_size)
    with (LocalCUDACluster(n_workers=gpus, dashboard_address=None) as local_cluster,
          distributed.Client(local_cluster) as client):
        client.wait_for_workers(gpus, timeout=120)
        cluster = Cluster(client)
        overhead.update(cluster_overhead(cluster, args.overhead_size))
        report["scaling"] = scaling(cluster, args.size, args.weak_rows)
        if gpus >= 2:
            report["moving"] = moving_chunks(cluster, args.size // 2, args.size)
    report["overhead"] = {**overhead, **{label.removesuffix("_s") + "_ratio": seconds / overhead["direct_s"]
                                         for label, seconds in overhead.items() if label != "direct_s"},
                          "target_ratio": OVERHEAD_TARGET}
    report["model"] = model_of_run(report, DEVICE_MEMORY_SHARE)
    return report


def table(report: dict[str, Any]) -> list[str]:
    env, size, s = report["environment"], report["size"], report["scaling"]
    lines = [f"{env['device']} x {env['gpus']}, dask-cuda {env['versions']['dask_cuda']}: float32 max_plus "
             f"through tropical_gemm.dask (B on every GPU: {s['replicate_b_s']:.1f} s to replicate)",
             f"  strong, {size}^3:  GPUs  seconds  cold (s)  T ops/s  speedup  efficiency  target  rows agree"]
    for p in s["strong"]:
        target = f"{p['target']:.1f} {'met' if p['met'] else 'MISSED'}" if "target" in p else ""
        lines.append(f"  {'':<17} {p['gpus']:>4} {p['seconds']:8.3f} {p['cold_s']:9.3f} {p['tops']:8.2f}"
                     f" {p['speedup']:8.2f} {p['efficiency']:11.0%}  {target:<10} {p['rows_agree']}")
    lines.append(f"  weak, {report['weak_rows']} rows/GPU: GPUs  seconds  T ops/s  efficiency  rows agree")
    for p in s["weak"]:
        lines.append(f"  {'':<17} {p['gpus']:>4} {p['seconds']:8.3f} {p['tops']:8.2f} {p['efficiency']:11.0%}"
                     f"  {p['rows_agree']}")
    m = report.get("moving")
    if m:
        bandwidth = f"{m['link_bytes_per_s'] / 1e9:.2f} GB/s a transfer" if m["link_bytes_per_s"] else "no transfer"
        lines.append(f"  moving chunks, {m['m']}x{m['k']}x{m['n']} K over {m['gpus']} GPUs: {m['seconds']:.3f} s, "
                     f"{m['bytes_moved'] / 2**30:.2f} GiB moved (expected {m['expected_bytes'] / 2**30:.2f}), "
                     f"transfers in flight {m['transfer_share']:.0%} of the time, {bandwidth}")
    o = report["overhead"]
    lines.append(f"  overhead at {report['overhead_size']}^3, ratio to a direct call ({o['direct_s']:.4f} s):  "
                 + ", ".join(f"{label.removesuffix('_ratio').replace('_', ' ')} {o[label]:.3f}"
                             for label in o if label.endswith("_ratio") and label != "target_ratio")
                 + f"  (target <= {o['target_ratio']:.2f} with one chunk)")
    mo = report["model"]
    if mo["answers"]:
        lines.append(f"  model: {mo['ops_per_gpu'] / 1e12:.1f} T ops/s per GPU, {mo['link_bytes_per_s'] / 1e9:.2f} GB/s"
                     f" per transfer; moving case predicted {mo['moving_check']['predicted_s']:.3f} s, measured"
                     f" {mo['moving_check']['measured_s']:.3f} s; largest N in 60 s: "
                     + ", ".join(f"{a['gpus']} GPUs {a['n']} ({'overlapped' if a['overlap'] else 'after'}, "
                                 f"{a['bound']})" for a in mo["answers"]))
    return lines


def plot(report: dict[str, Any], path: Path) -> bool:
    plt = pyplot()
    if plt is None:
        return False
    s = report["scaling"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    gpus = [p["gpus"] for p in s["strong"]]
    left.plot(gpus, gpus, "--", color="gray", label="ideal")
    left.plot(gpus, [p["speedup"] for p in s["strong"]], "o-", label=f"strong, {report['size']}³")
    left.plot(gpus, [p["efficiency"] * p["gpus"] for p in s["weak"]], "s-",
              label=f"weak, {report['weak_rows']} rows per GPU (efficiency × GPUs)")
    left.set(xlabel="GPUs", ylabel="speedup over one GPU", xticks=gpus,
             title=f"{report['environment']['device']} x {report['environment']['gpus']}")
    left.legend(fontsize=8)
    m = report.get("moving")
    if m:
        busy = m["transfer_busy_s"]
        right.barh([0], [m["seconds"] - busy], color="tab:blue", label="no transfer in flight")
        right.barh([0], [busy], left=[m["seconds"] - busy], color="tab:red", label="transfers in flight")
        right.set(yticks=[], xlabel="seconds",
                  title=f"K over {m['gpus']} GPUs: {m['bytes_moved'] / 2**30:.1f} GiB moved over TCP")
        right.legend(fontsize=8)
    else:
        right.set_axis_off()
    return save_figure(fig, path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size", type=int, default=32768, help="N of the N×N×N strong-scaling product")
    parser.add_argument("--weak-rows", type=int, help="rows of C per GPU in the weak scaling (default: size/4)")
    parser.add_argument("--overhead-size", type=int, default=8192, help="N of the overhead product")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args(argv)
    args.weak_rows = args.weak_rows or args.size // 4
    gpus = gpu_count()
    if gpus < 1:
        print("dask_scaling needs a CUDA GPU; cupy sees none: nothing measured")
        return 0
    try:
        import dask_cuda  # noqa: F401
    except ImportError as exc:
        print(f"dask_scaling needs dask-cuda ({exc}): pip install 'tropical-gemm-jit[dask-cuda]'")
        return 1
    report = run(args, gpus)
    path = save_report(report, args.out, f"dask-scaling-{gpus}gpu", table(report))
    if plot(report, path.with_suffix(".png")):
        print(f"wrote {path.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
