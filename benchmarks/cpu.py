"""The CPU engine against its peers, in one run, on the same saved inputs, at 1, 2 and all cores.

Peers (each result is checked equal to ours, bit for bit):

* ``tropical-gemm`` 0.4.0 from PyPI, the Rust crate: its import name clashes
  with ours, so the script installs it into a virtual environment of its own
  (``--rust-venv``; ``--rust-wheel`` installs a local wheel, for machines
  without an index) and runs it in a subprocess on the inputs saved as .npy;
  its threads are set with ``RAYON_NUM_THREADS``;
* torch-semiring-einsum (plain max-plus and its Viterbi argmax) where it is
  installed and the size is at most ``--tsr-max``;
* the numpy broadcast idiom ``np.max(a[:, :, None] + b[None], axis=1)``
  where its (n, n, n) temporary fits in ``--broadcast-limit-gib``.

Ours runs with ``TROPICAL_GEMM_NUM_THREADS``-style thread counts set in
process; every engine's count is recorded.  Throughput is in G ops/s
(``2·M·N·K`` per second, as everywhere in the project), the best of
``--repeats`` timed calls after one untimed call.  The run
also times our first call in fresh processes, with an empty kernel cache
(cold) and with a filled one (warm), and the demo.  Results go to
``benchmarks/results/cpu-<host CPU>-<date>.json`` through results_file.py.

    python benchmarks/cpu.py                        # this machine's cores
    python benchmarks/cpu.py --rust-wheel .whl/rust/tropical_gemm-0.4.0-cp312-*.whl
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import tropical_gemm as tg  # noqa: E402
from cpu_peers import (RUST_FUNCTIONS, cpu_model, environment, first_call_costs, runner_env,  # noqa: E402
                       rust_python, time_demo)
from results_file import RESULTS, save_report  # noqa: E402
from tropical_gemm.engines import cpu as cpu_engine  # noqa: E402

#: (dtype, n, argmax) cases; the issue's targets are on these.
CASES = [("float32", 256, False), ("float32", 1024, False), ("float32", 2048, False),
         ("float32", 1024, True), ("float32", 2048, True), ("int32", 1024, False), ("float64", 1024, False)]


def operands(dtype: str, n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Random operands without ties (floats) or overflow (small integers)."""
    rng = np.random.default_rng(seed)
    if dtype.startswith("int"):
        return rng.integers(-10**6, 10**6, (n, n)).astype(dtype), rng.integers(-10**6, 10**6, (n, n)).astype(dtype)
    return rng.standard_normal((n, n)).astype(dtype), rng.standard_normal((n, n)).astype(dtype)


def best_of(fn, repeats: int) -> tuple[float, list[float], object]:
    result = fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times), times, result


def ours(a: np.ndarray, b: np.ndarray, argmax: bool, threads: int, repeats: int) -> tuple[float, list[float], tuple]:
    cpu_engine.set_num_threads(threads)
    try:
        seconds, times, result = best_of(lambda: tg.matmul(a, b, "max_plus", argmax=argmax), repeats)
    finally:
        cpu_engine.set_num_threads(None)
    return seconds, times, result if argmax else (result, None)


def rust(python: Path, a_path: Path, b_path: Path, dtype: str, argmax: bool, threads: int, repeats: int,
         workdir: Path) -> tuple[float, list[float], tuple]:
    """The Rust crate in its own interpreter, on the saved operands; it saves its result for the check."""
    out = workdir / "rust_out.npz"
    env = {**runner_env(python.parent.parent), "RAYON_NUM_THREADS": str(threads)}
    done = subprocess.run([str(python), str(Path(__file__).with_name("cpu_rust_runner.py")), str(a_path),
                           str(b_path), RUST_FUNCTIONS[(dtype, argmax)], str(repeats), str(out)],
                          capture_output=True, text=True, env=env, cwd=workdir, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"the Rust crate's runner failed:\n{done.stderr[-2000:]}")
    times = json.loads(done.stdout.strip().splitlines()[-1])["times"]
    saved = np.load(out)
    return min(times), times, (saved["c"], saved["argmax"] if argmax else None)


def tsr_peer(a: np.ndarray, b: np.ndarray, argmax: bool, repeats: int) -> "tuple[float, list[float], tuple] | None":
    """torch-semiring-einsum on the same operands (float only; threads: torch's setting)."""
    try:
        import torch
        import torch_semiring_einsum as tsr
    except ImportError:
        return None
    eq = tsr.compile_equation("ik,kj->ij")
    ta, tb = torch.from_numpy(a), torch.from_numpy(b)

    def max_plus(compute_sum):  # noqa: ANN001, ANN202 - the library's callback protocol
        def add_in_place(x, y):  # noqa: ANN001, ANN202
            torch.maximum(x, y, out=x)

        def sum_block(x, dims):  # noqa: ANN001, ANN202
            return torch.amax(x, dim=dims) if dims else x

        def multiply_in_place(x, y):  # noqa: ANN001, ANN202
            x.add_(y)

        return compute_sum(add_in_place, sum_block, multiply_in_place)

    if argmax:
        seconds, times, (c, idx) = best_of(lambda: tsr.log_viterbi_einsum_forward(eq, ta, tb), repeats)
        return seconds, times, (c.numpy(), idx[..., 0].numpy().astype(np.int32))
    seconds, times, c = best_of(lambda: tsr.semiring_einsum_forward(eq, (ta, tb), tsr.AUTOMATIC_BLOCK_SIZE, max_plus),
                                repeats)
    return seconds, times, (c.numpy(), None)


