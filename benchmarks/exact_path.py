"""Products on the exact integer path's kernels, tame and wild, beside the float32 ones that share their code.

int32 under ``max_plus`` keeps an exact ⊗ (it saturates) for slices that hold
values that are not tame (the type's extremes, the semiring's zero among
them): each staged slice is checked, and a wild one takes the exact path
instead of the fast ⊗.  Tame operands (``throughput.random_operands``, values
in ±1000) measure the main loop; wild ones (the semiring's zero in every 7th
column of A: every slice takes the exact path, as a graph's missing edges
make it) measure that path.  float32 (no exact path) and the plain products
are there to show what the exact path's code costs the rest.  Cases: 2048³
and 4096³ squares, 1000×777×3000 (stream-K where the planner takes it), and a
K of 16 (one slice: the argmax compares every candidate in the product
kernel and needs no resolve).

    python benchmarks/exact_path.py [--label L] [--out benchmarks/results]   # GPU

Writes ``exact-path-<device>-<date>.json`` (T ops/s = 2·M·N·K per second,
tiering off, ``throughput.bench_product``'s timing).  Run it in two checkouts
with different ``--label`` to compare commits.
"""

from __future__ import annotations

import os
import sys

import numpy as np

import throughput  # benchmarks/ is this script's own directory
from results_file import LABEL_OPTION, run_and_save

#: (dtype, argmax, M, K, N, wild)
CASES = [("float32", False, 2048, 2048, 2048, False), ("float32", False, 1000, 777, 3000, False),
         ("float32", True, 2048, 2048, 2048, False), ("float32", True, 1000, 777, 3000, False),
         ("float32", True, 4096, 4096, 4096, False),
         ("int32", False, 2048, 2048, 2048, False), ("int32", False, 1000, 777, 3000, False),
         ("int32", True, 2048, 2048, 2048, False), ("int32", True, 1000, 777, 3000, False),
         ("int32", True, 4096, 4096, 4096, False),
         ("int32", True, 2048, 2048, 2048, True), ("int32", False, 2048, 2048, 2048, True),
         ("int32", True, 4096, 16, 4096, False)]


def wild_operands(draw, zero: str = "min"):
    """``draw`` with the semiring's zero in every 7th column of A: the integer type's ``zero`` end ("min" for
    max_plus, "max" for min_plus), so that every slice of K holds it."""
    def operands(shape_a, shape_b, dtype, **options):
        a, b = draw(shape_a, shape_b, dtype, **options)
        a[..., ::7] = getattr(np.iinfo(dtype), zero)
        return a, b
    return operands


def run(label: str) -> dict[str, object]:
    os.environ.setdefault("TROPICAL_GEMM_TIERED", "0")
    tame = throughput.random_operands
    rows = []
    for dtype, argmax, m, k, n, wild in CASES:
        throughput.random_operands = wild_operands(tame) if wild else tame
        seconds = throughput.bench_product(m, k, n, dtype, "max_plus", argmax=argmax)
        rows.append({"dtype": dtype, "argmax": argmax, "mkn": [m, k, n], "wild": wild, "seconds": seconds,
                     "tops": 2 * m * k * n / seconds / 1e12})
    throughput.random_operands = tame
    return {"environment": throughput.environment(), "label": label, "command": "python benchmarks/exact_path.py",
            "results": rows}


def table(report: dict[str, object]) -> list[str]:
    lines = [f"{'dtype':8} {'argmax':6} {'wild':5} {'M×K×N':16} T ops/s  ({report['label']})"]
    for r in report["results"]:
        lines.append(f"{r['dtype']:8} {r['argmax']!s:6} {r['wild']!s:5} {'x'.join(map(str, r['mkn'])):16} {r['tops']:7.2f}")
    return lines


def main(argv: list[str] | None = None) -> int:
    return run_and_save(__doc__, argv, "exact-path", run, table, LABEL_OPTION)


if __name__ == "__main__":
    sys.exit(main())
