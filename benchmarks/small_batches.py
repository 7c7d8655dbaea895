"""Batches of small matrices: the family the engine picks, the square one forced and the small one forced.

A batch of many small products fills the GPU with the square family's
blocks, so the engine takes it, but where the matrices are smaller than its
tile (128 × 128 for float32, 64 × 64 or 64 × 128 for float64) most of each
block's outputs are padding.  The small family's 32 × 32 tiles waste none at
these sizes.  Each case times the same product as the engine plans it, with
the square family forced (one SM reported, the square tiles taken however
much of them lies outside C) and with the small family forced (the planner
told that no product fills the GPU), plain and argmax, as CUDA-graph
replays; the batch is sized for about 2 G operations a product.

    python benchmarks/small_batches.py [--dtypes D ...] [--out benchmarks/results]   # GPU

Writes ``small-batches-<device>-<date>.json`` and prints a table.
"""

from __future__ import annotations

import sys

from results_file import run_and_save  # benchmarks/ is this script's own directory
from throughput import bench_product, environment
from tile_families import steered

from tropical_gemm.engines.cuda import plan as cuda_plan

#: The sides of the square matrices, batched.
SIDES = (32, 48, 64, 96, 128, 192)
#: Operations a product, about: the batch is this over 2·side³.
WORK = 2**31


def family_of(dtype: str, side: int, batch: int, argmax: bool) -> str:
    op = "forward_argmax" if argmax else "forward"
    return cuda_plan.choose_tile(side, side, side, batch, dtype, op, 132)[0]


def timed(family: str, side: int, dtype: str, batch: int, argmax: bool) -> float:
    """The product as the engine plans it ("chosen"), or with the planner steered to the square or small family."""
    with steered(family):
        return bench_product(side, side, side, dtype, argmax=argmax, batch=(batch,), graph=True)


def run(dtypes: list[str]) -> dict[str, object]:
    rows = []
    for dtype in dtypes:
        for side in SIDES:
            batch = max(1, WORK // (2 * side**3))
            for argmax in (False, True):
                seconds = {family: timed(family, side, dtype, batch, argmax)
                           for family in ("chosen", "square", "small")}
                work = 2.0 * batch * side**3
                rows.append({"dtype": dtype, "side": side, "batch": batch, "argmax": argmax,
                             "family": family_of(dtype, side, batch, argmax),
                             **{f"{family}_s": s for family, s in seconds.items()},
                             **{f"{family}_tops": work / s / 1e12 for family, s in seconds.items()}})
                print(rows[-1], file=sys.stderr, flush=True)
    return {"environment": environment(), "command": "python benchmarks/small_batches.py --dtypes " + " ".join(dtypes),
            "rows": rows}


def table(report: dict[str, object]) -> list[str]:
    lines = ["dtype    side  batch  argmax  family  chosen T  square T  small T"]
    for r in report["rows"]:
        lines.append(f"{r['dtype']:8} {r['side']:4} {r['batch']:6} {str(r['argmax']):7} {r['family']:7} "
                     f"{r['chosen_tops']:8.2f} {r['square_tops']:9.2f} {r['small_tops']:8.2f}")
    return lines


def main(argv: list[str] | None = None) -> int:
    options = {"--dtypes": {"nargs": "+", "default": ["float32", "float64", "int32", "int64"],
                            "help": "the dtypes to time (default: all four)"}}
    return run_and_save(__doc__, argv, "small-batches", run, table, options)


if __name__ == "__main__":
    sys.exit(main())
