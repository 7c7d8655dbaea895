"""One product per tuned square kernel of interest, for a profiler to attach to (``ncu``).

Each product runs twice (the first call builds the kernel), so a profiler
filtering on the second launch sees a warm kernel:

    ncu --launch-skip 1 --launch-count 1 -k regex:tg_forward_max_plus_f32 python benchmarks/profile_kernels.py

The ``--only`` substring narrows the products to those named.
"""

from __future__ import annotations

import argparse
import sys

from throughput import random_operands  # benchmarks/ is this script's own directory

import tropical_gemm as tg

#: (dtype, semiring, argmax, size)
PRODUCTS = [("float32", "max_plus", False, 4096), ("int32", "max_plus", False, 4096),
            ("float64", "max_plus", False, 4096), ("float32", "max_plus", True, 4096),
            ("int32", "max_plus", True, 4096)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="", help="run only products whose 'dtype semiring argmax' contains this")
    args = parser.parse_args(argv)
    import cupy as cp

    for dtype, semiring, argmax, size in PRODUCTS:
        if args.only not in f"{dtype} {semiring} {argmax}":
            continue
        a, b = random_operands((size, size), (size, size), dtype)
        for _ in range(2):
            tg.matmul(a, b, semiring, argmax=argmax)
        cp.cuda.Device().synchronize()
        print(f"ran {dtype} {semiring} argmax={argmax} {size}^3 twice", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
