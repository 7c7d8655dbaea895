"""A user's script, run as a user runs it: import, call once, exit; then run it again (issue 29).

Each story runs as real fresh processes: a first run on empty caches (ours,
``CUPY_CACHE_DIR``, the driver's with ``CUDA_CACHE_DISABLE=1``) that makes
one call, synchronises and exits without waiting for anything itself (its
background compiles are under way), then a second run on the cache the first
left.  For every process it records the exit status and stderr (anything but
the script's own output is a failure), the time to the first result (from
before ``import tropical_gemm``, the CUDA context already up and the inputs
already on the GPU, to the result synchronised on the GPU), which tier served
the first launch, our compiles in the call, and what was on disk after the
run.  Second runs also time one more identical call on the GPU's clock (for
torch, the forward alone): the tuned kernel at work.

The stories are ``startup.py``'s (``max_plus`` on cupy, torch forward and
backward) and wider ones: larger and float64 ``max_plus``; the argmax of
1000×3000×777, which runs as stream-K (the stream family); a 256³ product
captured with ``tropical_gemm.graphed`` (which waits for the tuned kernel
before its capture) and replayed once; ``and_or``'s plain
product on random bools (density 0.5), on tensor cores on sm_80 and later;
an ``and_or`` einsum, the triangle ``ij,jk,ki->i`` of three 2048² bool
operands (a product, then a batched one on a transposed operand); and the
counting product ``count_max_plus`` of (values, counts) pairs.

    python benchmarks/lifecycle.py [--out DIR] [--repeats 20] [--jobs 4] [--stories NAME ...]

``--jobs`` runs that many first-and-second pairs side by side (each on its
own caches); the report says how many.  Writes ``lifecycle-<device>-<date>.json``
and prints the table.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, NamedTuple

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results_file import RESULTS, save_report  # noqa: E402
import startup  # noqa: E402
from startup import compile_bytecode, environment  # noqa: E402

if TYPE_CHECKING:
    import numpy as np


class Story(NamedTuple):
    """One user story: its front end (``cupy`` or ``torch``), dtype, M=K=N, argmax, and the call (a key of CALLS).

    ``front`` puts the operands on the GPU (torch: tensors that require grad)
    and times the call; ``call`` makes them and makes the call.  (Named
    tuples, not dataclasses: the tests load this script under a name that is
    not in ``sys.modules``, where a dataclass cannot resolve its annotations.)
    """

    front: str
    dtype: str
    size: int
    argmax: bool
    call: str


class Call(NamedTuple):
    """What a story's script does: its operands (host arrays from a seeded generator) and its one call.

    ``run(tg, story, inputs)`` is the script's call; ``timed`` the one more
    call of the second run on the GPU's clock, where it differs (torch: the
    forward alone).
    """

    operands: Callable[["np.random.Generator", Story], list]
    run: Callable[[ModuleType, Story, list], object]
    timed: Callable[[ModuleType, Story, list], object] | None = None


#: The and_or einsum's network: a triangle, whether each i closes one (ij, jk, ki of one size).
TRIANGLE = "ij,jk,ki->i"


def _integers(rng: "np.random.Generator", story: Story, count: int = 2) -> list:
    """``count`` square operands of the story's dtype, integers in [-1000, 1000)."""
    return [rng.integers(-1000, 1000, (story.size, story.size)).astype(story.dtype) for _ in range(count)]


def _truths(rng: "np.random.Generator", story: Story, count: int = 2) -> list:
    """``count`` square bool operands, each entry true with probability 0.5."""
    return [rng.random((story.size, story.size)) < 0.5 for _ in range(count)]


def _odd_integers(rng: "np.random.Generator", story: Story) -> list:
    """1000×3000 and 3000×777 operands (``ODD``), integers in [-1000, 1000): a product that takes stream-K."""
    m, k, n = ODD
    return [rng.integers(-1000, 1000, shape).astype(story.dtype) for shape in ((m, k), (k, n))]


#: The odd product's M, K, N (issue 32's): its tiles fill under a wave of the GPU, so it runs as stream-K.
ODD = (1000, 3000, 777)


def _triangle_truths(rng: "np.random.Generator", story: Story) -> list:
    return _truths(rng, story, TRIANGLE.count(",") + 1)


def _pairs(rng: "np.random.Generator", story: Story) -> list:
    """Two (values, counts) operands, flattened: values, counts (1 to 4 ways, int64 as the engine keeps them), ..."""
    return [x for values in _integers(rng, story) for x in (values, rng.integers(1, 5, values.shape, dtype="int64"))]


def _max_plus(tg: ModuleType, story: Story, x: list) -> object:
    return tg.matmul(x[0], x[1], "max_plus", argmax=story.argmax)


def _graphed_max_plus(tg: ModuleType, story: Story, x: list) -> object:
    """``tropical_gemm.graphed``'s capture (it waits for the tuned kernel), then one replay on the operands."""
    step = tg.graphed(lambda a, b: tg.matmul(a, b, "max_plus", argmax=story.argmax), x[0], x[1])
    return step(x[0], x[1])


