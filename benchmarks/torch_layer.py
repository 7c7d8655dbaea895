"""What the torch integration costs and buys: a max_plus layer's forward+backward, and per-call overhead.

On CUDA (float32, max_plus):

* forward (with argmax, as in training) and forward+backward at 4096^3
  through ``tropical_gemm.torch``, and through the core API on cupy arrays;
* the torch broadcast idiom ``(a[:, :, None] + b[None]).amax(1)`` with its
  backward, at the largest cube that fits in memory, against ours at that size;
* per-call host time at 16^3 (median of many calls, best of 9 rounds, µs): the torch wrapper
  against a direct core call, for the forward, the forward with argmax and
  forward+backward (two calls: the product and its gradient).  The
  wrapper's overhead is the difference; a cProfile of each shows where it goes.
  forward+backward also pays torch's autograd engine, which is not the
  wrapper's, and it is charged two ways, both printed.  Less the ``autograd
  floor``: a Python autograd node that launches nothing, run through the
  same ``torch.autograd.grad``, taken out of the difference to the bare
  core.  Over the ``core in autograd``: the core's own forward and
  backward inside a Python autograd node, on arrays made beforehand.  On
  CUDA the backward runs on autograd's worker thread, and work after that
  hand-over (the backward there, the next forward on the calling thread)
  costs more than the same work on a warm thread; the no-op floor has no
  work to slow down, so the first charge also bills the wrapper for that,
  on the core's work as well as its own.  The second compares like with
  like: what is left is the wrapper's own glue.  torch's own ``torch.mm``
  forward+backward is timed for reference, and the same figures again with
  autograd's device threads off show how much the hand-over weighs.  One
  kernel launch through the engine is timed too: how fast this host is.

On the CPU the same, at sizes the CPU engine handles in moments, and the Rust
``tropical-gemm`` 0.4.0 package's PyTorch module (``tropical_gemm.pytorch``,
in a virtual environment of its own, as ``cpu.py`` installs it) on the same
forward+backward at 256^3, in rounds interleaved with ours; where the crate
cannot be installed the report says why.  Without a GPU only the CPU part runs.

    python benchmarks/torch_layer.py [--out benchmarks/results]

Writes ``torch-<device>-<date>.json`` and prints a table.
"""

from __future__ import annotations

import datetime as dt
import platform
import statistics
import sys
import time
from typing import Callable, NamedTuple

import numpy as np
import torch

import tropical_gemm as tg
from results_file import run_and_save  # benchmarks/ is this script's own directory
from tropical_gemm.torch import tropical_matmul, tropical_matmul_with_argmax

#: The issue's budget for the wrapper, per call at small sizes, on CUDA.
OVERHEAD_BUDGET_US = 30.0
SMALL = 16
#: Wrapper calls per workload: forward+backward is the product and its gradient.
WRAPPER_CALLS = {"forward": 1, "forward_argmax": 1, "forward_backward": 2}
CUDA_LAYER = 4096
CPU_LAYER = 256
#: Bytes per element of the broadcast cube at the backward's peak: the saved
#: sum (4), the amax mask (1), grad * mask and its division by the count (4 + 4).
BROADCAST_PEAK_BYTES = 13


# -------------------------------------------------------------------- timing


def gpu_seconds(fn: Callable[[], object], *, reps: int = 3, trials: int = 3) -> float:
    """Median seconds per call over timed batches on the current stream, after a warm-up.

    The core API launches on cupy's current stream, the null stream here,
    which is also torch's default stream, so one pair of events times both.
    """
    fn()
    torch.cuda.synchronize()
    samples = []
    for _ in range(trials):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        stop.record()
        stop.synchronize()
        samples.append(start.elapsed_time(stop) / 1e3 / reps)
    return statistics.median(samples)


