"""Tropical einsum on the GPU or the CPU: the issue-17 cases, against torch-semiring-einsum in the same run.

Cases (max_plus, float32; each timed warm, i.e. with the plan cached and the
kernels loaded, as the median of a few runs, synchronised).  Each row's
``size`` says which target it speaks to: "large" rows are big products, where
the issue asks for 50x torch-semiring-einsum; "memory-bound" rows are large
too, but each step reads its operand once (matrix-vector steps), so reading
the operands at the GPU's copy bandwidth bounds both sides: such a row also
reports that floor (``floor_seconds``), the most any implementation could gain
on torch-semiring-einsum (``speedup_ceiling``) and our share of the bandwidth
(``of_bandwidth``); "overhead-bound" rows are many small steps, whose time is
mostly the host's.

* ``matmul-N``: "ij,jk->ik", values alone (``seconds``) and with the
  configuration, against torch-semiring-einsum's ``log_viterbi_einsum_forward``
  (the same einsum with its argmax); argmaxes compared too;
* large (sized down on the CPU): ``bmm-BxN`` "bij,bjk->bik"; ``two-k-IxJxK``
  "ijk,jkl->il" (two indices contracted by one product); ``chain-8xN``, eight
  N x N matrices; ``hmm-TxS``, Viterbi with S states over T steps (path checked);
* ``hmm``: Viterbi of a 1000-step, 64-state HMM with the path (configuration);
* ``mis-60``, ``mis-120``: maximum independent set of random 3-regular graphs
  with the set (configuration), independence checked;
* ``chain-100``: a chain of 100 square matrices;
* ``overhead-16``: host time per pairwise step on 16³ products (a chain of 101 matrices; on cupy arrays the
  replayed launches), beside the array path (``lower.execute``), one bare ``tropical_gemm.matmul`` call, one
  bare prepared launch (GPU), and the array path's einsum layer alone (the engine's product stubbed out).

torch-semiring-einsum contracts a whole einsum at once, so for the networks it runs each of our plan's steps
(same order, same inputs), which is the best case for it; values must be identical.  Every row has ``seconds``
(values alone) and ``seconds_with_configuration``, and the speed-ups of each against torch-semiring-einsum
(whose steps return their argmax too).  Without it installed the comparison columns are skipped, with a note.
Writes ``einsum-<device>-<date>.json`` and an SVG bar chart next to it.

    python benchmarks/einsum.py [--device cuda|cpu] [--out DIR] [--quick] [--profile-steps] [--overhead-only]
"""

from __future__ import annotations

import argparse
import datetime
import platform
import statistics
import string
import sys
import time
from pathlib import Path

import networkx as nx
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "examples"))

import tropical_gemm as tg  # noqa: E402
from results_file import RESULTS, save_report  # noqa: E402
from tropical_gemm.einsum import _check_operands, einsum_plan, optimize_key, parse_call  # noqa: E402
from tropical_gemm.einsum.lower import ArrayOps, array_ops, execute  # noqa: E402
from tropical_gemm.einsum.plan import Pair, make_plan  # noqa: E402
from tropical_gemm.semirings import get_semiring  # noqa: E402

#: A row's ``size``: its steps are large products (the issue's "large sizes" target applies), large
#: steps bound by reading their operands once (matrix-vector: the bandwidth bounds any speed-up), or
#: many small steps whose time is mostly the host's (the per-step overhead target applies).
SIZE_LARGE, SIZE_MEMORY, SIZE_SMALL = "large", "memory-bound", "overhead-bound"


class Device:
    """Arrays and synchronisation for one side (numpy on the CPU, cupy on the GPU)."""

    def __init__(self, name: str) -> None:
        self.name = name
        if name == "cuda":
            import cupy

            self.xp, self.sync = cupy, cupy.cuda.Device().synchronize
            self.label = cupy.cuda.runtime.getDeviceProperties(0)["name"].decode()
        else:
            self.xp, self.sync, self.label = np, (lambda: None), f"cpu-{platform.machine()}"

    def put(self, x: np.ndarray):
        return self.xp.asarray(x)

    def get(self, x) -> np.ndarray:
        return x.get() if hasattr(x, "get") else np.asarray(x)