def _torch_forward(tg: ModuleType, story: Story, x: list) -> object:
    from tropical_gemm.torch import tropical_matmul

    return tropical_matmul(x[0], x[1], "max_plus")  # with grad, as the first call: the same forward kernel


def _torch_forward_backward(tg: ModuleType, story: Story, x: list) -> object:
    _torch_forward(tg, story, x).sum().backward()
    return None


def _and_or(tg: ModuleType, story: Story, x: list) -> object:
    return tg.matmul(x[0], x[1], "and_or")  # no argmax: the tensor-core kernel where the GPU has it


def _and_or_einsum(tg: ModuleType, story: Story, x: list) -> object:
    return tg.einsum(TRIANGLE, *x, semiring="and_or")


def _count_max_plus(tg: ModuleType, story: Story, x: list) -> object:
    return tg.matmul((x[0], x[1]), (x[2], x[3]), "count_max_plus")


#: call -> what the story's script does.
CALLS: dict[str, Call] = {
    "max_plus": Call(_integers, _max_plus),
    "max_plus 1000×3000×777": Call(_odd_integers, _max_plus),
    "graphed max_plus": Call(_integers, _graphed_max_plus, _max_plus),
    "torch max_plus, forward + backward": Call(_integers, _torch_forward_backward, _torch_forward),
    "and_or": Call(_truths, _and_or),
    "and_or einsum": Call(_triangle_truths, _and_or_einsum),
    "count_max_plus": Call(_pairs, _count_max_plus),
}


def _from_startup(front: str, dtype: str, size: int, argmax: bool) -> Story:
    return Story(front, dtype, size, argmax, "torch max_plus, forward + backward" if front == "torch" else "max_plus")


#: name -> story: startup.py's, and wider ones (see the module's docstring).
STORIES: dict[str, Story] = {
    **{name: _from_startup(*row) for name, row in startup.STORIES.items()},
    "cupy f32 max_plus 4096³": Story("cupy", "float32", 4096, False, "max_plus"),
    "cupy f64 max_plus 1024³": Story("cupy", "float64", 1024, False, "max_plus"),
    "cupy f32 max_plus 1000×3000×777 (stream-K), argmax": Story("cupy", "float32", 1000, True,
                                                                "max_plus 1000×3000×777"),
    "cupy f32 max_plus 256³, graphed": Story("cupy", "float32", 256, False, "graphed max_plus"),
    "torch f32 max_plus 4096³, forward + backward": _from_startup("torch", "float32", 4096, True),
    "cupy and_or matmul 4096³": Story("cupy", "bool", 4096, False, "and_or"),
    "cupy and_or einsum": Story("cupy", "bool", 2048, False, "and_or einsum"),
    "cupy counting 1024³": Story("cupy", "float32", 1024, False, "count_max_plus"),
}


# ------------------------------------------------------------------ child


def child(name: str, timed_call: bool) -> dict[str, Any]:
    """One script: import, one call, synchronise; report, and return (the exit is the script's own)."""
    story = STORIES[name]
    call = CALLS[story.call]
    import numpy as np

    host = call.operands(np.random.default_rng(0), story)
    if story.front == "torch":
        import torch

        inputs = [torch.tensor(x, device="cuda", requires_grad=True) for x in host]
        sync = torch.cuda.synchronize
    else:
        import cupy

        inputs = [cupy.asarray(x) for x in host]  # a copy: no kernel of CuPy's
        sync = cupy.cuda.Device().synchronize
    sync()
    started = time.perf_counter()
    import tropical_gemm as tg

    call.run(tg, story, inputs)
    sync()
    first = time.perf_counter() - started
    stats = tg.jit.stats()
    report = {"first_result_s": first, "compiled": stats["compiled"], "baseline_launches": stats["baseline_launches"],
              "background_compiles": stats["background_compiles"],
              "first_tier": "baseline" if stats["baseline_launches"] else "tuned"}
    if timed_call:
        report["call_gpu_ms"] = gpu_ms(story, inputs)
    return report


def gpu_ms(story: Story, inputs: list) -> float:
    """One more call on the GPU's clock (events around it); for torch, the forward alone (inputs require grad)."""
    import tropical_gemm as tg

    call = CALLS[story.call]
    if story.front == "torch":
        import torch

        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        elapsed = begin.elapsed_time
    else:
        import cupy

        begin, end = cupy.cuda.Event(), cupy.cuda.Event()
        elapsed = functools.partial(cupy.cuda.get_elapsed_time, begin)
    begin.record()
    (call.timed or call.run)(tg, story, inputs)
    end.record()
    end.synchronize()
    return elapsed(end)


# ----------------------------------------------------------------- parent


