"""Two source trees' CPU kernels timed against each other, interleaved, in the same conditions.

On a shared machine a single timing says little: this runs each tree in its
own fresh process, alternately, ``--rounds`` times, and keeps the best of
``--repeats`` warm calls per case and round.  Use it to check that a change
to ``tropical_gemm/engines/cpu`` keeps its throughput.

    python benchmarks/cpu_kernel_ab.py /tmp/base . --label-a before --label-b after
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu_peers import cpu_model  # noqa: E402
from results_file import RESULTS, save_report  # noqa: E402

#: (dtype, n, argmax, threads, semiring, scale of the operands) cases: integers scaled to overflow take the
#: saturating kernels, whose helpers LLVM inlines less readily than the plain ones.
CASES = [("float32", 1024, False, 1, "max_plus", 1e3), ("float32", 1024, True, 1, "max_plus", 1e3),
         ("float32", 1024, False, 2, "max_plus", 1e3), ("float32", 1024, True, 2, "max_plus", 1e3),
         ("float32", 2048, False, 2, "max_plus", 1e3), ("float32", 2048, True, 2, "max_plus", 1e3),
         ("int32", 1024, False, 2, "max_plus", 1e3), ("float64", 1024, False, 2, "max_plus", 1e3),
         ("float32", 768, False, 1, "max_times", 1.0), ("int32", 768, False, 1, "max_plus", 2e9),
         ("int64", 768, True, 1, "min_plus", 9e18)]

_CHILD = """
import json, sys, time
import numpy as np
import tropical_gemm as tg
from tropical_gemm.engines import cpu
cases, repeats = json.loads(sys.argv[1]), int(sys.argv[2])
out = []
for dtype, n, argmax, threads, semiring, scale in cases:
    rng = np.random.default_rng(0)
    a, b = (np.clip(rng.standard_normal((n, n)) * scale, -scale, scale).astype(dtype) for _ in range(2))
    cpu.set_num_threads(threads)
    tg.matmul(a, b, semiring, argmax=argmax)
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        tg.matmul(a, b, semiring, argmax=argmax)
        best = min(best, time.perf_counter() - t)
    out.append(best)
print(json.dumps(out))
"""


def run_tree(tree: Path, repeats: int) -> list[float]:
    done = subprocess.run([sys.executable, "-c", _CHILD, json.dumps(CASES), str(repeats)], capture_output=True,
                          text=True, check=True, env={**os.environ, "PYTHONPATH": str(tree.resolve())})
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("tree_a", type=Path)
    parser.add_argument("tree_b", type=Path)
    parser.add_argument("--label-a", default="a")
    parser.add_argument("--label-b", default="b")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--note", default="")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    trees = {args.label_a: args.tree_a, args.label_b: args.tree_b}
    for tree in trees.values():
        run_tree(tree, 1)  # compiles or loads the kernels, so the rounds time warm calls only
    runs = {label: [] for label in trees}
    for _ in range(args.rounds):
        for label, tree in trees.items():
            runs[label].append(run_tree(tree, args.repeats))
    rows, table = [], [f"{'case':38} " + " ".join(f"{label:>10}" for label in trees) + "   (G ops/s, best)"]
    for c, (dtype, n, argmax, threads, semiring, _) in enumerate(CASES):
        best = {label: 2 * n**3 / min(r[c] for r in runs[label]) / 1e9 for label in trees}
        rows.append({"dtype": dtype, "n": n, "semiring": semiring, "argmax": argmax, "threads": threads,
                     "gops": best,
                     "seconds_per_round": {label: [r[c] for r in runs[label]] for label in trees}})
        table.append(f"{dtype} {semiring:9} {n}³ {'argmax' if argmax else 'plain':6} t={threads:<3} "
                     + " ".join(f"{best[label]:10.2f}" for label in trees))
    report = {"environment": {"date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                              "device": cpu_model().split("(")[0].strip(), "note": args.note},
              "trees": {label: str(tree) for label, tree in trees.items()}, "rounds": args.rounds,
              "repeats": args.repeats, "results": rows}
    save_report(report, args.out, "cpu-kernel-ab", table)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