def timed(fn, sync, repeats: int) -> tuple[float, object]:
    """Median seconds of ``repeats`` warm runs (one untimed run first) and the last result."""
    result = fn()
    sync()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        result = fn()
        sync()
        samples.append(time.perf_counter() - t0)
    return statistics.median(samples), result


def tse_module():
    try:
        import torch_semiring_einsum
    except ImportError:
        return None
    return torch_semiring_einsum


def tse_steps(tse, tensors: list, plan):
    """Run our plan's steps with torch-semiring-einsum's max-plus einsum (same order, same inputs, already
    on its device, as ours are: no transfer is timed); the result."""
    live = list(tensors)
    for step in plan.steps:
        if isinstance(step, Pair):
            inputs = [live[step.left], live[step.right]]
            for p in sorted((step.left, step.right), reverse=True):
                live.pop(p)
            terms = [_labels_of(step, "a"), _labels_of(step, "b")]
        else:
            inputs, terms = [live[step.src] if step.in_place else live.pop(step.src)], [step.labels]
        names = {lab: string.ascii_letters[i] for i, lab in enumerate(dict.fromkeys(sum(terms, ())))}
        eq = ",".join("".join(names[x] for x in t) for t in terms) + "->" + "".join(names[x] for x in step.result)
        values, _ = tse.log_viterbi_einsum_forward(tse.compile_equation(eq), *inputs)
        if isinstance(step, Pair) or not step.in_place:
            live.append(values)
        else:
            live[step.src] = values
    return live[0].permute(*plan.final) if plan.final else live[0]


def _labels_of(step: Pair, side: str) -> tuple[int, ...]:
    """The operand's own axis order, from the grouped order and the permutation that made it."""
    grouped = step.batch + step.left_free + step.contracted if side == "a" else \
        step.batch + step.contracted + step.right_free
    perm = step.a_perm if side == "a" else step.b_perm
    own = [0] * len(perm)
    for g, axis in zip(grouped, perm):
        own[axis] = g
    return tuple(own)


