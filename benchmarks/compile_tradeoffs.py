"""Throughput of the tile choices made for compile time (issue 15 item 4), each against the one it replaced.

Run on a GPU.  Each row times one product in a fresh process with one
entry of ``tropical_gemm.jit.source.TILE_SHAPES`` swapped (part of the
kernel source, hence of the cache key), the same way ``tune_tiles.py``
does; ``--wild`` adds products whose int32 operands hold the semiring's
zero, so every slice takes the exact path (compare that row with the same
command on the commit before the change: the path itself changed, not a
tile).

    python benchmarks/compile_tradeoffs.py [--sizes 2048 4096] [--wild] [--out benchmarks/results]

Prints T ops/s and the NVRTC compile time (one compile, in the child
process, for the child's GPU) per (kernel, choice), and writes
``compile-tradeoffs-<date>.json``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import subprocess
import sys
from pathlib import Path

#: (dtype, op, semiring, {choice: shape as bm, bn, bk, tm, tn, min_blocks, unroll}); the first choice is the new one.
CHOICES = [
    (d, "forward_argmax", s, {"lean": (128, 64, 8, 8, 4, 2, 0), "wide": (128, 128, 16, 8, 8, 1, 0),
                              "wide unroll 2": (128, 128, 16, 8, 8, 1, 2), "wide unroll 1": (128, 128, 16, 8, 8, 1, 1)})
    for d in ("float32", "int32") for s in ("max_plus",)
] + [
    ("int32", "forward", s, {"unroll 2": (128, 128, 16, 8, 8, 2, 2), "unroll 4": (128, 128, 16, 8, 8, 2, 0)})
    for s in ("max_plus",)
]

CHILD = r"""
import json, sys
cfg = json.loads(sys.argv[1])
import tropical_gemm.jit.source as source
if cfg["shape"]:
    source.TILE_SHAPES[("square", cfg["dtype"], cfg["op"])] = source.TileShape(*cfg["shape"])
sys.path.insert(0, "benchmarks")
import throughput
if cfg["wild"]:  # the semiring's zero in every slice: each one takes the exact path
    from exact_path import wild_operands
    throughput.random_operands = wild_operands(throughput.random_operands,
                                               "min" if cfg["semiring"].startswith("max") else "max")
import time
from tropical_gemm.jit import make_spec
from tropical_gemm.jit.compiler import compile_program
from tropical_gemm.jit.registry import device_target
spec = make_spec(cfg["op"], cfg["semiring"], cfg["dtype"], tile="square")
started = time.perf_counter()
compile_program(source.kernel_source(spec), spec.name, device_target(0), source.kernel_options(spec))
compile_s = time.perf_counter() - started
s = cfg["size"]
seconds = throughput.bench_product(s, s, s, cfg["dtype"], cfg["semiring"], argmax=cfg["op"] == "forward_argmax")
print(json.dumps({"seconds": seconds, "tops": 2 * s**3 / seconds / 1e12, "compile_s": compile_s}))
"""


def measure(cfg: dict[str, object]) -> dict[str, object]:
    env = {**os.environ, "TROPICAL_GEMM_DISABLE_DISK_CACHE": "1", "TROPICAL_GEMM_TIERED": "0"}
    done = subprocess.run([sys.executable, "-c", CHILD, json.dumps(cfg)], capture_output=True, text=True, env=env)
    if done.returncode == 0:
        return json.loads(done.stdout.strip().splitlines()[-1])
    return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"}


def configs(sizes: list[int], wild: bool) -> list[dict[str, object]]:
    rows = [{"dtype": d, "op": o, "semiring": s, "size": n, "choice": c, "shape": shape, "wild": False}
            for d, o, s, choices in CHOICES for n in sizes for c, shape in choices.items()]
    if wild:  # the tables' own shapes (shape None): the exact path of this commit
        rows += [{"dtype": "int32", "op": o, "semiring": s, "size": n, "choice": "wild", "shape": None, "wild": True}
                 for o in ("forward", "forward_argmax") for s in ("max_plus", "min_plus") for n in sizes]
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[2048, 4096])
    parser.add_argument("--wild", action="store_true", help="also time int32 products that take the exact path")
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results")
    args = parser.parse_args(argv)
    rows = []
    for cfg in configs(args.sizes, args.wild):
        result = measure(cfg)
        rows.append({**cfg, **result})
        print(f"{cfg['dtype']:8} {cfg['op']:15} {cfg['semiring']:9} {cfg['size']}^3 {cfg['choice']:9} "
              + (f"{result['tops']:6.2f} T ops/s, compiled in {result['compile_s']:.2f} s" if "tops" in result
                 else result["error"]), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    date = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    path = args.out / f"compile-tradeoffs-{date[:10]}.json"
    path.write_text(json.dumps({"date": date, "commit": os.environ.get("TG_COMMIT", ""), "results": rows}, indent=2))
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
