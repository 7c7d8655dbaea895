"""Products whose time the tile store shares: the pipelined kernel's epilogue, beside products it hardly touches.

After its last slice each block writes its tile of outputs (and argmaxes).
Where K is short (batched 256 × 256³, 1024³ with its K slices) or a block's
share of it is (stream-K's 1000×3000×777, M×K×N), that store is a visible
share of a block's work; on large cubes it is not, and they show what the
rest of the kernel costs.  The cases take both operand orders, rows of C
whose length is a multiple of 16 bytes and rows whose length is not
(1000×3000×780, ×777), and tiles on C's edges, so that a change to the store
is timed on each of its paths.  ``--dtype`` keeps one dtype's cases (float64's
include 4096³, to compare its kernel between commits).

    python benchmarks/tile_store.py [--label L] [--dtype D] [--out benchmarks/results]   # GPU

Writes ``tile-store-<device>-<date>.json`` (T ops/s = 2·M·N·K per second,
tiering off, ``throughput.bench_product``'s timing).  Run it in two checkouts
with different ``--label`` to compare commits.
"""

from __future__ import annotations

import os
import sys

import throughput  # benchmarks/ is this script's own directory
from results_file import LABEL_OPTION, run_and_save

#: (dtype, argmax, batch, M, K, N, order)
CASES = [("float32", False, 256, 256, 256, 256, "C"), ("float32", True, 256, 256, 256, 256, "C"),
         ("float32", False, 1, 1024, 1024, 1024, "C"), ("float32", False, 1, 1000, 3000, 777, "C"),
         ("float32", True, 1, 1000, 3000, 777, "C"), ("float32", False, 1, 1000, 3000, 780, "C"),
         ("float32", False, 1, 2048, 2048, 2048, "C"), ("float32", False, 1, 4096, 4096, 4096, "C"),
         ("float32", False, 1, 2048, 2048, 2048, "F"), ("float32", False, 1, 4096, 4096, 4096, "F"),
         ("float32", True, 1, 2048, 2048, 2048, "C"), ("int32", True, 1, 2048, 2048, 2048, "C"),
         ("float64", False, 1, 2048, 2048, 2048, "C"), ("float64", False, 64, 256, 256, 256, "C"),
         ("float64", False, 1, 4096, 4096, 4096, "C")]


def run(label: str, dtype: "str | None") -> dict[str, object]:
    os.environ.setdefault("TROPICAL_GEMM_TIERED", "0")
    rows = []
    for case_dtype, argmax, batch, m, k, n, order in [c for c in CASES if dtype in (None, c[0])]:
        seconds = throughput.bench_product(m, k, n, case_dtype, "max_plus", argmax=argmax,
                                           batch=(batch,) if batch > 1 else (), order=order)
        rows.append({"dtype": case_dtype, "argmax": argmax, "batch": batch, "mkn": [m, k, n], "order": order,
                     "seconds": seconds, "tops": 2 * batch * m * k * n / seconds / 1e12})
    command = "python benchmarks/tile_store.py" + (f" --dtype {dtype}" if dtype else "")
    return {"environment": throughput.environment(), "label": label, "command": command, "results": rows}


def table(report: dict[str, object]) -> list[str]:
    lines = [f"{'dtype':8} {'argmax':6} {'batch':5} {'M×K×N':16} {'order':5} T ops/s  ({report['label']})"]
    for r in report["results"]:
        lines.append(f"{r['dtype']:8} {r['argmax']!s:6} {r['batch']:5} {'x'.join(map(str, r['mkn'])):16} "
                     f"{r['order']:5} {r['tops']:7.2f}")
    return lines


def main(argv: list[str] | None = None) -> int:
    return run_and_save(__doc__, argv, "tile-store", run, table,
                        {**LABEL_OPTION, "--dtype": {"help": "only this dtype's cases (e.g. float64)"}})


if __name__ == "__main__":
    sys.exit(main())
