"""Throughput of the CUDA kernels, each as a share of its own ceiling, peers and the issue-16 targets in one run.

One tropical multiply-add counts as 2 ops, so T ops/s = 2·M·N·K / seconds.
The ceilings are measured first, on the same device, by ``ceilings.py``:
register-only chains of each (semiring, dtype)'s own ⊗-then-⊕ instructions,
and the copy bandwidth (the memory roofline of the shapes that move more
than they compute).  Every product goes through ``tropical_gemm.matmul``;
the peers are the broadcast idioms in torch and CuPy at the sizes they fit,
and the Rust crate tropical-gemm's own CUDA kernel on the same column-major
operands as ours (``rust_peer.py``; skipped, saying how to fetch its source,
where ``.peers/tropical-gemm/`` is absent).

    python benchmarks/throughput.py [--quick] [--out benchmarks/results]

Writes ``throughput-<device>-<date>.json`` (and a PNG where matplotlib is
installed) and prints the targets table last.
"""

from __future__ import annotations

import argparse
import datetime as dt
import platform
import sys
from pathlib import Path

import numpy as np

import tropical_gemm as tg
from ceilings import measure_bandwidth, measure_ceilings, time_gpu  # benchmarks/ is this script's own directory
from results_file import commit, pyplot, save_figure, save_report
import rust_peer

DTYPES = ("float32", "float64", "int32", "int64")


def random_operands(shape_a, shape_b, dtype, seed: int = 0, order: str = "C"):
    """Fresh random operands, drawn on the host (no CuPy kernel is compiled for them) and uploaded in ``order``
    ("C" or "F" for both, or one letter each: "CF" is A row-major, B column-major)."""
    import cupy as cp

    rng = np.random.default_rng(seed)

    def draw(shape):
        if np.dtype(dtype).kind == "f":
            return rng.standard_normal(shape, dtype=np.float32).astype(dtype)
        return rng.integers(-1000, 1000, shape, dtype=dtype)

    order_a, order_b = (order * 2)[:2] if len(order) == 1 else order
    return cp.asarray(np.asarray(draw(shape_a), order=order_a)), cp.asarray(np.asarray(draw(shape_b), order=order_b))


def bench_product(m, k, n, dtype="float32", semiring="max_plus", *, argmax=False, batch=(), graph=False,
                  order="C") -> float:
    a, b = random_operands((*batch, m, k), (*batch, k, n), dtype, order=order)
    out = tg.matmul(a, b, semiring, argmax=argmax)
    work = 2.0 * m * n * k * int(np.prod(batch or (1,)))
    reps = max(1, min(50, int(2e11 / max(work, 1))))
    return time_gpu(lambda: tg.matmul(a, b, semiring, argmax=argmax, out=out), reps=reps, graph=graph)


def bench_backward(m, k, n, dtype="float32", semiring="max_plus", deterministic=False) -> float:
    import cupy as cp

    a, b = random_operands((m, k), (k, n), dtype)
    c, idx = tg.matmul(a, b, semiring, argmax=True)
    g = cp.asarray(np.random.default_rng(1).standard_normal(c.shape, dtype=np.float32).astype(dtype))
    return time_gpu(lambda: tg.matmul_backward(g, a, b, idx, semiring, deterministic=deterministic), reps=3)


def bench_idioms(size: int) -> dict[str, float]:
    """The broadcast idioms users reach for first, where they fit in memory."""
    import cupy as cp

    out = {}
    a, b = random_operands((size, size), (size, size), "float32")
    try:
        out["cupy_broadcast"] = time_gpu(lambda: cp.max(a[:, :, None] + b[None], axis=1), reps=1, trials=3)
    except cp.cuda.memory.OutOfMemoryError:
        pass
    try:
        import torch

        ta, tb = torch.from_dlpack(a), torch.from_dlpack(b)
        out["torch_broadcast"] = time_gpu(lambda: torch.amax(ta[:, :, None] + tb[None], dim=1), reps=1, trials=3)
    except (ImportError, RuntimeError):
        pass
    cp.get_default_memory_pool().free_all_blocks()
    return out


