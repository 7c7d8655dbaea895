"""Runs inside the Rust crate's virtual environment (benchmarks/cpu.py starts it): one function, timed.

    python cpu_rust_runner.py A.npy B.npy FUNCTION REPEATS OUT.npz

Prints ``{"times": [...]}`` (seconds per timed call, after one untimed call)
and saves the result, reshaped to (M, N), for the caller's equality check.
"""

from __future__ import annotations

import json
import sys
import time

import numpy as np
import tropical_gemm  # the Rust crate's package, not ours: the caller drops our path


def main(a_path: str, b_path: str, function: str, repeats: str, out: str) -> None:
    a, b = np.load(a_path), np.load(b_path)
    fn = getattr(tropical_gemm, function)
    result = fn(a, b)
    times = []
    for _ in range(int(repeats)):
        start = time.perf_counter()
        fn(a, b)
        times.append(time.perf_counter() - start)
    shape = (a.shape[0], b.shape[1])
    if isinstance(result, tuple):
        np.savez(out, c=np.asarray(result[0]).reshape(shape), argmax=np.asarray(result[1]).reshape(shape))
    else:
        np.savez(out, c=np.asarray(result).reshape(shape))
    print(json.dumps({"times": times}))


if __name__ == "__main__":
    main(*sys.argv[1:])
