"""The argmax against the plain product where K is short: the resolve's share of the call.

The square argmax records, per output, the slice in which its value last
improved, and a second launch (the resolve) finds the winning k in that
slice.  Its work grows with the outputs, the product's with outputs × K, so
at a short K (batched small matrices, the contractions of a tensor network)
the resolve is a large part of the call: where K is short enough, it stages
a tile of outputs' rows of A and columns of B in shared memory
(``argmax_resolve_staged``).  Each case times the product with and without
the argmax (``throughput.bench_product``, tiering off) and reports the ratio.

    python benchmarks/argmax_short_k.py [--label L] [--out benchmarks/results]   # GPU

Writes ``argmax-short-k-<device>-<date>.json``; run it in two checkouts with
different ``--label`` to compare commits.
"""

from __future__ import annotations

import os
import sys

import throughput  # benchmarks/ is this script's own directory
from results_file import LABEL_OPTION, run_and_save

#: (dtype, batch, M, K, N, order)
CASES = [("float32", 256, 256, 256, 256, "C"), ("float64", 256, 256, 256, 256, "C"),
         ("int32", 256, 256, 256, 256, "C"), ("float32", 4096, 64, 64, 64, "C"), ("float32", 64, 512, 128, 512, "C"),
         ("float32", 1, 4096, 64, 4096, "C"), ("float32", 1, 4096, 300, 4096, "F"),
         ("float32", 1, 4096, 300, 4096, "C"), ("float32", 1, 4096, 4096, 4096, "C")]


def run(label: str) -> dict[str, object]:
    os.environ.setdefault("TROPICAL_GEMM_TIERED", "0")
    rows = []
    for dtype, batch, m, k, n, order in CASES:
        lead = (batch,) if batch > 1 else ()
        plain = throughput.bench_product(m, k, n, dtype, "max_plus", batch=lead, order=order)
        argmax = throughput.bench_product(m, k, n, dtype, "max_plus", argmax=True, batch=lead, order=order)
        work = 2 * batch * m * k * n
        rows.append({"dtype": dtype, "batch": batch, "mkn": [m, k, n], "order": order, "plain_s": plain,
                     "argmax_s": argmax, "plain_tops": work / plain / 1e12, "argmax_tops": work / argmax / 1e12,
                     "argmax_of_plain": plain / argmax})
    return {"environment": throughput.environment(), "label": label, "command": "python benchmarks/argmax_short_k.py",
            "results": rows}


def table(report: dict[str, object]) -> list[str]:
    lines = [f"{'dtype':8} {'batch':5} {'M×K×N':16} {'order':5} {'plain T':>8} {'argmax T':>9} {'ratio':>6}"
             f"  ({report['label']})"]
    for r in report["results"]:
        lines.append(f"{r['dtype']:8} {r['batch']:5} {'x'.join(map(str, r['mkn'])):16} {r['order']:5} "
                     f"{r['plain_tops']:8.2f} {r['argmax_tops']:9.2f} {r['argmax_of_plain']:6.2f}")
    return lines


def main(argv: list[str] | None = None) -> int:
    return run_and_save(__doc__, argv, "argmax-short-k", run, table, LABEL_OPTION)


if __name__ == "__main__":
    sys.exit(main())