def environment() -> dict[str, object]:
    import cupy as cp
    from tropical_gemm.jit.compiler import nvrtc_version

    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    versions = {"tropical_gemm": tg.__version__, "cupy": cp.__version__, "numpy": np.__version__,
                "python": platform.python_version(), "cuda_driver": cp.cuda.runtime.driverGetVersion(),
                "nvrtc": ".".join(map(str, nvrtc_version()))}
    try:
        import torch

        versions["torch"] = torch.__version__
    except ImportError:
        pass
    return {"device": props["name"].decode(), "arch": f"sm_{props['major']}{props['minor']}",
            "sms": props["multiProcessorCount"], "versions": versions, "commit": commit(),
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}



class Recorder:
    """Rows of the report: each product's time, T ops/s and share of its own ceiling, and the targets it meets."""

    def __init__(self, ceilings: dict[str, dict[str, float]], bandwidth: float) -> None:
        self.ceilings, self.bandwidth, self.rows = ceilings, bandwidth, []

    def product(self, case: str, seconds: float, work: float, semiring: str = "max_plus", dtype: str = "float32",
                target: "tuple[str, float] | None" = None, **extra) -> dict[str, object]:
        """``target``: (metric, bound), metric one of share (of the ceiling, ≥), tops (≥), of_plain (≥),
        of_roofline (≥), ours_speedup (a peer's time over ours, ≥), of_forward (≤)."""
        tops = work / seconds / 1e12
        row = {"case": case, "seconds": seconds, "tops": tops, "semiring": semiring, "dtype": dtype,
               "share": tops / self.ceilings[semiring][dtype], **extra}
        if "moved_bytes" in row:
            row["of_roofline"] = row["moved_bytes"] / seconds / 1e12 / self.bandwidth
        if target is not None:
            metric, bound = target
            row.update(metric=metric, target=bound,
                       met=row[metric] <= bound if metric == "of_forward" else row[metric] >= bound)
        self.rows.append(row)
        print(f"  {case:<46} {seconds * 1e3:9.3f} ms {tops:7.2f} T ops/s {row['share']:6.1%} of ceiling"
              + (f"  [{row['metric']} {row[row['metric']]:.3g} vs {bound}: {'met' if row['met'] else 'MISSED'}]"
                 if target else ""), file=sys.stderr, flush=True)
        return row


def square_sweep(rec: Recorder, quick: bool) -> None:
    for s in ([256, 1024, 2048, 4096] if quick else [256, 512, 1024, 2048, 4096, 8192]):
        target = {4096: ("share", 0.92), 8192: ("share", 0.92), 2048: ("tops", 25.0), 1024: ("share", 0.75),
                  512: ("share", 0.45)}.get(s)
        rec.product(f"square {s}^3 f32 max_plus", bench_product(s, s, s), 2 * s**3, size=s, op="forward",
                    timing="calls", target=target)
        if s <= 1024:  # where the host's issue time can hide the kernel
            rec.product(f"square {s}^3 f32 max_plus (graph)", bench_product(s, s, s, graph=True), 2 * s**3,
                        size=s, op="forward", timing="graph")


def semiring_grid(rec: Recorder, size: int) -> dict[tuple[str, str], float]:
    """Every semiring × dtype at ``size``³, plain and with argmax; returns the plain times."""
    plain = {}
    for dtype in DTYPES:
        for semiring in (s for s in tg.semirings() if not tg.get_semiring(s).boolean):  # and_or: boolean.py
            share_target = {("max_plus", "int32"): 0.90, ("max_plus", "float64"): 0.85,
                            ("max_plus", "int64"): 0.80}.get((semiring, dtype))
            if semiring in ("max_min", "min_max"):
                share_target = 0.92
            t = bench_product(size, size, size, dtype, semiring)
            plain[(dtype, semiring)] = t
            rec.product(f"{semiring} {dtype} {size}^3", t, 2 * size**3, semiring, dtype, size=size, op="forward",
                        target=None if share_target is None or (semiring, dtype) == ("max_plus", "float32")
                        else ("share", share_target))
            t_arg = bench_product(size, size, size, dtype, semiring, argmax=True)
            rec.product(f"{semiring} {dtype} {size}^3 argmax", t_arg, 2 * size**3, semiring, dtype, size=size,
                        op="forward_argmax", of_plain=t / t_arg, target=("of_plain", 0.85))
    return plain