def case_single(dev: Device, name: str, eq: str, shapes: list[tuple[int, ...]], tse, repeats: int,
                size: str = SIZE_SMALL) -> dict:
    """One einsum that is one product: values alone, and with the configuration (its argmax), against
    torch-semiring-einsum's ``log_viterbi_einsum_forward`` (the same einsum, with its argmax)."""
    rng = np.random.default_rng(sum(map(sum, shapes)))
    host = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    ops = [dev.put(x) for x in host]
    ours, values = timed(lambda: tg.einsum(eq, *ops), dev.sync, repeats)
    with_config, got = timed(lambda: tg.einsum(eq, *ops, return_configuration=True), dev.sync, repeats)
    row = {"case": name, "size": size, "seconds": ours, "seconds_with_configuration": with_config}
    if tse is not None:
        import torch

        tops = [torch.as_tensor(x, device=dev.name) for x in host]
        compiled = tse.compile_equation(eq)
        sync = torch.cuda.synchronize if dev.name == "cuda" else (lambda: None)
        theirs, want = timed(lambda: tse.log_viterbi_einsum_forward(compiled, *tops), sync, max(1, repeats // 2))
        want_values, want_argmax = want[0].cpu().numpy(), want[1].cpu().numpy()
        # torch-semiring-einsum's argmax has one last axis: the contracted indices by first appearance
        contracted = [c for c in dict.fromkeys(eq.replace(",", "").split("->")[0]) if c not in eq.split("->")[1]]
        row.update(tse_seconds=theirs, speedup=theirs / ours, speedup_with_configuration=theirs / with_config,
                   identical=bool(np.array_equal(dev.get(values), want_values)
                                  and np.array_equal(dev.get(got[0]), want_values)),
                   same_argmax=all(np.array_equal(dev.get(got[1][c]), want_argmax[..., t])
                                   for t, c in enumerate(contracted)))
    return row


def left_fold(n: int) -> list[tuple[int, int]]:
    """The path that folds operands into the running result from the left (each result is appended last)."""
    return [(0, 1)] + [(0, n - 1 - t) for t in range(1, n - 1)]


def network_case(dev: Device, name: str, args: list, tse, repeats: int, check=None, optimize="greedy",
                 size: str = "overhead-bound") -> dict:
    """A whole network without its configuration (``seconds``) and with it, against torch-semiring-einsum
    running our plan's steps (each returns its argmax too); ``size`` says whether its steps are large
    products or many small ones."""
    put = [dev.put(x) if i % 2 == 0 and i < len(args) - 1 else x for i, x in enumerate(args)]
    t0 = time.perf_counter()
    plan = einsum_plan(*args, optimize=optimize)
    planning = time.perf_counter() - t0
    t0 = time.perf_counter()
    tg.einsum(*put, optimize=optimize, return_configuration=True)
    dev.sync()
    first = time.perf_counter() - t0
    with_config, (value, config) = timed(lambda: tg.einsum(*put, optimize=optimize, return_configuration=True),
                                         dev.sync, repeats)
    ours, _ = timed(lambda: tg.einsum(*put, optimize=optimize), dev.sync, repeats)
    row = {"case": name, "size": size, "seconds": ours, "seconds_with_configuration": with_config,
           "planning_seconds": planning, "first_call_seconds": first, "steps": len(plan.steps),
           "largest_intermediate": max(int(np.prod(s.out_shape)) for s in plan.steps),
           "value": float(dev.get(value)) if dev.get(value).size == 1 else None,
           "operand_bytes": sum(x.nbytes for x in args[0::2][: len(plan.operands)])}
    if check is not None:
        row["checked"] = bool(check(float(dev.get(value)), {k: dev.get(v) for k, v in config.items()}))
    if tse is not None and row["largest_intermediate"] <= 2**22:
        import torch

        sync = torch.cuda.synchronize if dev.name == "cuda" else (lambda: None)
        try:
            tensors = [torch.as_tensor(np.asarray(x), device=dev.name) for x in args[0::2][: len(plan.operands)]]
            theirs, want = timed(lambda: tse_steps(tse, tensors, plan), sync, max(1, repeats // 2))
        except RuntimeError as exc:  # torch's out-of-memory error is one: record it, keep the other rows
            row["tse_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
            return row
        row.update(tse_seconds=theirs, speedup=theirs / ours, speedup_with_configuration=theirs / with_config,
                   identical=bool(np.array_equal(dev.get(value), want.cpu().numpy())))
    return row


def hmm_args(steps: int, states: int) -> tuple[list, object]:
    import einsum_viterbi as vit

    hmm = vit.make_hmm(states, 16, steps, np.random.default_rng(0))
    log_pi, log_a, log_e, obs = hmm
    args: list = [(log_pi + log_e[:, obs[0]]).astype(np.float32), [0]]
    for t, o in enumerate(obs[1:], start=1):
        args += [(log_a + log_e[:, o][None, :]).astype(np.float32), [t - 1, t]]
    want_score, want_path = vit.dp_viterbi(*hmm)

    def score(path: list[int]) -> float:
        return float(log_pi[path[0]] + log_e[path[0], obs[0]]
                     + sum(log_a[p, q] + log_e[q, o] for p, q, o in zip(path, path[1:], obs[1:])))

    def check(value, config):
        # float32 steps may break a float64 near-tie the other way: an optimal path scores the optimum
        path = [int(config[t]) for t in range(steps)]
        return abs(value - want_score) < 1e-2 and (path == want_path or abs(score(path) - want_score) < 1e-3)

    return args + [[]], check


def mis_args(vertices: int) -> tuple[list, object]:
    import einsum_mis as mis

    graph = nx.random_regular_graph(3, vertices, seed=0)
    args = mis.network(graph, np)

    def check(value, config):
        chosen = {v for v in graph.nodes if int(config[v]) == 1}
        return len(chosen) == int(value) and not any(graph.has_edge(u, v) for u in chosen for v in chosen)

    return args, check


def chain_args(length: int, n: int) -> list:
    rng = np.random.default_rng(1)
    args: list = []
    for t in range(length):
        args += [rng.standard_normal((n, n)).astype(np.float32), [t, t + 1]]
    return args + [[0, length]]


def chain_101(dev: Device) -> tuple[list, list]:
    """101 matrices of 16² on the device, and the left fold (each result, appended last, meets the next one)."""
    args = chain_args(101, 16)
    return [dev.put(x) if i % 2 == 0 and i < len(args) - 1 else x for i, x in enumerate(args)], left_fold(101)


def overhead(dev: Device, calls: int) -> dict:
    """Host time per pairwise step at 16³, warm: ``tg.einsum`` (on cupy arrays the replayed launches), the array
    path (``lower.execute``) on the same call, one bare product call, and on the GPU one bare prepared launch."""
    put, path = chain_101(dev)
    a, b = put[0], put[2]
    per_einsum, per_general, per_matmul = [], [], []
    for _ in range(calls):  # interleaved rounds, best of each: robust to a shared, noisy host
        per_einsum.append(timed(lambda: tg.einsum(*put, optimize=path), dev.sync, 1)[0])
        per_general.append(timed(lambda: array_path(dev, put, path), dev.sync, 1)[0])
        per_matmul.append(timed(lambda: [tg.matmul(a, b) for _ in range(100)], dev.sync, 1)[0] / 100)
    per_einsum, per_matmul = min(per_einsum), min(per_matmul)
    layer = min(einsum_layer(dev, put, path) for _ in range(calls))
    row = {"case": "overhead-16", "seconds_per_step": per_einsum / 100, "matmul_seconds_per_call": per_matmul,
           "array_path_seconds_per_step": min(per_general) / 100,
           "einsum_overhead_per_step": per_einsum / 100 - per_matmul, "einsum_layer_per_step": layer / 100}
    if dev.name == "cuda":
        row["launch_seconds_per_call"] = min(prepared_launch(a, b) for _ in range(calls))
    return row


def array_path(dev: Device, put: list, path: list, ops=None):
    """One einsum call through the array path (``lower.execute``: views, then one engine call per step)."""
    parsed, operands = parse_call(put[0], tuple(put[1:]))
    semiring = get_semiring("max_plus")
    _, operands = _check_operands(operands, semiring)
    plan = make_plan(parsed, optimize_key(path))
    return execute(plan, parsed, operands, ops or array_ops(dev.name), semiring, False)


def prepared_launch(a, b) -> float:
    """Seconds of one bare prepared launch of the 16³ product on addresses (the replay's unit of work)."""
    import cupy

    from tropical_gemm.engines import cuda

    strides = tuple(s // a.itemsize for s in a.strides)
    product = cuda.prepare_product(a.shape, strides, b.shape, strides, "float32", "max_plus", False, a.device.id)
    c = cupy.empty(a.shape, a.dtype)
    at = (a.data.ptr, b.data.ptr, c.data.ptr, None, cupy.cuda.get_current_stream().ptr)
    return timed(lambda: [product.launch(*at) for _ in range(100)], cupy.cuda.Device().synchronize, 1)[0] / 100


def profile_steps(dev: Device, calls: int = 200) -> None:
    """cProfile of the overhead case (101 matrices of 16², a left fold): where each step's host time goes,
    the einsum layer's functions beside the engine's."""
    import cProfile
    import pstats

    put, path = chain_101(dev)
    tg.einsum(*put, optimize=path)
    dev.sync()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(calls):
        tg.einsum(*put, optimize=path)
    dev.sync()
    profiler.disable()
    print(f"{calls} calls of 100 steps each; per-step figures are the listed times / {calls * 100}")
    pstats.Stats(profiler).sort_stats("tottime").print_stats(30)


def einsum_layer(dev: Device, put: list, path: list) -> float:
    """Seconds of one array-path call with the engine's product stubbed out (a ready buffer): that path's own
    host time (parsing, plan lookup, views, step loop), apart from the engine's per-call path."""
    ops = ArrayOps(None, array_ops(dev.name).strided, array_ops(dev.name).reduce_rows, array_ops(dev.name).regroup)
    ready = dev.put(np.zeros((1, 16, 16), np.float32))
    ops.product = lambda a, b, semiring, want_argmax: (ready, None)  # an instance attribute hides the method
    return timed(lambda: array_path(dev, put, path, ops), dev.sync, 1)[0]


def large_cases(dev: Device, tse, repeats: int, gpu: bool) -> list[dict]:
    """The issue's "large sizes" target: big products, a batch, two contracted indices at once, a chain of
    big matrices and a many-state HMM (each sized down on the CPU, where only the code path is checked)."""
    n, b, ij, kk, states, steps = (2048, 64, 1024, 64, 4096, 32) if gpu else (256, 8, 128, 16, 256, 16)
    rows = [case_single(dev, f"bmm-{b}x{n // 4}", "bij,bjk->bik", [(b, n // 4, n // 4)] * 2, tse, repeats,
                        SIZE_LARGE),
            case_single(dev, f"two-k-{ij}x{kk}x{kk}", "ijk,jkl->il", [(ij, kk, kk), (kk, kk, ij)], tse, repeats,
                        SIZE_LARGE)]
    rows.append(network_case(dev, f"chain-8x{n}", chain_args(8, n), tse, repeats, size=SIZE_LARGE))
    args, check = hmm_args(steps, states)
    rows.append(network_case(dev, f"hmm-{steps}x{states}", args, tse, repeats, check, optimize=left_fold(steps),
                             size=SIZE_MEMORY))
    return rows


def bandwidth_floor(row: dict, operand_bytes: int, bandwidth: float) -> dict:
    """A memory-bound row's floor: its operands read once at ``bandwidth`` (bytes moved per second, as a
    device-to-device copy moves them), and what it bounds."""
    floor = operand_bytes / bandwidth
    extra = {"bandwidth_bytes_per_second": bandwidth, "floor_seconds": floor, "of_bandwidth": floor / row["seconds"]}
    if "tse_seconds" in row:
        extra["speedup_ceiling"] = row["tse_seconds"] / floor
    return extra


def run(device: str, quick: bool) -> dict:
    dev = Device(device)
    tse = tse_module()
    gpu = device == "cuda"
    repeats = 3 if quick else 5
    rows = [case_single(dev, f"matmul-{n}", "ij,jk->ik", [(n, n), (n, n)], tse, repeats,
                        SIZE_LARGE if n >= 1024 else SIZE_SMALL) for n in ((256, 1024, 2048) if gpu else (64, 256))]
    rows += large_cases(dev, tse, repeats, gpu)
    if gpu:  # the copy bandwidth of this GPU, measured now, for the memory-bound rows' floor
        from ceilings import measure_bandwidth

        bandwidth = measure_bandwidth()["best"] * 1e12  # bytes moved (read plus written) per second by a copy
        for row in rows:
            if row["size"] == SIZE_MEMORY:
                row.update(bandwidth_floor(row, row["operand_bytes"], bandwidth))
    args, check = hmm_args(1000, 64)
    # opt_einsum's greedy cost (memory removed) ties vector-matrix with matrix-matrix steps on a chain and
    # may pick the latter; Viterbi's own order is the left fold, given as an explicit path.
    rows.append(network_case(dev, "hmm-1000x64", args, tse, repeats, check, optimize=left_fold(1000)))
    for v in (60, 120):
        args, check = mis_args(v)
        rows.append(network_case(dev, f"mis-{v}", args, tse if (gpu or v == 60) else None, repeats, check))
    rows.append(network_case(dev, "chain-100", chain_args(100, 256 if gpu else 64), tse, repeats))
    rows.append(overhead(dev, 20 if quick else 50))
    return {
        "environment": {"device": dev.label, "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
                        "tropical_gemm": tg.__version__, "python": platform.python_version(),
                        "torch_semiring_einsum": None if tse is None else getattr(tse, "__version__", "installed"),
                        "note": None if tse is not None else
                        "torch-semiring-einsum is not installed: comparison skipped (pip install torch-semiring-einsum)"},
        "semiring": "max_plus", "dtype": "float32", "rows": rows,
    }


def table(report: dict) -> list[str]:
    """One line per row: times, speed-ups without and with the configuration, and the checks."""
    lines = [f"{'case':<20}{'size':<15}{'ours (s)':>11}{'+config (s)':>12}{'tse (s)':>11}{'speedup':>9}"
             f"{'+config':>9}  identical  notes"]
    for r in report["rows"]:
        if r["case"] == "overhead-16":
            lines.append(overhead_line(r))
            continue
        cells = [f"{r[k]:>{w}.3e}" if k in r else f"{'-':>{w}}"
                 for k, w in (("seconds", 11), ("seconds_with_configuration", 12), ("tse_seconds", 11))]
        cells += [f"{r[k]:>9.1f}" if k in r else f"{'-':>9}" for k in ("speedup", "speedup_with_configuration")]
        notes = ", ".join(f"{k}={r[k]:.4g}" if isinstance(r[k], float) else f"{k}={r[k]}"
                          for k in ("checked", "same_argmax", "largest_intermediate", "planning_seconds",
                                    "first_call_seconds", "of_bandwidth", "speedup_ceiling", "tse_error")
                          if k in r)
        lines.append(f"{r['case']:<20}{r.get('size', '-'):<15}{''.join(cells)}  "
                     f"{str(r.get('identical', '-')):9}  {notes}")
    if report["environment"]["note"]:
        lines.append(report["environment"]["note"])
    return lines


def overhead_line(r: dict) -> str:
    launch = r.get("launch_seconds_per_call")
    return (f"{'overhead-16':<20}{SIZE_SMALL:<15}{r['seconds_per_step']:>11.2e}  per step "
            f"(array path {r['array_path_seconds_per_step'] * 1e6:.1f} us); bare matmul "
            f"{r['matmul_seconds_per_call'] * 1e6:.1f} us"
            f"{'' if launch is None else f'; one prepared launch {launch * 1e6:.1f} us'}; the array path's einsum "
            f"layer alone (engine stubbed) {r['einsum_layer_per_step'] * 1e6:.1f} us per step")


def svg(report: dict) -> str:
    """Bars of our time and torch-semiring-einsum's per case, log scale, no plotting library needed."""
    rows = [r for r in report["rows"] if "seconds" in r]
    lo, hi = -6, 2
    width, bar, gap, left = 640, 12, 14, 110
    height = 40 + len(rows) * (2 * bar + gap)

    def length(s: float) -> float:
        return max(2.0, (np.log10(max(s, 10.0**lo)) - lo) / (hi - lo) * (width - left - 20))

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" font-family="sans-serif" '
             f'font-size="11"><text x="10" y="16">tropical einsum vs torch-semiring-einsum, '
             f'{report["environment"]["device"]} (seconds, log scale; shorter is faster)</text>']
    y = 30
    for r in rows:
        parts.append(f'<text x="10" y="{y + bar}">{r["case"]}</text>')
        parts.append(f'<rect x="{left}" y="{y}" width="{length(r["seconds"]):.1f}" height="{bar}" fill="#1f77b4"/>')
        parts.append(f'<text x="{left + length(r["seconds"]) + 4:.1f}" y="{y + bar - 2}">{r["seconds"]:.2e}</text>')
        if "tse_seconds" in r:
            t = r["tse_seconds"]
            parts.append(f'<rect x="{left}" y="{y + bar}" width="{length(t):.1f}" height="{bar}" fill="#ff7f0e"/>')
            parts.append(f'<text x="{left + length(t) + 4:.1f}" y="{y + 2 * bar - 2}">{t:.2e} '
                         f'({r["speedup"]:.0f}x)</text>')
        y += 2 * bar + gap
    parts.append(f'<text x="{left}" y="{height - 4}" fill="#1f77b4">tropical_gemm.einsum</text>'
                 f'<text x="{left + 160}" y="{height - 4}" fill="#ff7f0e">torch-semiring-einsum</text></svg>')
    return "\n".join(parts) + "\n"


def main(argv: "list[str] | None" = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--quick", action="store_true", help="fewer repeats")
    parser.add_argument("--profile-steps", action="store_true",
                        help="only profile the overhead case's host path (cProfile, top functions) and exit")
    parser.add_argument("--overhead-only", action="store_true",
                        help="only time the overhead row (host time per step at 16³), print it and exit")
    args = parser.parse_args(argv)
    if args.overhead_only:
        row = overhead(Device(args.device), 20 if args.quick else 50)
        print(overhead_line(row), row, sep="\n")
        return 0
    if args.profile_steps:
        profile_steps(Device(args.device))
        return 0
    report = run(args.device, args.quick)
    path = save_report(report, args.out, "einsum", table(report))
    path.with_suffix(".svg").write_text(svg(report))
    print(f"wrote {path.with_suffix('.svg')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