def run_process(story: str, cache: Path, cupy_cache: Path, second: bool) -> dict[str, Any]:
    env = {**os.environ, "TROPICAL_GEMM_CACHE_DIR": str(cache), "CUPY_CACHE_DIR": str(cupy_cache),
           "CUDA_CACHE_DISABLE": "1"}
    for name in ("TROPICAL_GEMM_TIERED", "TROPICAL_GEMM_EXIT_WAIT"):  # the defaults, as a user has them
        env.pop(name, None)
    code = ("import sys, json; sys.path.insert(0, sys.argv[1]); import lifecycle; "
            "print(json.dumps(lifecycle.child(sys.argv[2], sys.argv[3] == 'second')), flush=True)")
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", code, str(Path(__file__).resolve().parent), story,
                           "second" if second else "first"], env=env, capture_output=True, text=True, timeout=300)
    lines = done.stdout.strip().splitlines()
    row: dict[str, Any] = json.loads(lines[-1]) if done.returncode == 0 and lines else {}
    row.update(status=done.returncode, stderr=done.stderr[-2000:], process_s=time.perf_counter() - started,
               on_disk=sum(1 for p in cache.rglob("*") if p.suffix in (".cubin", ".ptx")))
    row["clean"] = done.returncode == 0 and not done.stderr
    return row


def pair(story: str, scratch: Path) -> dict[str, Any]:
    cache = Path(tempfile.mkdtemp(dir=scratch))
    first = run_process(story, cache, Path(tempfile.mkdtemp(dir=scratch)), second=False)
    second = run_process(story, cache, Path(tempfile.mkdtemp(dir=scratch)), second=True)
    return {"first": first, "second": second}


def summary(story: str, pairs: list[dict[str, Any]]) -> dict[str, Any]:
    firsts, seconds = [p["first"] for p in pairs], [p["second"] for p in pairs]
    runs = firsts + seconds

    def median(rows: list[dict], key: str) -> "float | None":
        values = [r[key] for r in rows if key in r]
        return statistics.median(values) if values else None

    return {"story": story, "processes": len(runs), "abnormal": sum(not r["clean"] for r in runs),
            "signals": sum(r["status"] < 0 for r in runs),
            "first_s": median(firsts, "first_result_s"), "second_s": median(seconds, "first_result_s"),
            "second_compiles": sum(r.get("compiled", 1) for r in seconds),
            "second_baseline_launches": sum(r.get("baseline_launches", 1) for r in seconds),
            "first_tiers": sorted({r.get("first_tier", "?") for r in firsts}),
            "second_tiers": sorted({r.get("first_tier", "?") for r in seconds}),
            "on_disk_after_first": sorted({r["on_disk"] for r in firsts}),
            "second_call_gpu_ms": median(seconds, "call_gpu_ms")}


def table(report: dict[str, Any]) -> list[str]:
    env = report["environment"]
    lines = [f"Lifecycle: {report['repeats']} first runs (empty caches) and their second runs per story, "
             f"{report['jobs']} pairs side by side ({env['device']}, {env.get('commit', '')[:7]})",
             "| story | processes | abnormal exits | first result, first run | first result, second run "
             "| second runs: compiles / baseline launches | tier of the first launch (first / second) "
             "| kernels on disk after the first run | one more call, second run (GPU) |",
             "|---|---|---|---|---|---|---|---|---|"]
    for row in report["stories"]:
        def ms(value: "float | None", scale: float = 1e3) -> str:
            return "—" if value is None else f"{value * scale:.1f} ms"
        lines.append(f"| {row['story']} | {row['processes']} | {row['abnormal']} ({row['signals']} by a signal) "
                     f"| {ms(row['first_s'])} | {ms(row['second_s'])} "
                     f"| {row['second_compiles']} / {row['second_baseline_launches']} "
                     f"| {'/'.join(row['first_tiers'])} / {'/'.join(row['second_tiers'])} "
                     f"| {', '.join(map(str, row['on_disk_after_first']))} | {ms(row['second_call_gpu_ms'], 1)} |")
    total = sum(r["processes"] for r in report["stories"])
    lines.append(f"{total} processes, {sum(r['abnormal'] for r in report['stories'])} abnormal exits")
    return lines


def main(argv: "list[str] | None" = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=4)
    parser.add_argument("--stories", nargs="*", choices=list(STORIES), default=list(STORIES))
    args = parser.parse_args(argv)
    compile_bytecode()
    report: dict[str, Any] = {"environment": environment(), "repeats": args.repeats, "jobs": args.jobs,
                              "stories": [], "runs": {}}
    with tempfile.TemporaryDirectory(prefix="tg-lifecycle-") as scratch, ThreadPoolExecutor(args.jobs) as pool:
        for story in args.stories:
            pairs = list(pool.map(lambda _: pair(story, Path(scratch)), range(args.repeats)))
            report["runs"][story] = pairs
            report["stories"].append(summary(story, pairs))
            print(f"done: {story}: {report['stories'][-1]['abnormal']} abnormal", flush=True)
    save_report(report, args.out, "lifecycle", table(report))
    return 0 if all(r["abnormal"] == 0 for r in report["stories"]) else 1


if __name__ == "__main__":
    sys.exit(main())
