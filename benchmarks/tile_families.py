"""The small tile family against the tuned square one, on the products the engine gives it.

The CUDA engine sends a product that cannot give every SM one square-tile
block (K slices included) to the small family: 32×32 tiles, up to 16 times
as many blocks, and a kernel that compiles about three times faster.  This
times each case both ways, float32 max_plus with and without argmax: as the
engine picks, and with the square family forced (the engine told the GPU has
one SM, as the GPU tests do).  Products are timed as CUDA-graph replays, so
short kernels are measured rather than the host's launch time.

    python benchmarks/tile_families.py [--out benchmarks/results]

Writes ``tile-families-<device>-<date>.json`` and prints a table.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager

from results_file import run_and_save  # benchmarks/ is this script's own directory
from throughput import bench_product, environment

from tropical_gemm.engines import cuda as cuda_engine
from tropical_gemm.engines.cuda import gpu as cuda_gpu
from tropical_gemm.engines.cuda import plan as cuda_plan

#: (M, K, N, batch): small squares, a long K, a batch of small matrices, and
#: the sizes where the rule hands over to the square family.
CASES = [(256, 256, 256, ()), (512, 512, 512, ()), (768, 768, 768, ()), (256, 4096, 256, ()),
         (128, 128, 128, (64,)), (1024, 1024, 1024, ()), (512, 2304, 512, ())]


def family_of(m: int, k: int, n: int, batch: tuple[int, ...], argmax: bool) -> str:
    batches = 1
    for size in batch:
        batches *= size
    op = "forward_argmax" if argmax else "forward"
    return cuda_engine.choose_tile(m, n, k, batches, "float32", op, cuda_gpu.sm_count(0))[0]


@contextmanager
def steered(family: str) -> Iterator[None]:
    """Products planned meanwhile take ``family`` where the planner would choose between square and small
    ("chosen": as it chooses).  "square": one SM reported, and the square tiles taken however much of them
    lies outside C; "small": the square family's fill threshold out of reach."""
    real = cuda_gpu.sm_count, cuda_plan._USEFUL, cuda_plan._FILLED
    if family == "square":
        cuda_gpu.sm_count, cuda_plan._USEFUL = (lambda device_id: 1), {}
    elif family == "small":
        cuda_plan._FILLED = 1e9
    cuda_plan.plan_forward.cache_clear()
    try:
        yield
    finally:
        cuda_gpu.sm_count, cuda_plan._USEFUL, cuda_plan._FILLED = real
        cuda_plan.plan_forward.cache_clear()


def forced_square(m: int, k: int, n: int, batch: tuple[int, ...], argmax: bool) -> float:
    with steered("square"):
        return bench_product(m, k, n, argmax=argmax, batch=batch, graph=True)


def run() -> dict[str, object]:
    rows = []
    for m, k, n, batch in CASES:
        for argmax in (False, True):
            chosen = bench_product(m, k, n, argmax=argmax, batch=batch, graph=True)
            square = forced_square(m, k, n, batch, argmax)
            rows.append({"m": m, "k": k, "n": n, "batch": list(batch), "argmax": argmax,
                         "family": family_of(m, k, n, batch, argmax), "chosen_s": chosen, "square_s": square,
                         "square_over_chosen": square / chosen})
            print(f"{rows[-1]}", file=sys.stderr, flush=True)
    return {"environment": environment(), "command": "python benchmarks/tile_families.py", "rows": rows}


def table(report: dict[str, object]) -> list[str]:
    lines = ["M×K×N (batch)          argmax  family  chosen (µs)  square (µs)  square/chosen"]
    for row in report["rows"]:
        shape = f"{row['m']}×{row['k']}×{row['n']}" + (f" ({row['batch'][0]})" if row["batch"] else "")
        lines.append(f"{shape:<22} {str(row['argmax']):<7} {row['family']:<7} {row['chosen_s'] * 1e6:11.1f} "
                     f"{row['square_s'] * 1e6:12.1f} {row['square_over_chosen']:14.2f}")
    return lines


def main(argv: list[str] | None = None) -> int:
    return run_and_save(__doc__, argv, "tile-families", run, table)


if __name__ == "__main__":
    sys.exit(main())