def shapes(rec: Recorder) -> None:
    """Shapes that do not fill the GPU with square tiles: batched, odd, K-small, skinny."""
    rec.product("batched 256 x 256^3 f32", bench_product(256, 256, 256, batch=(256,)), 2 * 256**4, op="forward",
                target=("share", 0.80))
    for m, k, n in [(1000, 3000, 777), (3000, 1000, 2047)]:
        rec.product(f"odd {m}x{k}x{n} f32", bench_product(m, k, n), 2 * m * k * n, op="forward",
                    target=("share", 0.75))
    # (1, 4096, 4096): the vector-matrix step of an HMM's Viterbi einsum, bound by reading the matrix
    for m, k, n in [(4096, 32, 4096), (2**21, 4, 4), (8, 4096, 4096), (4096, 4096, 8), (1, 4096, 4096)]:
        moved = 4 * (m * k + k * n + m * n)
        bound = ("of_roofline", 0.60) if (m, k, n) in [(4096, 32, 4096), (2**21, 4, 4)] else None
        for graph in (False, True):
            rec.product(f"skinny {m}x{k}x{n} f32" + (" (graph)" if graph else ""), bench_product(m, k, n, graph=graph),
                        2 * m * n * k, op="forward", timing="graph" if graph else "calls", moved_bytes=moved,
                        target=bound if not graph else None)


def backward_and_peers(rec: Recorder, quick: bool) -> None:
    fwd = bench_product(4096, 4096, 4096)
    for det in (False, True):
        t = bench_backward(4096, 4096, 4096, deterministic=det)
        rec.product(f"backward 4096^3 f32 max_plus {'deterministic' if det else 'atomic'}", t, 2 * 4096**3,
                    op="backward", of_forward=t / fwd, target=None if det else ("of_forward", 0.15))
    for s in ([1024] if quick else [1024, 2048]):
        ours = bench_product(s, s, s)
        for name, t in bench_idioms(s).items():
            rec.product(f"peer {name} {s}^3 f32 max_plus", t, 2 * s**3, op="peer", size=s, ours_speedup=t / ours)


def rust_crate(rec: Recorder, quick: bool) -> dict[str, object]:
    """Issue 32: ours and the Rust crate's CUDA kernel on the same column-major f32 operands; what was measured.

    Ours goes through ``tg.matmul`` on the Fortran-order arrays as a user's
    call would; the crate's kernel is launched as its host code launches it.
    """
    try:
        peer = rust_peer.load(("float32",))
    except rust_peer.PeerUnavailable as exc:
        print(f"  Rust crate kernel skipped: {exc}", file=sys.stderr, flush=True)
        return {"skipped": str(exc), "fetch": rust_peer.FETCH_COMMAND}
    for s in ((2048, 4096) if quick else (2048, 4096, 8192)):
        r = rust_peer.compare(peer, *random_operands((s, s), (s, s), "float32", order="F"))
        rec.product(f"column-major {s}^3 f32 max_plus", r["ours_s"], 2 * s**3, size=s, op="forward", layout="F")
        rec.product(f"peer rust crate kernel {s}^3 f32 max_plus", r["crate_s"], 2 * s**3, op="peer", size=s,
                    layout="F", ours_speedup=r["ours_speedup"], agrees=r["agrees"], mismatches=r["mismatches"],
                    target=("ours_speedup", 1.3) if s >= 4096 else None)
    return peer.describe()


