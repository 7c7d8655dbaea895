"""The torch wrapper's per-call overhead on CUDA, A/B: this checkout against another, alternating on one host.

Host speed drifts from machine to machine and from minute to minute, so a
change to the wrapper is judged by both versions measured side by side:
pairs of fresh processes, one per version, alternating, each timing
``torch_layer.overhead`` (this checkout's harness, 16^3 float32 max_plus,
best of 9 rounds) with that version's ``tropical_gemm`` first on the path.

    git worktree add /tmp/before <commit>
    python benchmarks/torch_overhead_ab.py /tmp/before [--pairs 2] [--out benchmarks/results]

Writes ``torch-overhead-ab-<device>-<date>.json`` and prints, per run, the
per-call figures of ``torch_layer`` (forward+backward charged both ways).
Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

from results_file import RESULTS, save_report  # benchmarks/ is this script's own directory

HERE = Path(__file__).resolve().parent
THIS_CHECKOUT = HERE.parent


def child() -> None:
    """One measurement, in this process: print the overhead rows and where the package came from, as JSON."""
    import torch
    import torch_layer

    import tropical_gemm
    from tropical_gemm.engines import cuda as engine

    if not hasattr(engine, "prepare_product"):  # checkouts before it: no host-speed reference
        torch_layer.kernel_launch_call = lambda a, b: (lambda: None)
    rows = torch_layer.overhead("cuda", torch.cuda.synchronize)
    per_call = {charge: torch_layer.per_call_overhead(rows, charge) for charge in torch_layer.FORWARD_BACKWARD_CHARGES}
    print(json.dumps({"package": tropical_gemm.__file__, "rows": rows, "per_call": per_call}))


def measure(checkout: Path) -> dict:
    """A fresh process timing ``checkout``'s package; stderr passes through."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(checkout), str(HERE), os.environ.get("PYTHONPATH", "")])}
    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    done = subprocess.run([sys.executable, __file__, "--child"], env=env, check=True, capture_output=True, text=True)
    return {"started": started, **json.loads(done.stdout.splitlines()[-1])}


def run(other: Path, pairs: int) -> dict:
    import torch_layer

    report = {"environment": torch_layer.environment(), "this": str(THIS_CHECKOUT), "other": str(other), "runs": []}
    for _ in range(pairs):
        for label, checkout in (("other", other), ("this", THIS_CHECKOUT)):
            print(f"{label}: {checkout}", file=sys.stderr)
            report["runs"].append({"version": label, **measure(checkout)})
    return report


def table(report: dict) -> list[str]:
    charges = list(report["runs"][0]["per_call"])
    lines = [f"per wrapper call at 16^3 (µs); forward+backward {' | '.join(charges)}",
             f"  {'version':<8} {'started':<26} {'forward':>8} {'fwd+argmax':>10}" + f" {'fwd+bwd':>8}" * len(charges)]
    for entry in report["runs"]:
        per_call = entry["per_call"]
        first = per_call[charges[0]]
        line = f"  {entry['version']:<8} {entry['started']:<26} {first['forward']:8.1f} {first['forward_argmax']:10.1f}"
        lines.append(line + "".join(f" {per_call[c]['forward_backward']:8.1f}" for c in charges))
    return lines


def main(argv: list[str] | None = None) -> int:
    if argv is None and sys.argv[1:] == ["--child"]:
        child()
        return 0
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("other", type=Path, help="a checkout, or any folder, holding the tropical_gemm to compare")
    parser.add_argument("--pairs", type=int, default=2, help="alternating pairs of runs (default 2)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    report = run(args.other.resolve(), args.pairs)
    save_report(report, args.out, "torch-overhead-ab", table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
