"""Products on the exact integer path's kernels, tame and wild, beside the float32 ones that share their code.

int32 under ``max_plus`` keeps an exact ⊗ (it saturates) for slices that hold
values that are not tame (the type's extremes, the semiring's zero among
them): each staged slice is checked, and a wild one takes the exact path
instead of the fast ⊗.  Tame operands (``throughput.random_operands``, values
in ±1000) measure the main loop; wild ones (the semiring's zero in every 7th
column of A: every slice takes the exact path, as a graph's missing edges
make it) measure that path.  float32 (no exact path) and the plain products
are there to show what the exact path's code costs the rest.  Cases: 2048³
and 4096³ squares, 1000×777×3000, 1000×3000×777 (the int32 argmax on the
stream family, tame and wild), and a K of 16 (one slice: the argmax
compares every candidate in the product kernel and needs no resolve).

    python benchmarks/exact_path.py [--label L] [--semirings max_plus max_mul] [--orders C CF F]
                                    [--only REGEX] [--out benchmarks/results]   # GPU

``--only`` keeps the cases whose label (``int32 argmax 1000x3000x777 wild``:
dtype, ``argmax`` or ``plain``, M×K×N, ``wild`` or ``tame``) matches.

``--semirings`` (default ``max_plus``) and ``--orders`` (default ``C``: both
operands row-major; ``CF``: A row-major, B column-major; ``F``: both
column-major) run every case in each, so that each operand layout's kernels
are timed.  Writes ``exact-path-<device>-<date>.json`` (T ops/s = 2·M·N·K per
second, tiering off, ``throughput.bench_product``'s timing).  Run it in two
checkouts with different ``--label`` to compare commits.
"""

from __future__ import annotations

import os
import re
import sys

import numpy as np

import throughput  # benchmarks/ is this script's own directory
from results_file import LABEL_OPTION, run_and_save

#: (dtype, argmax, M, K, N, wild)
CASES = [("float32", False, 2048, 2048, 2048, False), ("float32", False, 1000, 777, 3000, False),
         ("float32", False, 4096, 4096, 4096, False),
         ("float32", True, 2048, 2048, 2048, False), ("float32", True, 1000, 777, 3000, False),
         ("float32", True, 4096, 4096, 4096, False),
         ("int32", False, 2048, 2048, 2048, False), ("int32", False, 1000, 777, 3000, False),
         ("int32", True, 2048, 2048, 2048, False), ("int32", True, 1000, 777, 3000, False),
         ("int32", True, 4096, 4096, 4096, False),
         ("int32", True, 2048, 2048, 2048, True), ("int32", False, 2048, 2048, 2048, True),
         ("int32", True, 1000, 3000, 777, False), ("int32", True, 1000, 3000, 777, True),
         ("int32", True, 4096, 16, 4096, False)]


def wild_operands(draw, zero: str = "min"):
    """``draw`` with the semiring's zero in every 7th column of A: the integer type's ``zero`` end ("min" for
    max_plus, "max" for min_plus), so that every slice of K holds it."""
    def operands(shape_a, shape_b, dtype, **options):
        a, b = draw(shape_a, shape_b, dtype, **options)
        a[..., ::7] = getattr(np.iinfo(dtype), zero)
        return a, b
    return operands


def case_label(dtype: str, argmax: bool, m: int, k: int, n: int, wild: bool) -> str:
    return f"{dtype} {'argmax' if argmax else 'plain'} {m}x{k}x{n} {'wild' if wild else 'tame'}"


def run(label: str, semirings: list[str], orders: list[str], only: str = "") -> dict[str, object]:
    os.environ.setdefault("TROPICAL_GEMM_TIERED", "0")
    tame = throughput.random_operands
    rows = []
    for semiring in semirings:
        for order in orders:
            for dtype, argmax, m, k, n, wild in (c for c in CASES if re.search(only, case_label(*c))):
                throughput.random_operands = wild_operands(tame) if wild else tame
                seconds = throughput.bench_product(m, k, n, dtype, semiring, argmax=argmax, order=order)
                rows.append({"semiring": semiring, "order": order, "dtype": dtype, "argmax": argmax, "mkn": [m, k, n],
                             "wild": wild, "seconds": seconds, "tops": 2 * m * k * n / seconds / 1e12})
    throughput.random_operands = tame
    return {"environment": throughput.environment(), "label": label,
            "command": f"python benchmarks/exact_path.py --semirings {' '.join(semirings)} --orders {' '.join(orders)}"
                       + (f" --only '{only}'" if only else ""),
            "results": rows}


def table(report: dict[str, object]) -> list[str]:
    lines = [f"{'semiring':9} {'order':5} {'dtype':8} {'argmax':6} {'wild':5} {'M×K×N':16} T ops/s  ({report['label']})"]
    for r in report["results"]:
        lines.append(f"{r.get('semiring', 'max_plus'):9} {r.get('order', 'C'):5} {r['dtype']:8} {r['argmax']!s:6} "
                     f"{r['wild']!s:5} {'x'.join(map(str, r['mkn'])):16} {r['tops']:7.2f}")
    return lines


OPTIONS = {**LABEL_OPTION,
           "--semirings": {"nargs": "+", "default": ["max_plus"], "help": "semirings to run every case in"},
           "--orders": {"nargs": "+", "default": ["C"], "help": "operand layouts: C, F, or one letter each (CF)"},
           "--only": {"default": "", "help": "only the cases whose label matches this regular expression"}}


def main(argv: list[str] | None = None) -> int:
    return run_and_save(__doc__, argv, "exact-path", run, table, OPTIONS)


if __name__ == "__main__":
    sys.exit(main())
