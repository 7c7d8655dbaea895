"""The argmax against the plain product where K is short: the resolve's share of the call.

The square argmax records, per output, the slice in which its value last
improved, and a second launch (the resolve) finds the winning k in that
slice.  Its work grows with the outputs, the product's with outputs × K, so
at a short K (batched small matrices, the contractions of a tensor network)
the resolve is a large part of the call.  The float kernels compare every
candidate where K is at most their tile's ``each_k`` (``source.each_k_depth``:
no resolve at all); elsewhere, where K is short enough, the resolve stages a
tile of outputs' rows of A and columns of B in shared memory
(``argmax_resolve_staged``).  Each case times the product with and without
the argmax (``throughput.bench_product``, tiering off) and reports the ratio.
``--each-k N`` sets the float argmax tiles' ``each_k`` to N first (0: slices
and a resolve wherever K is deeper than one slice), to choose
``source._FLOAT_EACH_K``: run it once per N.

    python benchmarks/argmax_short_k.py [--label L] [--each-k N] [--out benchmarks/results]   # GPU

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
         ("int32", 256, 256, 256, 256, "C"), ("float32", 4096, 64, 64, 64, "C"), ("float64", 4096, 64, 64, 64, "C"),
         ("int32", 4096, 64, 64, 64, "C"),
         ("float32", 64, 512, 128, 512, "C"), ("float32", 1, 4096, 64, 4096, "C"), ("float32", 64, 256, 512, 256, "C"),
         ("float32", 1, 4096, 300, 4096, "F"), ("float32", 1, 4096, 300, 4096, "C"),
         ("float32", 1, 2048, 512, 2048, "C"), ("float32", 1, 4096, 4096, 4096, "C")]


def set_float_each_k(depth: int) -> None:
    """Every float argmax tile's ``each_k`` to ``depth``, before any kernel is built (it is in their source)."""
    from tropical_gemm.jit import source

    for table in (source.TILE_SHAPES, source.PIPELINED_SHAPES):
        for key, shape in table.items():
            if "forward_argmax" in key and ("float32" in key or "float64" in key):
                table[key] = shape._replace(each_k=depth)


def run(label: str, each_k: "int | None" = None) -> dict[str, object]:
    os.environ.setdefault("TROPICAL_GEMM_TIERED", "0")
    if each_k is not None:
        set_float_each_k(each_k)
    rows = []
    for dtype, batch, m, k, n, order in CASES:
        lead = (batch,) if batch > 1 else ()
        plain = throughput.bench_product(m, k, n, dtype, "max_plus", batch=lead, order=order)
        argmax = throughput.bench_product(m, k, n, dtype, "max_plus", argmax=True, batch=lead, order=order)
        work = 2 * batch * m * k * n
        rows.append({"dtype": dtype, "batch": batch, "mkn": [m, k, n], "order": order, "plain_s": plain,
                     "argmax_s": argmax, "plain_tops": work / plain / 1e12, "argmax_tops": work / argmax / 1e12,
                     "argmax_of_plain": plain / argmax})
    return {"environment": throughput.environment(), "label": label, "each_k": each_k,
            "command": "python benchmarks/argmax_short_k.py" + ("" if each_k is None else f" --each-k {each_k}"),
            "results": rows}


def table(report: dict[str, object]) -> list[str]:
    lines = [f"{'dtype':8} {'batch':5} {'M×K×N':16} {'order':5} {'plain T':>8} {'argmax T':>9} {'ratio':>6}"
             f"  ({report['label']})"]
    for r in report["results"]:
        lines.append(f"{r['dtype']:8} {r['batch']:5} {'x'.join(map(str, r['mkn'])):16} {r['order']:5} "
                     f"{r['plain_tops']:8.2f} {r['argmax_tops']:9.2f} {r['argmax_of_plain']:6.2f}")
    return lines


def main(argv: list[str] | None = None) -> int:
    options = {**LABEL_OPTION, "--each-k": {"type": int, "help": "the float argmax tiles' each_k (0: none)"}}
    return run_and_save(__doc__, argv, "argmax-short-k", run, table, options)


if __name__ == "__main__":
    sys.exit(main())