def cpu_seconds(fn: Callable[[], object], *, reps: int = 5) -> float:
    fn()
    samples = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def host_us(fn: Callable[[], object], sync: Callable[[], None], *, calls: int = 2000) -> float:
    """Median host time of one call in µs: at 16^3 the GPU keeps up, so this is the overhead."""
    for _ in range(calls // 10):
        fn()
    sync()
    samples = []
    for _ in range(calls):
        start = time.perf_counter_ns()
        fn()
        samples.append(time.perf_counter_ns() - start)
    sync()
    return statistics.median(samples) / 1e3


# ----------------------------------------------------------------- workloads


def leaves(size: int, device: str, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Operands that require grad, and an upstream gradient, all float32."""
    gen = torch.Generator(device=device).manual_seed(seed)
    a, b, g = (torch.randn(size, size, device=device, generator=gen) for _ in range(3))
    return a.requires_grad_(), b.requires_grad_(), g


def torch_calls(a: torch.Tensor, b: torch.Tensor, g: torch.Tensor) -> dict[str, Callable[[], object]]:
    def forward_backward():
        torch.autograd.grad(tropical_matmul(a, b), (a, b), g)

    constant_a, constant_b = a.detach(), b.detach()  # no grad wanted: the argmax-free path
    return {
        "forward": lambda: tropical_matmul(constant_a, constant_b),
        "forward_argmax": lambda: tropical_matmul_with_argmax(a, b),
        "forward_backward": forward_backward,
    }


def core_calls(a: object, b: object, g: object) -> dict[str, Callable[[], object]]:
    """The same work on engine arrays (numpy or cupy) through the core API."""

    def forward_backward():
        _, argmax = tg.matmul(a, b, argmax=True)
        tg.matmul_backward(g, a, b, argmax)

    return {
        "forward": lambda: tg.matmul(a, b),
        "forward_argmax": lambda: tg.matmul(a, b, argmax=True),
        "forward_backward": forward_backward,
    }


class _PassThrough(torch.autograd.Function):
    """A Python autograd node that launches no kernel: what autograd itself costs such an op."""

    @staticmethod
    def forward(ctx, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a.view_as(a)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return grad, grad


class _CoreInAutograd(torch.autograd.Function):
    """The core API's forward (with argmax) and backward in a Python autograd node, on views made beforehand.

    What any autograd integration of the core pays besides its own glue:
    autograd's node and, on CUDA, the hand-over to autograd's worker thread,
    with the core's real work on both sides of it (work run after a hand-over
    costs more than the same work on a warm thread, so the no-op floor alone
    undercounts it).  It returns tensors made beforehand: converting between
    tensors and arrays is the wrapper's job, and is what it is charged for.
    """

    @staticmethod
    def forward(ctx, a: torch.Tensor, b: torch.Tensor, arrays: "CoreArrays") -> torch.Tensor:
        ctx.arrays = arrays
        ctx.argmax = tg.matmul(arrays.a, arrays.b, argmax=True)[1]
        return arrays.values.view_as(arrays.values)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple:
        arrays = ctx.arrays
        tg.matmul_backward(arrays.grad, arrays.a, arrays.b, ctx.argmax)
        return arrays.grad_a, arrays.grad_b, None


class CoreArrays(NamedTuple):
    """Engine views of the operands and upstream gradient, and tensors for the node to return."""

    a: object
    b: object
    grad: object
    values: torch.Tensor
    grad_a: torch.Tensor
    grad_b: torch.Tensor


def autograd_calls(a: torch.Tensor, b: torch.Tensor, g: torch.Tensor, device: str) -> dict[str, Callable[[], object]]:
    """torch's own costs for a square operand pair: the autograd floor, the core in autograd, torch.mm for reference."""
    arrays = CoreArrays(*engine_views((a, b, g), device), torch.empty_like(g), torch.zeros_like(a), torch.zeros_like(b))
    return {
        "autograd_floor": lambda: torch.autograd.grad(_PassThrough.apply(a, b), (a, b), g),
        "core_in_autograd": lambda: torch.autograd.grad(_CoreInAutograd.apply(a, b, arrays), (a, b), g),
        "torch_mm_forward_backward": lambda: torch.autograd.grad(torch.mm(a, b), (a, b), g),
    }


def kernel_launch_call(a: torch.Tensor, b: torch.Tensor) -> Callable[[], object]:
    """One launch of the forward kernel from the engine's prepared product: this host's launch cost.

    Host speed varies from machine to machine and day to day (a launch has
    taken 4.5 to 17.5 µs on H100 hosts here), so each report carries it.
    """
    import cupy

    from tropical_gemm.engines import cuda as engine

    c = torch.empty(a.shape[0], b.shape[1], device=a.device)
    prepared = engine.prepare_product(a.shape, a.stride(), b.shape, b.stride(), "float32", "max_plus", False,
                                      a.get_device())
    addresses = (a.data_ptr(), b.data_ptr(), c.data_ptr(), None)
    return lambda: prepared.launch(*addresses, cupy.cuda.Stream.null)


def broadcast_forward_backward(a: torch.Tensor, b: torch.Tensor, g: torch.Tensor) -> None:
    """The idiom users write first: an M×K×N cube, then a max over K."""
    torch.autograd.grad((a[:, :, None] + b[None]).amax(1), (a, b), g)


def engine_views(tensors: tuple[torch.Tensor, ...], device: str) -> tuple[object, ...]:
    if device == "cpu":
        return tuple(t.detach().numpy() for t in tensors)
    import cupy

    return tuple(cupy.from_dlpack(t.detach()) for t in tensors)


#: Rounds of the per-call measurement: each round times every workload once
#: (the median of many calls), so that a slow spell of the host weighs on all
#: of them alike.  Interference only adds time, so each workload's cost is its
#: best round; every round is kept in the report.
ROUNDS = 9


def overhead(device: str, sync: Callable[[], None]) -> dict[str, dict[str, object]]:
    """Per-call µs of the wrapper and of the core at 16^3, each the best of ROUNDS rounds, and their difference."""
    tensors = leaves(SMALL, device, seed=1)
    wrapped, direct = torch_calls(*tensors), core_calls(*engine_views(tensors, device))
    references = autograd_calls(*tensors, device)
    if device == "cuda":
        references["kernel_launch"] = kernel_launch_call(*tensors[:2])
    samples: dict[str, list[float]] = {}
    for _ in range(ROUNDS):
        for label, fn in [*((f"{name}/torch", f) for name, f in wrapped.items()),
                          *((f"{name}/core", f) for name, f in direct.items()),
                          *((f"{name}/torch", f) for name, f in references.items())]:
            samples.setdefault(label, []).append(host_us(fn, sync))
    best = {label: min(values) for label, values in samples.items()}
    out: dict[str, dict[str, object]] = {}
    for name in wrapped:
        w, d = best[f"{name}/torch"], best[f"{name}/core"]
        out[name] = {"torch_us": w, "core_us": d, "overhead_us": w - d,
                     "torch_us_rounds": samples[f"{name}/torch"], "core_us_rounds": samples[f"{name}/core"]}
    for name in references:
        out[name] = {"torch_us": best[f"{name}/torch"], "torch_us_rounds": samples[f"{name}/torch"]}
    return out


def overhead_on_calling_thread() -> dict[str, dict[str, object]]:
    """The CUDA per-call figures with autograd's device threads off: backward runs on the calling thread.

    By default autograd runs a CUDA backward on a per-device worker thread and
    the caller waits for it; every node pays for that hand-over, ours too.
    This measurement shows how much of the forward+backward time that is.
    """
    with torch.autograd.set_multithreading_enabled(False):
        return overhead("cuda", torch.cuda.synchronize)


#: The two ways forward+backward is charged (see the module docstring): the reference row it is
#: measured against, and whether the bare core's forward+backward is added to that row.
FORWARD_BACKWARD_CHARGES = {"less the no-op floor": ("autograd_floor", True),
                            "over the core in autograd": ("core_in_autograd", False)}


def per_call_overhead(rows: dict[str, dict[str, object]], charge: str) -> dict[str, float]:
    """The wrapper's µs per call for each workload, forward+backward charged as ``charge`` says."""
    reference, plus_core = FORWARD_BACKWARD_CHARGES[charge]
    fb = rows["forward_backward"]
    baseline = rows[reference]["torch_us"] + (fb["core_us"] if plus_core else 0.0)
    return {name: ((fb["torch_us"] - baseline) if name == "forward_backward" else rows[name]["overhead_us"]) / calls
            for name, calls in WRAPPER_CALLS.items()}


def host_profile(device: str, sync: Callable[[], None], calls: int = 500, top: int = 15) -> dict[str, str]:
    """Where the wrapper's host time goes at 16^3: cProfile's top entries by own time, per workload.

    The backward runs on the calling thread here (autograd multithreading
    off), so that the profiler sees it; the timings above keep torch's default.
    """
    import cProfile
    import io
    import pstats

    wrapped = torch_calls(*leaves(SMALL, device, seed=2))
    report = {}
    with torch.autograd.set_multithreading_enabled(False):
        for name, fn in wrapped.items():
            for _ in range(calls // 10):
                fn()
            sync()
            profiler = cProfile.Profile()
            profiler.enable()
            for _ in range(calls):
                fn()
            sync()
            profiler.disable()
            text = io.StringIO()
            pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(top)
            report[name] = text.getvalue()
    return report


def layer(size: int, device: str, seconds: Callable[[Callable[[], object]], float]) -> dict[str, float]:
    """Forward, forward with argmax, and forward+backward, through torch and through the core."""
    tensors = leaves(size, device)
    wrapped, direct = torch_calls(*tensors), core_calls(*engine_views(tensors, device))
    out = {"size": size}
    for name in wrapped:
        out[f"torch_{name}_s"] = seconds(wrapped[name])
        out[f"core_{name}_s"] = seconds(direct[name])
    return out


def release_cached_memory() -> None:
    """Hand torch's and cupy's cached blocks back to the driver, so free memory is really free."""
    import cupy

    torch.cuda.empty_cache()
    cupy.get_default_memory_pool().free_all_blocks()


def largest_broadcast_cube() -> int:
    """The largest multiple of 256 whose broadcast forward+backward should fit in free memory."""
    release_cached_memory()
    free, _ = torch.cuda.mem_get_info()
    size = int((0.85 * free / BROADCAST_PEAK_BYTES) ** (1 / 3)) // 256 * 256
    return max(size, 256)


def broadcast_vs_ours() -> dict[str, float]:
    """The idiom at the largest size that runs (stepping down on OOM), and ours at that size."""
    size = largest_broadcast_cube()
    while size >= 256:
        tensors = leaves(size, "cuda")
        try:
            idiom = gpu_seconds(lambda: broadcast_forward_backward(*tensors), reps=1)
        except torch.cuda.OutOfMemoryError:
            del tensors
            release_cached_memory()
            size -= 256
            continue
        release_cached_memory()
        ours = gpu_seconds(torch_calls(*tensors)["forward_backward"])
        return {"size": size, "broadcast_forward_backward_s": idiom, "torch_forward_backward_s": ours,
                "speedup": idiom / ours}
    return {"size": 0}


# -------------------------------------------------------------------- report


def environment() -> dict[str, object]:
    versions = {"torch": torch.__version__, "tropical_gemm": tg.__version__, "numpy": np.__version__,
                "python": platform.python_version()}
    try:
        import cupy

        versions["cupy"] = cupy.__version__
    except ImportError:
        pass
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    return {"device": device, "cpu": platform.processor() or platform.machine(), "versions": versions,
            "date": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")}


#: Interleaved rounds of ours and the Rust module's forward+backward on the CPU; each side keeps its best round.
RUST_ROUNDS = 3


def rust_module_vs_ours(size: int) -> dict[str, object]:
    """The Rust package's PyTorch forward+backward against ours, in interleaved rounds, or why it could not run."""
    import json
    import subprocess
    import tempfile
    from pathlib import Path

    from cpu_peers import runner_env, rust_python  # benchmarks/ is this script's own directory

    try:
        venv_dir = Path(tempfile.gettempdir()) / "tropical-gemm-rust-venv"
        python = rust_python(venv_dir, None)
    except (OSError, subprocess.CalledProcessError) as exc:
        return {"size": size, "unavailable": f"the Rust crate could not be installed: {exc}"}
    torch_site = str(Path(torch.__file__).resolve().parents[1])
    runner = str(Path(__file__).with_name("torch_rust_runner.py"))
    ours = torch_calls(*leaves(size, "cpu"))["forward_backward"]
    rounds = []
    for _ in range(RUST_ROUNDS):
        done = subprocess.run([str(python), runner, torch_site, str(size), "5"], capture_output=True, text=True,
                              cwd=venv_dir, env=runner_env(venv_dir))
        if done.returncode != 0:
            return {"size": size, "unavailable": f"the Rust module's runner failed: {done.stderr[-1000:]}"}
        rounds.append({"rust_s": json.loads(done.stdout)["seconds"], "ours_s": cpu_seconds(ours)})
    rust_s, ours_s = min(r["rust_s"] for r in rounds), min(r["ours_s"] for r in rounds)
    return {"size": size, "rounds": rounds, "rust_forward_backward_s": rust_s, "torch_forward_backward_s": ours_s,
            "ours_over_rust": ours_s / rust_s}


def run() -> dict[str, object]:
    report: dict[str, object] = {"environment": environment()}
    if torch.cuda.is_available():
        print(f"cuda: {report['environment']['device']}", file=sys.stderr)
        report["cuda"] = {
            "overhead": overhead("cuda", torch.cuda.synchronize),
            "overhead_autograd_threads_off": overhead_on_calling_thread(),
            "host_profile": host_profile("cuda", torch.cuda.synchronize),
            "layer": layer(CUDA_LAYER, "cuda", gpu_seconds),
            "broadcast": broadcast_vs_ours(),
        }
    print("cpu", file=sys.stderr)
    cube = leaves(CPU_LAYER, "cpu")
    report["cpu"] = {
        "overhead": overhead("cpu", lambda: None),
        "layer": layer(CPU_LAYER, "cpu", cpu_seconds),
        "broadcast": {"size": CPU_LAYER, "broadcast_forward_backward_s": cpu_seconds(lambda: broadcast_forward_backward(*cube))},
        "rust_module": rust_module_vs_ours(CPU_LAYER),
    }
    return report


def overhead_lines(rows: dict[str, dict[str, object]]) -> list[str]:
    """The per-call table of one ``overhead`` measurement: workloads with their overhead, then torch's references."""
    charges = {charge: per_call_overhead(rows, charge) for charge in FORWARD_BACKWARD_CHARGES}
    lines = [f"  per call at {SMALL}^3 (µs, best of {ROUNDS})   torch       core   overhead   per wrapper call, "
             f"forward+backward {' | '.join(charges)}"]
    for name, row in rows.items():
        line = f"  {name:<30} {row['torch_us']:8.1f}"
        if name in WRAPPER_CALLS:
            line += f" {row['core_us']:10.1f} {row['overhead_us']:10.1f}"
            line += "".join(f" {per_call[name]:12.1f}" for per_call in charges.values())
        lines.append(line)
    return lines


def table(report: dict[str, object]) -> list[str]:
    lines = []
    for device in ("cuda", "cpu"):
        part = report.get(device)
        if part is None:
            continue
        lay = part["layer"]
        n = lay["size"]
        lines.append(f"{device}: float32 max_plus {n}^3          torch (ms)   core (ms)")
        for name in ("forward", "forward_argmax", "forward_backward"):
            lines.append(f"  {name:<30} {lay[f'torch_{name}_s'] * 1e3:10.3f} {lay[f'core_{name}_s'] * 1e3:11.3f}")
        bc = part["broadcast"]
        if bc.get("size"):
            line = f"  broadcast idiom fwd+bwd {bc['size']}^3: {bc['broadcast_forward_backward_s'] * 1e3:.3f} ms"
            if "speedup" in bc:
                line += f" (ours {bc['torch_forward_backward_s'] * 1e3:.3f} ms, {bc['speedup']:.1f}x faster)"
            lines.append(line)
        rust = part.get("rust_module")
        if rust is not None:
            lines.append(f"  Rust tropical-gemm 0.4.0 PyTorch module fwd+bwd {rust['size']}^3: "
                         + (rust["unavailable"] if "unavailable" in rust else
                            f"{rust['rust_forward_backward_s'] * 1e3:.3f} ms, ours "
                            f"{rust['torch_forward_backward_s'] * 1e3:.3f} ms ({rust['ours_over_rust']:.2f}x its time)"))
        lines += overhead_lines(part["overhead"])
    if "cuda" in report:
        threads_off = report["cuda"]["overhead_autograd_threads_off"]
        lines.append("  with autograd's device threads off (backward on the calling thread):")
        lines += overhead_lines(threads_off)
        for label, rows in (("default autograd", report["cuda"]["overhead"]), ("autograd threads off", threads_off)):
            for charge in FORWARD_BACKWARD_CHARGES:
                worst = max(per_call_overhead(rows, charge).values())
                verdict = "within" if worst <= OVERHEAD_BUDGET_US else "OVER"
                lines.append(f"cuda wrapper overhead, {label}, forward+backward {charge}: worst {worst:.1f} µs per "
                             f"wrapper call, {verdict} the {OVERHEAD_BUDGET_US:.0f} µs budget")
    return lines


def main(argv: list[str] | None = None) -> int:
    return run_and_save(__doc__, argv, "torch", run, table)


if __name__ == "__main__":
    sys.exit(main())
