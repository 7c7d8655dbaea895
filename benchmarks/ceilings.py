"""Register-only ceilings of each kernel's instruction mix, and the copy bandwidth (memory roofline).

Every probe is built by the library's own compiler (``jit.compiler``, the
preamble's semiring functors) and loaded by its own loader: nothing here
makes CuPy compile a kernel.  A probe runs 16 independent chains per thread
of ``v = SR::mac(b, v, a)`` = ``b ⊕ (v ⊗ a)``: exactly the ⊗ and ⊕
instructions a kernel issues per multiply-add (FADD + FMNMX for f32
max_plus, one VIADDMNMX for i32 max_plus, two FMNMX for f32 max_min, ...),
with no loads.  The ⊗ operand is the next chain's value from the round
before, so no ⊗ is loop-invariant (hoisted) and no two rounds fold
algebraically (a constant operand let the compiler merge i32 max_min's
min-then-max rounds); the 16 updates of a round stay independent.  One multiply-add counts as 2 ops.

    python benchmarks/ceilings.py        # prints the table
    python benchmarks/ceilings.py --occupancy   # max_plus probes at 2-16 warps per scheduler

``throughput.py`` imports ``measure_ceilings`` and ``measure_bandwidth``.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

from results_file import RESULTS, save_report  # benchmarks/ is this script's own directory

_C_TYPES = {"float32": "float", "float64": "double", "int32": "int", "int64": "long long"}
_PROBE = r"""
template <class SR, class T>
__device__ void chains(T* out, T a, T b, int iters) {
  T v[16];
#pragma unroll
  for (int i = 0; i < 16; ++i) v[i] = (T)(threadIdx.x + i);
  for (int it = 0; it < iters; it += 2) {  // two rounds, v -> w -> v: no register copies between them
    T w[16];
#pragma unroll
    for (int i = 0; i < 16; ++i) w[i] = SR::template mac<T>(b, v[i], v[(i + 1) % 16]);
#pragma unroll
    for (int i = 0; i < 16; ++i) v[i] = SR::template mac<T>(b, w[i], w[(i + 1) % 16]);
  }
  T s = v[0];
#pragma unroll
  for (int i = 1; i < 16; ++i) s = s > v[i] ? s : v[i];
  out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
"""
_COPY = r"""
extern "C" __global__ void tg_probe_copy(const uint4* __restrict__ src, uint4* __restrict__ dst, long long n) {
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
    dst[i] = src[i];
}
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


def probe_name(semiring: str, dtype: str) -> str:
    return f"tg_probe_{semiring}_{dtype}"


def probe_source(pairs: list[tuple[str, str]]) -> str:
    """The preamble, the chain template and one ``extern "C"`` probe per (semiring, dtype)."""
    from tropical_gemm.jit.source import _SEMIRING_TYPES, preamble

    entries = [f'extern "C" __global__ void {probe_name(sr, dt)}({_C_TYPES[dt]}* o, {_C_TYPES[dt]} a, '
               f"{_C_TYPES[dt]} b, int n) {{ chains<{_SEMIRING_TYPES[sr]}, {_C_TYPES[dt]}>(o, a, b, n); }}"
               for sr, dt in pairs]
    return "\n".join([preamble(), "namespace tg {", _PROBE, "}", "using tg::chains;", *entries, _COPY])


def _load_all(source: str, names: list[str]) -> dict[str, object]:
    import cupy as cp

    from tropical_gemm.jit import Target
    from tropical_gemm.jit.compiler import compile_program
    from tropical_gemm.jit.registry import load_function

    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    target = Target("cubin", props["major"] * 10 + props["minor"])
    kernel = compile_program(source, names[0], target)
    return {n: load_function(kernel.binary, n, cp.cuda.Device().id) for n in names}


#: Blocks of 256 threads per SM the ceilings run with: 16 warps per scheduler, as many as an SM holds.
CEILING_BLOCKS_PER_SM = 8


def _probe_tops(kernel, dtype: str, blocks_per_sm: int) -> float:
    """T ops/s of one probe, launched with ``blocks_per_sm`` blocks of 256 threads on every SM."""
    import cupy as cp

    blocks, threads = cp.cuda.Device().attributes["MultiProcessorCount"] * blocks_per_sm, 256
    iters = 4096 if np.dtype(dtype).itemsize == 4 else 1024
    out = cp.empty(blocks * threads, dtype)
    one = np.dtype(dtype).type(1)
    seconds = time_gpu(lambda: kernel((blocks,), (threads,), (out, one, one, np.int32(iters))), reps=3)
    return 2 * 16 * blocks * threads * iters / seconds / 1e12


def measure_ceilings() -> dict[str, dict[str, float]]:
    """T tropical ops/s of each (semiring, dtype) ⊗-then-⊕ mix, all SMs busy: ``{semiring: {dtype: T}}``."""
    import tropical_gemm as tg

    pairs = [(sr, dt) for sr in tg.semirings() if not tg.get_semiring(sr).boolean for dt in _C_TYPES]
    functions = _load_all(probe_source(pairs), [probe_name(sr, dt) for sr, dt in pairs])
    ceilings: dict[str, dict[str, float]] = {}
    for sr, dt in pairs:
        ceilings.setdefault(sr, {})[dt] = _probe_tops(functions[probe_name(sr, dt)], dt, CEILING_BLOCKS_PER_SM)
    return ceilings


def measure_occupancy(dtypes: tuple[str, ...] = ("float32", "float64", "int32")) -> dict[str, dict[int, float]]:
    """The max_plus probes at 1 to 8 blocks of 256 threads per SM (2 to 16 warps per scheduler):
    ``{dtype: {blocks per SM: T}}``.  The ceilings run with 16 warps per scheduler; a kernel whose
    registers allow 2 blocks an SM has 4, and this says what the probe itself reaches with that few."""
    pairs = [("max_plus", dt) for dt in dtypes]
    functions = _load_all(probe_source(pairs), [probe_name(sr, dt) for sr, dt in pairs])
    return {dt: {n: _probe_tops(functions[probe_name("max_plus", dt)], dt, n) for n in (1, 2, 3, 4, 6, 8)}
            for dt in dtypes}


def measure_bandwidth() -> dict[str, float]:
    """Bytes read plus written per second (TB/s) by a 1 GiB device-to-device copy, two ways, and the best."""
    import cupy as cp

    names = ["tg_probe_copy"]
    copy = _load_all(_COPY, names)["tg_probe_copy"]
    src = cp.empty(2**28, dtype=cp.int32)  # what a copy moves does not change its speed; no fill kernel
    dst = cp.empty_like(src)
    vectors = np.int64(src.nbytes // 16)
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    kernel_s = time_gpu(lambda: copy((sms * 16,), (512,), (src, dst, vectors)), reps=5)
    memcpy_s = time_gpu(lambda: cp.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, src.nbytes, 3, 0), reps=5)
    result = {"copy_kernel": 2 * src.nbytes / kernel_s / 1e12, "memcpy_d2d": 2 * src.nbytes / memcpy_s / 1e12}
    result["best"] = max(result.values())
    return result


def main(argv: "list[str] | None" = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--occupancy", action="store_true",
                        help="the max_plus probes at 1-8 blocks per SM instead, saved as probe-occupancy-*.json")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.occupancy:
        from throughput import environment

        curves = measure_occupancy()
        lines = [f"{'dtype':<8} " + " ".join(f"{n * 2:>3} w" for n in (1, 2, 3, 4, 6, 8))
                 + "   (T ops/s; warps per scheduler, 256-thread blocks)"]
        lines += [f"{dt:<8} " + " ".join(f"{t:5.1f}" for t in row.values()) for dt, row in curves.items()]
        report = {"environment": environment(), "command": "python benchmarks/ceilings.py --occupancy",
                  "blocks_per_sm_to_tops": curves}
        save_report(report, args.out, "probe-occupancy", lines)
        return 0
    ceilings = measure_ceilings()
    print(f"{'semiring':<10}" + "".join(f"{dt:>10}" for dt in _C_TYPES) + "   (T ops/s, register-only chains)")
    for sr, row in ceilings.items():
        print(f"{sr:<10}" + "".join(f"{row[dt]:10.1f}" for dt in _C_TYPES))
    bw = measure_bandwidth()
    print("copy bandwidth (read + write): " + ", ".join(f"{k} {v:.2f} TB/s" for k, v in bw.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