def broadcast_peer(a: np.ndarray, b: np.ndarray, argmax: bool, repeats: int, limit: float):
    if a.nbytes * a.shape[0] > limit:
        return None
    if argmax:
        def fn():  # noqa: ANN202
            cand = a[:, :, None] + b[None]
            return cand.max(axis=1), cand.argmax(axis=1).astype(np.int32)
    else:
        def fn():  # noqa: ANN202
            return np.max(a[:, :, None] + b[None], axis=1), None
    seconds, times, result = best_of(fn, repeats)
    return seconds, times, result


def same(result: tuple, reference: tuple) -> bool:
    values_equal = result[0].tobytes() == reference[0].tobytes()
    return values_equal and (result[1] is None or np.array_equal(result[1], reference[1]))


def row(case: tuple, engine: str, threads: "int | None", measured: tuple, reference: tuple) -> dict:
    dtype, n, argmax = case
    seconds, times, result = measured
    entry = {"dtype": dtype, "n": n, "argmax": argmax, "engine": engine, "threads": threads,
             "seconds": seconds, "all_seconds": times, "gops": 2 * n**3 / seconds / 1e9,
             "equal_to_ours": same(result, reference)}
    print(f"{dtype:8s} {n:5d}{' argmax' if argmax else '       '} {engine:22s} threads={threads!s:4s} "
          f"{entry['gops']:7.2f} G ops/s  equal={entry['equal_to_ours']}", flush=True)
    return entry


def measure_case(case: tuple, args: argparse.Namespace, python: Path, workdir: Path,
                 thread_counts: list[int]) -> list[dict]:
    dtype, n, argmax = case
    a, b = operands(dtype, n, args.seed)
    a_path, b_path = workdir / "a.npy", workdir / "b.npy"
    np.save(a_path, a)
    np.save(b_path, b)
    repeats = args.repeats if n <= 1024 else args.large_repeats
    rows = []
    for threads in thread_counts:
        mine = ours(a, b, argmax, threads, repeats)
        rows.append(row(case, "tropical_gemm", threads, mine, mine[2]))
        if (dtype, argmax) in RUST_FUNCTIONS:
            rows.append(row(case, "rust tropical-gemm 0.4.0", threads,
                            rust(python, a_path, b_path, dtype, argmax, threads, repeats, workdir), mine[2]))
    reference = ours(a, b, argmax, thread_counts[-1], 1)[2]
    if dtype.startswith("float") and n <= args.tsr_max:
        measured = tsr_peer(a, b, argmax, 1)
        if measured is not None:
            import torch

            rows.append(row(case, "torch-semiring-einsum", torch.get_num_threads(), measured, reference))
    measured = broadcast_peer(a, b, argmax, 1, args.broadcast_limit_gib * 2**30)
    if measured is not None:
        rows.append(row(case, "numpy broadcast", 1, measured, reference))
    return rows


def main(argv: "list[str] | None" = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rust-wheel", type=Path, default=None, help="install the Rust crate from this wheel")
    parser.add_argument("--rust-venv", type=Path, default=Path(tempfile.gettempdir()) / "tropical-gemm-rust-venv",
                        help="virtual environment for the Rust crate (made if missing)")
    parser.add_argument("--threads", type=int, nargs="+", default=None,
                        help="thread counts (default: 1, 2 and all cores)")
    parser.add_argument("--repeats", type=int, default=3, help="timed calls up to n = 1024 (best is kept)")
    parser.add_argument("--large-repeats", type=int, default=3, help="timed calls above n = 1024")
    parser.add_argument("--tsr-max", type=int, default=1024, help="largest n given to torch-semiring-einsum")
    parser.add_argument("--broadcast-limit-gib", type=float, default=1.0,
                        help="largest (n, n, n) temporary the broadcast idiom may allocate")
    parser.add_argument("--max-n", type=int, default=None, help="skip the cases larger than this")
    parser.add_argument("--skip-startup", action="store_true", help="skip the first-call and demo timings")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)

    cores = cpu_engine.num_threads()
    thread_counts = args.threads or sorted({1, min(2, cores), cores})
    python = rust_python(args.rust_venv, args.rust_wheel)
    report = {"environment": {**environment(), "device": cpu_model()}, "benchmark": "cpu",
              "semiring": "max_plus", "unit": "G ops/s (2·M·N·K per second)", "thread_counts": thread_counts,
              "command": " ".join([Path(sys.argv[0]).name, *(argv if argv is not None else sys.argv[1:])]),
              "load_average_before": os.getloadavg()}
    with tempfile.TemporaryDirectory() as tmp:
        cases = [case for case in CASES if args.max_n is None or case[1] <= args.max_n]
        report["results"] = [r for case in cases for r in measure_case(case, args, python, Path(tmp), thread_counts)]
    if not args.skip_startup:
        report["first_call"] = first_call_costs()
        report["demo"] = time_demo()
    report["load_average_after"] = os.getloadavg()
    save_report(report, args.out, "cpu", [f"{len(report['results'])} rows; first call {report.get('first_call')}",
                                          f"demo {report.get('demo')}"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
