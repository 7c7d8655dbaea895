"""Throughput of the CUDA kernels, as ratios to ceilings and peers measured in the same run.

One tropical multiply-add counts as 2 ops, so T ops/s = 2·M·N·K / seconds.
The ceilings are measured here, on the same device, by issue-rate
microbenchmarks (independent register chains doing exactly the kernels'
instruction mix) and a device-to-device copy; the peers are the broadcast
idioms in torch and CuPy at the sizes they fit.

    python benchmarks/throughput.py [--quick] [--out benchmarks/results]

Writes ``throughput-<device>-<date>.json`` (and a PNG plot where matplotlib is
installed) and prints a table.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import platform
import statistics
import sys
from pathlib import Path

import numpy as np

import tropical_gemm as tg

CEILING_SOURCE = r"""
template <class T, class Op>
__device__ void chains(T* out, T a, T b, int iters, Op op) {
  T v[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) v[i] = (T)(threadIdx.x + i);
  for (int it = 0; it < iters; ++it) {
#pragma unroll
    for (int i = 0; i < 16; ++i) v[i] = op(v[i], a, b);
  }
  T s = v[0];
#pragma unroll
  for (int i = 1; i < 16; ++i) s = s > v[i] ? s : v[i];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
struct F32 { __device__ float operator()(float v, float a, float b) const { return fmaxf(v + a, b); } };
struct F64 { __device__ double operator()(double v, double a, double b) const { return fmax(v + a, b); } };
struct I32 { __device__ int operator()(int v, int a, int b) const { return max(v + a, b); } };
struct I32Dpx { __device__ int operator()(int v, int a, int b) const { return __viaddmax_s32(v, a, b); } };
struct F64Sel { __device__ double operator()(double v, double a, double b) const { double s = v + a; return s > b ? s : b; } };
struct F32MinMax { __device__ float operator()(float v, float a, float b) const { return fmaxf(fminf(v, a), b); } };
struct I32MinMax { __device__ int operator()(int v, int a, int b) const { return max(min(v, a), b); } };
struct I64 { __device__ long long operator()(long long v, long long a, long long b) const {
  long long s = v + a; return s > b ? s : b; } };
extern "C" __global__ void ceil_f32(float* o, float a, float b, int n) { chains(o, a, b, n, F32()); }
extern "C" __global__ void ceil_f64(double* o, double a, double b, int n) { chains(o, a, b, n, F64()); }
extern "C" __global__ void ceil_i32(int* o, int a, int b, int n) { chains(o, a, b, n, I32()); }
extern "C" __global__ void ceil_i32_dpx(int* o, int a, int b, int n) { chains(o, a, b, n, I32Dpx()); }
extern "C" __global__ void ceil_f64_sel(double* o, double a, double b, int n) { chains(o, a, b, n, F64Sel()); }
extern "C" __global__ void ceil_f32_minmax(float* o, float a, float b, int n) { chains(o, a, b, n, F32MinMax()); }
extern "C" __global__ void ceil_i32_minmax(int* o, int a, int b, int n) { chains(o, a, b, n, I32MinMax()); }
extern "C" __global__ void ceil_i64(long long* o, long long a, long long b, int n) { chains(o, a, b, n, I64()); }
"""


def time_gpu(fn, *, reps: int = 10, trials: int = 5, graph: bool = False) -> float:
    """Median seconds per call over ``trials`` timed batches of ``reps`` calls, after a warm-up.

    With ``graph=True`` the ``reps`` calls are captured once into a CUDA graph
    and the replays are timed, so that short kernels are measured rather than
    the host's time to issue them (METHOD.md's advice for small launches).
    """
    import cupy as cp

    if not graph:  # on the default stream, which also orders torch's default-stream work
        fn()
        cp.cuda.Device().synchronize()
        return statistics.median(_timed_batches(lambda: [fn() for _ in range(reps)], None, trials, reps))
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        fn()
        stream.synchronize()
        stream.begin_capture()
        for _ in range(reps):
            fn()
        captured = stream.end_capture()
        captured.launch(stream)
        return statistics.median(_timed_batches(lambda: captured.launch(stream), stream, trials, reps))


def _timed_batches(run, stream, trials: int, reps: int) -> list[float]:
    import cupy as cp

    samples = []
    for _ in range(trials):
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record(stream)
        run()
        stop.record(stream)
        stop.synchronize()
        samples.append(cp.cuda.get_elapsed_time(start, stop) / 1e3 / reps)
    return samples


def measure_ceilings() -> dict[str, float]:
    """T tropical ops/s of the best instruction mix per dtype, all SMs busy."""
    import cupy as cp

    module = cp.RawModule(code=CEILING_SOURCE, options=("--std=c++17",))
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    blocks, threads, iters = sms * 8, 256, 4096
    results = {}
    for name, dtype in [("f32", "f4"), ("f64", "f8"), ("f64_sel", "f8"), ("i32", "i4"), ("i32_dpx", "i4"),
                        ("i64", "i8"), ("f32_minmax", "f4"), ("i32_minmax", "i4")]:
        kernel = module.get_function(f"ceil_{name}")
        out = cp.empty(blocks * threads, dtype)
        scalar = np.dtype(dtype).type
        seconds = time_gpu(lambda: kernel((blocks,), (threads,), (out, scalar(1), scalar(3), np.int32(iters))), reps=3)
        results[name] = 2 * 16 * blocks * threads * iters / seconds / 1e12
    # Per dtype, the best instruction mix for ⊗ = + then ⊕; max_min/min_max use
    # two min/max instructions, whose own ceiling is listed under "detail".
    return {
        "float32": results["f32"], "float64": max(results["f64"], results["f64_sel"]),
        "int32": max(results["i32"], results["i32_dpx"]), "int64": results["i64"],
        "detail": results,
    }


def measure_bandwidth() -> float:
    """Bytes read plus written per second by a large device-to-device copy (TB/s)."""
    import cupy as cp

    src = cp.ones(2**28, dtype=cp.float32)
    dst = cp.empty_like(src)
    seconds = time_gpu(lambda: cp.copyto(dst, src), reps=5)
    return 2 * src.nbytes / seconds / 1e12


def random_operands(shape_a, shape_b, dtype):
    import cupy as cp

    rng = cp.random.default_rng(0)
    if np.dtype(dtype).kind == "f":
        return rng.standard_normal(shape_a, dtype=np.float64).astype(dtype), rng.standard_normal(shape_b, dtype=np.float64).astype(dtype)
    return (rng.integers(-1000, 1000, shape_a).astype(dtype), rng.integers(-1000, 1000, shape_b).astype(dtype))


def bench_product(m, k, n, dtype="float32", semiring="max_plus", *, argmax=False, batch=(), graph=False) -> float:
    a, b = random_operands((*batch, m, k), (*batch, k, n), dtype)
    out = tg.matmul(a, b, semiring, argmax=argmax)
    work = 2.0 * m * n * k * int(np.prod(batch or (1,)))
    reps = max(1, min(50, int(2e11 / max(work, 1))))
    return time_gpu(lambda: tg.matmul(a, b, semiring, argmax=argmax, out=out), reps=reps, graph=graph)


def bench_backward(m, k, n, dtype="float32", semiring="max_plus", deterministic=False) -> float:
    import cupy as cp

    a, b = random_operands((m, k), (k, n), dtype)
    c, idx = tg.matmul(a, b, semiring, argmax=True)
    g = cp.ones_like(c)
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
    from cupy_backends.cuda.libs import nvrtc

    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    versions = {"tropical_gemm": tg.__version__, "cupy": cp.__version__, "numpy": np.__version__,
                "python": platform.python_version(), "cuda_driver": cp.cuda.runtime.driverGetVersion(),
                "nvrtc": ".".join(map(str, nvrtc.getVersion()))}
    try:
        import torch

        versions["torch"] = torch.__version__
    except ImportError:
        pass
    return {"device": props["name"].decode(), "arch": f"sm_{props['major']}{props['minor']}",
            "sms": props["multiProcessorCount"], "versions": versions,
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}


def run(quick: bool) -> dict[str, object]:
    env = environment()
    print(f"device: {env['device']} ({env['arch']}), measuring ceilings...", file=sys.stderr)
    ceilings = measure_ceilings()
    bandwidth = measure_bandwidth()
    rows: list[dict[str, object]] = []

    def record(case, seconds, work, dtype, **extra):
        tops = work / seconds / 1e12
        rows.append({"case": case, "seconds": seconds, "tops": tops, "dtype": dtype,
                     "ratio_to_ceiling": tops / ceilings[dtype], **extra})
        print(f"  {case:<44} {seconds * 1e3:9.3f} ms {tops:7.2f} T ops/s "
              f"{tops / ceilings[dtype]:6.1%} of ceiling", file=sys.stderr)

    sizes = [256, 1024, 2048, 4096] if quick else [256, 512, 1024, 2048, 4096, 8192]
    for s in sizes:
        record(f"square {s}^3 f32 max_plus", bench_product(s, s, s), 2 * s**3, "float32", size=s, op="forward",
               timing="calls")
        if s <= 1024:  # where the host's issue time can hide the kernel
            record(f"square {s}^3 f32 max_plus (graph)", bench_product(s, s, s, graph=True), 2 * s**3,
                   "float32", size=s, op="forward", timing="graph")
    grid = 2048 if quick else 4096
    plain = {}
    for dtype in ("float32", "float64", "int32", "int64"):
        for semiring in tg.semirings():
            size = grid if dtype in ("float32", "int32") else grid // 2
            t = bench_product(size, size, size, dtype, semiring)
            plain[(dtype, semiring)] = t
            record(f"{semiring} {dtype} {size}^3", t, 2 * size**3, dtype, semiring=semiring, size=size, op="forward",
                   ratio_to_max_plus=plain[(dtype, "max_plus")] / t)
            t_arg = bench_product(size, size, size, dtype, semiring, argmax=True)
            record(f"{semiring} {dtype} {size}^3 argmax", t_arg, 2 * size**3, dtype, semiring=semiring,
                   size=size, op="forward_argmax", ratio_to_forward=t / t_arg)
    fwd = bench_product(4096, 4096, 4096)
    for det in (False, True):
        t = bench_backward(4096, 4096, 4096, deterministic=det)
        rows.append({"case": f"backward 4096^3 f32 max_plus {'deterministic' if det else 'atomic'}",
                     "seconds": t, "fraction_of_forward": t / fwd, "dtype": "float32", "op": "backward"})
        print(f"  {rows[-1]['case']:<44} {t * 1e3:9.3f} ms {t / fwd:7.1%} of forward", file=sys.stderr)
    record("batched 256 x 256^3 f32", bench_product(256, 256, 256, batch=(256,)), 2 * 256**4, "float32", op="forward")
    for m, k, n in [(2**21, 4, 4), (4096, 32, 4096), (8, 4096, 4096), (4096, 4096, 8)]:
        moved = 4 * (m * k + k * n + m * n)
        for graph in (False, True):
            t = bench_product(m, k, n, graph=graph)
            record(f"skinny {m}x{k}x{n} f32" + (" (graph)" if graph else ""), t, 2 * m * n * k, "float32",
                   op="forward", timing="graph" if graph else "calls",
                   bandwidth_tbs=moved / t / 1e12, ratio_to_bandwidth=moved / t / 1e12 / bandwidth)
    idiom_sizes = [1024] if quick else [1024, 2048]
    for s in idiom_sizes:
        ours = bench_product(s, s, s)
        for name, t in bench_idioms(s).items():
            rows.append({"case": f"{name} {s}^3 f32 max_plus", "seconds": t, "tops": 2 * s**3 / t / 1e12,
                         "ours_speedup": t / ours, "dtype": "float32", "op": "peer"})
            print(f"  {rows[-1]['case']:<44} {t * 1e3:9.3f} ms  ours is {t / ours:6.1f}x faster", file=sys.stderr)
    return {"environment": env, "ceilings_tops": ceilings, "bandwidth_tbs": bandwidth, "results": rows}


def plot(report: dict[str, object], path: Path) -> bool:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return False
    squares = [r for r in report["results"] if str(r["case"]).startswith("square")]
    fig, ax = plt.subplots(figsize=(6, 4))
    for timing, style, label in (("calls", "o-", "tropical_gemm f32 max_plus"),
                                 ("graph", "s--", "the same, kernels only (CUDA graph replay)")):
        rows = [r for r in squares if r.get("timing", "calls") == timing]
        ax.plot([r["size"] for r in rows], [r["tops"] for r in rows], style, label=label)
    ax.axhline(report["ceilings_tops"]["float32"], color="gray", ls="--", label="measured f32 ceiling")
    peers = [r for r in report["results"] if r["op"] == "peer"]
    for r in peers:
        ax.plot([int(str(r["case"]).split()[1].split("^")[0])], [r["tops"]], "x", label=r["case"])
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("M = N = K")
    ax.set_ylabel("T tropical ops/s")
    ax.set_title(f"{report['environment']['device']}")
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer and smaller sizes")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args(argv)
    report = run(args.quick)
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"throughput-{report['environment']['device'].replace(' ', '_')}-{report['environment']['date'][:10]}"
    (args.out / f"{stem}.json").write_text(json.dumps(report, indent=2))
    plotted = plot(report, args.out / f"{stem}.png")
    c = report["ceilings_tops"]
    print(f"ceilings T ops/s: f32 {c['float32']:.1f}  f64 {c['float64']:.1f}  i32 {c['int32']:.1f}  "
          f"i64 {c['int64']:.1f}; copy {report['bandwidth_tbs']:.2f} TB/s")
    for r in report["results"]:
        extra = (f"{r['ratio_to_ceiling']:.0%} ceil" if "ratio_to_ceiling" in r else
                 f"{r.get('fraction_of_forward', 0):.1%} of fwd" if r["op"] == "backward" else
                 f"ours {r.get('ours_speedup', 0):.0f}x")
        print(f"{r['case']:<44} {r['seconds'] * 1e3:9.3f} ms  {r.get('tops', float('nan')):6.2f}  {extra}")
    print(f"wrote {args.out / stem}.json" + (" and .png" if plotted else " (no matplotlib: no plot)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
