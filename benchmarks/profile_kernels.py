"""One product per tuned square kernel of interest, for a profiler to attach to (``ncu``).

Each product runs twice (the first call builds the kernel), so a profiler
filtering on the second launch sees a warm kernel:

    ncu --launch-skip 1 --launch-count 1 -k regex:tg_forward_max_plus_f32 python benchmarks/profile_kernels.py

The ``--only`` substring narrows the products to those named; ``--pipelined``
swaps the pipelined square kernel's shape (``source.PIPELINED_SHAPES``) for
the run, as JSON (bm, bn, bk, tm, tn, min_blocks, unroll, stages), or
``none`` for the register-staged kernel; ``--order`` lays the operands out
as ``throughput.random_operands`` does.
"""

from __future__ import annotations

import argparse
import json
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
    parser.add_argument("--pipelined", help="the pipelined kernel's shape as JSON, or 'none'")
    parser.add_argument("--order", default="C", help="operand orders: C, F, or one letter each")
    args = parser.parse_args(argv)
    import cupy as cp

    from tropical_gemm.jit import source

    for key in list(source.PIPELINED_SHAPES) if args.pipelined else ():  # every dtype and layout
        if args.pipelined == "none":
            del source.PIPELINED_SHAPES[key]
        else:
            source.PIPELINED_SHAPES[key] = source.TileShape(*json.loads(args.pipelined))

    for dtype, semiring, argmax, size in PRODUCTS:
        if args.only not in f"{dtype} {semiring} {argmax}":
            continue
        a, b = random_operands((size, size), (size, size), dtype, order=args.order)
        for _ in range(2):
            tg.matmul(a, b, semiring, argmax=argmax)
        cp.cuda.Device().synchronize()
        print(f"ran {dtype} {semiring} argmax={argmax} {size}^3 twice", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