def run(quick: bool) -> dict[str, object]:
    env = environment()
    print(f"device: {env['device']} ({env['arch']}), measuring ceilings...", file=sys.stderr, flush=True)
    ceilings = measure_ceilings()
    bandwidth = measure_bandwidth()
    rec = Recorder(ceilings, bandwidth["best"])
    square_sweep(rec, quick)
    semiring_grid(rec, 2048 if quick else 4096)
    shapes(rec)
    backward_and_peers(rec, quick)
    crate = rust_crate(rec, quick)
    return {"environment": env, "command": "python benchmarks/throughput.py" + (" --quick" if quick else ""),
            "ceilings_tops": ceilings, "bandwidth_tbs": bandwidth, "rust_peer": crate, "results": rec.rows}


def table(report: dict[str, object]) -> list[str]:
    c = report["ceilings_tops"]
    lines = ["ceilings, T ops/s (register-only chains of each mix):",
             f"  {'':<10}" + "".join(f"{d:>9}" for d in DTYPES)]
    lines += [f"  {sr:<10}" + "".join(f"{c[sr][d]:9.1f}" for d in DTYPES) for sr in c]
    lines.append("copy bandwidth (read + write): " + ", ".join(f"{k} {v:.2f} TB/s"
                                                            for k, v in report["bandwidth_tbs"].items()))
    lines.append(f"{'case':<46} {'ms':>9} {'T ops/s':>8} {'ceiling':>8}  target")
    for r in report["results"]:
        verdict = (f"{r['metric']} {r[r['metric']]:.3g} {'<=' if r['metric'] == 'of_forward' else '>='} "
                   f"{r['target']}: {'met' if r['met'] else 'MISSED'}") if "target" in r else ""
        peer = f"ours {r['ours_speedup']:.3g}x as fast" if "ours_speedup" in r and "target" not in r else ""
        if r.get("agrees") is False:
            peer += f"; RESULTS DIFFER in {r['mismatches']} entries"
        lines.append(f"{r['case']:<46} {r['seconds'] * 1e3:9.3f} {r['tops']:8.2f} {r['share']:8.1%}  {verdict}{peer}")
    if "skipped" in report.get("rust_peer", {}):
        lines.append(f"Rust crate kernel skipped: {report['rust_peer']['skipped']}")
    missed = [r["case"] for r in report["results"] if r.get("met") is False]
    lines.append(f"targets met: {sum(1 for r in report['results'] if r.get('met'))} of "
                 f"{sum(1 for r in report['results'] if 'met' in r)}; missed: {', '.join(missed) or 'none'}")
    return lines


def plot(report: dict[str, object], path: Path) -> bool:
    plt = pyplot()
    if plt is None:
        return False
    rows = report["results"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.5))
    for timing, style, label in (("calls", "o-", "tropical_gemm f32 max_plus"),
                                 ("graph", "s--", "the same, kernels only (CUDA graph replay)")):
        sq = [r for r in rows if str(r["case"]).startswith("square") and r.get("timing") == timing]
        left.plot([r["size"] for r in sq], [r["tops"] for r in sq], style, label=label)
    left.axhline(report["ceilings_tops"]["max_plus"]["float32"], color="gray", ls="--", label="measured f32 ceiling")
    for r in (r for r in rows if r["op"] == "peer"):
        left.plot([r["size"]], [r["tops"]], "x", label=r["case"])
    left.set(xscale="log", yscale="log", xlabel="M = N = K", ylabel="T tropical ops/s",
             title=report["environment"]["device"])
    left.set_xscale("log", base=2)
    left.legend(fontsize=7)
    judged = [r for r in rows if "met" in r]
    values = [r[r["metric"]] / r["target"] if r["metric"] != "of_forward" else r["target"] / r[r["metric"]]
              for r in judged]
    right.barh(range(len(judged)), values, color=["tab:green" if r["met"] else "tab:red" for r in judged])
    right.axvline(1.0, color="black", lw=1)
    right.set_yticks(range(len(judged)), [r["case"] for r in judged], fontsize=6)
    right.set_xlabel("measured / target (≥ 1: met)")
    right.invert_yaxis()
    return save_figure(fig, path, dpi=120)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer and smaller sizes")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args(argv)
    report = run(args.quick)
    path = save_report(report, args.out, "throughput", table(report))
    if plot(report, path.with_suffix(".png")):
        print(f"wrote {path.with_suffix('.png')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
